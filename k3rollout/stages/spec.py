"""``StageSpec``: a stage kind's behaviour, declared once in its own module.

Each stage module under k3rollout/stages ends with ``SPEC = StageSpec(kind("NAME"), run=run)``:
the kind's data (scope, parameters model, destructiveness, state, runbook, default
estimate, the rollback actions that undo it) is its ``StageKind`` in model/playbook.py's
``STAGE_KINDS``, read here by ``kind``; the spec adds what the stage does. The registry
(stages/registry.py) finds each declared kind's spec in the module of the same name, so a
new stage is its declaration plus its module. The rollback actions a kind names in
``undone_by`` run in stages/rollback.py, in their fixed safe order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from k3rollout.model.playbook import STAGE_TABLES
from k3rollout.model.stagekinds import StageKind
from k3rollout.stages.base import NodeCtx, StageOutcome

BatchRun = Callable[[NodeCtx, list[str]], dict[str, StageOutcome]]


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

    def __post_init__(self) -> None:
        if (self.kind.scope == "batch") != (self.run_batch is not None):
            raise ValueError(f"stage {self.kind.name}: a batch-scoped stage, and only one, declares run_batch")

    def __call__(self, ctx: NodeCtx) -> StageOutcome:
        out = self.run(ctx)
        if out.passed and self.publishes_on_pass:
            ctx.publish_progress(self.publishes_on_pass)
        return out
