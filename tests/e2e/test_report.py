"""Reports are regenerated from the journal and never let host or playbook text inject markup."""

from __future__ import annotations

import yaml
from support import DOCKER_HOST, journal, result, write_inventory, write_playbook

from k3rollout.cli import main

HOSTILE = "<script>alert('x')</script>"


def test_hostile_strings_are_escaped_and_reports_regenerate(tmp_path, capsys):
    # a Docker host: its serving container's image is the hostile string
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_serving_image": f"evil/{HOSTILE}"}}, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    data = yaml.safe_load(pb.read_text())
    cuda = next(s for s in data[0]["stages"] if s["stage"] == "cuda_check")
    cuda["post"] = {"that": ["facts.cuda_device_count == 9"], "fail_msg": f"<img src=x onerror=alert(1)> {HOSTILE}"}
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 1
    html = (run_dir / "report.html").read_text()
    assert "<script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html
    md = (run_dir / "report.md").read_text()
    assert "<script>" not in md and "<img" not in md
    r = result(run_dir)
    # the serving image exists only by name on the simulated host, so its container cannot
    # start again after the rollback: the node is kept cordoned (rollback_failed)
    assert r["nodes"]["gpu-01"]["final"] == "rollback_failed"
    assert "fail_msg" not in r["nodes"]["gpu-01"]["reason"] and "<img" in r["nodes"]["gpu-01"]["reason"]
    # reports are a pure function of the run directory
    before = {f: (run_dir / f).read_text() for f in ("report.md", "report.html", "result.json")}
    for f in before:
        (run_dir / f).unlink()
    assert main(["report", str(run_dir)]) == 0
    assert {f: (run_dir / f).read_text() for f in before} == before
    capsys.readouterr()
    assert main(["report", str(run_dir), "--format", "md"]) == 0
    assert capsys.readouterr().out == before["report.md"]


def test_report_checklist_is_ticked_only_from_evidence(tmp_path):
    import json

    run_dir = tmp_path / "run"
    # a Docker host: item 1's evidence is the failed K3 container's logs
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, vars={"allow_in_place_change": False})
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    items = {i["item"]: i for i in json.loads((run_dir / "report.json").read_text())["checklist"]}
    # evidence-only run: the r575 failure is captured, nothing was upgraded or served
    assert items[1]["status"] == "done" and items[1]["evidence"]
    for n in (3, 4, 5, 6):
        assert items[n]["status"] == "missing", items[n]


def test_planted_secret_never_reaches_journal_evidence_events_or_reports(tmp_path):
    secret = "planted-S3cret-4242"
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"ansible_become_password": "hv-" + secret}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, vars={"proxy_password": secret})
    data = yaml.safe_load(pb.read_text())
    up = next(s for s in data[0]["stages"] if s["stage"] == "driver_upgrade")
    up["with"]["install"]["apt"][0] = ["apt-get", "-o", "Acquire::http::Proxy=http://ops:{{ proxy_password }}@proxy",
                                      "update"]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    used = [line for line in (run_dir / "journal.jsonl").read_text().splitlines() if "Acquire::http::Proxy" in line]
    assert used and all("********" in line for line in used)
    leaks = []
    for p in run_dir.rglob("*"):
        # sim-hosts/ is the simulated machines' own disk, not something k3rollout writes
        if p.is_file() and "sim-hosts" not in p.parts and secret in p.read_text(errors="replace"):
            leaks.append(str(p.relative_to(run_dir)))
    assert leaks == []


def test_internal_error_exits_70_with_traceback_in_debug_log(tmp_path, monkeypatch, capsys):
    from k3rollout.engine import runner

    def boom(self):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(runner.Engine, "run", boom)
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    run_dir = tmp_path / "run"
    code = main(["run", str(write_playbook(tmp_path / "pb.yml", min_serving=0)), "-i", str(inv), "--yes",
                 "--run-dir", str(run_dir)])
    assert code == 70
    err = capsys.readouterr().err
    assert "debug.log" in err and "Traceback" not in err
    assert "RuntimeError: simulated bug" in (run_dir / "debug.log").read_text()
    assert (run_dir / "journal.jsonl").read_text().count("run_started") == 1


def test_end_of_run_reports_are_written_from_the_engines_view_not_a_reread(tmp_path, monkeypatch):
    """At 1,000 nodes the journal is 190,000 records: the run's end does not read it back,
    it renders the view the engine folded as it appended each record (the same fold)."""
    from support import assert_reports_match_journal

    from k3rollout.report import render
    from k3rollout.runlog.journal import Journal

    reads = []
    read = Journal.read
    monkeypatch.setattr(render.Journal, "read", staticmethod(lambda p: reads.append(p) or read(p)))
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}})
    run_dir = tmp_path / "run"
    assert main(["run", str(write_playbook(tmp_path / "pb.yml", min_serving=0, max_fail_percentage=100)), "-i",
                 str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert reads == [] and (run_dir / "report.html").is_file()
    assert result(run_dir)["nodes"]["gpu-02"]["final"] == "rolled_back"
    assert_reports_match_journal(run_dir)
    assert reads == [run_dir / "journal.jsonl"]


def test_banner_of_a_completed_run_counts_what_was_rolled_back_in_another_colour(tmp_path):
    # issue #33 item 5: a completed run with a unit rolled back does not look like a clean one
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}})
    pb = write_playbook(tmp_path / "pb.yml", serial=[2], min_serving=0, max_fail_percentage=50)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert r["status"] == "completed" and r["nodes"]["gpu-02"]["final"] == "rolled_back"
    html = (run_dir / "report.html").read_text()
    h1 = next(line for line in html.splitlines() if line.startswith('<h1 id="verdict"'))
    assert "1 node of 2 rolled back" in h1 and 'class="verdict completed"' not in h1, h1
    assert 'class="verdict completed_partial"' in h1
    assert ".verdict.completed_partial{background:" in html     # its own colour, not the clean green
    md = (run_dir / "report.md").read_text().splitlines()[0]
    assert "1 node of 2 rolled back" in md and md.startswith("# \U0001F7E0 "), md
    assert "cuda" in (run_dir / "report.md").read_text().lower()     # the reason stays in the body


def test_report_shows_each_nodes_pods_and_owners_before_and_after(tmp_path):
    # containerd nodes (the default under scheduler: kubernetes): a Deployment serves on both;
    # gpu-01 is upgraded first and its owner proven back at 2 ready replicas (gpu-02 still holds
    # the other), then gpu-02 fails its CUDA check and is rolled back
    serving = {"sim_k8s_serving": {"kind": "Deployment", "name": "k3-serving"}}
    inv = write_inventory(tmp_path / "inv", {"gpu-01": serving, "gpu-02": {**serving, "sim_faults": ["cuda_init_fails"]}})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1], min_serving=0, max_fail_percentage=100)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert {n: v["final"] for n, v in result(run_dir)["nodes"].items()} == {"gpu-01": "upgraded",
                                                                             "gpu-02": "rolled_back"}
    facts = {(e["node"], e["stage"]): e["facts"] for e in journal(run_dir) if e["type"] == "facts"}
    base = {n: facts[(n, "baseline")]["serving_containers"][0] for n in ("gpu-01", "gpu-02")}
    digest = base["gpu-01"]["digest"].rsplit("@", 1)[-1][:19]
    md = (run_dir / "report.md").read_text()
    section = md.split("## Serving Pods and their owners: before and after", 1)[1].split("\n## ", 1)[0]
    rows = {r.split(" | ")[0].lstrip("| "): r for r in section.splitlines() if r.startswith("| gpu-")}
    assert set(rows) == {"gpu-01", "gpu-02"}
    for node in rows:
        # before: the baseline's pod, its image digest and the owner that brings it back
        assert base[node]["name"] in rows[node] and digest in rows[node]
        assert "Deployment inference/k3-serving" in rows[node]
    # after: the uncordon found the owner back at its 2 ready replicas on the same digest, one
    # of its pods on gpu-01 again
    back = facts[("gpu-01", "uncordon")]["serving_owners"]["Deployment/inference/k3-serving"]
    assert back["ready"] == back["baseline_ready"] == 2
    assert "| 2 → 2 |" in rows["gpu-01"] and f"| {digest} |" in rows["gpu-01"]
    assert any(f"{p['name'].split('/')[-1]} (Running)" in rows["gpu-01"] for p in back["pods"] if p["node"] == "gpu-01")
    # the rolled-back node's owner was not proven by an uncordon of this run: said, not invented
    assert "| 2 → not checked |" in rows["gpu-02"]
    html = (run_dir / "report.html").read_text()
    table = html.split('<table id="serving-pods">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr><td>gpu-") == 2 and "Deployment inference/k3-serving" in table
    assert 'class="upgraded">2 &rarr; 2</td>' in table and "2 &rarr; not checked" in table
