"""`k3rollout preflight`: read-only, one refusal per check, and `run` refusing a failed
preflight unless the failed node is left out with --skip-node."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support import PLAYBOOK, api_changes, journal, result, sim_state, write_inventory

from k3rollout.cli import main

READ_ONLY = ("true", "cat ", "uname ", "nvidia-smi", "ls ", "apt-cache ", "dpkg-query ", "rpm ", "mokutil ",
             "apt-mark showhold", "dnf -q repoquery", "dnf list", "dnf versionlock list", "dnf module list", "df ",
             "docker image inspect", "docker info ", "systemctl is-active",
             # a containerd node's read-only looks (its workloads are read through the API)
             "crictl version", "crictl inspecti ")


def ran(host_dir: Path) -> list[str]:
    """Commands a simulated host ran (a logged argument may hold a newline: only lines that
    start with the log's timestamp start a command)."""
    out = []
    for line in (host_dir / "commands.log").read_text().splitlines():
        stamp, _, cmd = line.partition(" ")
        if stamp.replace(".", "", 1).isdigit():
            out.append(cmd)
    return out


def short_playbook(path: Path, **vars_) -> Path:
    data = yaml.safe_load(PLAYBOOK.read_text())
    play = data[0]
    play.pop("profile", None)           # single-node test clusters: plan in nodes, not K3 replicas
    play["stages"] = [s for s in play["stages"] if s["stage"] in ("baseline", "cordon", "driver_upgrade",
                                                                   "cuda_check", "uncordon")]
    play["min_serving"], play["max_fail_percentage"], play["serial"] = 0, 100, 4
    play["vars"].update(vars_)
    up = next(s for s in play["stages"] if s["stage"] == "driver_upgrade")
    up["with"]["tasks"] = {k: str(PLAYBOOK.parent / v) for k, v in up["with"]["tasks"].items()}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def preflight(tmp_path: Path, hosts: dict, playbook: Path | None = None) -> tuple[int, dict, Path]:
    inv = write_inventory(tmp_path / "inv", hosts)
    out = tmp_path / "pre"
    code = main(["preflight", str(playbook or short_playbook(tmp_path / "pb.yml")), "-i", str(inv), "--json",
                 "--output", str(out)])
    return code, json.loads((out / "preflight.json").read_text()), out


def failed(report: dict, node: str) -> dict[str, str]:
    return {c["check"]: c["detail"] for c in report["nodes"][node]["checks"] if not c["ok"]}


def test_each_refusal_names_its_node_and_check_and_changes_nothing(tmp_path):
    hosts = {"ok": {}, "rhel": {"ansible_os_family": "RedHat", "sim_held_packages": ["nvidia-driver"]},
             "gone": {"sim_faults": ["rollback_packages_gone"]},
             "gone-rhel": {"ansible_os_family": "RedHat", "sim_faults": ["rollback_packages_gone"]},
             "operator": {"sim_gpu_operator": True},
             "sb": {"sim_secure_boot": True},
             "sb-ok": {"sim_secure_boot": True, "nvidia_driver_source": "ubuntu-archive-precompiled"},
             "nofm": {"sim_fabricmanager": False},
             "seven": {"k3_gpu_count": 7},
             "disk": {"sim_disk_free_gib": 100}}
    code, rep, out = preflight(tmp_path, hosts)
    assert code == 1 and rep["ok"] is False
    assert sorted(rep["failed_nodes"]) == sorted(["gone", "gone-rhel", "operator", "sb", "nofm", "seven", "disk"])
    assert failed(rep, "ok") == {} and failed(rep, "rhel") == {} and failed(rep, "sb-ok") == {}
    assert set(failed(rep, "gone")) == {"rollback_packages"}
    assert "nvidia-driver-575-server-open=575.57.08-0ubuntu0.22.04.1" in failed(rep, "gone")["rollback_packages"]
    assert "nvidia-driver=575.57.08-1.el9" in failed(rep, "gone-rhel")["rollback_packages"]
    assert set(failed(rep, "operator")) == {"gpu_operator"}
    assert set(failed(rep, "sb")) == {"secure_boot"} and "precompiled" in failed(rep, "sb")["secure_boot"]
    assert set(failed(rep, "nofm")) == {"fabric_manager"}
    assert failed(rep, "seven") == {"gpu_count": "7 GPUs, expected 8"}
    assert set(failed(rep, "disk")) == {"disk"} and "600 GiB needed" in failed(rep, "disk")["disk"]
    assert rep["nodes"]["rhel"]["info"]["driver_module_stream"] == "575-open"
    assert rep["nodes"]["rhel"]["info"]["held_packages"] == ["nvidia-driver"]          # a DNF version lock
    # Canonical's precompiled module is among what the rollback restores, and still offered
    assert "linux-modules-nvidia-575-server-open-6.8.0-45-generic" in {
        p["name"] for p in rep["nodes"]["sb-ok"]["info"]["installed_driver_packages"]}
    md = (out / "preflight.md").read_text()
    assert "**FAILED**" in md and "| gone | rollback_packages | **FAIL** |" in md
    # read-only: every command any node ran is a query
    for h in hosts:
        cmds = ran(out / "sim-hosts" / h)
        assert cmds and all(c.startswith(READ_ONLY) for c in cmds), [c for c in cmds if not c.startswith(READ_ONLY)]


def test_target_not_offered_by_the_updates_pocket(tmp_path):
    # 580.82.07 was superseded in the Ubuntu archive by 580.95.05; NVIDIA's repository keeps it
    pb = short_playbook(tmp_path / "pb.yml", target_driver="580.82.07")
    code, rep, _ = preflight(tmp_path, {"arch": {}, "cuda": {"nvidia_driver_source": "cuda-repo"},
                                        "rhel": {"ansible_os_family": "RedHat"}}, pb)
    assert code == 1 and rep["failed_nodes"] == ["arch"]
    assert "nvidia-driver-580-server-open" in failed(rep, "arch")["target_packages"]
    assert rep["nodes"]["cuda"]["info"]["target_install"][0] == "linux-headers-6.8.0-45-generic=6.8.0-45.45"
    assert "nvidia-driver-580-open=580.82.07-0ubuntu1" in rep["nodes"]["cuda"]["info"]["target_install"]


def test_default_sim_cluster_passes(tmp_path):
    from support import SIM_INVENTORY

    out = tmp_path / "pre"
    assert main(["preflight", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--output", str(out)]) == 0
    rep = json.loads((out / "preflight.json").read_text())
    assert rep["ok"] and len(rep["nodes"]) == 16
    assert rep["nodes"]["gpu-b08"]["info"]["driver_source"] == "rhel-module"


def test_run_refuses_a_failed_preflight_and_touches_nothing(tmp_path, capsys):
    # the preflight is run's default: no flag asks for it
    inv = write_inventory(tmp_path / "inv", {"a": {}, "b": {"sim_faults": ["rollback_packages_gone"]}})
    run_dir = tmp_path / "run"
    code = main(["run", str(short_playbook(tmp_path / "pb.yml")), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 1 and "preflight FAILED on b" in err and "b: rollback_packages: no longer downloadable" in err
    assert not (run_dir / "journal.jsonl").exists()
    assert json.loads((run_dir / "preflight.json").read_text())["failed_nodes"] == ["b"]
    for h in ("a", "b"):
        assert all(c.startswith(READ_ONLY) for c in ran(run_dir / "sim-hosts" / h))


def test_skip_node_leaves_the_failed_node_out_and_records_it(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"a": {}, "b": {"sim_faults": ["rollback_packages_gone"]}})
    run_dir = tmp_path / "run"
    code = main(["run", str(short_playbook(tmp_path / "pb.yml")), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                 "--skip-node", "b"])
    assert code == 0
    r = result(run_dir)
    assert list(r["nodes"]) == ["a"] and r["nodes"]["a"]["final"] == "upgraded"
    pre = json.loads((run_dir / "preflight.json").read_text())
    assert pre["skipped_nodes"] == ["b"] and pre["failed_nodes"] == ["b"]
    started = next(x for x in journal(run_dir) if x["type"] == "run_started")
    assert any("left out of this run with --skip-node: b (rollback_packages:" in n for n in started["plan"]["notes"])
    assert "Left out of the run with --skip-node: b" in (run_dir / "preflight.md").read_text()
    # journaled with its evidence: the report the run started on is in the evidence store
    rec = started["preflight"]
    assert (rec["ran"], rec["ok"], rec["failed_nodes"], rec["skipped_nodes"]) == (True, False, ["b"], ["b"])
    kept = json.loads((run_dir / "evidence" / rec["evidence"]).read_text())
    assert kept["failed_nodes"] == ["b"] and "rollback_packages" in {c["check"] for c in kept["nodes"]["b"]["checks"]}
    assert rec["evidence"] in (run_dir / "evidence" / "MANIFEST.sha256").read_text()
    md = (run_dir / "report.md").read_text()
    assert "Preflight: FAILED on b; left out of the run with --skip-node: b; evidence" in md
    assert json.loads((run_dir / "report.json").read_text())["preflight"]["skipped_nodes"] == ["b"]
    assert all(c.startswith(READ_ONLY) for c in ran(run_dir / "sim-hosts" / "b"))
    # naming a node that is not in the play is bad input
    assert main(["run", str(short_playbook(tmp_path / "pb.yml")), "-i", str(inv), "--yes", "--run-dir",
                 str(tmp_path / "run2"), "--skip-node", "nope"]) == 2


def test_no_preflight_starts_without_it_and_says_so_in_the_journal_and_report(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"a": {}, "b": {"sim_faults": ["rollback_packages_gone"]}})
    pb = short_playbook(tmp_path / "pb.yml")
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--no-preflight"]) == 0
    assert not (run_dir / "preflight.json").exists()
    started = next(x for x in journal(run_dir) if x["type"] == "run_started")
    assert started["preflight"]["ran"] is False and "--no-preflight" in started["preflight"]["reason"]
    # the node whose rollback packages are gone was not refused: nobody looked
    assert {n: v["final"] for n, v in result(run_dir)["nodes"].items()} == {"a": "upgraded", "b": "upgraded"}
    assert "Preflight: NOT RUN (--no-preflight:" in (run_dir / "report.md").read_text()
    assert "<strong>NOT RUN</strong>" in (run_dir / "report.html").read_text()
    # no preflight command reached a node: the first thing each ran is the baseline's
    assert ran(run_dir / "sim-hosts" / "a")[0].startswith("date -u")
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run2"), "--no-preflight",
                 "--preflight"]) == 2
    assert "--no-preflight and --preflight exclude each other" in capsys.readouterr().err


def test_run_reads_an_earlier_preflight_report(tmp_path, capsys):
    pb = short_playbook(tmp_path / "pb.yml")
    code, rep, out = preflight(tmp_path, {"a": {}, "b": {"sim_gpu_operator": True}}, pb)
    assert code == 1 and rep["failed_nodes"] == ["b"]
    inv = tmp_path / "inv" / "hosts.yml"
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                 "--preflight", str(out / "preflight.json")]) == 1
    assert "b: gpu_operator:" in capsys.readouterr().err and not (run_dir / "journal.jsonl").exists()
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                 "--preflight", str(out / "preflight.json"), "--skip-node", "b"]) == 0
    assert list(result(run_dir)["nodes"]) == ["a"]
    # a report for another play (another target driver) is refused as bad input
    other = short_playbook(tmp_path / "pb2.yml", target_driver="580.82.07")
    assert main(["run", str(other), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run3"),
                 "--preflight", str(out / "preflight.json")]) == 2
    assert "is for driver 580.95.05" in capsys.readouterr().err


def test_plan_can_include_the_preflight(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inv = write_inventory(tmp_path / "inv", {"a": {}, "b": {"sim_gpu_operator": True}})
    assert main(["plan", str(short_playbook(tmp_path / "pb.yml")), "-i", str(inv), "--preflight"]) == 0
    out = capsys.readouterr().out
    assert "note: preflight FAILED (run refuses these nodes unless --skip-node): b: gpu_operator:" in out


def test_gpu_operator_refusal_names_the_backend_that_upgrades_through_the_operator(tmp_path):
    # issue #33 item 3: k3rollout can drive the operator's upgrade itself; the refusal says how
    code, rep, _ = preflight(tmp_path, {"operator": {"sim_gpu_operator": True}})
    assert code == 1
    detail = failed(rep, "operator")["gpu_operator"]
    assert "ClusterPolicy" not in detail
    for var in ("k3_driver_backend: gpu-operator", "k3_gpu_operator_pool_label", "k3_gpu_operator_pool"):
        assert var in detail, detail


def test_nodes_the_play_does_not_change_never_block_the_run(tmp_path, capsys):
    """issue #33 item 1: a node past the target (590.44.01, whose packages the repository no
    longer offers) and one already on it are left alone by plan, preflight and run alike: no
    rollback checks, no --skip-node, baseline only, and the plan and report say why."""
    hosts = {"a": {}, "newer": {"driver_version": "590.44.01"}, "at": {"driver_version": "580.95.05"}}
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = short_playbook(tmp_path / "pb.yml")
    code, rep, _ = preflight(tmp_path, hosts, pb)
    assert code == 0 and rep["failed_nodes"] == [], rep["failed_nodes"]
    assert set(rep["no_change_nodes"]) == {"newer", "at"}
    for h in ("newer", "at"):
        checks = {c["check"]: c for c in rep["nodes"][h]["checks"]}
        assert checks["no_change"]["ok"] and "rollback_packages" not in checks and "target_packages" not in checks
    assert "past the target 580.95.05" in rep["no_change_nodes"]["newer"]
    assert main(["plan", str(pb), "-i", str(inv)]) == 0
    out = capsys.readouterr().out
    assert "2 node(s) the play will not change" in out and "newer: already on driver 590.44.01" in out
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert r["status"] == "completed" and r["nodes"]["a"]["final"] == "upgraded"
    for h in ("newer", "at"):
        n = r["nodes"][h]
        assert n["final"] == "skipped" and n["no_change"] and n["reason"] == n["no_change"]
        assert n["driver_after"] == hosts[h]["driver_version"]
        # read by baseline, never drained or changed
        assert api_changes(run_dir, h) == [] and sim_state(run_dir, h)["scheduler"]["state"] == "schedulable"
        assert not [c for c in ran(run_dir / "sim-hosts" / h)
                    if c.startswith(("apt-get", "dnf", "reboot", "docker rm", "docker run", "docker stop",
                                     "systemctl stop", "systemctl disable", "ansible"))], h
    plans = {x["node"] for x in journal(run_dir) if x["type"] == "rollback_plan"}
    assert plans == {"a"}
    started = next(x for x in journal(run_dir) if x["type"] == "run_started")
    assert any(n.startswith("preflight: not changed by the play") and "newer: already on driver 590.44.01" in n
               for n in started["plan"]["notes"])
    md = (run_dir / "report.md").read_text()
    assert "Not changed by the play" in md and "newer: already on driver 590.44.01" in md
    assert md.splitlines()[0].startswith("# \U0001F7E2 Rollout completed:")       # a clean run
    assert 'id="unchanged"' in (run_dir / "report.html").read_text()
