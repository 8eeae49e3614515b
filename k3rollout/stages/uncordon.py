"""Stage 7: return the node to service (expansion), restoring what it ran before.

Restarts the serving containers the smoke test stopped (a regression check of the
existing CUDA 12 workloads on the new driver) and uncordons only a node that was
schedulable before the run: what k3rollout did not cordon, it does not uncordon.
"""

from __future__ import annotations

from k3rollout.stages.base import NodeCtx, StageOutcome


def restart_serving(ctx: NodeCtx) -> list[str]:
    failed = []
    for name in ctx.facts.get("stopped_serving", []):
        res = ctx.step(f"start-{name}", ["docker", "start", name])
        st = ctx.step(f"state-{name}", ["docker", "inspect", "-f", "{{.State.Status}}", name])
        if not res.ok or st.stdout.strip() != "running":
            failed.append(name)
    return failed


def uncordon(ctx: NodeCtx, name: str = "uncordon") -> tuple[bool, str]:
    if ctx.baseline.get("scheduler_state") != "schedulable":
        return True, f"left out of service: it was {ctx.baseline.get('scheduler_state')} before the run"
    return ctx.scheduler.uncordon(ctx, name)


def run(ctx: NodeCtx) -> StageOutcome:
    ctx.publish_progress("uncordon-required")
    failed = restart_serving(ctx)
    if failed:
        return StageOutcome(False, f"existing workloads did not restart on the new driver: {', '.join(failed)}",
                            {"restarted_serving_failed": failed})
    ok, why = uncordon(ctx)
    if ok:
        ctx.publish_progress("upgrade-done")
    return StageOutcome(ok, why, {"scheduler_state": ctx.read_scheduler()})
