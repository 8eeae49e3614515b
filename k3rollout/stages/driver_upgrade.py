"""Stage 3: upgrade the NVIDIA driver on the cordoned, drained node, and prove it loaded.

How is the node's driver backend's (``k3_driver_backend``, stages/driver): the host's
packages through the operator's vendor steps and a reboot (stages/driver/host.py), or the
GPU Operator's driver container through its NVIDIADriver pool label
(stages/driver/gpu_operator.py). This stage asks the backend and never branches on it.

Its undo, ``restore_driver``, is the backend's too: planned from the baseline by the
node's backend, recorded with the backend's name, run by the backend the step names.
"""

from __future__ import annotations

from typing import Any

from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver import RestoreParams, driver_backend_for, driver_backend_named
from k3rollout.stages.spec import Planning, StageSpec, UndoAction, kind

KIND = kind("driver_upgrade")


def run(ctx: NodeCtx) -> StageOutcome:
    return driver_backend_for(ctx.vars).upgrade(ctx)


def restore_params(p: Planning) -> RestoreParams:
    """What the play's driver stage (the last, if several) says about putting it back."""
    params = RestoreParams(reboot=p.declared.reboot)
    for stage in p.playbook.stages:
        if stage.stage == KIND.name:
            w = stage.typed_params()
            params = RestoreParams(restore=w.restore, reboot=p.declared.reboot, reboot_timeout=w.reboot_timeout,
                                   reboot_grace=w.reboot_grace, operator_timeout=w.operator_timeout)
    return params


def plan_restore(step: dict[str, Any], p: Planning) -> dict[str, Any]:
    driver_backend_for(p.tvars).restore_plan(step, p.node, p.baseline, p.tvars, restore_params(p))
    return step


def describe_restore(step: dict[str, Any]) -> str:
    return driver_backend_named(step.get("backend")).describe_restore(step)


def restore(ctx: NodeCtx, step: dict[str, Any], untouched: str | None = None) -> tuple[bool, str]:
    return driver_backend_named(step.get("backend")).restore(ctx, step, untouched)


# on pass, the node shows NVIDIA's next upgrade state
SPEC = StageSpec(KIND, run=run, publishes_on_pass="validation-required",
                 undo={"restore_driver": UndoAction(plan_restore, describe_restore, restore)})
