"""The recorder: every journal append goes through it, and it folds each record into the
run view as the record is written.

Journal first: a record is appended (and, unless it only describes what was observed,
committed) before the side effect it announces starts, and again after it ends. The view
(``runlog.view``) is the fold of the journal, record by record in journal order, so a
resumed run and a fresh one decide from the same data. ``transition`` moves a node through
the state machine (``engine/states.py``) by recording the ``node_state`` record the fold
applies. The engine and its parts (step runner, gates, rollback executor) each hold the
recorder's ``record``; none of them writes the journal any other way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from k3rollout.engine.states import STATE_STAGE, Event, NodeState
from k3rollout.engine.states import step as fsm_step
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.view import RunView, apply, fold

T = TypeVar("T")

# journal record types that carry no decision a resume could repeat wrongly if the
# last few were lost in a power cut: resume re-derives them (read-only stages run again;
# destructive steps are settled from their own durable records)
OBSERVATIONS = frozenset({"node_state", "stage_started", "stage_done", "assertions", "facts", "triage", "evidence",
                          "step_error", "ansible_event", "hook_started"})


class Recorder:
    """The journal, the view folded from it, and the node state machine's table."""

    def __init__(self, journal: Journal, table: dict[tuple[NodeState, Event], NodeState],
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.journal = journal
        self.table = table
        self.on_event = on_event
        self.view: RunView = fold(journal.records)
        # how many records the view holds (seq starts at 1, without gaps: all of them when this
        # equals the journal's last seq; a record appended before the recorder existed is not)
        self.applied = len(journal.records)
        self._lock = threading.Lock()

    def record(self, type_: str, *, durable: bool | None = None, **data: Any) -> dict[str, Any]:
        """Append to the journal. Records that only describe what was observed (facts,
        assertions, stage and state bookkeeping) are written at once but committed with
        the next durable record; a destructive step's start, rollbacks, and run and batch
        records are committed before this returns (see runlog/journal.py). Callers pass
        ``durable=False`` for records a later commit covers in time: a destructive step's
        outcome that its probe can settle, and the rollback plan (committed with the first
        destructive step's start, before anything changes)."""
        if durable is None:
            durable = type_ not in OBSERVATIONS
        rec = self.journal.append(type_, durable=durable, on_written=self._fold, **data)
        if self.on_event:
            self.on_event(rec)
        return rec

    def _fold(self, rec: dict[str, Any]) -> None:
        # called by the journal under its write lock: the view folds records in journal
        # order even when worker threads append at once (as a resume folds them)
        with self._lock:
            apply(self.view, rec)
            self.applied += 1

    def read(self, fn: Callable[[RunView], T]) -> T:
        """``fn(view)`` with no record folded meanwhile: what iterates the view's growing
        tables (steps started and done) from a worker thread reads them here, or another
        thread's record changes a dict under the iteration."""
        with self._lock:
            return fn(self.view)

    def transition(self, node: str, event: Event, stage: str | None = None) -> NodeState:
        cur = NodeState(self.view.node(node).state)
        nxt = fsm_step(self.table, cur, event)
        self.record("node_state", node=node, batch=self.view.node(node).batch, **{"from": cur.value},
                    to=nxt.value, event=event.value, stage=stage or STATE_STAGE.get(nxt))
        return nxt


def run_plan(view: RunView) -> dict[str, Any]:
    """The plan of the run ``view`` folds (its ``run_started`` record's). The engine and its
    parts only ever work on a run that has started."""
    if view.plan is None:
        raise RuntimeError("the journal has no run_started record: the run has no plan")
    return view.plan
