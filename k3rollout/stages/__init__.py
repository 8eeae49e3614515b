"""One module per stage. A stage decides what to run from facts; it never opens a socket.

Each stage receives a ``NodeCtx`` (facts, vars, rendered params, and a journaled
``ctx.step`` that runs a command through whatever executor the engine plugged in) and
returns a ``StageOutcome``. Rollback actions live in ``rollback``.
"""

from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.registry import STAGES

__all__ = ["NodeCtx", "StageOutcome", "STAGES"]
