"""The batch policy, built alone: its decisions from a hand-made run view (the plan, batch
states, node states and baselines), with no engine, no journal and no executor."""

from __future__ import annotations

from k3rollout.engine.policy import BatchPolicy, Halt, NextBatch
from k3rollout.engine.states import NodeState
from k3rollout.runlog.view import RunView

DONE, ROLLED_BACK, RB_FAILED = NodeState.UPGRADE_DONE.value, NodeState.ROLLED_BACK.value, NodeState.ROLLBACK_FAILED.value


def view_of(batches: list[list[str]], *, min_serving: int = 0, groups: dict[str, list[str]] | None = None,
            states: dict[str, str] | None = None, status: dict[int, str] | None = None,
            window_end: float | None = None, policy: dict | None = None) -> RunView:
    """A run view as the fold would leave it: the plan, each batch's status, node states."""
    hosts = [n for b in batches for n in b]
    plan: dict = {"hosts": hosts, "min_serving": min_serving, "batches": [
        {"index": i, "nodes": b, "estimate_s": 600.0, "rollback_estimate_s": 300.0,
         **({"replicas": [g for g, ns in groups.items() if set(ns) <= set(b)]} if groups else {})}
        for i, b in enumerate(batches, start=1)]}
    if groups:
        plan["groups"] = groups
    if policy:
        plan["policy"] = policy
    v = RunView(plan=plan, window_end=window_end)
    for i, b in enumerate(batches, start=1):
        v.batches[i] = {"index": i, "nodes": list(b), "status": (status or {}).get(i, "not_started"), "failed": []}
        for n in b:
            v.node(n).batch = i
    for n, st in (states or {}).items():
        v.node(n).state = st
    return v


def never() -> float:
    raise AssertionError("the clock was read, though no window is set")


# ---------------------------------------------------------------- verdict

def test_a_failed_node_of_a_replica_counts_as_one_failed_replica():
    groups = {"r1": ["a", "b"], "r2": ["c", "d"]}
    v = view_of([["a", "b", "c", "d"]], groups=groups, states={"a": ROLLED_BACK, "b": DONE, "c": DONE, "d": DONE})
    status, failed, halt = BatchPolicy(max_fail_percentage=25).verdict(v, v.plan["batches"][0])
    assert (status, failed) == ("failed", ["a"])
    # 1 of 4 nodes is 25% (not above 25%); 1 of 2 replicas is 50%
    assert halt == ("failure", "batch 1: 1 of 2 replica(s) failed (50%), above max_fail_percentage 25%")


def test_without_replicas_the_same_batch_counts_nodes_and_goes_on():
    v = view_of([["a", "b", "c", "d"]], states={"a": ROLLED_BACK, "b": DONE, "c": DONE, "d": DONE})
    assert BatchPolicy(max_fail_percentage=25).verdict(v, v.plan["batches"][0]) == ("failed", ["a"], None)


def test_a_failed_rollback_halts_whatever_the_percentage():
    v = view_of([["a", "b"]], states={"a": RB_FAILED, "b": DONE})
    status, failed, halt = BatchPolicy(max_fail_percentage=100).verdict(v, v.plan["batches"][0])
    assert status == "failed" and failed == ["a"]
    assert halt is not None and halt[0] == "rollback_failed" and "ROLLBACK FAILED on a" in halt[1]


def test_a_skipped_node_is_not_a_failure():
    v = view_of([["a", "b"]], states={"a": NodeState.SKIPPED.value, "b": DONE})
    assert BatchPolicy(max_fail_percentage=0).verdict(v, v.plan["batches"][0]) == ("passed", [], None)


# ---------------------------------------------------------------- failure budget

def test_the_failure_budget_counts_failed_nodes_across_the_rollout():
    v = view_of([["a", "b"], ["c", "d"]], states={"a": ROLLED_BACK, "c": RB_FAILED, "b": DONE})
    assert BatchPolicy(max_fail_percentage=50, failure_budget=2).over_budget(v) is None
    assert BatchPolicy(max_fail_percentage=50, failure_budget=1).over_budget(v) == \
        "2 node(s) failed so far (a, c), above the rollout's failure_budget of 1 (1)"
    # a percentage of the plan's hosts: 25% of 4 is 1 node
    assert BatchPolicy(max_fail_percentage=50, failure_budget="25%").over_budget(v) == \
        "2 node(s) failed so far (a, c), above the rollout's failure_budget of 1 (25%)"
    assert BatchPolicy(max_fail_percentage=50).over_budget(v) is None      # no budget set


# ---------------------------------------------------------------- capacity floor

def test_the_capacity_floor_counts_nodes_the_baseline_found_out_of_service():
    v = view_of([["a"], ["b"], ["c"], ["d"]], min_serving=3)
    p = BatchPolicy(max_fail_percentage=0)
    assert p.capacity_short(v, ["a"], "batch 1") is None
    v.node("d").baseline["scheduler_state"] = "cordoned"
    assert p.out_of_service(v) == {"d"}
    assert p.capacity_short(v, ["a"], "batch 1") == \
        "batch 1 would leave 2 node(s) serving, below min_serving 3 (1 out of service: d)"
    # a node already out costs nothing more
    assert p.capacity_short(v, ["d"], "batch 4") is None


def test_quarantined_and_declared_out_nodes_serve_nothing():
    v = view_of([["a", "b"], ["c", "d"]], min_serving=2, states={"a": ROLLED_BACK})
    assert BatchPolicy(max_fail_percentage=0).out_of_service(v) == set()
    assert BatchPolicy(max_fail_percentage=0, quarantine=True).out_of_service(v) == {"a"}
    declared = BatchPolicy(max_fail_percentage=0, quarantine=True, declared_out=lambda hosts: ["d"])
    assert declared.out_of_service(v) == {"a", "d"}
    assert declared.capacity_short(v, ["c"], "batch 2") == \
        "batch 2 would leave 1 node(s) serving, below min_serving 2 (2 out of service: a, d)"


def test_capacity_counts_replicas_when_the_plan_has_them():
    groups = {"r1": ["a", "b"], "r2": ["c", "d"], "r3": ["e", "f"]}
    v = view_of([["a", "b"], ["c", "d"], ["e", "f"]], min_serving=2, groups=groups)
    p = BatchPolicy(max_fail_percentage=0)
    assert p.capacity_short(v, ["a", "b"], "batch 1") is None
    # one node of r3 out of service takes the whole replica out
    v.node("e").baseline["scheduler_state"] = "drained"
    assert p.capacity_short(v, ["a", "b"], "batch 1") == \
        "batch 1 would leave 1 replica(s) serving, below min_serving 2 (1 out of service: r3)"
    # extra nodes held out (a window's nodes in flight) count as out too
    assert p.capacity_short(v, ["a"], "starting a", extra_out={"c"}) is not None


# ---------------------------------------------------------------- the next batch

def test_next_replays_a_finished_batch_then_starts_the_next():
    v = view_of([["a"], ["b"]], status={1: "passed"})
    p = BatchPolicy(max_fail_percentage=0)
    first = p.next(v, 0, never)
    assert isinstance(first, NextBatch) and (first.index, first.action, first.position) == (1, "replay", 0)
    second = p.next(v, 1, never)
    assert isinstance(second, NextBatch) and (second.index, second.action) == (2, "start")
    assert p.next(v, 2, never) is None
    v.batches[2]["status"] = "running"              # a stop interrupted it
    nxt = p.next(v, 1, never)
    assert isinstance(nxt, NextBatch) and nxt.action == "continue"


def test_next_refuses_a_batch_that_would_cross_the_capacity_floor():
    v = view_of([["a"], ["b"]], min_serving=2)
    assert BatchPolicy(max_fail_percentage=0, guard_capacity=True).next(v, 0, never) == \
        Halt("capacity", "batch 1 would leave 1 node(s) serving, below min_serving 2 (0 out of service: none)", 1)
    # a play that takes nothing out of service (no cordon stage, or no change) is not held to the floor
    nxt = BatchPolicy(max_fail_percentage=0, guard_capacity=False).next(v, 0, never)
    assert isinstance(nxt, NextBatch) and nxt.action == "start"


def test_next_refuses_a_batch_that_does_not_fit_the_window_left():
    t0 = 1_000_000.0
    v = view_of([["a"]], window_end=t0 + 899)         # the batch needs 600 s + 300 s of rollback reserve
    assert BatchPolicy(max_fail_percentage=0).next(v, 0, lambda: t0) == \
        Halt("window", "batch 1 needs 15 min (including its rollback) but the window has 14 min left", 1)
    v.window_end = t0 + 900
    nxt = BatchPolicy(max_fail_percentage=0).next(v, 0, lambda: t0)
    assert isinstance(nxt, NextBatch) and nxt.action == "start"


def test_next_hands_the_window_batch_to_the_sliding_window():
    v = view_of([["a"], ["b", "c", "d"]], status={1: "passed"}, policy={"name": "window", "batch": 2})
    nxt = BatchPolicy(max_fail_percentage=0).next(v, 1, never)
    assert isinstance(nxt, NextBatch) and (nxt.index, nxt.action) == (2, "window")
    v.batches[2]["status"] = "failed"               # the window finished: only its post-batch steps remain
    nxt = BatchPolicy(max_fail_percentage=0).next(v, 1, never)
    assert isinstance(nxt, NextBatch) and nxt.action == "replay"
