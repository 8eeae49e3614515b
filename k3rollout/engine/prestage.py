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
from typing import Any, Protocol

from k3rollout.engine.outcome import STAGE_ERRORS, failed_outcome
from k3rollout.engine.pool import run_each
from k3rollout.model.playbook import Playbook
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.view import RunView
from k3rollout.stages import prestage as node_prestage
from k3rollout.stages.base import NodeCtx, StageContext, StageOutcome


class Engine(Protocol):
    """What the pre-staging uses of the engine (engine/runner.py's ``Engine`` is one),
    declared here so this module does not import the runner that imports it."""

    @property
    def run_id(self) -> str: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def view(self) -> RunView: ...

    @property
    def playbook(self) -> Playbook: ...

    @property
    def steps(self) -> StageContext: ...

    @property
    def stopping(self) -> threading.Event: ...

    @property
    def log(self) -> Any: ...

    @property
    def redact(self) -> Callable[[str], str]: ...

    def tvars(self, node: str) -> dict[str, Any]: ...

    def record(self, type_: str, *, durable: bool | None = None, **data: Any) -> dict[str, Any]: ...

FOLDER = "00-prestage"


def pending(engine: Engine, nodes: list[str]) -> list[str]:
    done = {r["node"] for r in engine.journal.records if r.get("type") == "prestage_done" and r.get("ok")}
    return [n for n in nodes if n not in done]


def one(engine: Engine, node: str) -> tuple[str, StageOutcome]:
    n = engine.view.node(node)
    ctx = NodeCtx(node=node, run_id=engine.run_id, stage="prestage", folder=FOLDER, params=None,
                  vars=engine.tvars(node), facts=dict(n.facts), baseline=dict(n.baseline), runner=engine.steps)
    cfg = engine.playbook.play.prestage
    engine.record("prestage_started", node=node)
    try:
        out = node_prestage.run(ctx, cfg)
    except STAGE_ERRORS as exc:
        out = failed_outcome(exc)
    if out.facts:
        engine.record("facts", node=node, stage="prestage", facts=out.facts)
    engine.record("prestage_done", node=node, ok=out.passed, reason=engine.redact(out.reason))
    engine.log.info("prestage_done", node=node, ok=out.passed, reason=out.reason)
    return node, out


def run(engine: Engine, nodes: list[str]) -> str | None:
    """Pre-stage ``nodes``; why the rollout must not start, or None."""
    cfg = engine.playbook.play.prestage
    todo = pending(engine, nodes)
    if cfg is None or not todo:
        return None
    # the engine's worker pool (engine/pool.py): on a stop, a node not started yet is not
    # started (resume pre-stages it), and one in flight finishes and is journaled
    results = run_each(lambda n: one(engine, n), todo, workers=cfg.parallel, stopping=engine.stopping,
                       name="k3prestage")
    failed = [(n, o.reason) for n, o in results if not o.passed]
    if failed:
        return (f"pre-staging failed on {len(failed)} of {len(todo)} node(s), before any change: "
                + "; ".join(f"{n}: {why}" for n, why in failed))
    return None
