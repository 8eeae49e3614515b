"""Rollback: the per-node plan recorded after baseline, and its execution.

The plan is built once, from baseline facts, before any change (driver back to the exact
packages baseline saw, serving containers back on their original image digest, node back
to its prior scheduler state) and written to the journal. Execution runs the recorded
plan, never a re-derived one, in a fixed safe order, and only the actions whose stage
actually started on the node. A step that cannot be proven done fails the rollback: the
node stays cordoned and is reported ``rollback_failed``.

Each action is its stage kind's: the kind declares it (its ``Undo``, model/playbook.py's
``STAGE_KINDS``: the plan's text, the estimate, how its failure bears on the rest) and its
module says how it is planned, shown and run (its ``StageSpec.undo``). This module is the
loop over the declared actions in ``ROLLBACK_ORDER``, asking each owning kind.
"""

from __future__ import annotations

from typing import Any

from k3rollout.errors import StepFailed
from k3rollout.model.playbook import ROLLBACK_UNDOES, STAGE_TABLES, Playbook
from k3rollout.model.stagekinds import Undo
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.registry import SPECS
from k3rollout.stages.spec import Planning, UndoAction


def action(name: str) -> UndoAction:
    """How the rollback action ``name`` runs: its owning kind's (KeyError when none declares it)."""
    return SPECS[ROLLBACK_UNDOES[name]].undo[name]


def _declared(name: str) -> Undo:
    return STAGE_TABLES.undos[name]


def plan_rollback(playbook: Playbook, node: str, baseline: dict[str, Any], tvars: dict[str, Any]) -> list[dict[str, Any]]:
    """Each action the playbook's stages declare, once, in ``ROLLBACK_ORDER``, as its kind
    plans it from the baseline."""
    return [action(rb.action).plan({"action": rb.action, "undoes": ROLLBACK_UNDOES[rb.action]},
                                   Planning(playbook, node, baseline, tvars, rb))
            for rb in playbook.rollback_actions()]


def describe(step: dict[str, Any]) -> str:
    a = step["action"]
    return action(a).describe(step) if a in ROLLBACK_UNDOES else a


def _run(ctx: NodeCtx, step: dict[str, Any], untouched: str | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    try:
        got = action(step["action"]).execute(ctx, step, untouched)
        ok, detail = got[0], got[1]
        if len(got) > 2:
            extra = got[2]      # the three-item form (stages/spec.py)
    except StepFailed as exc:
        ok, detail = False, str(exc)
    return {"action": step["action"], "status": "done" if ok else "failed", "detail": detail, **extra}


def execute(ctx: NodeCtx, steps: list[dict[str, Any]], entered: set[str], *,
            untouched: str | None = None) -> tuple[bool, list[dict[str, Any]]]:
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
    for i, step in enumerate(steps):
        a = step["action"]
        if not _needed(step, entered):
            results.append({"action": a, "status": "not_needed", "detail": f"{step['undoes']} never started"})
            continue
        done = _run(ctx, step, untouched)
        results.append(done)
        undo = _declared(a)
        if undo.then_publish_failed:
            _publish_failed(ctx)
        if done["status"] != "done":
            ok_all = False
            if undo.failure_stops_rest:
                # the node must stay out of service: the rest is skipped, except what needs
                # only the scheduler (a node that never came back is marked too)
                _publish_failed(ctx)
                for rest in steps[i + 1:]:
                    if _declared(rest["action"]).scheduler_only:
                        results.append(_run(ctx, rest))
                        continue
                    results.append({"action": rest["action"], "status": "skipped",
                                    "detail": undo.failure_stops_rest})
                break
    return ok_all, results


def _needed(step: dict[str, Any], entered: set[str]) -> bool:
    """An action runs when the stage it undoes started on the node, or one its declaration
    names in ``also_after`` (the serving containers after any driver change: the reboots
    stop them, and a failure before the smoke test must not leave them down)."""
    if step["undoes"] in entered:
        return True
    return any(s in entered for s in _declared(step["action"]).also_after)


def unreachable(ctx: NodeCtx, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For a node the rollback cannot reach: the plan's actions that need only its scheduler
    (quarantine: cordon and mark it through the API), and its progress published as failed."""
    _publish_failed(ctx)
    return [_run(ctx, step) for step in steps if _declared(step["action"]).scheduler_only]


def _publish_failed(ctx: NodeCtx) -> None:
    try:
        ctx.publish_progress("upgrade-failed")
    except StepFailed:
        pass    # the label informs; the rollback's own result already says what happened
