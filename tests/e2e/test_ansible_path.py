"""The Ansible path of the driver stage over real sshd hosts: the preflight proves it on
each node with the inventory's own connection variables, and a node where the vendor tasks
changed nothing goes back to service as it was (issue #33 item 7)."""

from __future__ import annotations

import json

import pytest
from support import DOCKER_HOST, result, write_playbook

from k3rollout.cli import main
from k3sim.state import executed

BROKEN = {"ansible_python_interpreter": "/nonexistent/bin/python3"}


def state(c, host: str) -> dict:
    return json.loads((c.hosts[host].state / "state.json").read_text())


def test_vendor_tasks_that_changed_nothing_leave_the_node_in_service_as_it_was(sshd_cluster, tmp_path):
    # gpu-02 was cordoned before the run: it stays cordoned
    # Docker hosts: the serving container the node ran is still running, untouched
    with sshd_cluster({"gpu-01": dict(DOCKER_HOST), "gpu-02": {**DOCKER_HOST, "sim_cordoned": True}}) as c:
        inv = c.inventory(tmp_path / "inv" / "hosts.yml", host_vars={"gpu-01": {**BROKEN, **DOCKER_HOST},
                                                                     "gpu-02": {**BROKEN, **DOCKER_HOST}})
        pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, max_fail_percentage=100, reboot_timeout=30)
        run_dir = tmp_path / "run"
        assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--no-preflight"]) == 0
        r = result(run_dir)
        for h, prior in (("gpu-01", "schedulable"), ("gpu-02", "cordoned")):
            n = r["nodes"][h]
            assert n["failed_stage"] == "driver_upgrade" and "interpreter" in n["reason"], n
            assert n["final"] == "rolled_back", n
            got = {a["action"]: a for a in n["rollback"]["results"]}
            assert got["restore_driver"]["status"] == "done"
            assert "nothing to restore" in got["restore_driver"]["detail"], got
            assert "no task reporting a change" in got["restore_driver"]["detail"]
            st = state(c, h)
            assert st["scheduler"]["state"] == prior and st["boots"] == 0 and st["loaded_driver"] == "575.57.08"
            assert st["services"]["nvidia-fabricmanager"]["active"]
            assert st["docker"]["containers"]["vllm-serving"]["status"] == "running"
            assert not [x for x in executed(c.hosts[h].state) if x.startswith(("apt-get install", "reboot"))]
        # within max_fail_percentage 100: no rollback failed, so nothing halts the run
        assert r["status"] == "completed" and r["batches"][0]["status"] == "failed"
        md = (run_dir / "report.md").read_text()
        assert "nothing to restore" in md


@pytest.mark.preflight
def test_preflight_proves_the_ansible_path_and_refuses_a_node_it_fails_on(sshd_cluster, tmp_path, capsys):
    with sshd_cluster({"gpu-01": {}, "gpu-02": {}}) as c:
        inv = c.inventory(tmp_path / "inv" / "hosts.yml", host_vars={"gpu-01": BROKEN})
        pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, reboot_timeout=30)
        out = tmp_path / "pre"
        assert main(["preflight", str(pb), "-i", str(inv), "--json", "--output", str(out)]) == 1
        rep = json.loads((out / "preflight.json").read_text())
        assert rep["failed_nodes"] == ["gpu-01"]
        checks = {h: {c["check"]: c for c in rep["nodes"][h]["checks"]} for h in ("gpu-01", "gpu-02")}
        assert checks["gpu-02"]["ansible"]["ok"]
        bad = checks["gpu-01"]["ansible"]
        assert not bad["ok"] and "ansible_python_interpreter" in bad["detail"], bad
        assert "/nonexistent/bin/python3" in bad["detail"]
        # run performs the same preflight and refuses before any change
        run_dir = tmp_path / "run"
        assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 1
        err = capsys.readouterr().err
        assert "gpu-01: ansible:" in err and "ansible_python_interpreter" in err, err
        assert not (run_dir / "journal.jsonl").exists()
        for h in ("gpu-01", "gpu-02"):
            assert state(c, h)["scheduler"]["state"] == "schedulable" and state(c, h)["boots"] == 0
            assert not [x for x in executed(c.hosts[h].state) if x.startswith(("apt-get", "systemctl disable"))]
