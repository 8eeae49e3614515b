"""Stage 7: return the node to service (expansion), restoring what it ran before.

Brings back the serving workloads the smoke test stopped (a regression check of the
existing CUDA 12 workloads on the new driver), uncordons only a node that was schedulable
before the run (what k3rollout did not cordon, it does not uncordon), then proves the
node's own workloads are back where their owners bring them back. How each is done is
the node's workload runtime's (k3rollout/workload): on a Docker host the stopped
containers are started before the uncordon and each one's ``RestartCount`` recorded
(``serving_restart_counts``, which ``k3rollout observe`` compares its passes with).
"""

from __future__ import annotations

from typing import Any

from k3rollout.stages import workload_probes
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind


def uncordon(ctx: NodeCtx, name: str = "uncordon") -> tuple[bool, str]:
    if ctx.baseline.get("scheduler_state") != "schedulable":
        return True, f"left out of service: it was {ctx.baseline.get('scheduler_state')} before the run"
    return ctx.scheduler.uncordon(ctx, name)


def run(ctx: NodeCtx) -> StageOutcome:
    ctx.publish_progress("uncordon-required")
    wl = ctx.workload
    back = wl.restore_serving(ctx, list(ctx.facts.get("stopped_serving", [])))
    if back.failed:
        return StageOutcome(False, f"existing workloads did not restart on the new driver: {', '.join(back.failed)}",
                            {"restarted_serving_failed": back.failed, **back.facts})
    ok, why = uncordon(ctx)
    facts: dict[str, Any] = {"scheduler_state": ctx.read_scheduler(), **back.facts}
    if ok:
        proven = wl.prove_serving(ctx)
        facts.update(proven.facts)
        if proven.failed:
            return StageOutcome(False, proven.reason or "existing workloads are not back in service: "
                                + ", ".join(proven.failed), {**facts, "serving_not_back": proven.failed})
        # back is not enough: each workload answers its probe again, as it did at baseline
        after, lost = workload_probes.prove_again(ctx, ctx.params.serving_ready_timeout, back.back + proven.back)
        if after:
            facts["workload_probes_after"] = after
        if lost:
            shown = "; ".join(f"{r['name']} ({r['probe']}: {r.get('detail') or 'failed'})" for r in after
                              if r["name"] in lost)
            return StageOutcome(False, f"existing workloads are back but fail the probe they passed at baseline: "
                                       f"{shown}", {**facts, "workload_probes_lost": lost})
        ctx.publish_progress("upgrade-done")
    return StageOutcome(ok, why, facts)


SPEC = StageSpec(kind("uncordon"), run=run)
