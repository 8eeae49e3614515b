"""Reports are regenerated from the journal and never let host or playbook text inject markup."""

from __future__ import annotations

import yaml

from conftest import result, write_inventory, write_playbook
from k3rollout.cli import main

HOSTILE = "<script>alert('x')</script>"


def test_hostile_strings_are_escaped_and_reports_regenerate(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_serving_image": f"evil/{HOSTILE}"}})
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
    assert r["nodes"]["gpu-01"]["final"] == "rolled_back"
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
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, vars={"allow_in_place_change": False})
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    items = {i["item"]: i for i in json.loads((run_dir / "report.json").read_text())["checklist"]}
    # evidence-only run: the r575 failure is captured, nothing was upgraded or served
    assert items[1]["status"] == "done" and items[1]["evidence"]
    for n in (3, 4, 5, 6):
        assert items[n]["status"] == "missing", items[n]
