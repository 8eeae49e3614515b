"""What every walker is built from (node.py, replica.py, batch.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3rollout.engine.recorder import Recorder
from k3rollout.engine.walkers.verdicts import StageVerdicts
from k3rollout.model.playbook import Stage
from k3rollout.stages.base import NodeCtx


class Walker:
    """The recorder (its ``record``, ``transition`` and view), the stage verdicts, the play's
    stages, ``make_ctx(node, stage, params)`` and ``render_params(stage, node)`` (the
    engine's contexts)."""

    def __init__(self, *, recorder: Recorder, verdicts: StageVerdicts, stages: list[Stage],
                 make_ctx: Callable[[str, Stage, Any], NodeCtx], render_params: Callable[[Stage, str], Any]):
        self.record = recorder.record
        self.transition = recorder.transition
        self.view = recorder.view
        self.verdicts = verdicts
        self.stages = stages
        self.kinds = [s.stage for s in stages]
        self.make_ctx = make_ctx
        self.render_params = render_params
