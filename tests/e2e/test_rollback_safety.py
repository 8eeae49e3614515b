"""On-demand rollback, resume during a reboot, capacity before the run, and read-only
retries (issue 21, items 1, 2, 6, 7 and 17)."""

from __future__ import annotations

from pathlib import Path

from support import (
    DOCKER_HOST,
    api_changes,
    commands,
    host_timeline,
    journal,
    result,
    sim_state,
    with_default_gpu,
    write_inventory,
    write_playbook,
)
from support import (
    forked_cli as cli,
)


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
            env=locks, fault=("KILL", seq))
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


def test_run_counts_the_baseline_scheduler_state_before_every_batch(tmp_path):
    from k3sim.dispatch import dispatch
    from k3sim.state import init_host

    # the inventory says nothing: the first batch's two nodes were cordoned on the cluster
    # before the run; the plan (6 serving, floor 3) lets batches of two go
    inv = write_inventory(tmp_path / "inv", {h: {} for h in SIX})
    pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=3)
    run_dir = tmp_path / "run"
    for h in ("gpu-01", "gpu-02"):
        d = init_host(run_dir / "sim-hosts" / h, h, with_default_gpu({"scheduler": "kubernetes"}))
        assert dispatch(d, ["kubectl", "cordon", h]).rc == 0
    # without the preflight's read-only queries: the nodes of a batch that never started get
    # no command at all
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--no-preflight",
            env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert p.returncode == 1, p.stdout + p.stderr
    r = result(run_dir)
    # batch 1 upgraded the two cordoned nodes and left them cordoned (it never uncordons
    # what it did not cordon); batch 2 would have left 2 serving
    assert [r["nodes"][h]["final"] for h in ("gpu-01", "gpu-02")] == ["upgraded", "upgraded"]
    assert r["status"] == "halted" and r["halt"]["kind"] == "capacity"
    assert "batch 2 would leave 2 node(s) serving, below min_serving 3" in r["halt"]["reason"]
    assert "gpu-01, gpu-02" in r["halt"]["reason"]
    for h in SIX[2:]:
        assert commands(run_dir, h) == []
    assert [sim_state(run_dir, h)["scheduler"]["state"] for h in SIX].count("schedulable") == 4


def _run(tmp_path, hosts: dict[str, dict], stage_with: dict | None = None, **play) -> tuple[int, Path]:
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", stage_with=stage_with,
                        **{"serial": 1, "min_serving": 0, "max_fail_percentage": 100, **play})
    run_dir = tmp_path / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    return p.returncode, run_dir


def _rollback_results(run_dir: Path, node: str) -> dict[str, dict]:
    done = [r for r in journal(run_dir) if r["type"] == "rollback_done" and r["node"] == node][-1]
    return {x["action"]: x for x in done["results"]}


def test_a_rollback_after_cuda_check_restarts_the_serving_containers_the_baseline_saw(tmp_path):
    # the serving container does not come back by itself after a reboot (restart policy
    # "no"); the node fails at cuda_check, before the smoke test that stops and restarts it
    # (a Docker host: the serving workload is its container)
    code, run_dir = _run(tmp_path, {"gpu-01": {**DOCKER_HOST, "sim_faults": ["cuda_init_fails"],
                                               "sim_serving_restart": "no"}})
    assert code == 0          # 1 of 1 failed is not above max_fail_percentage 100
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["failed_stage"], n["final"]) == ("cuda_check", "rolled_back")
    res = _rollback_results(run_dir, "gpu-01")
    assert res["restore_serving_image"]["status"] == "done"
    st = sim_state(run_dir, "gpu-01")
    assert st["docker"]["containers"]["vllm-serving"]["status"] == "running"
    assert st["scheduler"]["state"] == "schedulable" and st["loaded_driver"] == "575.57.08"


def test_a_rolled_back_node_whose_serving_container_cannot_run_stays_cordoned_and_says_why(tmp_path):
    # no NVIDIA container runtime: the serving container the baseline saw running cannot
    # start again after the rollback's reboot (a Docker host: its container is the workload)
    code, run_dir = _run(tmp_path, {"gpu-01": {**DOCKER_HOST, "sim_faults": ["container_runtime_missing"]}})
    assert code == 1
    r = result(run_dir)
    n = r["nodes"]["gpu-01"]
    assert (n["failed_stage"], n["final"]) == ("cuda_check", "rollback_failed")
    assert r["halt"]["kind"] == "rollback_failed"
    res = _rollback_results(run_dir, "gpu-01")
    assert res["restore_driver"]["status"] == "done"
    assert res["uncordon_if_healthy"]["status"] == "failed"
    # docker leaves a container whose start failed in "created"
    assert "serving container vllm-serving is created" in res["uncordon_if_healthy"]["detail"]
    assert "kept cordoned" in res["uncordon_if_healthy"]["detail"]
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] != "schedulable"
    assert not any('"unschedulable": null' in c for c in api_changes(run_dir, "gpu-01"))      # never uncordoned


def _seq_of(records: list[dict], pred) -> int:
    return next(r["seq"] for r in records if pred(r))


def test_operator_rollback_drains_in_service_nodes_keeps_the_floor_and_resumes(tmp_path):
    from k3sim.dispatch import dispatch
    from k3sim.state import init_host

    # four nodes, two per batch; gpu-03 was cordoned on the cluster before the run (its
    # baseline says so and the run leaves it cordoned), so three serve after the run and
    # min_serving 2 lets the rollback take one node at a time
    d = init_host(tmp_path / "run" / "sim-hosts" / "gpu-03", "gpu-03", with_default_gpu({"scheduler": "kubernetes"}))
    assert dispatch(d, ["kubectl", "cordon", "gpu-03"]).rc == 0
    hosts = {"gpu-01": {}, "gpu-02": {}, "gpu-03": {}, "gpu-04": {}}
    code, run_dir = _run(tmp_path, hosts, serial=2, min_serving=2)
    assert code == 0, result(run_dir)["halt"]
    r = result(run_dir)
    assert [r["nodes"][h]["final"] for h in ("gpu-01", "gpu-02")] == ["upgraded", "upgraded"]
    last = journal(run_dir)[-1]["seq"]
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    # killed right after the first node's drain was journaled, before it ran (its cordon
    # first publishes the progress label: one more step before the drain)
    p = cli("rollback", str(run_dir), "--batch", "1", env=locks, fault=("KILL", last + 8))
    assert p.returncode == -9, p.stdout + p.stderr
    killed_at = journal(run_dir)[-1]
    assert (killed_at["type"], killed_at.get("step"), killed_at.get("node")) == ("step_started", "drain", "gpu-01")
    p = cli("resume", str(run_dir), env=locks)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = journal(run_dir)
    r = result(run_dir)
    assert r["batches"][0]["status"] == "rolled_back"
    for h in ("gpu-01", "gpu-02"):
        assert r["nodes"][h]["final"] == "rolled_back" and r["nodes"][h]["driver_after"] == "575.57.08"
        cmds = host_timeline(run_dir, h)
        # the rollback: drained once (after the run's own drain and uncordon), then restored
        # and rebooted once, then uncordoned (both through the Kubernetes API)
        drains = [i for i, c in enumerate(cmds) if c == f'PATCH nodes/{h} {{"spec": {{"unschedulable": true}}}}']
        reboots = [i for i, c in enumerate(cmds) if c == "reboot"]
        uncordons = [i for i, c in enumerate(cmds) if c == f'PATCH nodes/{h} {{"spec": {{"unschedulable": null}}}}']
        assert len(drains) == 2 and len(reboots) == 2 and len(uncordons) == 2, cmds
        restore = [i for i, c in enumerate(cmds) if c.startswith("apt-get install") and i > uncordons[0]]
        assert len(restore) == 1 and uncordons[0] < drains[1] < restore[0] < reboots[1] < uncordons[1]
        st = sim_state(run_dir, h)
        assert st["loaded_driver"] == "575.57.08" and st["scheduler"]["state"] == "schedulable"
    # one node out at a time: gpu-02's rollback starts after gpu-01's ended
    done_01 = _seq_of(recs, lambda x: x["type"] == "rollback_done" and x["node"] == "gpu-01")
    start_02 = _seq_of(recs, lambda x: x["type"] == "rollback_started" and x["node"] == "gpu-02")
    assert done_01 < start_02
    # its own plan and records, and the resume finished it
    plan = next(x for x in recs if x["type"] == "operator_rollback")
    assert plan["batches"][0]["in_service"] == ["gpu-01", "gpu-02"] and plan["evidence"]
    assert (run_dir / "evidence" / plan["evidence"]).is_file() or (run_dir / plan["evidence"]).is_file()
    assert any(x["type"] == "operator_rollback_resumed" for x in recs)
    assert [x["ok"] for x in recs if x["type"] == "operator_rollback_finished"] == [True]
    # batch 2 was not touched by the rollback
    assert r["nodes"]["gpu-03"]["final"] == r["nodes"]["gpu-04"]["final"] == "upgraded"
    assert sim_state(run_dir, "gpu-03")["scheduler"]["state"] != "schedulable"


def test_operator_rollback_refuses_to_cross_the_capacity_floor(tmp_path):
    hosts = {"gpu-01": {}, "gpu-02": {}, "gpu-03": {}, "gpu-04": {"sim_faults": ["cuda_init_fails"]}}
    # min_serving 3 of 4: one node at a time during the run; after gpu-04 is quarantined
    # only three serve, so no node of batch 1 may be taken out again
    code, run_dir = _run(tmp_path, hosts, serial=1, min_serving=3, on_node_failure="quarantine")
    assert code == 0, result(run_dir)["halt"]
    before = {h: list(commands(run_dir, h)) for h in ("gpu-01", "gpu-02", "gpu-03")}
    api_before = {h: list(api_changes(run_dir, h)) for h in before}
    p = cli("rollback", str(run_dir), "--batch", "1", env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert p.returncode == 1
    assert "STOPPED" in p.stdout and "below min_serving 3" in p.stdout and "gpu-04" in p.stdout
    for h, cmds in before.items():
        after = commands(run_dir, h)
        assert not any(c.startswith(("apt-get", "reboot")) for c in after[len(cmds):])
        assert api_changes(run_dir, h) == api_before[h]        # not cordoned, labelled or drained
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    recs = journal(run_dir)
    assert any(x["type"] == "operator_rollback_halted" for x in recs)


def test_a_rolled_back_node_whose_fabric_manager_is_down_stays_cordoned(tmp_path):
    # a restore recipe that leaves the fabric manager out: the driver is back on 575 but the
    # fabric manager no longer matches it (CUDA would fail with error 802 on this HGX node)
    restore = [["apt-get", "install", "-y", "--allow-downgrades",
                "{{ baseline.driver_packages | rejectattr('name', 'eq', 'nvidia-fabricmanager-575') "
                "| map('apt_pin') | list }}"]]
    code, run_dir = _run(tmp_path, {"gpu-01": {"sim_faults": ["vllm_oom"]}},
                         stage_with={"driver_upgrade": {"restore": {"apt": restore}}})
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["failed_stage"], n["final"]) == ("vllm_smoke", "rollback_failed")
    res = _rollback_results(run_dir, "gpu-01")
    assert res["restore_driver"]["status"] == "done"
    assert "nvidia-fabricmanager is" in res["uncordon_if_healthy"]["detail"]
    assert "kept cordoned" in res["uncordon_if_healthy"]["detail"]
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] != "schedulable"


def test_driver_stage_that_installed_nothing_is_rolled_back_to_service(tmp_path):
    """issue #33 item 7: the driver stage stops the GPU services, then fails before any
    install (the target is not offered); the rollback has no driver to restore and no reboot
    to start them, so it starts them itself and the node serves again as it did."""
    from k3rollout.cli import main

    # a Docker host: the node serves again through its serving container
    inv = write_inventory(tmp_path / "inv", {"gpu-01": dict(DOCKER_HOST)})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, vars={"target_driver": "580.99.99"})
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 1
    r = result(run_dir)
    n = r["nodes"]["gpu-01"]
    assert (n["failed_stage"], n["final"]) == ("driver_upgrade", "rolled_back"), n
    assert r["halt"]["kind"] == "failure"             # the canary failed; no rollback did
    got = {a["action"]: a for a in n["rollback"]["results"]}
    assert "nothing to restore" in got["restore_driver"]["detail"]
    assert "started again: nvidia-fabricmanager" in got["restore_driver"]["detail"]
    st = sim_state(run_dir, "gpu-01")
    assert st["scheduler"]["state"] == "schedulable" and st["services"]["nvidia-fabricmanager"]["active"]
    assert st["docker"]["containers"]["vllm-serving"]["status"] == "running" and st["boots"] == 0
    assert not [c for c in commands(run_dir, "gpu-01") if c.startswith(("apt-get install", "reboot"))]
