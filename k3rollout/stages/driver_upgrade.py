"""Stage 3: upgrade the NVIDIA driver on the cordoned, drained node, and prove it loaded.

How is the node's driver backend's (``k3_driver_backend``, stages/driver): the host's
packages through the operator's vendor steps and a reboot (stages/driver/host.py), or the
GPU Operator's driver container through its NVIDIADriver pool label
(stages/driver/gpu_operator.py). This stage asks the backend and never branches on it.
"""

from __future__ import annotations

from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver import driver_backend_for
from k3rollout.stages.spec import StageSpec, kind


def run(ctx: NodeCtx) -> StageOutcome:
    return driver_backend_for(ctx.vars).upgrade(ctx)


# on pass, the node shows NVIDIA's next upgrade state
SPEC = StageSpec(kind("driver_upgrade"), run=run, publishes_on_pass="validation-required")
