"""Every simulated fault, alone and combined, in the canary and in a later batch: the right
stage fails, the right rollback runs, the right halt decision is taken, the report says why."""

from __future__ import annotations

import pytest
from support import (
    DOCKER_HOST,
    assert_reports_match_journal,
    commands,
    journal,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.cli import main

# fault -> (failed stage or None when the node still upgrades, final, triage)
EXPECT = {
    # the NVIDIA module does not build (DKMS "Bad return status for module build"): the node has
    # no working driver for CUDA to start with, tree step 2, as the labelled corpus has it
    "driver_install_fails": ("driver_upgrade", "rolled_back", "container_runtime"),
    "no_boot_after_upgrade": ("driver_upgrade", "rollback_failed", "other"),
    "cuda_init_fails": ("cuda_check", "rolled_back", "container_runtime"),
    # without the NVIDIA runtime the serving container the baseline saw running cannot start
    # again after the rollback: the node is kept cordoned (issue 21, item 7)
    "container_runtime_missing": ("cuda_check", "rollback_failed", "container_runtime"),
    "vllm_oom": ("vllm_smoke", "rolled_back", "model_load_capacity"),
    "prefix_cache_miss": ("features", "rolled_back", "other"),
    # a broken inter-node fabric cannot show in a one-node canary (NVLink works); it is
    # caught in the first multi-node batch
    "nccl_broken": ("multinode", "rolled_back", "communication"),
    # no RDMA device: NCCL falls back to sockets and still "works"; its log fails the gate,
    # and like a broken fabric it cannot show in a one-node canary
    "rdma_missing": ("multinode", "rolled_back", "communication"),
    "ssh_drops": (None, "upgraded", None),        # the dropped install is settled, not repeated
    "ssh_drops_read": (None, "upgraded", None),   # a dropped read-only query is run again
    "slow_reboot": (None, "upgraded", None),      # slower than usual, within the reboot timeout
}


def rollout(tmp_path, faults: dict[str, list[str]]) -> tuple[int, dict, object]:
    hosts = {f"gpu-{i:02d}": {"sim_faults": faults.get(f"gpu-{i:02d}", [])} for i in range(1, 5)}
    # Docker hosts: the matrix's outcomes are the Docker host's (without the NVIDIA runtime its
    # serving container cannot start again after the rollback); on a containerd node the same
    # fault leaves the device plugin with no GPUs, which the cuda_check waits gpu_ready_timeout for
    inv = write_inventory(tmp_path / "inv", hosts, {**DOCKER_HOST, "sim_reboot_s": 0.01, "sim_slow_reboot_s": 0.3})
    # canary, then the remaining three together; one of three failing (33%) is tolerated
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 3], max_fail_percentage=34, min_serving=0,
                        reboot_timeout=2)
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert_reports_match_journal(run_dir)
    return code, result(run_dir), run_dir


@pytest.mark.parametrize("fault", sorted(EXPECT))
@pytest.mark.parametrize("where", ["canary", "later"])
def test_single_fault(tmp_path, fault, where):
    node = "gpu-01" if where == "canary" else "gpu-03"
    code, r, run_dir = rollout(tmp_path, {node: [fault]})
    stage, final, triage = EXPECT[fault]
    if fault in ("nccl_broken", "rdma_missing") and where == "canary":
        stage, final, triage = None, "upgraded", None
    n = r["nodes"][node]
    assert (n["failed_stage"], n["final"], n["triage"]) == (stage, final, triage), n
    if final == "rollback_failed":
        expect_status, halt_kind = "halted", "rollback_failed"
    elif stage and where == "canary":
        expect_status, halt_kind = "halted", "failure"       # 1 of 1 = 100% > 34%
    else:
        expect_status, halt_kind = "completed", None          # 1 of 3 = 33% <= 34%
    assert r["status"] == expect_status
    assert (r["halt"] or {}).get("kind") == halt_kind
    assert code == (0 if expect_status == "completed" else 1)
    if final == "rolled_back":
        st = sim_state(run_dir, node)
        assert n["driver_after"] == "575.57.08" and st["loaded_driver"] == "575.57.08"
        assert st["scheduler"]["state"] == "schedulable"
    if final == "rollback_failed":
        assert sim_state(run_dir, node)["scheduler"]["state"] != "schedulable"
    if stage:
        report = (run_dir / "report.md").read_text()
        assert n["reason"][:40].replace("|", "\\|") in report
    # nodes of batches that never started were never touched
    for other, v in r["nodes"].items():
        if v["final"] == "pending":
            assert commands(run_dir, other) == []


@pytest.mark.parametrize("faults,stage,final", [
    (["ssh_drops", "cuda_init_fails"], "cuda_check", "rolled_back"),
    (["ssh_drops", "driver_install_fails"], "driver_upgrade", "rolled_back"),
    (["slow_reboot", "vllm_oom"], "vllm_smoke", "rolled_back"),
    (["container_runtime_missing", "vllm_oom"], "cuda_check", "rollback_failed"),
])
def test_combined_faults_on_one_node(tmp_path, faults, stage, final):
    code, r, run_dir = rollout(tmp_path, {"gpu-03": faults})
    n = r["nodes"]["gpu-03"]
    assert (n["failed_stage"], n["final"]) == (stage, final)
    # a rollback that leaves the node unable to serve halts the rollout, whatever the percentage
    assert r["status"] == ("halted" if final == "rollback_failed" else "completed")
    installs = [c for c in commands(run_dir, "gpu-03") if c.startswith("apt-get install")]
    assert len(installs) <= 3   # upgrade (+ one retry after an unsettled drop) + restore


def test_faults_on_several_nodes_of_one_batch_halt_it(tmp_path):
    code, r, run_dir = rollout(tmp_path, {"gpu-02": ["vllm_oom"], "gpu-04": ["driver_install_fails"]})
    assert code == 1 and r["status"] == "halted" and r["halt"]["kind"] == "failure"
    assert "2 of 3" in r["halt"]["reason"]
    assert {r["nodes"][h]["final"] for h in ("gpu-02", "gpu-04")} == {"rolled_back"}
    assert r["nodes"]["gpu-03"]["final"] == "upgraded"


def test_capacity_floor_is_never_crossed_even_with_failures(tmp_path):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 9)}
    hosts["gpu-02"] = {"sim_faults": ["vllm_oom"]}
    hosts["gpu-06"] = {"sim_faults": ["cuda_init_fails"]}
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", serial=3, min_serving=6, max_fail_percentage=100)
    run_dir = tmp_path / "run"
    main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    out: set[str] = set()
    worst = 0
    for rec in journal(run_dir):
        if rec["type"] == "stage_started" and rec["stage"] == "cordon":
            out.add(rec["node"])
        elif rec["type"] == "node_state" and rec["to"] in ("upgrade-done", "rolled-back"):
            out.discard(rec["node"])
        worst = max(worst, len(out))
    assert worst <= 8 - 6
    assert result(run_dir)["status"] == "completed"
