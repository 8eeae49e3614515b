"""Stage 2: take the node out of service (drain on Kubernetes, DRAIN on Slurm).

The prior scheduler state is already in the baseline, so the rollback (and the final
uncordon) can restore it: a node that was cordoned before the run stays cordoned.
"""

from __future__ import annotations

from k3rollout.stages.base import NodeCtx, StageOutcome


def _is_out(ctx: NodeCtx, meta: dict | None = None) -> bool:
    return ctx.read_scheduler() in ("cordoned", "drained")


def run(ctx: NodeCtx) -> StageOutcome:
    kind = ctx.vars.get("scheduler", "kubernetes")
    if kind == "kubernetes":
        res = ctx.step("drain", ["kubectl", "drain", ctx.node, "--ignore-daemonsets", "--delete-emptydir-data",
                                 f"--timeout={int(ctx.params.drain_timeout)}s"],
                       once=True, probe=_is_out, timeout=ctx.params.drain_timeout + 60)
    elif kind == "slurm":
        res = ctx.step("drain", ["scontrol", "update", f"NodeName={ctx.node}", "State=DRAIN",
                                 f"Reason=k3rollout {ctx.run_id}"], once=True, probe=_is_out)
    else:
        return StageOutcome(True, "scheduler 'none': nothing to cordon", {"scheduler_state": "unmanaged"})
    state = ctx.read_scheduler()
    if not res.ok:
        return StageOutcome(False, f"drain failed (rc {res.rc})", {"scheduler_state": state}, res.tail(2000))
    return StageOutcome(True, "", {"scheduler_state": state})
