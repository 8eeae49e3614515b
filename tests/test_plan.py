import json
from pathlib import Path

import pytest
from support import PLAYBOOK, SIM_INVENTORY, write_inventory, write_playbook

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model import load_inventory, load_playbook
from k3rollout.plan import make_plan


def plan_for(tmp_path, n=8, window_s=None, **over):
    inv = load_inventory(write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, n + 1)}))
    pb = load_playbook(write_playbook(tmp_path / "pb.yml", **over)) if over else load_playbook(PLAYBOOK)
    return make_plan(pb, inv, window_s=window_s)


def test_plan_shows_batches_stages_durations_and_rollback_plans():
    plan = make_plan(load_playbook(PLAYBOOK), load_inventory(SIM_INVENTORY), window_s=None)
    # the default cluster in Kimi K3 replicas: rack_a's 8 H200 nodes in 4 two-node tp16-ep16
    # replicas, rack_b's 8 B300 nodes in 8 one-node tp8 replicas; serial [1, 2, 4] counts replicas
    assert plan.unit == "replica"
    assert [(r["id"], len(r["nodes"]), r["layout"]["name"]) for r in plan.replicas] == \
        [(f"rack-a/{i}", 2, "tp16-ep16") for i in range(1, 5)] + [(f"rack-b/{i}", 1, "tp8") for i in range(1, 9)]
    assert [len(b.nodes) for b in plan.batches] == [2, 4, 5, 4, 1]
    assert plan.batches[2].nodes == ["gpu-a07", "gpu-a08", "gpu-b01", "gpu-b02", "gpu-b03"]
    assert [s["stage"] for s in plan.stages] == ["baseline", "cordon", "driver_upgrade", "cuda_check",
                                                  "vllm_smoke", "features", "multinode", "uncordon"]
    b1 = plan.batches[0]
    assert b1.estimate_s == sum(s["estimate_s"] for s in plan.stages)
    # in replicas: 11 of 12 serve while the canary replica is out; min_serving 50% of 12
    assert b1.serving_during == 11 and b1.serving_floor == 6
    steps = b1.rollback_plan[0]["steps"]
    assert any("575.57.08" in s and s.startswith("restore_driver") for s in steps)
    assert steps[-1].startswith("uncordon_if_healthy")


def test_window_fit_counts_the_rollback_reserve(tmp_path):
    # per batch 83 min, rollback reserve 25 min + 3 x 1 min: a 2 h window fits batch 1 only
    plan = plan_for(tmp_path, n=4, window_s=2 * 3600, serial=1)
    assert [b.fits_window for b in plan.batches] == [True, False, False, False]
    assert plan.fits_window is False
    assert any("only 1 of 4" in n for n in plan.notes)
    # 111 min (83 + 28) is the least a one-batch window needs
    tight = plan_for(tmp_path, n=1, window_s=110 * 60, serial=1, min_serving=0)
    assert tight.batches[0].fits_window is False
    ok = plan_for(tmp_path, n=1, window_s=111 * 60, serial=1, min_serving=0)
    assert ok.batches[0].fits_window is True


def test_capacity_floor_splits_batches_that_would_cross_it(tmp_path):
    plan = plan_for(tmp_path, n=8, serial=4, min_serving=6)
    assert [len(b.nodes) for b in plan.batches] == [2, 2, 2, 2]
    assert all(b.capped_by_capacity for b in plan.batches)
    assert all(b.serving_during >= 6 for b in plan.batches)


def test_capacity_floor_that_leaves_nothing_to_upgrade_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="no node can be taken out"):
        plan_for(tmp_path, n=4, min_serving="100%")


def test_plan_json_cli_touches_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--json", "--window", "8h"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["window_s"] == 8 * 3600
    # the canary is the first replica: both nodes of rack-a/1 (the default cluster plans K3 replicas)
    assert len(data["batches"]) == 5 and data["batches"][0]["nodes"] == ["gpu-a01", "gpu-a02"]
    assert [p.name for p in Path(tmp_path).iterdir() if p.name != "locks"] == []


def test_plan_text_says_whether_each_batch_fits(capsys):
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--window", "3h", "--rollback"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out
    assert "restore_driver" in out


def _grouped(tmp_path, groups: dict[str, int], serial, min_serving, extra_hosts: dict | None = None):
    from support import write_inventory, write_playbook

    from k3rollout.model import load_inventory, load_playbook
    from k3rollout.plan import make_plan

    hosts = {}
    for g, n in groups.items():
        for i in range(n):
            hosts[f"{g}-n{i}"] = {"serving_group": g}
    hosts.update(extra_hosts or {})
    inv = write_inventory(tmp_path / "ginv", hosts)
    pb = write_playbook(tmp_path / "gpb.yml", serial=serial, min_serving=min_serving, group_by="serving_group")
    return make_plan(load_playbook(pb), load_inventory(inv))


def test_serving_groups_batch_whole_replicas_and_count_capacity_in_replicas(tmp_path):
    # four 2-node replicas (TP across two nodes each); keep 3 of 4 replicas serving
    plan = _grouped(tmp_path, {"r1": 2, "r2": 2, "r3": 2, "r4": 2}, serial=[1, 2], min_serving=3)
    assert plan.unit == "replica" and plan.min_serving == 3
    assert [b.replicas for b in plan.batches] == [["r1"], ["r2"], ["r3"], ["r4"]]
    assert [b.nodes for b in plan.batches][0] == ["r1-n0", "r1-n1"]
    assert all(b.serving_during == 3 and b.serving_before == 4 for b in plan.batches)
    # serial 2 was split: two replicas at once would leave 2 serving
    assert plan.batches[1].capped_by_capacity


def test_a_node_without_a_group_is_a_replica_of_its_own(tmp_path):
    plan = _grouped(tmp_path, {"r1": 2}, serial=[2], min_serving=0, extra_hosts={"solo": {}})
    assert plan.groups == {"r1": ["r1-n0", "r1-n1"], "solo": ["solo"]}
    assert plan.batches[0].replicas == ["r1", "solo"] and len(plan.batches[0].nodes) == 3


def test_plan_lists_each_rollback_action_once_in_the_order_it_runs():
    # issue #33 item 4: vllm_smoke and features both declare stop_test_server; the plan a
    # change board approves names it once, in the order the executed rollback runs it
    from k3rollout.stages.rollback import plan_rollback

    pb = load_playbook(PLAYBOOK)
    assert sum(rb.action == "stop_test_server" for s in pb.stages for rb in s.rollback) == 2
    plan = make_plan(pb, load_inventory(SIM_INVENTORY), window_s=None)
    for b in plan.batches:
        for p in b.rollback_plan:
            actions = [s.split(":")[0] for s in p["steps"]]
            assert actions == ["stop_test_server", "restore_driver", "restore_serving_image",
                               "uncordon_if_healthy"], (p["node"], actions)
    executed = [s["action"] for s in plan_rollback(pb, "gpu-a01", {"driver_version": "575.57.08"}, {})]
    assert executed == [s.split(":")[0] for s in plan.batches[0].rollback_plan[0]["steps"]]


def test_plan_marks_nodes_the_play_will_not_change_with_no_rollback(tmp_path):
    # issue #33 item 1: one rule (plan/target.py) for plan, preflight and run
    from k3rollout.plan.target import no_change_reason

    hosts = {"gpu-01": {}, "gpu-02": {"driver_version": "590.44.01"}, "gpu-03": {"driver_version": "580.95.05"}}
    inv = load_inventory(write_inventory(tmp_path / "inv", hosts))
    plan = make_plan(load_playbook(write_playbook(tmp_path / "pb.yml", min_serving=0)), inv, window_s=None)
    assert set(plan.no_change) == {"gpu-02", "gpu-03"}
    steps = {rp["node"]: rp["steps"] for b in plan.batches for rp in b.rollback_plan}
    assert steps["gpu-02"] == [f"none: {plan.no_change['gpu-02']}; baseline only, the node stays in service"]
    assert steps["gpu-01"][0].startswith("stop_test_server")
    assert any("2 node(s) the play will not change" in n for n in plan.notes)
    assert no_change_reason("590.44.01", "580.95.05") == plan.no_change["gpu-02"]
    assert no_change_reason("580.105.08", "580.95.05") and no_change_reason("575.57.08", "580.95.05") is None
    assert no_change_reason(None, "580.95.05") is None


def test_plan_warns_of_a_replica_that_mixes_changed_and_unchanged_nodes(tmp_path):
    h200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141, "rack": "a"}
    hosts = {"gpu-01": dict(h200), "gpu-02": {**h200, "driver_version": "590.44.01"}}
    inv = load_inventory(write_inventory(tmp_path / "inv", hosts))
    plan = make_plan(load_playbook(write_playbook(tmp_path / "pb.yml", profile="kimi-k3", min_serving=0)), inv)
    assert list(plan.no_change) == ["gpu-02"]
    assert any(n.startswith("replica rack-a/1 mixes nodes the play changes with gpu-02") for n in plan.notes), \
        plan.notes
