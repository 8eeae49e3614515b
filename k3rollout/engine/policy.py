"""The batch policy: which batch runs next, and when the rollout must stop.

Pure decisions over the run view (the plan, each batch's status, each node's state and
baseline): no journal, no executor, no engine. The engine asks it

- ``next(view, position, now)``: the next batch of the plan from ``position`` on and what
  to do with it (``start`` it, ``continue`` one a stop interrupted, ``replay`` the
  post-batch hooks and gate of one that finished, or hand it to the sliding ``window``:
  engine/window.py), or a ``Halt`` when the batch must not start (``preflight``), or None
  at the end of the plan;
- ``verdict(view, batch)``: a finished batch's status, its failed nodes and a halt when
  ``max_fail_percentage`` is crossed (counting replicas when the plan has them: a replica
  with any failed node is one failed replica) or a rollback failed;
- ``over_budget(view)``: the rollout-wide ``failure_budget``;
- ``capacity_short(view, nodes, ...)``: taking ``nodes`` out now would cross ``min_serving``
  (in replicas when the plan has them), counting ``out_of_service(view)``.

``serial`` batches are barriers: one batch at a time, in the plan's order. A plan with a
``window`` policy runs its canary batches that way and hands the window batch to
engine/window.py, which asks ``capacity_short`` and ``over_budget`` before each node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from k3rollout.engine.recorder import run_plan
from k3rollout.engine.states import NodeState
from k3rollout.plan.serial import pct_to_int
from k3rollout.runlog.view import RunView

DONE_BATCH = ("passed", "failed", "rolled_back")
# scheduler states of a node that serves (``unmanaged``: no scheduler, nothing cordons it)
IN_SERVICE = ("schedulable", "unmanaged")


@dataclass(frozen=True)
class Halt:
    """The rollout stops: ``kind`` as result.json's ``halt.kind``, ``reason`` for a person."""
    kind: str
    reason: str
    batch: int | None = None


@dataclass(frozen=True)
class NextBatch:
    """The next batch of the plan and what to do with it: ``start`` (not started; its
    preflight passed), ``continue`` (a stop interrupted it), ``replay`` (it finished: its
    post-batch hooks and gate, which a stop may have left undone) or ``window`` (the
    sliding window's batch). ``position``: its place in the plan's batch list."""
    batch: dict[str, Any]
    action: str
    position: int

    @property
    def index(self) -> int:
        return int(self.batch["index"])


def _none_declared(hosts: list[str]) -> Iterable[str]:
    return ()


class BatchPolicy:
    """``max_fail_percentage`` and ``failure_budget`` as the play gives them; ``quarantine``:
    the play's ``on_node_failure`` is ``quarantine`` (a rolled-back node stays out);
    ``guard_capacity``: batches take nodes out of service (an in-place play with a cordon
    stage), so a batch's preflight checks the floor; ``declared_out(hosts)``: the hosts the
    inventory says serve nothing before the run (plan/planner.py)."""

    def __init__(self, *, max_fail_percentage: float, failure_budget: int | str | None = None,
                 quarantine: bool = False, guard_capacity: bool = True,
                 declared_out: Callable[[list[str]], Iterable[str]] = _none_declared):
        self.max_fail_percentage = max_fail_percentage
        self.failure_budget = failure_budget
        self.quarantine = quarantine
        self.guard_capacity = guard_capacity
        self.declared_out = declared_out

    # ------------------------------------------------------------------ the next batch

    def next(self, view: RunView, position: int, now: Callable[[], float]) -> NextBatch | Halt | None:
        """The first batch of the plan at or after ``position``; ``now`` is read only when a
        batch about to start is checked against the window."""
        policy = run_plan(view).get("policy") or {}
        batches = run_plan(view)["batches"]
        for pos in range(position, len(batches)):
            batch = batches[pos]
            idx = batch["index"]
            status = view.batches[idx]["status"]
            if policy.get("name") == "window" and idx == policy.get("batch") and status not in DONE_BATCH:
                return NextBatch(batch, "window", pos)
            if status in DONE_BATCH:
                return NextBatch(batch, "replay", pos)
            if status == "not_started":
                stop = self.preflight(view, batch, now)
                if stop:
                    return Halt(stop[0], stop[1], idx)
                return NextBatch(batch, "start", pos)
            return NextBatch(batch, "continue", pos)
        return None

    def preflight(self, view: RunView, batch: dict[str, Any], now: Callable[[], float]) -> tuple[str, str] | None:
        """Why the batch must not start, or None: its estimate plus its rollback estimate
        does not fit in the window left, or it would cross the capacity floor."""
        if view.window_end is not None:
            need = batch["estimate_s"] + batch["rollback_estimate_s"]
            left = view.window_end - now()
            if need > left:
                return "window", (f"batch {batch['index']} needs {math.ceil(need / 60)} min (including its rollback) "
                                  f"but the window has {max(0, int(left // 60))} min left")
        if self.guard_capacity:
            short = self.capacity_short(view, batch["nodes"], f"batch {batch['index']}")
            if short:
                return "capacity", short
        return None

    # ------------------------------------------------------------------ after a batch

    def verdict(self, view: RunView, batch: dict[str, Any]) -> tuple[str, list[str], tuple[str, str] | None]:
        """(status, failed nodes, halt or None) of a batch whose nodes are all done."""
        nodes = batch["nodes"]
        states = {n: view.node(n).state for n in nodes}
        failed = [n for n, s in states.items() if s not in (NodeState.UPGRADE_DONE.value, NodeState.SKIPPED.value)]
        status = "failed" if failed else "passed"
        halt = None
        rb_failed = [n for n, s in states.items() if s == NodeState.ROLLBACK_FAILED.value]
        groups = run_plan(view).get("groups") or {}
        if groups and batch.get("replicas"):
            # max_fail_percentage counts replicas: a replica with any failed node is a failed replica
            reps = batch["replicas"]
            bad = [g for g in reps if any(n in failed for n in groups.get(g, []))]
            pct, counted = 100.0 * len(bad) / len(reps), f"{len(bad)} of {len(reps)} replica(s)"
        else:
            pct, counted = 100.0 * len(failed) / len(nodes), f"{len(failed)} of {len(nodes)} node(s)"
        if rb_failed:
            halt = ("rollback_failed", f"ROLLBACK FAILED on {', '.join(rb_failed)}: node(s) kept cordoned and need "
                                       "hands-on recovery (see runbooks/ and the node's rollback evidence)")
        elif pct > self.max_fail_percentage:
            halt = ("failure", f"batch {batch['index']}: {counted} failed ({pct:.0f}%), "
                               f"above max_fail_percentage {self.max_fail_percentage:g}%")
        return status, failed, halt

    def failed_nodes(self, view: RunView) -> list[str]:
        bad = (NodeState.ROLLED_BACK.value, NodeState.ROLLBACK_FAILED.value, NodeState.FAILED.value)
        return sorted(n for n, v in view.nodes.items() if v.state in bad)

    def over_budget(self, view: RunView) -> str | None:
        """Why the rollout-wide failure budget is spent, or None."""
        budget = self.failure_budget
        if budget is None:
            return None
        total = len(run_plan(view)["hosts"])
        allowed = pct_to_int(budget, total, 0) if isinstance(budget, str) else int(budget)
        failed = self.failed_nodes(view)
        if len(failed) > allowed:
            return (f"{len(failed)} node(s) failed so far ({', '.join(failed[:8])}{' ...' if len(failed) > 8 else ''}), "
                    f"above the rollout's failure_budget of {allowed} ({budget})")
        return None

    # ------------------------------------------------------------------ capacity

    def out_of_service(self, view: RunView) -> set[str]:
        """The nodes that serve nothing now, as the capacity floor counts them."""
        out = {n for n, v in view.nodes.items() if v.state == NodeState.ROLLBACK_FAILED.value}
        if self.quarantine:
            # quarantined nodes stay cordoned: they serve nothing until someone releases them
            out |= {n for n, v in view.nodes.items() if v.state == NodeState.ROLLED_BACK.value}
        hosts = run_plan(view)["hosts"]
        out |= set(self.declared_out(hosts))
        # what the scheduler told the baseline: a node that was not serving before the run
        # (or whose state could not be read) serves nothing after it either (the run never
        # uncordons what it did not cordon). Nodes of later batches are not contacted before
        # their batch: for them, the plan's knowledge (inventory) counts.
        for h in hosts:
            state = view.node(h).baseline.get("scheduler_state")
            if state is not None and state not in IN_SERVICE:
                out.add(h)
        return out

    def capacity_short(self, view: RunView, nodes: list[str], what_for: str,
                       extra_out: Iterable[str] = frozenset()) -> str | None:
        """Why taking ``nodes`` out of service now would cross the capacity floor, or None."""
        plan = run_plan(view)
        out = self.out_of_service(view) | set(extra_out)
        if plan.get("groups"):
            # capacity in replicas: a replica serves only when every node of it does
            groups = plan["groups"]
            out_g = {g for g, ns in groups.items() if any(n in out for n in ns)}
            serving = len(groups) - len(out_g)
            taking = len({g for g, ns in groups.items() if g not in out_g and any(n in nodes for n in ns)})
            what, down = "replica(s)", sorted(out_g)
        else:
            serving = len(plan["hosts"]) - len(out)
            taking = len([n for n in nodes if n not in out])
            what, down = "node(s)", sorted(out)
        if serving - taking < plan["min_serving"]:
            return (f"{what_for} would leave {serving - taking} {what} serving, below min_serving "
                    f"{plan['min_serving']} ({len(down)} out of service: {', '.join(down) or 'none'})")
        return None
