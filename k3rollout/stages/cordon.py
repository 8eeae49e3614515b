"""Stage 2: take the node out of service (drain on Kubernetes, DRAIN on Slurm).

The prior scheduler state is already in the baseline, so the rollback (and the final
uncordon) can restore it: a node that was cordoned before the run stays cordoned. The
stage passes only once no work runs on the node: a Slurm node still DRAINING (jobs
running) after ``drain_timeout`` fails it, and the node is never upgraded under a job.
"""

from __future__ import annotations

from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind


def run(ctx: NodeCtx) -> StageOutcome:
    sched = ctx.scheduler
    ok, why, logs = sched.cordon(ctx)
    return StageOutcome(ok, why, {"scheduler_state": sched.read_state(ctx)}, logs)


SPEC = StageSpec(kind("cordon"), run=run)
