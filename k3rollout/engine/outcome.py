"""What a stage's exception makes of its outcome: the one mapping, wherever the engine runs a
stage (a node's stage, a batch-scoped stage once for its batch, a replica's serving stage
once for the replica, the pre-staging, the cordon before an operator's rollback).

A failure of the node, not of k3rollout, is a failed ``StageOutcome`` the run goes on from
(triage, the node's rollback, the batch's verdict):

- ``StepFailed``: a command could not be run or settled. The step runner (engine/steps.py)
  turns every transport error into one, naming the host: an unreachable host, a connection
  lost and not settled, a command past its timeout. The reason is the error; the logs the
  triage reads are the error and the command's output tail.
- ``ParseError``: a command answered what its parser does not know. Reason ``unexpected
  output: ...``.
- any other ``ValueError``: the stage's parameters (an ``AssertionSyntaxError`` or a template
  that does not render, a value pydantic refuses). Reason ``stage parameters: ...`` (the label
  is the caller's: ``cordon stage parameters`` before an operator's rollback).

Which exceptions a caller turns into an outcome, and which it lets go on (an internal error:
exit 70, and ``resume`` continues), is the caller's: ``STAGE_ERRORS`` around a stage's run,
``ValueError`` around the rendering of its parameters.
"""

from __future__ import annotations

from k3rollout.checks.parsers import ParseError
from k3rollout.errors import StepFailed
from k3rollout.stages.base import StageOutcome

# what a stage's run raises for a failure of the node
STAGE_ERRORS: tuple[type[StepFailed], type[ParseError]] = (StepFailed, ParseError)


def failed_outcome(exc: StepFailed | ValueError, *, parameters: str = "stage parameters") -> StageOutcome:
    """The failed outcome of a stage that raised ``exc`` (see the module's docstring)."""
    if isinstance(exc, StepFailed):
        return StageOutcome(False, str(exc), logs=f"{exc}\n{exc.logs}")
    if isinstance(exc, ParseError):
        return StageOutcome(False, f"unexpected output: {exc}", logs=str(exc))
    return StageOutcome(False, f"{parameters}: {exc}")
