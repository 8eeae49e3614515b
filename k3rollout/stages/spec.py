"""``StageSpec``: a stage kind's behaviour, declared once in its own module.

Each stage module under k3rollout/stages ends with ``SPEC = StageSpec(kind("NAME"), run=run)``:
the kind's data (scope, parameters model, destructiveness, state, runbook, default
estimate, the rollback actions that undo it) is its ``StageKind`` in model/playbook.py's
``STAGE_KINDS``, read here by ``kind``; the spec adds what the stage does. The registry
(stages/registry.py) finds each declared kind's spec in the module of the same name, so a
new stage is its declaration plus its module.

A kind owns its undo: each rollback action it names in ``undone_by`` (an ``Undo``: the
plan's text, its estimate, how its failure bears on the rest) has its ``UndoAction`` in
the spec's ``undo``: how it is planned from the baseline, how the recorded step reads, how
it runs. stages/rollback.py runs them in their fixed safe order (``ROLLBACK_ORDER``),
asking each owning kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from k3rollout.model.playbook import STAGE_TABLES, Playbook, RollbackStep
from k3rollout.model.stagekinds import StageKind
from k3rollout.stages.base import NodeCtx, StageOutcome

BatchRun = Callable[[NodeCtx, list[str]], dict[str, StageOutcome]]


@dataclass(frozen=True)
class Planning:
    """What a node's rollback step is planned from: right after its baseline, before any
    change (the plan is recorded then, and run as recorded)."""

    playbook: Playbook
    node: str
    baseline: dict[str, Any]
    tvars: dict[str, Any]               # the node's template variables
    declared: RollbackStep              # the playbook's declaration of the action


@dataclass(frozen=True)
class UndoAction:
    """How a stage kind's rollback action is planned, shown and run."""

    # the recorded step: ``{"action", "undoes"}`` completed from the baseline (or the step
    # that runs in its place, as quarantine for uncordon_if_healthy)
    plan: Callable[[dict[str, Any], Planning], dict[str, Any]]
    # the recorded step as the plan shows it to a change board
    describe: Callable[[dict[str, Any]], str]
    # run the recorded step: (proven, what was done or why not), or with a third item, what
    # the result records besides (``{"in_service": True}``: the action returned the node to
    # its scheduler, proven or not); the third argument is why the journal proves the driver
    # stage changed nothing, when it does (engine/rollback.py)
    execute: Callable[[NodeCtx, dict[str, Any], str | None], tuple[bool, str] | tuple[bool, str, dict[str, Any]]]


def kind(name: str) -> StageKind:
    """The declared stage kind ``name`` (model/playbook.py's ``STAGE_KINDS``)."""
    return STAGE_TABLES.kind(name)


@dataclass(frozen=True)
class StageSpec:
    kind: StageKind
    # the stage on one node's context (a replica-scoped stage gets its head's, with
    # ``ctx.replica`` set, when it runs once for a multi-node replica)
    run: Callable[[NodeCtx], StageOutcome]
    # a batch-scoped stage: once for the batch, on the first ready node's context, with
    # the ready nodes; an outcome per node
    run_batch: BatchRun | None = None
    # the upgrade state published where the scheduler shows it (the Kubernetes label)
    # when the stage passes
    publishes_on_pass: str | None = None
    # rollback action -> how it runs: one for each ``Undo`` its kind declares
    undo: Mapping[str, UndoAction] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.kind.scope == "batch") != (self.run_batch is not None):
            raise ValueError(f"stage {self.kind.name}: a batch-scoped stage, and only one, declares run_batch")
        declared = [u.action for u in self.kind.undone_by]
        if sorted(self.undo) != sorted(declared):
            raise ValueError(f"stage {self.kind.name}: its kind declares the rollback actions "
                             f"{', '.join(declared) or 'none'}, and its spec runs {', '.join(self.undo) or 'none'}")

    def __call__(self, ctx: NodeCtx) -> StageOutcome:
        out = self.run(ctx)
        if out.passed and self.publishes_on_pass:
            ctx.publish_progress(self.publishes_on_pass)
        return out
