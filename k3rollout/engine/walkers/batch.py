"""A batch-scoped stage (the multinode test) once for the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3rollout.engine.outcome import failed_outcome
from k3rollout.engine.policy import BatchPolicy
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.engine.states import Event, NodeState
from k3rollout.engine.walkers.base import Walker
from k3rollout.engine.walkers.scopes import waiting_at
from k3rollout.engine.walkers.verdicts import StageVerdicts
from k3rollout.errors import StepFailed
from k3rollout.model.playbook import Stage
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.registry import SPECS


class BatchWalker(Walker):
    """Built from the recorder, the stage verdicts, the play's stages, ``make_ctx(node,
    stage, params)``, ``render_params(stage, node)`` and the batch policy (which nodes are
    out of service)."""

    def __init__(self, *, recorder: Recorder, verdicts: StageVerdicts, stages: list[Stage],
                 make_ctx: Callable[[str, Stage, Any], NodeCtx], render_params: Callable[[Stage, str], Any],
                 policy: BatchPolicy):
        super().__init__(recorder=recorder, verdicts=verdicts, stages=stages, make_ctx=make_ctx,
                         render_params=render_params)
        self.policy = policy

    def run(self, nodes: list[str], kind: str) -> None:
        """The stage once, on the first ready node's context, for every node of ``nodes``
        waiting before it whose ``pre`` assertions hold (the spec's ``run_batch``)."""
        waiting = waiting_at(self.view, nodes, kind)
        if not waiting:
            return
        stage = self.stages[self.kinds.index(kind)]
        lead = waiting[0]
        for n in waiting:
            self.record("stage_started", node=n, stage=kind, name=stage.name)
        ready = []
        for n in waiting:
            ok, why = self.verdicts.check(n, stage, "pre")
            if ok:
                ready.append(n)
            else:
                self.verdicts.finish(n, stage, StageOutcome(False, why, logs=why))
        outcomes: dict[str, StageOutcome] = {}
        if ready:
            try:
                params = self.render_params(stage, lead)
                ctx = self.make_ctx(ready[0], stage, params)
                ctx.peers = self.old_driver_peers(nodes)
                run_batch = SPECS[kind].run_batch
                assert run_batch is not None     # a batch-scoped spec declares it (stages/spec.py)
                outcomes = run_batch(ctx, ready)
            except (StepFailed, ValueError) as exc:     # the parameters' and the stage's
                outcomes = {n: failed_outcome(exc) for n in ready}
        for n in ready:
            self.verdicts.finish(n, stage, outcomes[n])
        for n in waiting:
            self.transition(n, Event.PASSED if self.verdicts.last_passed(n, kind) else Event.FAILED)

    def old_driver_peers(self, batch_nodes: list[str]) -> list[str]:
        """Nodes still on the old driver and in service, in the order the rollout will take them."""
        out = self.policy.out_of_service(self.view) | set(batch_nodes)
        pending = NodeState.PENDING.value
        return [n for b in run_plan(self.view)["batches"] for n in b["nodes"]
                if n not in out and self.view.node(n).state == pending]
