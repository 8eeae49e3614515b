"""Stage 7: return the node to service (expansion), restoring what it ran before.

Restarts the serving containers the smoke test stopped (a regression check of the
existing CUDA 12 workloads on the new driver) and uncordons only a node that was
schedulable before the run: what k3rollout did not cordon, it does not uncordon.

Each restarted container's ``RestartCount`` is recorded (``serving_restart_counts``): the
restarts Docker's restart policy made since the container was last started by hand (a
manual ``docker start`` sets it to 0, as does the daemon starting it at boot). ``k3rollout
observe`` compares its passes with this value: a serving container that crashed and was
restarted after the run shows as a higher count.
"""

from __future__ import annotations

from typing import Any

from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind


def restart_serving(ctx: NodeCtx) -> tuple[list[str], dict[str, int]]:
    """Start the containers the smoke test stopped: (the ones that are not running after
    it, the restart count of each that runs)."""
    failed, counts = [], {}
    for name in ctx.facts.get("stopped_serving", []):
        res = ctx.step(f"start-{name}", ["docker", "start", name])
        st = ctx.step(f"state-{name}", ["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", name])
        status, _, count = st.stdout.strip().partition(" ")
        if not res.ok or status != "running":
            failed.append(name)
        elif count.strip().isdigit():
            counts[name] = int(count)
    return failed, counts


def uncordon(ctx: NodeCtx, name: str = "uncordon") -> tuple[bool, str]:
    if ctx.baseline.get("scheduler_state") != "schedulable":
        return True, f"left out of service: it was {ctx.baseline.get('scheduler_state')} before the run"
    return ctx.scheduler.uncordon(ctx, name)


def run(ctx: NodeCtx) -> StageOutcome:
    ctx.publish_progress("uncordon-required")
    failed, counts = restart_serving(ctx)
    if failed:
        return StageOutcome(False, f"existing workloads did not restart on the new driver: {', '.join(failed)}",
                            {"restarted_serving_failed": failed})
    ok, why = uncordon(ctx)
    if ok:
        ctx.publish_progress("upgrade-done")
    facts: dict[str, Any] = {"scheduler_state": ctx.read_scheduler()}
    if counts:
        facts["serving_restart_counts"] = counts
    return StageOutcome(ok, why, facts)


SPEC = StageSpec(kind("uncordon"), run=run)
