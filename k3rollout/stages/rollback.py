"""Rollback: the per-node plan recorded after baseline, and its execution.

The plan is built once, from baseline facts, before any change (driver back to the exact
packages baseline saw, serving containers back on their original image digest, node back
to its prior scheduler state) and written to the journal. Execution runs the recorded
plan, never a re-derived one, in a fixed safe order, and only the actions whose stage
actually started on the node. A step that cannot be proven done fails the rollback: the
node stays cordoned and is reported ``rollback_failed``.
"""

from __future__ import annotations

import shlex
from typing import Any

from k3rollout.errors import StepFailed
from k3rollout.model.playbook import ROLLBACK_ORDER, ROLLBACK_UNDOES, Playbook
from k3rollout.scheduler import scheduler_for
from k3rollout.stages import uncordon as uncordon_stage
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.driver import RestoreParams, driver_backend_for, driver_backend_named
from k3rollout.workload import workload_for

ORDER = ROLLBACK_ORDER
QUARANTINE_LABEL = "k3rollout.io/quarantine"
TEST_CONTAINERS = ("k3rollout-smoke", "k3rollout-features")


def plan_rollback(playbook: Playbook, node: str, baseline: dict[str, Any], tvars: dict[str, Any]) -> list[dict]:
    declared = {rb.action: rb for rb in playbook.rollback_actions()}
    restore = RestoreParams()
    for stage in playbook.stages:
        if stage.stage == "driver_upgrade":
            params = stage.typed_params()
            restore = RestoreParams(restore=params.restore, reboot_timeout=params.reboot_timeout,
                                    reboot_grace=params.reboot_grace, operator_timeout=params.operator_timeout)
    steps: list[dict] = []
    for action in declared:
        step: dict[str, Any] = {"action": action, "undoes": ROLLBACK_UNDOES[action]}
        if action == "stop_test_server":
            step["commands"] = workload_for(tvars).removal_plan(TEST_CONTAINERS)
        elif action == "restore_driver":
            driver_backend_for(tvars).restore_plan(
                step, node, baseline, tvars, RestoreParams(restore.restore, declared[action].reboot,
                                                           restore.reboot_timeout, restore.reboot_grace,
                                                           restore.operator_timeout))
        elif action == "restore_serving_image":
            step["containers"] = [{"name": c["name"], "image": c["image"], "digest": c.get("digest")}
                                  for c in baseline.get("serving_containers", [])]
        elif action == "uncordon_if_healthy" and playbook.play.on_node_failure == "quarantine":
            # a failed node is rolled back but stays out of service, marked for investigation
            step = {"action": "quarantine", "undoes": ROLLBACK_UNDOES["quarantine"],
                    "scheduler": scheduler_for(tvars).kind, "label": QUARANTINE_LABEL,
                    "prior_state": baseline.get("scheduler_state")}
        elif action == "uncordon_if_healthy":
            step["prior_state"] = baseline.get("scheduler_state")
            step["expect_driver"] = baseline.get("driver_version")
            step["expect_gpus"] = baseline.get("gpu_count")
            # what the baseline saw running must run again before the node serves
            step["expect_running"] = [c["name"] for c in baseline.get("serving_containers", [])]
            step["expect_fabricmanager"] = baseline.get("fabricmanager") == "active"
        steps.append(step)
    return steps


def describe(step: dict) -> str:
    a = step["action"]
    if a == "stop_test_server":
        return "stop_test_server: " + "; ".join(shlex.join(c) for c in step["commands"])
    if a == "restore_driver":
        return driver_backend_named(step.get("backend")).describe_restore(step)
    if a == "restore_serving_image":
        items = ", ".join(f"{c['name']} on {c['image']}@{(c.get('digest') or '?').split('@')[-1][:19]}"
                          for c in step["containers"]) or "none were running"
        return f"restore_serving_image: restart {items}"
    if a == "quarantine":
        how = scheduler_for(step).describe_quarantine(step["label"])
        return f"quarantine: keep cordoned and mark it ({how}); counted against the failure budget"
    if a == "uncordon_if_healthy":
        if step.get("prior_state") != "schedulable":
            return f"uncordon_if_healthy: keep cordoned (was {step.get('prior_state')} before the run)"
        also = "".join([f", {', '.join(step['expect_running'])} running" if step.get("expect_running") else "",
                        ", the fabric manager active" if step.get("expect_fabricmanager") else ""])
        return (f"uncordon_if_healthy: uncordon only if nvidia-smi shows {step.get('expect_gpus')} GPUs on "
                f"{step.get('expect_driver')}{also}; otherwise keep cordoned")
    return a


def execute(ctx: NodeCtx, steps: list[dict], entered: set[str], *,
            untouched: str | None = None) -> tuple[bool, list[dict]]:
    """Run the recorded plan; returns (all ok, per-action results). ``untouched``: why the
    journal proves the driver stage changed nothing (engine/rollback.py): the driver is not
    restored, what the stage stopped is started again, and the node goes back as it was."""
    results = []
    ok_all = True
    # a runtime that opened the node for its checks (Slurm's maintenance reservation, the
    # node resumed into it) drains it again and closes it before anything is restored
    close = getattr(ctx.workload, "close_node", None)
    if close is not None:
        try:
            ok, detail = close(ctx)
        except StepFailed as exc:
            ok, detail = False, str(exc)
        results.append({"action": "close_checks", "status": "done" if ok else "failed", "detail": detail})
        if not ok:
            return False, results + [{"action": "rollback", "status": "skipped",
                                      "detail": "the node could not be drained again: nothing was restored"}]
    for step in steps:
        a = step["action"]
        if not _needed(step, entered):
            results.append({"action": a, "status": "not_needed", "detail": f"{step['undoes']} never started"})
            continue
        try:
            if a == "restore_driver":
                ok, detail = driver_backend_named(step.get("backend")).restore(ctx, step, untouched)
            else:
                ok, detail = _ACTIONS[a](ctx, step)
        except StepFailed as exc:
            ok, detail = False, str(exc)
        results.append({"action": a, "status": "done" if ok else "failed", "detail": detail})
        if a == "uncordon_if_healthy":
            _publish_failed(ctx)
        if not ok:
            ok_all = False
            if a == "restore_driver":
                # Without a sound driver the node must stay out of service: skip the rest
                # except keeping it cordoned, which it already is. A quarantine still runs:
                # it needs only the scheduler (a node that never came back is marked too).
                _publish_failed(ctx)
                for rest in steps[steps.index(step) + 1:]:
                    if rest["action"] == "quarantine":
                        try:
                            qok, qdetail = _quarantine(ctx, rest)
                        except StepFailed as exc:
                            qok, qdetail = False, str(exc)
                        results.append({"action": "quarantine", "status": "done" if qok else "failed",
                                        "detail": qdetail})
                        continue
                    results.append({"action": rest["action"], "status": "skipped",
                                    "detail": "driver restore failed; node kept cordoned"})
                break
    return ok_all, results


def _needed(step: dict, entered: set[str]) -> bool:
    """An action runs when the stage it undoes started on the node. Restarting the serving
    containers is also owed after any driver change: the reboots stop them, and a failure
    before the smoke test (which stops them itself) must not leave them down."""
    if step["undoes"] in entered:
        return True
    return step["action"] == "restore_serving_image" and "driver_upgrade" in entered


def unreachable(ctx: NodeCtx, steps: list[dict]) -> list[dict]:
    """For a node the rollback cannot reach: the plan's actions that need only its scheduler
    (quarantine: cordon and mark it through the API), and its progress published as failed."""
    results = []
    _publish_failed(ctx)
    for step in steps:
        if step["action"] == "quarantine":
            try:
                ok, detail = _quarantine(ctx, step)
            except StepFailed as exc:
                ok, detail = False, str(exc)
            results.append({"action": "quarantine", "status": "done" if ok else "failed", "detail": detail})
    return results


def _publish_failed(ctx: NodeCtx) -> None:
    try:
        ctx.publish_progress("upgrade-failed")
    except StepFailed:
        pass    # the label informs; the rollback's own result already says what happened


def _stop_test(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    # the plan's commands are what the node's runtime runs for these names (its removal_plan)
    for i, name in enumerate(TEST_CONTAINERS, start=1):
        ctx.workload.remove_server(ctx, name, f"stop-test-{i}")
    return True, "test containers removed"


def _restore_serving(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    return ctx.workload.restore_images(ctx, step["containers"])


def health_problems(ctx: NodeCtx, step: dict) -> list[str]:
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


def _uncordon(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
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
    if proven.failed:
        return False, f"uncordoned, but {proven.reason or 'existing workloads are not back: ' + ', '.join(proven.failed)}"
    return ok, why or "uncordoned"


def _quarantine(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    # the scheduler recorded in the plan, the one the node had when the plan was made
    return scheduler_for(step).quarantine(ctx, step["label"])


_ACTIONS = {"stop_test_server": _stop_test,
            "restore_serving_image": _restore_serving, "uncordon_if_healthy": _uncordon, "quarantine": _quarantine}
