"""The multi-node gate between an upgraded node and a not-yet-upgraded one."""

from __future__ import annotations

from support import cli, journal, result, write_inventory, write_playbook


def _run(tmp_path, faults, mixed=True, serial=(1, 3)):
    hosts = {f"gpu-{i:02d}": {"sim_faults": faults.get(f"gpu-{i:02d}", [])} for i in range(1, 5)}
    inv = write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=list(serial), min_serving=0, max_fail_percentage=100,
                        stage_with={"multinode": {"mixed_version_peer": mixed}})
    run = tmp_path / "run"
    cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run))
    facts: dict[str, dict] = {}
    for r in journal(run):
        if r["type"] == "facts":
            facts.setdefault(r["node"], {}).update(r["facts"])
    return result(run), facts, run


def test_a_broken_fabric_on_the_canary_is_caught_in_the_canary_batch(tmp_path):
    res, facts, _ = _run(tmp_path, {"gpu-01": ["nccl_broken"]})
    n = res["nodes"]["gpu-01"]
    assert n["final"] == "rolled_back" and n["failed_stage"] == "multinode" and n["triage"] == "communication"
    assert [t["peer"] for t in facts["gpu-01"]["nccl_mixed_tries"]] == ["gpu-02", "gpu-03"]


def test_a_healthy_mixed_pair_is_recorded(tmp_path):
    res, facts, run = _run(tmp_path, {})
    assert all(n["final"] == "upgraded" for n in res["nodes"].values())
    f = facts["gpu-01"]
    assert f["nccl_mixed_peer"] == "gpu-02" and f["nccl_mixed_ok"] and f["nccl_mixed_busbw_gbps"] > 0
    cmds = [c for c in (run / "sim-hosts" / "gpu-01" / "commands.log").read_text().splitlines() if "mpirun" in c]
    assert any("-H gpu-01:1,gpu-02:1" in c for c in cmds)
    # the last batch has no old-driver node left to pair with
    assert facts["gpu-04"]["nccl_mixed_note"].startswith("no node left on the old driver")


def test_a_broken_old_driver_peer_is_named_not_blamed_on_the_canary(tmp_path):
    res, facts, _ = _run(tmp_path, {"gpu-02": ["nccl_broken"]})
    assert res["nodes"]["gpu-01"]["final"] == "upgraded"
    f = facts["gpu-01"]
    assert f["nccl_mixed_suspect_peer"] == "gpu-02" and f["nccl_mixed_ok"]
    assert [t["ok"] for t in f["nccl_mixed_tries"]] == [False, True]
