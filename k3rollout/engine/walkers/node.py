"""One node through its node-scoped stages (``forks`` of them at once, in the engine's pool)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Container
from dataclasses import replace
from typing import Any

from k3rollout import fastjson
from k3rollout.engine.clock import Clock
from k3rollout.engine.outcome import STAGE_ERRORS, failed_outcome
from k3rollout.engine.recorder import Recorder
from k3rollout.engine.states import STATE_STAGE, Event, NodeState
from k3rollout.engine.walkers.base import Walker
from k3rollout.engine.walkers.scopes import Scopes
from k3rollout.engine.walkers.verdicts import GateInterrupted, StageVerdicts
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.assertions import AssertionSyntaxError
from k3rollout.model.playbook import REPLICA_SCOPED_STAGES, STAGE_TABLES, Playbook, Stage
from k3rollout.model.stagekinds import RECORDS_BASELINE, RETURNS_TO_SERVICE, TAKES_OUT_OF_SERVICE
from k3rollout.plan.target import no_change_reason
from k3rollout.stages import rollback as rb
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.registry import STAGES

# called on a node's walk right before its cordon; False holds the node there (not out of
# service, nothing changed): the sliding window waits in it for a slot and the floor
BeforeCordon = Callable[[str], bool]


class NodeWalker(Walker):
    """Built from the recorder, the stage verdicts, the scopes, the playbook, a
    ``make_ctx(node, stage, params)`` and ``render_params(stage, node)`` (the engine's
    contexts), ``tvars(node)``, ``folder(stage)``, ``replica_holds(node)`` (its replica has
    not returned to service whole yet: ``ReplicaWalker.holds``), whether the play changes
    nodes (``in_place``), the rollback plan's owner, the evidence store, the clock, the stop
    flag, the redactor and the log."""

    def __init__(self, *, recorder: Recorder, verdicts: StageVerdicts, scopes: Scopes, playbook: Playbook,
                 make_ctx: Callable[[str, Stage, Any], NodeCtx], render_params: Callable[[Stage, str], Any],
                 tvars: Callable[[str], dict[str, Any]], folder: Callable[[Stage], str],
                 replica_holds: Callable[[str], bool], in_place: bool, rollback_owner: Any,
                 evidence: EvidenceStore, clock: Clock, stopping: threading.Event, redact: Callable[[str], str],
                 log: Any):
        super().__init__(recorder=recorder, verdicts=verdicts, stages=playbook.stages, make_ctx=make_ctx,
                         render_params=render_params)
        self.scopes = scopes
        self.playbook = playbook
        self.tvars = tvars
        self.folder = folder
        self.replica_holds = replica_holds
        self.in_place = in_place
        self.rollback_owner = rollback_owner
        self.evidence = evidence
        self.clock = clock
        self.stopping = stopping
        self.redact = redact
        self.log = log

    def run_stage(self, node: str, stage: Stage) -> StageOutcome:
        self.record("stage_started", node=node, stage=stage.stage, name=stage.name)
        ok, why = self.verdicts.check(node, stage, "pre")
        if not ok:
            return StageOutcome(False, why, logs=why)
        try:
            params = self.render_params(stage, node)
        except ValueError as exc:            # an AssertionSyntaxError is one
            return failed_outcome(exc)
        ctx = self.make_ctx(node, stage, params)
        rep = self.scopes.replica_of(node) if stage.stage in REPLICA_SCOPED_STAGES and self.playbook.profile is not None \
            else None
        if rep is not None:
            # a one-node replica (8 x B300 for K3) runs on its own node, with the profile's launch
            # for its hardware and ready timeout, as a multi-node one does across its nodes
            ctx.replica = {**rep, "baselines": {node: dict(self.view.node(node).baseline)},
                           "ready_timeout": float(self.playbook.profile.engine_ready_timeout_s)}
        try:
            out = STAGES[stage.stage](ctx)
            if rep is not None:
                own = out.facts.get("per_node") or {}
                facts = {k: v for k, v in out.facts.items() if k != "per_node"}
                out = replace(out, facts={**facts, **own.get(node, {}), "replica_role": "head"})
            return out
        except STAGE_ERRORS as exc:
            return failed_outcome(exc)

    def advance(self, node: str, held: Container[str] = (), before_cordon: BeforeCordon | None = None) -> None:
        """Walk one node forward until it is done, failed, or waiting: before a stage its
        replica or its batch runs (its scope), before a stage in ``held`` (a pause), before
        its return to service until its replica may return whole, or held by
        ``before_cordon`` (engine/window.py)."""
        while not self.stopping.is_set():
            state = NodeState(self.view.node(node).state)
            if state == NodeState.PENDING:
                self.transition(node, Event.START)
                continue
            kind = STATE_STAGE.get(state)
            if kind is None or kind in held or self.scopes.of(node, kind) != "node":
                return                      # done, paused, or run for its replica or its batch
            if STAGE_TABLES.plays(kind, RETURNS_TO_SERVICE) and self.replica_holds(node):
                return                      # a replica returns to service whole, or not at all
            if STAGE_TABLES.plays(kind, TAKES_OUT_OF_SERVICE) and before_cordon is not None \
                    and not before_cordon(node):
                return                      # held before its cordon (engine/window.py)
            stage = self.stages[self.kinds.index(kind)]
            out = self.run_stage(node, stage)
            if out.inconclusive and not out.passed:
                try:
                    out = self.verdicts.human_verdict(node, stage, out)
                except GateInterrupted:
                    return                  # stopped while waiting: resume asks again

            self.verdicts.finish(node, stage, out)
            passed = self.verdicts.last_passed(node, kind)
            records_baseline = STAGE_TABLES.plays(kind, RECORDS_BASELINE)
            if passed and records_baseline and self.in_place and (why := self.unchanged(node)):
                # nothing to install, so nothing to roll back: the node stays in service as it was
                self.record("facts", node=node, stage=kind, facts={"no_change": why})
                self.log.info("node_unchanged", node=node, reason=why)
                self.transition(node, Event.HOLD)
                return
            if passed and records_baseline:
                self.record_rollback_plan(node)
                if not self.in_place:
                    self.transition(node, Event.HOLD)
                    return
            self.transition(node, Event.PASSED if passed else Event.FAILED)

    def unchanged(self, node: str) -> str | None:
        """Why the play leaves ``node`` alone after its baseline (plan/target.py, the rule the
        plan and the preflight apply too), or None."""
        if "driver_upgrade" not in self.kinds:
            return None
        try:
            # the driver stage's own target for this node, as it would install it
            target = str(self.render_params(self.stages[self.kinds.index("driver_upgrade")], node).target_driver)
        except (AssertionSyntaxError, ValueError):
            return None             # the driver stage reports its parameters itself
        return no_change_reason(self.view.node(node).baseline.get("driver_version"), target)

    def record_rollback_plan(self, node: str) -> None:
        n = self.view.node(node)
        if n.rollback_plan is not None:
            return
        steps = rb.plan_rollback(self.playbook, node, n.baseline, self.tvars(node))
        described = [self.redact(rb.describe(s)) for s in steps]
        # the plan is evidence too: what would be restored, written before anything changed
        ref = self.evidence.write(node, self.folder(self.stages[0]), "rollback-plan.json", self.redact(fastjson.dumps_pretty(
            {"node": node, "recorded_at": self.clock.iso(), "owner": self.rollback_owner,
             "steps": described, "detail": steps})))
        self.record("evidence", node=node, stage=STAGE_TABLES.with_role(RECORDS_BASELINE), name="rollback-plan",
                    path=ref.path, sha256=ref.sha256)
        # durable with the first destructive step's start, which commits all before it
        self.record("rollback_plan", node=node, batch=n.batch, steps=steps, described=described, durable=False)

