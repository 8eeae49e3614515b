"""A run's live state: the run log's fold, the stage times measured so far, and the
estimates made from them. Pure: records in, figures out; the time is passed in.

The estimate of what is left uses the stage times this run has measured as soon as it has
them: a stage's mean over the nodes of the same hardware class that passed it (over all
classes when that class has none yet); a stage nobody has passed yet takes the plan's
estimate, scaled by how this run's measured stages compare with their plan estimates (a
fleet that runs twice as fast as planned is expected to keep doing so). A batch's nodes
walk their stages side by side (at most ``forks`` at once), so a batch lasts as long as its
slowest node, or its total work over ``forks`` when that is more.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate
from typing import Any

from k3rollout.runlog.view import NodeView, RunView, apply

# records the view has no use for: three in four of a run's are a command's start or end, whose
# outcome the stage's own records carry (skipping them is most of what the fold costs)
UNSHOWN = frozenset({"step_started", "step_done", "step_settled", "assertions", "ansible_event", "evidence",
                     "step_error"})
# node states after which nothing more happens to a node in this run (engine/states.py)
DONE_STATES = frozenset({"upgrade-done", "rolled-back", "rollback-failed", "failed", "skipped"})
UNKNOWN = "unknown"
# the metrics' histogram of stage durations (live/metrics.py): stage durations run from seconds
# (a cordon) to an hour and more (a driver with reboot)
BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


def ts(text: str | None) -> float | None:
    """Seconds since the epoch of a journal timestamp (ISO 8601 with its offset)."""
    return datetime.fromisoformat(text).timestamp() if text else None


@dataclass
class Units:
    """How far a set of units (nodes or replicas) got: done, in flight, not started."""
    total: int = 0
    done: int = 0
    in_flight: int = 0


@dataclass
class LiveRun:
    """The fold of the records seen so far (``view``) and what the estimates need."""
    view: RunView = field(default_factory=RunView)
    seq: int = 0                      # the last record applied (records come in seq order)
    # (stage, hardware class) -> durations (s) of the spans that passed, in this run
    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # the same spans counted as they come by the first of BUCKETS they fit under (the last
    # place: over them all); ``histogram()`` sums them up
    buckets: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    shown: int = 0                    # records applied that change what is shown (not UNSHOWN)
    measured_s: float = 0.0           # sum of those spans ...
    planned_s: float = 0.0            # ... and of the plan's estimates for the same (stage, class)
    _planned: dict[tuple[str, str], float] = field(default_factory=dict)
    _stage_estimate: dict[str, float] = field(default_factory=dict)
    _plan_class: dict[str, str] = field(default_factory=dict)   # node -> class the plan knew
    # running sums of ``samples``, per (stage, class) and per stage: (seconds, count)
    _sum: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    _pooled: dict[str, tuple[float, int]] = field(default_factory=dict)
    _memo: dict[Any, float] = field(default_factory=dict)      # at ``_memo_seq``: what a frame asks twice
    _memo_seq: int = -1
    _of_plan: Any = None              # the plan the four below were taken from (it comes once, at run start)
    _stages: list[str] = field(default_factory=list)
    _after: dict[str, list[str]] = field(default_factory=dict)      # stage -> the plan's stages after it
    _groups: dict[str, list[str]] = field(default_factory=dict)
    _batch_units: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    pid: int | None = None            # the process that last started or resumed the run ...
    host: str | None = None           # ... and its machine (None in journals from before it was recorded)
    operator_rollback: bool = False   # an operator's `rollback` is under way

    def apply(self, r: dict[str, Any]) -> bool:
        """Fold one record; False for one already folded (a record is applied once)."""
        seq = r["seq"]
        if seq <= self.seq:
            return False
        self.seq = seq
        t = r["type"]
        if t in UNSHOWN:                  # three records in four: kept short
            if "ts" in r:
                self.view.last_ts = r["ts"]
            return True
        apply(self.view, r)
        self.shown += 1
        if t == "run_started":
            self._read_plan(r["plan"])
            self.pid, self.host = r.get("pid"), r.get("host")
        elif t == "run_resumed":
            self.pid, self.host = r.get("pid"), r.get("host")
        elif t in ("operator_rollback", "operator_rollback_resumed"):
            self.operator_rollback = True
        elif t == "operator_rollback_finished":
            self.operator_rollback = False
        elif t == "stage_done" and r["passed"]:
            n = self.view.nodes[r["node"]]
            span = next((s for s in reversed(n.timeline) if s["stage"] == r["stage"] and s["end"] == r["ts"]), None)
            start, end = ts(span["start"]) if span else None, ts(r["ts"])
            if start is not None and end is not None and end >= start:
                hw, took = self.hw_class(n), end - start
                self.samples.setdefault((r["stage"], hw), []).append(took)
                counts = self.buckets.setdefault((r["stage"], hw), [0] * (len(BUCKETS) + 1))
                counts[bisect_left(BUCKETS, took)] += 1
                a, k = self._sum.get((r["stage"], hw), (0.0, 0))
                self._sum[(r["stage"], hw)] = (a + took, k + 1)
                a, k = self._pooled.get(r["stage"], (0.0, 0))
                self._pooled[r["stage"]] = (a + took, k + 1)
                self.measured_s += took
                self.planned_s += self.planned_estimate(r["stage"], hw)
        return True

    def _read_plan(self, plan: dict[str, Any]) -> None:
        for s in plan.get("stages", []):
            self._stage_estimate[s["stage"]] = float(s.get("estimate_s") or 0.0)
        for row in (plan.get("timing") or {}).get("stages", []):
            self._planned[(row["stage"], row["class"])] = float(row["used_s"])
        for rep in plan.get("replicas") or []:
            for node in rep.get("nodes", []):
                if rep.get("gpu"):
                    self._plan_class[node] = str(rep["gpu"])

    # ------------------------------------------------------------------ the plan

    @property
    def plan(self) -> dict[str, Any]:
        return self.view.plan or {}

    def _planned_shape(self) -> None:
        """What the view asks of the plan again and again (its stages, units and batches),
        taken once from it: a run's plan comes in its first record and never changes."""
        plan = self.view.plan
        if plan is self._of_plan:
            return
        self._of_plan = plan
        plan = plan or {}
        self._stages = [s["stage"] for s in plan.get("stages", [])]
        self._after = {}
        for i, s in enumerate(self._stages):
            self._after.setdefault(s, self._stages[i + 1:])     # after its first place, as list.index
        if self.unit == "replica":
            self._groups = {k: list(v) for k, v in plan["groups"].items()}
        else:
            self._groups = {n: [n] for b in plan.get("batches", []) for n in b["nodes"]}
        self._batch_units = {}

    @property
    def stages(self) -> list[str]:
        self._planned_shape()
        return self._stages

    @property
    def unit(self) -> str:
        """What the plan counts: ``node`` or ``replica``."""
        return "replica" if self.plan.get("unit") == "replica" and self.plan.get("groups") else "node"

    def hw_class(self, n: NodeView) -> str:
        """The node's hardware class: what its baseline read, else what the plan knew."""
        return str(n.baseline.get("gpu_model") or self._plan_class.get(n.name) or UNKNOWN)

    def planned_estimate(self, stage: str, hw: str) -> float:
        return self._planned.get((stage, hw), self._stage_estimate.get(stage, 0.0))

    def histogram(self) -> list[tuple[str, str, list[int], int, float]]:
        """The stage spans that passed, by (stage, hardware class), sorted: how many took at
        most each of BUCKETS, how many in all, and their seconds in all."""
        out = []
        for (stage, hw), counts in sorted(self.buckets.items()):
            total, k = self._sum[(stage, hw)]
            out.append((stage, hw, list(accumulate(counts[:-1])), k, total))
        return out

    def calibration(self) -> float:
        """Measured over planned, for the stages measured so far (1.0 before any)."""
        return self.measured_s / self.planned_s if self.planned_s > 0 and self.measured_s > 0 else 1.0

    def estimate(self, stage: str, hw: str) -> float:
        """A stage's expected duration on a node of class ``hw``, from what this run measured."""
        total, k = self._sum.get((stage, hw)) or self._pooled.get(stage) or (0.0, 0)
        if k:
            return total / k
        return self.planned_estimate(stage, hw) * self.calibration()

    # ------------------------------------------------------------------ units and batches

    def groups(self) -> dict[str, list[str]]:
        """Each unit and its nodes (a node is its own unit in a node plan); the caller reads it
        and leaves it as it is (it is kept for the next call)."""
        self._planned_shape()
        return self._groups

    def batch_units(self, index: int) -> dict[str, list[str]]:
        self._planned_shape()
        if index not in self._batch_units:
            nodes = set(self.view.batches[index]["nodes"])
            self._batch_units[index] = {u: members for u, members in self.groups().items()
                                        if nodes.intersection(members)}
        return self._batch_units[index]

    def count(self, units: dict[str, list[str]]) -> Units:
        out = Units(total=len(units))
        nodes = self.view.nodes
        for members in units.values():
            if len(members) == 1:                 # a node plan's unit: one node
                n = nodes.get(members[0]) or self.view.node(members[0])
                if n.state in DONE_STATES:
                    out.done += 1
                elif n.state != "pending":
                    out.in_flight += 1
                continue
            states = [self.view.node(n).state for n in members]
            if all(s in DONE_STATES for s in states):
                out.done += 1
            elif any(s != "pending" for s in states):
                out.in_flight += 1
        return out

    def in_flight(self) -> list[NodeView]:
        return [n for n in self.view.nodes.values() if n.state != "pending" and n.state not in DONE_STATES]

    # ------------------------------------------------------------------ time

    def node_left(self, n: NodeView, now: float) -> float:
        """Seconds a node still needs, from its current stage's elapsed time and the estimates."""
        if n.state in DONE_STATES:
            return 0.0
        hw = self.hw_class(n)
        if n.state == "pending" or not n.timeline:
            return self._whole(hw)
        span = n.timeline[-1]
        if span["stage"] == "rollback" or n.state == "rollback-required":
            batch: dict[str, Any] = next((b for b in self.plan.get("batches", []) if b["index"] == n.batch), {})
            planned = float(batch.get("rollback_estimate_s") or 0.0) * self.calibration()
            return max(0.0, planned - (now - (ts(span["start"]) or now))) if span["end"] is None else planned
        cur = span["stage"]
        rest = self._after_stage(cur, hw)
        if span["end"] is not None:          # between two stages
            return rest
        return max(0.0, self.estimate(cur, hw) - (now - (ts(span["start"]) or now))) + rest

    def _memo_now(self) -> dict[Any, float]:
        """What was worked out since the last record (the estimates change only with one)."""
        if self._memo_seq != self.seq or len(self._memo) > 4096:
            self._memo.clear()
            self._memo_seq = self.seq
        return self._memo

    def _whole(self, hw: str) -> float:
        """A node's every stage, start to end (asked for each node not started: kept per record)."""
        memo, key = self._memo_now(), ("whole", hw)
        if key not in memo:
            memo[key] = sum(self.estimate(s, hw) for s in self.stages)
        return memo[key]

    def _after_stage(self, stage: str, hw: str) -> float:
        """The stages after ``stage``, start to end (kept per record, as ``_whole``)."""
        memo, key = self._memo_now(), ("after", stage, hw)
        if key not in memo:
            self._planned_shape()
            memo[key] = sum(self.estimate(s, hw) for s in self._after.get(stage, ()))
        return memo[key]

    def batch_left(self, index: int, now: float) -> float:
        b = self.view.batches[index]
        if b["status"] not in ("running", "not_started"):
            return 0.0
        memo, key = self._memo_now(), ("batch", index, now)
        if key not in memo:
            # a node that is done adds nothing to either figure below: only the others are asked
            nodes = self.view.nodes
            left = [self.node_left(n, now) for n in (nodes.get(x) or self.view.node(x) for x in b["nodes"])
                    if n.state not in DONE_STATES]
            forks = max(1, int(self.plan.get("forks") or 1))
            memo[key] = max(max(left), sum(left) / forks) if left else 0.0
        return memo[key]

    def remaining(self, now: float) -> float:
        """Seconds until the run's end, as far as the measured times tell."""
        if self.view.status != "running":
            return 0.0
        memo, key = self._memo_now(), ("remaining", now)
        if key not in memo:
            memo[key] = sum(self.batch_left(i, now) for i in self.view.batches)
        return memo[key]

    def elapsed(self, now: float) -> float:
        start = ts(self.view.started)
        end = ts(self.view.finished) if self.view.status != "running" else now
        return max(0.0, (end or now) - start) if start is not None else 0.0

    def started_at(self) -> float | None:
        return ts(self.view.started)

    def planned_end(self) -> float | None:
        start = ts(self.view.started)
        total = self.plan.get("total_estimate_s")
        return start + float(total) if start is not None and total is not None else None

    def estimated_end(self, now: float) -> float | None:
        if self.view.started is None:
            return None
        if self.view.status != "running":
            return ts(self.view.finished)
        return now + self.remaining(now)

    def window_state(self, now: float) -> str:
        """``none`` (no window booked), ``ok``, ``tight`` (the estimate takes more than 80% of
        the time left) or ``over`` (it takes more than all of it, or the window has ended)."""
        end = self.view.window_end
        if end is None:
            return "none"
        if self.finished():
            return "over" if (ts(self.view.finished) or now) > end else "ok"
        left, need = end - now, self.remaining(now)
        if left <= 0 or need > left:
            return "over"
        return "tight" if need > 0.8 * left else "ok"

    def open_pauses(self) -> list[dict[str, Any]]:
        return [p for p in self.view.pauses.values() if p.get("decision") is None]

    def finished(self) -> bool:
        """The run (or an operator's rollback of it) has ended: nothing more will be appended
        unless someone resumes it."""
        return self.view.started is not None and self.view.status != "running" and not self.operator_rollback
