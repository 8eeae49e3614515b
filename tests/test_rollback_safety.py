"""On-demand rollback, resume during a reboot, capacity before the run, and read-only
retries (issue 21, items 1, 2, 6, 7 and 17)."""

from __future__ import annotations

from pathlib import Path

from conftest import cli, commands, journal, result, sim_state, write_inventory, write_playbook


def _reboot_done_seq(records: list[dict], node: str) -> int:
    return next(r["seq"] for r in records if r["type"] == "step_done" and r.get("node") == node
                and r.get("key") == "03-driver_upgrade/reboot")


def test_resume_while_the_host_still_reboots_waits_for_it(tmp_path):
    # a reboot that takes 3 s: the process is SIGKILLed right after the reboot step was
    # recorded, and the resume starts while the host still does not answer
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["slow_reboot"], "sim_slow_reboot_s": 3.0}})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, reboot_grace=1)
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    ref = tmp_path / "ref"
    assert cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(ref), env=locks).returncode == 0
    seq = _reboot_done_seq(journal(ref), "gpu-01")
    run_dir = tmp_path / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={**locks, "K3ROLLOUT_KILL_AT_SEQ": str(seq)})
    assert p.returncode == -9
    r = cli("resume", str(run_dir), env=locks)
    assert r.returncode == 0, r.stdout + r.stderr
    res = result(run_dir)
    assert res["status"] == "completed" and res["nodes"]["gpu-01"]["final"] == "upgraded"
    cmds = commands(run_dir, "gpu-01")
    assert sum(1 for c in cmds if c == "reboot") == 1
    # the vendor steps ran once, before the reboot; none was sent to the rebooting host
    assert sum(1 for c in cmds if c.startswith("apt-get update")) == 1
    assert not any(x["type"] == "rollback_started" for x in journal(run_dir))
    assert sim_state(run_dir, "gpu-01")["loaded_driver"] != "575.57.08"


def test_a_read_only_command_whose_connection_drops_is_retried_not_rolled_back(tmp_path):
    # sshd is restarted under the first GPU query after the upgrade reboot
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["ssh_drops_read"]}})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    run_dir = tmp_path / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert p.returncode == 0, p.stdout + p.stderr
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    recs = journal(run_dir)
    dropped = [r for r in recs if r["type"] == "step_error" and r["error"] == "connection_lost"]
    assert [r["step"] for r in dropped] == ["nvidia-smi-query"]
    key = dropped[0]["key"]
    # the same read ran again and completed; nothing was rolled back
    assert [r["type"] for r in recs if r.get("key") == key and r["type"] in ("step_started", "step_done")
            and r["seq"] > dropped[0]["seq"]][:2] == ["step_started", "step_done"]
    assert not any(r["type"] == "rollback_started" for r in recs)
    assert sum(1 for c in commands(run_dir, "gpu-01") if c == "reboot") == 1


SIX = [f"gpu-{i:02d}" for i in range(1, 7)]


def test_plan_counts_nodes_out_of_service_before_the_run(tmp_path):
    from k3rollout.model import load_inventory, load_playbook
    from k3rollout.plan import make_plan

    # two of six nodes cordoned before the run, one by the simulator's host var and one by
    # the operator's `serving: false`; min_serving 3 leaves room for one more at a time
    inv = write_inventory(tmp_path / "inv", {h: {} for h in SIX[:4]} | {"gpu-05": {"sim_cordoned": True},
                                                                        "gpu-06": {"serving": False}})
    pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=3)
    plan = make_plan(load_playbook(str(pb)), load_inventory(str(inv)))
    down = {"gpu-05", "gpu-06"}
    for b in plan.batches:
        taken = [n for n in b.nodes if n not in down]
        assert len(SIX) - len(down) - len(taken) >= 3, (b.index, b.nodes)
        assert b.serving_during == len(SIX) - len(down) - len(taken)
    assert sorted(n for b in plan.batches for n in b.nodes) == SIX


def test_run_reads_the_scheduler_and_never_crosses_the_floor_with_nodes_cordoned_before_it(tmp_path):
    from k3rollout.sim.dispatch import dispatch
    from k3rollout.sim.state import init_host

    # the inventory says nothing: two nodes were cordoned on the cluster before the run
    inv = write_inventory(tmp_path / "inv", {h: {} for h in SIX})
    pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=3)
    run_dir = tmp_path / "run"
    for h in ("gpu-05", "gpu-06"):
        d = init_host(run_dir / "sim-hosts" / h, h, {"scheduler": "kubernetes"})
        assert dispatch(d, ["kubectl", "cordon", h]).rc == 0
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert p.returncode == 1, p.stdout + p.stderr
    r = result(run_dir)
    assert r["status"] == "halted" and r["halt"]["kind"] == "capacity"
    assert "leave 2 node(s) serving, below min_serving 3" in r["halt"]["reason"]
    assert "gpu-05" in r["halt"]["reason"] and "gpu-06" in r["halt"]["reason"]
    for h in SIX:
        assert not any(c.startswith(("kubectl drain", "apt-get", "reboot")) for c in commands(run_dir, h))
        assert sim_state(run_dir, h)["scheduler"]["state"] == ("cordoned" if h in ("gpu-05", "gpu-06")
                                                                else "schedulable")
