"""The sliding-window batch policy (play key ``window:``), after the canary batches.

``serial`` makes batches barriers: a batch starts only once the slowest node of the one
before it, and its rollback, is done. With ``window: {max_unavailable: 4}`` the play's
``serial`` list gives the canary batches (its leading values; they run as barriers, as
before), and every node after them is one unit of a single sliding window: a node starts
as soon as another finishes, while

- at most ``max_unavailable`` (a count or a percentage of the play's nodes) are out of
  service (from their cordon on) at once, and taking one more out keeps the capacity floor
  (``min_serving``, counting every node already out of service: the same check a batch
  makes);
- the window cut-off holds: a node starts only if its estimate plus its rollback reserve
  plus ``cutoff`` (a margin, default none) fits in the time left;
- failures stay within ``max_fail_percentage``, applied to the last ``fail_window`` nodes
  started (default 10) once each of them has finished: when more than that percentage of
  them failed, no further node starts; those in flight finish (or roll back). A rollback
  that fails stops new starts at once. ``failure_budget`` stays rollout-wide, as before.

A node counts against ``max_unavailable`` and the floor from its cordon on, not before:
its stages before the cordon (baseline ...) change nothing and run while it still serves,
so a node walks them ahead of a free slot and waits right before its cordon (in the
``before_cordon`` the window hands its walk) until a slot is free and taking it out keeps
the floor, checked there against every node already out of service; a freed slot goes to
the first waiting node in the plan's order that the floor lets out. The cut-off,
``max_fail_percentage`` and ``failure_budget`` are checked again at that point; a node held
there when new starts stop stays in service, nothing changed (``cordon-required``). Besides
one per free slot, at most :func:`lookahead` nodes walk ahead at once, so one is ready when
a slot frees and none waits long on a baseline that ages: from the stages' estimates, or,
once three nodes of the window have been through both, from the mean of what the last
twenty took in service and out of it, when that asks for more. ``max_fail_percentage``
counts a node from its cordon on (or from its end, if it failed before it).

``SlidingWindow`` is built once by the engine. Each node runs through the engine's
``run_batch([node], idx, before_cordon)``: its stages, the batch-scoped multinode stage on
its own, and its rollback if it fails, all journaled as for a batch. The window is one
batch in the plan and the journal (``batch_started``/``batch_done``), so ``resume``
continues it: nodes already done are left alone; a node whose cordon had started takes its
slot again at once (it is out of service already); the others start again under the same
rules, and wait before their cordon as above. Stage ``pause`` gates
need a batch to wait in; a play with a window refuses them (model/playbook.py).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from k3rollout.engine.clock import Clock
from k3rollout.engine.policy import BatchPolicy
from k3rollout.engine.pool import WorkerPool
from k3rollout.engine.recorder import Recorder
from k3rollout.engine.states import STAGE_STATE, NodeState
from k3rollout.engine.walkers.node import BeforeCordon
from k3rollout.model.playbook import STAGE_TABLES, Stage
from k3rollout.model.stagekinds import TAKES_OUT_OF_SERVICE
from k3rollout.runlog.view import RunView

# ``Engine.run_batch(nodes, idx, before_cordon)``: a batch's nodes through their stages and
# rollbacks, each node held by ``before_cordon`` right before its cordon
RunBatch = Callable[[list[str], int, BeforeCordon], None]
# ``Engine.post_batch(idx, nodes, status, failed)``: the batch's post_batch hooks
PostBatch = Callable[[int, list[str], str, list[str]], None]

TERMINAL = {NodeState.UPGRADE_DONE.value, NodeState.SKIPPED.value, NodeState.ROLLED_BACK.value,
            NodeState.ROLLBACK_FAILED.value, NodeState.FAILED.value}
FAILED = {NodeState.ROLLED_BACK.value, NodeState.ROLLBACK_FAILED.value, NodeState.FAILED.value}


def _failing(view: RunView, started: list[str], last_n: int, pct: float) -> tuple[str, str] | None:
    """(halt kind, why) when no further node may start for the failures so far: a failed
    rollback anywhere (``rollback_failed``), or more than ``pct`` percent of the last
    ``last_n`` nodes started failed (``failure``)."""
    states = {n: view.node(n).state for n in started}
    bad_rb = [n for n, s in states.items() if s == NodeState.ROLLBACK_FAILED.value]
    if bad_rb:
        return ("rollback_failed", f"ROLLBACK FAILED on {', '.join(bad_rb)}: node(s) kept cordoned and need "
                                   "hands-on recovery (see runbooks/ and the node's rollback evidence)")
    recent = started[-last_n:]
    done = [n for n in recent if states[n] in TERMINAL]
    failed = [n for n in done if states[n] in FAILED]
    if recent and 100.0 * len(failed) / len(recent) > pct:
        return ("failure", f"sliding window: {len(failed)} of the last {len(recent)} node(s) started failed "
                           f"({100.0 * len(failed) / len(recent):.0f}%), above max_fail_percentage {pct:g}%: no "
                           "further node starts")
    return None


def lookahead(stages: list[Stage], k: int) -> int:
    """How many nodes may walk their in-service stages ahead of a free slot (besides one
    per free slot): enough that one is ready each time a slot frees, and no more."""
    i = STAGE_TABLES.index([s.stage for s in stages], TAKES_OUT_OF_SERVICE)
    if i is None:
        return 1
    lead = sum(float(s.estimate_s) for s in stages[:i])
    out = sum(float(s.estimate_s) for s in stages[i:]) or 1.0
    return min(k, math.ceil(k * lead / out) + 1)


def went_out(view: RunView, kinds: list[str], node: str) -> bool:
    """Whether the node's cordon has started (in this run): from then on it is out of service,
    or may be, and holds a slot until it is done."""
    v = view.node(node)
    if v.state in TERMINAL or v.state == NodeState.PENDING.value:
        return False
    i = STAGE_TABLES.index(kinds, TAKES_OUT_OF_SERVICE)
    if i is None:
        return True
    before = {STAGE_STATE[kd].value for kd in kinds[:i + 1]}
    return v.state not in before or kinds[i] in v.entered


class _Window:
    """The window's shared state, under one condition variable."""

    def __init__(self, part: SlidingWindow, idx: int, nodes: list[str], policy: dict[str, Any]):
        self.part = part
        self.idx = idx
        self.k = max(1, int(policy["max_unavailable"]))
        self.ahead_est = lookahead(part.stages, self.k)
        # what the nodes of this window actually took (monotonic seconds): from a start to its
        # arrival before the cordon (the in-service lead), and from its cordon to its end
        self.began: dict[str, float] = {}
        self.went: dict[str, float] = {}
        self.leads: deque[float] = deque(maxlen=20)        # the last twenty nodes' of each
        self.outs: deque[float] = deque(maxlen=20)
        self.need = (float(policy["unit_estimate_s"]) + float(policy["rollback_estimate_s"])
                     + float(policy.get("cutoff_s") or 0))
        self.last_n = int(policy.get("fail_window") or 10)
        self.pct = part.max_fail_percentage
        self.cond = threading.Condition()
        self.out: set[str] = set()        # from their cordon on: what max_unavailable and the floor count
        self.waiting: set[str] = set()    # walking their in-service stages (baseline ...), still serving
        # at their cordon, waiting for a slot: a freed slot goes to the first of them in the
        # plan's order that the floor lets out, not to whichever thread wakes first
        self.order = {n: i for i, n in enumerate(nodes)}
        self.queued: set[str] = set()
        self.stop: tuple[str, str] | None = None
        # the units started, in order (what max_fail_percentage looks at): a node counts from its
        # cordon on, or once it ended before it (failed its baseline); earlier runs' first (resume)
        self.started = [n for n in nodes if went_out(part.view, part.kinds, n) or part.view.node(n).state in TERMINAL]

    @property
    def ahead(self) -> int:
        """:func:`lookahead` from the estimates, or from what the last nodes took when that
        asks for more: a lead that takes longer than its estimate (a slow baseline, a loaded
        controller) needs more nodes walking it at once, or slots stand empty waiting for
        one. More never holds a slot: a node ahead still serves until its cordon."""
        if len(self.leads) < 3 or len(self.outs) < 3:
            return self.ahead_est
        lead = sum(self.leads) / len(self.leads)
        out = sum(self.outs) / len(self.outs)
        seen = min(self.k, math.ceil(self.k * lead / out) + 1) if out > 0 else self.ahead_est
        return max(self.ahead_est, seen)

    def stopped(self) -> bool:
        return self.stop is not None or self.part.stopping.is_set()

    def why_stop(self, node: str, cutoff: bool) -> tuple[str, str] | None:
        p = self.part
        failing = _failing(p.view, self.started, self.last_n, self.pct)
        if failing:
            return failing
        over = p.policy.over_budget(p.view)
        if over:
            return ("failure_budget", over)
        if cutoff and p.view.window_end is not None:
            left = p.view.window_end - p.clock.now()
            if self.need > left:
                return ("window", f"sliding window: {node} needs {self.need / 60:.0f} min (with its rollback "
                                  f"and the cut-off margin) but the window has {max(0, left) / 60:.0f} "
                                  "min left; no further node starts")
        return None

    def before_cordon(self, node: str) -> bool:
        """The walk's ``before_cordon`` (engine/walkers/node.py): wait for a slot and the
        capacity floor, right before the node's cordon. False: the window stopped, the node stays where it is (serving)."""
        with self.cond:
            if node in self.out:
                return True                 # its cordon had started before a crash: it holds its slot
            if node in self.began:
                self.leads.append(time.monotonic() - self.began.pop(node))
            self.queued.add(node)
            try:
                return self._take_slot(node)
            finally:
                self.queued.discard(node)
                self.cond.notify_all()

    def _first_in_line(self, node: str) -> bool:
        """Whether ``node`` is the first in the plan's order of the nodes waiting at their
        cordon, or the first one is held back by the floor (it does not hold the others)."""
        first = min(self.queued, key=lambda m: self.order.get(m, len(self.order)))
        return first == node or self.part.policy.capacity_short(
            self.part.view, [first], f"cordoning {first}", extra_out=set(self.out)) is not None

    def _take_slot(self, node: str) -> bool:
        """Under ``cond``: wait for a slot, the node's turn and the floor; True once ``node``
        holds a slot, False when the window stopped."""
        while not self.stopped():
            why = self.why_stop(node, cutoff=True)
            if why:
                self.stop = why
                self.cond.notify_all()
                return False
            if len(self.out) < self.k and self._first_in_line(node):
                short = self.part.policy.capacity_short(self.part.view, [node], f"cordoning {node}",
                                                        extra_out=set(self.out))
                if short is None:
                    self.waiting.discard(node)
                    self.out.add(node)
                    self.started.append(node)
                    self.went[node] = time.monotonic()
                    return True
                if not self.out:
                    # nothing of the window's is out to come back: the floor cannot be met
                    self.stop = ("capacity", short)
                    self.cond.notify_all()
                    return False
            self.cond.wait(0.5)
        return False

    def one(self, node: str) -> None:
        try:
            self.part.run_batch([node], self.idx, self.before_cordon)
        finally:
            with self.cond:
                if node in self.went:
                    self.outs.append(time.monotonic() - self.went.pop(node))
                self.out.discard(node)
                self.waiting.discard(node)
                if node not in self.started and self.part.view.node(node).state in TERMINAL:
                    self.started.append(node)
                self.cond.notify_all()

    def dispatch(self, node: str) -> bool:
        """Wait until ``node`` may start; False when the window stopped."""
        view = self.part.view
        with self.cond:
            resumed_out = went_out(view, self.part.kinds, node)
            while not self.stopped():
                why = self.why_stop(node, cutoff=view.node(node).state == NodeState.PENDING.value)
                if why:
                    self.stop = why
                    self.cond.notify_all()
                    return False
                if resumed_out:
                    # resumed after its cordon: out of service already, it needs a slot (its
                    # floor check was made when it went out)
                    if len(self.out) < self.k:
                        self.out.add(node)
                        return True
                elif len(self.waiting) < self.k - len(self.out) + self.ahead:
                    self.waiting.add(node)
                    self.began[node] = time.monotonic()
                    return True
                self.cond.wait(0.5)
            return False


class SlidingWindow:
    """Built from the recorder, the play's stages and ``max_fail_percentage``, the batch
    policy (the failure budget and the capacity floor), ``run_batch`` and ``post_batch``
    (the engine's), the clock, the stop flag and the log."""

    def __init__(self, *, recorder: Recorder, stages: list[Stage], max_fail_percentage: float, policy: BatchPolicy,
                 run_batch: RunBatch, post_batch: PostBatch, clock: Clock, stopping: threading.Event, log: Any):
        self.record = recorder.record
        self.view = recorder.view
        self.stages = stages
        self.kinds = [s.stage for s in stages]
        self.max_fail_percentage = max_fail_percentage
        self.policy = policy
        self.run_batch = run_batch
        self.post_batch = post_batch
        self.clock = clock
        self.stopping = stopping
        self.log = log

    def run(self, batch: dict[str, Any], policy: dict[str, Any]) -> tuple[str, str] | None:
        """Run the window batch; (halt kind, why) when new starts stopped early, else None."""
        idx, nodes = batch["index"], batch["nodes"]
        if self.view.batches[idx]["status"] == "not_started":
            self.record("batch_started", batch=idx, nodes=nodes)
            self.log.info("batch_started", batch=idx, nodes=nodes, policy="window")
        w = _Window(self, idx, nodes, policy)
        todo = [n for n in nodes if self.view.node(n).state not in TERMINAL]
        # room for every slot and the most nodes ahead (threads start only as nodes need them);
        # a stop is the engine's worker pool's (engine/pool.py): no new node or step starts,
        # what runs now finishes and is journaled
        with WorkerPool(2 * w.k + 1, stopping=self.stopping, name="k3window") as pool:
            for node in todo:
                if not w.dispatch(node):
                    break
                pool.submit(w.one, node)
        if self.stopping.is_set():
            raise KeyboardInterrupt
        stop = w.stop
        if stop is None:
            stop = _failing(self.view, w.started, w.last_n, w.pct)
        failed = sorted(n for n in nodes if self.view.node(n).state in FAILED)
        status = "failed" if failed else "passed"
        self.record("batch_done", batch=idx, status=status, failed=failed)
        self.log.info("batch_done", batch=idx, status=status, failed=failed, policy="window")
        self.post_batch(idx, nodes, status, failed)
        return stop
