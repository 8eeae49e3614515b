"""Pre-staging ahead of the batches (``prestage:`` in the play; stages/prestage.py does the
node's part).

Before the first batch starts, every node of the run that has not been pre-staged yet is
pre-staged while it still serves: at most ``prestage.parallel`` nodes at a time, so serving
is not starved of disk and network. Each node's commands are journaled steps with their
output as evidence (folder ``00-prestage``); its facts go in the journal under
``facts.prestage``, and a ``prestage_done`` record closes it. Nothing is cordoned, stopped or
installed, so a node that fails here needs no rollback: the run halts before any change,
naming the nodes and why. ``resume`` does not pre-stage a node twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from k3rollout.engine.outcome import STAGE_ERRORS, failed_outcome
from k3rollout.engine.pool import run_each
from k3rollout.engine.recorder import Recorder
from k3rollout.model.playbook import Prestage
from k3rollout.stages import prestage as node_prestage
from k3rollout.stages.base import NodeCtx, StageContext, StageOutcome

FOLDER = "00-prestage"


class PreStaging:
    """Built from the recorder, the play's ``prestage:`` (None: nothing to do), the run's
    id, ``tvars(node)`` (a node's template variables), the step runner (``ctx.runner``),
    the stop flag, the redactor and the log."""

    def __init__(self, *, recorder: Recorder, config: Prestage | None, run_id: str,
                 tvars: Callable[[str], dict[str, Any]], steps: StageContext, stopping: threading.Event,
                 redact: Callable[[str], str], log: Any):
        self.journal = recorder.journal
        self.record = recorder.record
        self.view = recorder.view
        self.config = config
        self.run_id = run_id
        self.tvars = tvars
        self.steps = steps
        self.stopping = stopping
        self.redact = redact
        self.log = log

    def pending(self, nodes: list[str]) -> list[str]:
        done = {r["node"] for r in self.journal.records if r.get("type") == "prestage_done" and r.get("ok")}
        return [n for n in nodes if n not in done]

    def one(self, node: str) -> tuple[str, StageOutcome]:
        n = self.view.node(node)
        ctx = NodeCtx(node=node, run_id=self.run_id, stage="prestage", folder=FOLDER, params=None,
                      vars=self.tvars(node), facts=dict(n.facts), baseline=dict(n.baseline), runner=self.steps)
        self.record("prestage_started", node=node)
        try:
            out = node_prestage.run(ctx, self.config)
        except STAGE_ERRORS as exc:
            out = failed_outcome(exc)
        if out.facts:
            self.record("facts", node=node, stage="prestage", facts=out.facts)
        self.record("prestage_done", node=node, ok=out.passed, reason=self.redact(out.reason))
        self.log.info("prestage_done", node=node, ok=out.passed, reason=out.reason)
        return node, out

    def run(self, nodes: list[str]) -> str | None:
        """Pre-stage ``nodes``; why the rollout must not start, or None."""
        cfg = self.config
        todo = self.pending(nodes)
        if cfg is None or not todo:
            return None
        # the engine's worker pool (engine/pool.py): on a stop, a node not started yet is not
        # started (resume pre-stages it), and one in flight finishes and is journaled
        results = run_each(self.one, todo, workers=cfg.parallel, stopping=self.stopping, name="k3prestage")
        failed = [(n, o.reason) for n, o in results if not o.passed]
        if failed:
            return (f"pre-staging failed on {len(failed)} of {len(todo)} node(s), before any change: "
                    + "; ".join(f"{n}: {why}" for n, why in failed))
        return None
