"""Stage 2: take the node out of service (drain on Kubernetes, DRAIN on Slurm).

The prior scheduler state is already in the baseline, so the rollback (and the final
uncordon) can restore it: a node that was cordoned before the run stays cordoned. The
stage passes only once no work runs on the node: a Slurm node still DRAINING (jobs
running) after ``drain_timeout`` fails it, and the node is never upgraded under a job.

Its undo, last in a node's rollback: ``uncordon_if_healthy`` returns the node to service
only if it was schedulable before the run and is healthy by the success path's bar;
under ``on_node_failure: quarantine`` the plan puts ``quarantine`` in its place (kept
cordoned and marked, through the scheduler alone).
"""

from __future__ import annotations

from typing import Any

from k3rollout.model.playbook import ROLLBACK_UNDOES
from k3rollout.scheduler import scheduler_for
from k3rollout.stages import uncordon as uncordon_stage
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import Planning, StageSpec, UndoAction, kind

QUARANTINE_LABEL = "k3rollout.io/quarantine"


def run(ctx: NodeCtx) -> StageOutcome:
    sched = ctx.scheduler
    ok, why, logs = sched.cordon(ctx)
    return StageOutcome(ok, why, {"scheduler_state": sched.read_state(ctx)}, logs)


def plan_uncordon(step: dict[str, Any], p: Planning) -> dict[str, Any]:
    if p.playbook.play.on_node_failure == "quarantine":
        # a failed node is rolled back but stays out of service, marked for investigation
        return plan_quarantine({"action": "quarantine", "undoes": ROLLBACK_UNDOES["quarantine"]}, p)
    step["prior_state"] = p.baseline.get("scheduler_state")
    step["expect_driver"] = p.baseline.get("driver_version")
    step["expect_gpus"] = p.baseline.get("gpu_count")
    # what the baseline saw running must run again before the node serves
    step["expect_running"] = [c["name"] for c in p.baseline.get("serving_containers", [])]
    step["expect_fabricmanager"] = p.baseline.get("fabricmanager") == "active"
    return step


def describe_uncordon(step: dict[str, Any]) -> str:
    if step.get("prior_state") != "schedulable":
        return f"uncordon_if_healthy: keep cordoned (was {step.get('prior_state')} before the run)"
    also = "".join([f", {', '.join(step['expect_running'])} running" if step.get("expect_running") else "",
                    ", the fabric manager active" if step.get("expect_fabricmanager") else ""])
    return (f"uncordon_if_healthy: uncordon only if nvidia-smi shows {step.get('expect_gpus')} GPUs on "
            f"{step.get('expect_driver')}{also}; otherwise keep cordoned")


def health_problems(ctx: NodeCtx, step: dict[str, Any]) -> list[str]:
    """What keeps a rolled-back node out of service: the bar of the success path (the
    driver and GPUs the baseline saw, every serving container it saw running is running,
    as stages/uncordon.py requires before it uncordons) plus the fabric manager, when the
    baseline saw it active."""
    problems = []
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != step.get("expect_driver") or gpu.get("gpu_count") != step.get("expect_gpus"):
        problems.append(f"driver {gpu.get('driver_version')}, {gpu.get('gpu_count')} GPUs (baseline: "
                        f"{step.get('expect_driver')}, {step.get('expect_gpus')} GPUs)")
    expect = step.get("expect_running")
    if expect is None:          # a plan recorded before this check existed: the baseline says
        expect = [c["name"] for c in ctx.baseline.get("serving_containers", [])]
    problems += ctx.workload.serving_problems(ctx, list(expect))
    fm_expected = step.get("expect_fabricmanager")
    if fm_expected is None:
        fm_expected = ctx.baseline.get("fabricmanager") == "active"
    if fm_expected:
        fm = ctx.step("health-fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"])
        if fm.stdout.strip() != "active":
            problems.append(f"nvidia-fabricmanager is {fm.stdout.strip() or 'unknown'}")
    return problems


def uncordon_if_healthy(ctx: NodeCtx, step: dict[str, Any],
                        untouched: str | None = None) -> tuple[bool, str] | tuple[bool, str, dict[str, Any]]:
    problems = health_problems(ctx, step)
    if problems:
        return False, f"node unhealthy after rollback ({'; '.join(problems)}): kept cordoned"
    ok, why = uncordon_stage.uncordon(ctx, "rollback-uncordon")
    if not ok:
        return ok, why
    # the success path's bar after its uncordon: where owners bring the node's workloads
    # back (Kubernetes), each owner baseline saw is back to its readyReplicas on the same
    # image digest, waited for up to serving_ready_timeout
    proven = ctx.workload.prove_serving(ctx)
    # uncordoned either way: the report says so of a node whose workloads were not proven back
    if proven.failed:
        return (False, f"uncordoned, but {proven.reason or 'existing workloads are not back: ' + ', '.join(proven.failed)}",
                {"in_service": True})
    return ok, why or "uncordoned", {"in_service": True}


def plan_quarantine(step: dict[str, Any], p: Planning) -> dict[str, Any]:
    # planned in place of uncordon_if_healthy (plan_uncordon): the scheduler the node has now
    return {**step, "scheduler": scheduler_for(p.tvars).kind, "label": QUARANTINE_LABEL,
            "prior_state": p.baseline.get("scheduler_state")}


def describe_quarantine(step: dict[str, Any]) -> str:
    how = scheduler_for(step).describe_quarantine(step["label"])
    return f"quarantine: keep cordoned and mark it ({how}); counted against the failure budget"


def quarantine(ctx: NodeCtx, step: dict[str, Any], untouched: str | None = None) -> tuple[bool, str]:
    # the scheduler recorded in the plan, the one the node had when the plan was made
    return scheduler_for(step).quarantine(ctx, step["label"])


SPEC = StageSpec(kind("cordon"), run=run, undo={
    "uncordon_if_healthy": UndoAction(plan_uncordon, describe_uncordon, uncordon_if_healthy),
    "quarantine": UndoAction(plan_quarantine, describe_quarantine, quarantine),
})
