"""The rollout engine: batches and the per-node state machine, handed to the parts it holds.

- ``Recorder`` (engine/recorder.py): journal first, every transition, step and fact is
  appended (and fsynced) before the side effect starts and again after it ends; the
  engine's own state is the fold of its journal (``runlog.view``), so a resumed run and a
  fresh one decide from the same data.
- ``StepRunner`` (engine/steps.py): what a stage gets as ``ctx.runner``.
- ``Gates`` (engine/gates.py): pauses for a person, and hooks.
- ``BatchPolicy`` (engine/policy.py): the next batch or a halt, a batch's verdict, the
  failure budget and the capacity floor, decided from the view alone; the sliding window
  after the canary batches is engine/window.py.
- ``RollbackExecutor`` (engine/rollback.py): a node's recorded rollback plan, and an
  operator's rollback of whole batches.

Per batch: every node walks its stages in parallel (``forks``) up to the batch-scoped
multinode stage, which runs once for the batch; then the nodes finish; then nodes that
failed are rolled back by their recorded plan. The batch verdict is checked against
``max_fail_percentage`` (Ansible's rule: halt when failed/batch > the percentage), and a
rollback that itself failed always halts. Before a batch starts, the window and the
capacity floor are checked against the batch's estimate plus its rollback estimate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from k3rollout import fastjson
from k3rollout.checks.triage import caused_by, classify
from k3rollout.engine import prestage, window
from k3rollout.engine.clock import Clock
from k3rollout.engine.gates import Gates
from k3rollout.engine.outcome import STAGE_ERRORS, failed_outcome
from k3rollout.engine.policy import BatchPolicy, Halt, NextBatch
from k3rollout.engine.pool import run_each
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.engine.rollback import RollbackExecutor
from k3rollout.engine.states import STATE_STAGE, Event, NodeState, build_table
from k3rollout.engine.steps import StepRunner
from k3rollout.errors import StepFailed
from k3rollout.evidence.redact import mask_credentials
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.assertions import AssertionSyntaxError, evaluate_all, render, template_context, templated
from k3rollout.model.inventory import Inventory
from k3rollout.model.playbook import (
    BATCH_SCOPED_STAGES,
    PARAMS_BY_KIND,
    REPLICA_SCOPED_STAGES,
    STAGE_TABLES,
    Pause,
    Playbook,
    Stage,
    play_vars,
)
from k3rollout.model.stagekinds import RECORDS_BASELINE, RETURNS_TO_SERVICE, TAKES_OUT_OF_SERVICE
from k3rollout.plan.planner import out_of_service_before
from k3rollout.plan.target import no_change_reason
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.view import RunView
from k3rollout.stages import rollback as rb
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.registry import SPECS, STAGES
from k3rollout.transport.base import Executor

SECRET_HINTS = ("pass", "secret", "token", "key_data", "api_key", "credential")
VERBATIM_PARAMS = frozenset({"install", "restore", "tasks"})


def secret_values(*var_maps: dict[str, Any]) -> list[str]:
    out: set[str] = set()
    for m in var_maps:
        for k, v in m.items():
            if any(h in k.lower() for h in SECRET_HINTS) and isinstance(v, (str, int)) and len(str(v)) >= 4 \
                    and not k.endswith("_file"):
                out.add(str(v))
    return sorted(out, key=len, reverse=True)


class Redactor:
    def __init__(self, secrets: list[str]):
        self.secrets = secrets

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "********")
        return mask_credentials(text)       # URL credentials, secret-named env values and flags


class GateInterrupted(Exception):
    """The run was told to stop while a node waited for a person."""


class Engine:
    """A rollout: the recorder (journal and view), the step runner (``ctx.runner`` for every
    stage), the gates and hooks, the batch policy and the rollback executor, held and
    handed each its part of the work. What stays here is the walk of a batch's nodes
    through their stages (per node, per replica, once per batch)."""

    def __init__(self, *, playbook: Playbook, inventory: Inventory, executor: Executor, journal: Journal,
                 evidence: EvidenceStore, clock: Clock, run_id: str, log: Any = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.playbook = playbook
        self.inventory = inventory
        self.executor = executor
        self.journal = journal
        self.evidence = evidence
        # one commit makes journal and evidence durable together (see runlog/journal.py)
        journal.extra_sync = evidence.sync
        self.clock = clock
        self.run_id = run_id
        self.stages: list[Stage] = playbook.stages
        self.kinds = [s.stage for s in self.stages]
        # where the play takes a node out of service (its stage kind that plays the role), if it does
        self.out_at = STAGE_TABLES.index(self.kinds, TAKES_OUT_OF_SERVICE)
        self.table = build_table(self.kinds)
        # the journal and the view folded from it: every record goes through the recorder
        self.recorder = Recorder(journal, self.table, on_event)
        self.record = self.recorder.record
        self.transition = self.recorder.transition
        self.view: RunView = self.recorder.view
        self.play_vars = play_vars(playbook.play)
        self.log = (log or structlog.get_logger("k3rollout")).bind(run_id=run_id)
        self.stopping = threading.Event()
        hv = [inventory.hosts[h].vars for h in inventory.hosts]
        vaulted = [v for v in getattr(inventory, "vault_values", ()) if len(v) >= 4]   # whatever their names
        self.redact = Redactor(sorted(set(secret_values(self.play_vars, *hv)) | set(vaulted), key=len, reverse=True))
        self.in_place = bool(self.play_vars.get("allow_in_place_change", True))
        self.playbook_dir = str(Path(playbook.path).resolve().parent)
        timeouts: dict[str, float | None] = {}
        for s in self.stages:
            timeouts.setdefault(s.stage, s.timeout)
        # what every stage gets as ctx.runner (stages.base.StageContext)
        self.steps = StepRunner(record=self.record, view=self.view, executor=executor, evidence=evidence,
                                redact=self.redact, inventory=inventory, log=self.log, clock=clock,
                                stopping=self.stopping, stage_timeouts=timeouts)
        play = playbook.play
        # which batch next, or a halt; verdicts, the failure budget, the capacity floor
        self.policy = BatchPolicy(max_fail_percentage=play.max_fail_percentage, failure_budget=play.failure_budget,
                                  quarantine=play.on_node_failure == "quarantine",
                                  guard_capacity=self.in_place and self.out_at is not None,
                                  declared_out=lambda hosts: out_of_service_before(inventory, hosts))
        # pauses for a person, and hooks (webhooks go out through the step runner's HTTP client)
        self.gates = Gates(record=self.record, view=self.view, evidence=evidence, clock=clock, stopping=self.stopping,
                           redact=self.redact, hooks=playbook.play.hooks, run_id=run_id, log=self.log,
                           api=lambda: self.steps.api)
        # a node's recorded rollback plan, and an operator's rollback of whole batches
        self.rollbacks = RollbackExecutor(recorder=self.recorder, steps=self.steps, policy=self.policy,
                                          run_hooks=self.gates.run_hooks, pool=self.pool,
                                          make_ctx=lambda node, folder: self.ctx(node, None, folder),
                                          cordon_params=self.cordon_params, evidence=evidence, clock=clock,
                                          stopping=self.stopping, redact=self.redact, log=self.log)
        self._held: dict[str, Pause] = {}     # stages the current batch waits before, and their pauses
        self._replica_released: set[str] = set()   # nodes whose whole replica reached uncordon
        self._param_templates: dict[int, tuple[dict[str, Any], list[str]]] = {}   # stage parameters: dump, templated keys
        self._rejected: tuple[str, str] | None = None   # (rejected|window, why) a gate stopped the rollout
        # called on a node's walk right before its cordon; False holds the node there (not out of
        # service, nothing changed). The sliding window waits in it for a slot and the floor.
        self.before_cordon: Callable[[str], bool] | None = None

    @property
    def applied(self) -> int:
        """How many journal records the view holds (``Recorder.applied``)."""
        return self.recorder.applied

    def close(self) -> None:
        """Release the transports: SSH connections, the HTTP pool, the simulated network."""
        self.steps.close()
        self.executor.close()
        self.evidence.close()

    def cordon_params(self, node: str) -> Any:
        """The run's cordon stage parameters for ``node`` (the defaults when the play has
        no cordon stage): what an operator's rollback drains a node in service with."""
        if self.out_at is not None:
            return self.render_params(self.stages[self.out_at], node)
        return PARAMS_BY_KIND[STAGE_TABLES.with_role(TAKES_OUT_OF_SERVICE)].model_validate({})

    # ------------------------------------------------------------------ contexts

    def tvars(self, node: str) -> dict[str, Any]:
        # Ansible precedence: play vars override inventory vars
        return {**self.inventory.hosts[node].vars, **self.play_vars, "inventory_hostname": node,
                "playbook_dir": self.playbook_dir}

    def ctx(self, node: str, stage: Stage | None, folder: str, params: Any = None) -> NodeCtx:
        n = self.view.node(node)
        return NodeCtx(node=node, run_id=self.run_id, stage=stage.stage if stage else "rollback", folder=folder,
                       params=params, vars=self.tvars(node), facts=dict(n.facts), baseline=dict(n.baseline),
                       runner=self.steps)

    def folder(self, stage: Stage) -> str:
        return f"{self.kinds.index(stage.stage) + 1:02d}-{stage.stage}"

    def assertion_context(self, node: str) -> dict[str, Any]:
        n = self.view.node(node)
        return template_context(self.tvars(node), node=node, facts=dict(n.facts), baseline=dict(n.baseline))

    def render_params(self, stage: Stage, node: str) -> Any:
        typed = stage.typed_params()
        known = self._param_templates.get(id(typed))
        if known is None:
            data = typed.model_dump()
            # vendor command templates are rendered per argv element when used (render_argv)
            keys = [k for k, v in data.items() if k not in VERBATIM_PARAMS and templated(v)]
            known = self._param_templates[id(typed)] = (data, keys)
        data, keys = known
        if not keys:
            return typed            # nothing to render: the validated (frozen) parameters as they are
        ctx = self.assertion_context(node)
        return type(typed).model_validate({**data, **{k: render(data[k], ctx) for k in keys}})

    # ------------------------------------------------------------------ stages

    def check(self, node: str, stage: Stage, phase: str) -> tuple[bool, str]:
        block = stage.pre if phase == "pre" else stage.post
        if block is None:
            return True, ""
        ctx = self.assertion_context(node)
        results = evaluate_all(block.that, ctx)
        passed = all(r.passed for r in results)
        self.record("assertions", node=node, stage=stage.stage, phase=phase, passed=passed,
                    results=[r.to_dict() for r in results])
        if passed:
            return True, ""
        failed = next(r for r in results if not r.passed)
        msg = f"{phase}-assertion failed: {failed.expr}" + (f" ({failed.error})" if failed.error else "")
        if block.fail_msg:
            msg += f" - {block.fail_msg}"
        return False, msg

    def finish_stage(self, node: str, stage: Stage, out: StageOutcome) -> None:
        if out.facts:
            self.record("facts", node=node, stage=stage.stage, facts=out.facts)
        if out.passed:
            ok, why = self.check(node, stage, "post")
            if not ok:
                out = StageOutcome(False, why, {}, out.logs + "\n" + why)
        if not out.passed:
            f = self.view.node(node).facts
            image_cuda = f.get("image_cuda") if stage.stage in STAGE_TABLES.image_stages else None
            groups = run_plan(self.view).get("groups") or {}
            # failed because another node of its replica did: that node's triage, naming it
            culprit = str(out.facts.get("replica_culprit") or "")
            peer = self.view.nodes[culprit].triage if culprit != node and culprit in self.view.nodes else None
            tri = caused_by(peer, culprit, out.facts.get("replica")) if peer else \
                classify(out.logs or out.reason, driver=f.get("driver_version") if image_cuda else None,
                         image_cuda=image_cuda, stage=stage.stage, cuda_init_ok=f.get("cuda_init_ok"),
                         nnodes=next((len(ns) for ns in groups.values() if node in ns), None))
            self.record("triage", node=node, stage=stage.stage, **tri.to_dict())
        self.record("stage_done", node=node, stage=stage.stage, passed=out.passed, reason=self.redact(out.reason))
        self.log.info("stage_done", node=node, stage=stage.stage, passed=out.passed, reason=out.reason)

    def run_stage(self, node: str, stage: Stage) -> StageOutcome:
        self.record("stage_started", node=node, stage=stage.stage, name=stage.name)
        ok, why = self.check(node, stage, "pre")
        if not ok:
            return StageOutcome(False, why, logs=why)
        try:
            params = self.render_params(stage, node)
        except ValueError as exc:            # an AssertionSyntaxError is one
            return failed_outcome(exc)
        ctx = self.ctx(node, stage, self.folder(stage), params)
        rep = self.replica_of(node) if stage.stage in REPLICA_SCOPED_STAGES and self.playbook.profile is not None else None
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

    def advance(self, node: str) -> None:
        """Walk one node forward until it is done, failed, or waiting at a batch barrier."""
        while not self.stopping.is_set():
            state = NodeState(self.view.node(node).state)
            if state == NodeState.PENDING:
                self.transition(node, Event.START)
                continue
            kind = STATE_STAGE.get(state)
            if kind is None or kind in BATCH_SCOPED_STAGES or kind in self._held:
                return
            if self.replica_scoped(node, kind):
                return                      # served once for the whole replica (run_replica_stage)
            if STAGE_TABLES.plays(kind, RETURNS_TO_SERVICE) and run_plan(self.view).get("replicas") \
                    and node not in self._replica_released:
                return                      # a replica returns to service whole, or not at all
            if STAGE_TABLES.plays(kind, TAKES_OUT_OF_SERVICE) and self.before_cordon is not None \
                    and not self.before_cordon(node):
                return                      # held before its cordon (engine/window.py)
            stage = self.stages[self.kinds.index(kind)]
            out = self.run_stage(node, stage)
            if out.inconclusive and not out.passed:
                try:
                    out = self.human_verdict(node, stage, out)
                except GateInterrupted:
                    return                  # stopped while waiting: resume asks again

            self.finish_stage(node, stage, out)
            passed = self._last_stage_passed(node, kind)
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

    def human_verdict(self, node: str, stage: Stage, out: StageOutcome) -> StageOutcome:
        """An inconclusive gate waits for a person instead of passing or failing on its own."""
        n = self.view.node(node)
        asked = sum(1 for p in self.view.pauses.values()
                    if p.get("node") == node and p.get("stage") == stage.stage and p.get("decision"))
        pid = f"{node}-{stage.stage}-inconclusive-{asked + 1}"
        decision = self.gates.pause(pid, f"{node}: {stage.stage} is inconclusive: {out.reason}; approve to accept the "
                                   "node, reject to fail it", None, batch=n.batch, at_stage=stage.stage, for_node=node)
        if decision == "stopped":
            raise GateInterrupted(pid)
        if decision == "approved":
            by = self.view.pauses[pid].get("by")
            return StageOutcome(True, "", {**out.facts, "accepted_by": by, "accepted_inconclusive": out.reason})
        why = {"rejected": "rejected by a person at the inconclusive gate", "window": "window ended at the gate",
               "stopped": "stopped while waiting at the gate"}.get(decision, decision)
        return StageOutcome(False, f"{out.reason} ({why})", out.facts, out.logs)

    def _last_stage_passed(self, node: str, kind: str) -> bool:
        for span in reversed(self.view.node(node).timeline):
            if span["stage"] == kind:
                return bool(span["passed"])
        return False

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
            {"node": node, "recorded_at": self.clock.iso(), "owner": self.play_vars.get("rollback_owner"),
             "steps": described, "detail": steps})))
        self.record("evidence", node=node, stage="baseline", name="rollback-plan", path=ref.path, sha256=ref.sha256)
        # durable with the first destructive step's start, which commits all before it
        self.record("rollback_plan", node=node, batch=n.batch, steps=steps, described=described, durable=False)

    def run_barrier(self, nodes: list[str], kind: str) -> None:
        waiting = [n for n in nodes if STATE_STAGE.get(NodeState(self.view.node(n).state)) == kind]
        if not waiting:
            return
        stage = self.stages[self.kinds.index(kind)]
        lead = waiting[0]
        for n in waiting:
            self.record("stage_started", node=n, stage=kind, name=stage.name)
        ready = []
        for n in waiting:
            ok, why = self.check(n, stage, "pre")
            if ok:
                ready.append(n)
            else:
                self.finish_stage(n, stage, StageOutcome(False, why, logs=why))
        outcomes: dict[str, StageOutcome] = {}
        if ready:
            try:
                params = self.render_params(stage, lead)
                ctx = self.ctx(ready[0], stage, self.folder(stage), params)
                ctx.peers = self.old_driver_peers(nodes)
                run_batch = SPECS[kind].run_batch
                assert run_batch is not None     # a batch-scoped spec declares it (stages/spec.py)
                outcomes = run_batch(ctx, ready)
            except (StepFailed, ValueError) as exc:     # the parameters' and the stage's
                outcomes = {n: failed_outcome(exc) for n in ready}
        for n in ready:
            self.finish_stage(n, stage, outcomes[n])
        for n in waiting:
            self.transition(n, Event.PASSED if self._last_stage_passed(n, kind) else Event.FAILED)

    def old_driver_peers(self, batch_nodes: list[str]) -> list[str]:
        """Nodes still on the old driver and in service, in the order the rollout will take them."""
        out = self.policy.out_of_service(self.view) | set(batch_nodes)
        pending = NodeState.PENDING.value
        return [n for b in run_plan(self.view)["batches"] for n in b["nodes"]
                if n not in out and self.view.node(n).state == pending]

    # ------------------------------------------------------------------ batches

    def pool(self, fn: Callable[[str], Any], nodes: list[str]) -> None:
        """``fn`` on every node, ``forks`` at once, in the engine's worker pool (engine/pool.py,
        the one rule for Ctrl-C and SIGTERM): on a stop no new step starts, what is running now
        finishes (or times out) and is journaled, and only then does the caller close the
        journal and the transports."""
        run_each(fn, nodes, workers=self.playbook.play.forks, stopping=self.stopping, name="k3node")

    def run_batch(self, nodes: list[str], idx: int | None = None) -> None:
        self._held = {s.stage: s.pause for s in self.stages if s.pause}
        while True:
            self.pool(self.advance, nodes)
            if self.stopping.is_set():
                break
            at = {STATE_STAGE.get(NodeState(self.view.node(n).state)) for n in nodes}
            gate = next((k for k in self.kinds if k in at and (k in self._held or k in BATCH_SCOPED_STAGES or (
                k in REPLICA_SCOPED_STAGES and any(self.replica_scoped(n, k) for n in nodes
                                            if STATE_STAGE.get(NodeState(self.view.node(n).state)) == k)))), None)
            back = STAGE_TABLES.with_role(RETURNS_TO_SERVICE)
            if gate is None and back in at and run_plan(self.view).get("replicas") and any(
                    n not in self._replica_released for n in nodes
                    if STATE_STAGE.get(NodeState(self.view.node(n).state)) == back):
                gate = "replica"
            if gate is None:
                break
            if gate == "replica":
                self.replica_gate(nodes)
            elif gate in self._held:
                self.stage_gate(nodes, idx, gate, self._held.pop(gate))
            elif gate in BATCH_SCOPED_STAGES:
                self.run_barrier(nodes, gate)
            else:
                self.run_replica_stage(nodes, gate)
        need = [n for n in nodes if self.view.node(n).state == NodeState.ROLLBACK_REQUIRED.value]
        self.pool(lambda n: self.rollbacks.rollback(n, self.view.node(n).reason or "stage failed"), need)

    def replica_of(self, node: str) -> dict[str, Any] | None:
        return next((r for r in run_plan(self.view).get("replicas") or [] if node in r["nodes"]), None)

    def replica_scoped(self, node: str, kind: str) -> bool:
        """With a model profile, the serving stages of a replica of more than one node run once
        for the replica; a one-node replica and a play without a profile run them per node."""
        if kind not in REPLICA_SCOPED_STAGES or not run_plan(self.view).get("replicas"):
            return False
        rep = self.replica_of(node)
        return rep is not None and len(rep["nodes"]) > 1

    def run_replica_stage(self, nodes: list[str], kind: str) -> None:
        """A serving stage once per multi-node replica whose nodes all wait before it: the launch
        across its nodes, health and the ladder on its head (stages/replica_serve.py). The
        outcome is every member's; a replica with a member that failed before does not launch,
        and its waiting nodes fail naming that member (then all roll back by their plans)."""
        stage = self.stages[self.kinds.index(kind)]
        waiting = [n for n in nodes if STATE_STAGE.get(NodeState(self.view.node(n).state)) == kind
                   and self.replica_scoped(n, kind)]
        done: set[str] = set()
        for n in waiting:
            if n in done:
                continue
            rep = self.replica_of(n)
            if rep is None:             # (replica_scoped: every waiting node has its replica)
                continue
            members = rep["nodes"]
            here = [m for m in members if m in waiting]
            done.update(here)
            for m in here:
                self.record("stage_started", node=m, stage=kind, name=stage.name)
            absent = [m for m in members if m not in here]
            outcomes: dict[str, StageOutcome] = {}
            if absent:
                why = "; ".join(f"{c} is not changed by the play ({v.facts['no_change']}), so the replica would run "
                                "two drivers" if (v := self.view.node(c)).facts.get("no_change") else
                                f"{c} failed" + (f" at {v.failed_stage}" if v.failed_stage
                                                 else f" ({v.state})") + (f" ({v.reason[:200]})" if v.reason else "")
                                for c in absent)
                reason = f"replica {rep['id']} is not serving: {why}; its nodes are rolled back together"
                outcomes = {m: StageOutcome(False, reason, {"replica": rep["id"], "replica_culprit": absent[0]}, reason)
                            for m in here}
            else:
                pre = {m: self.check(m, stage, "pre") for m in here}
                bad = [m for m in here if not pre[m][0]]
                if bad:
                    reason = f"replica {rep['id']}: {bad[0]}: {pre[bad[0]][1]}"
                    outcomes = {m: StageOutcome(False, pre[m][1] if m in bad else reason, logs=reason) for m in here}
                else:
                    try:
                        outcomes = self._serve_replica(rep, stage)
                    except GateInterrupted:
                        return              # stopped while a person was asked: resume runs it again
            # the node that caused a failure first: its triage is the others'
            for m in sorted(here, key=lambda m: outcomes[m].facts.get("replica_culprit") != m):
                self.finish_stage(m, stage, outcomes[m])
            for m in here:
                self.transition(m, Event.PASSED if self._last_stage_passed(m, kind) else Event.FAILED)

    def _serve_replica(self, rep: dict[str, Any], stage: Stage) -> dict[str, StageOutcome]:
        head = rep["nodes"][0]
        try:
            params = self.render_params(stage, head)
            ctx = self.ctx(head, stage, self.folder(stage), params)
            ctx.replica = {**rep, "baselines": {m: dict(self.view.node(m).baseline) for m in rep["nodes"]},
                           "ready_timeout": float(self.playbook.profile.engine_ready_timeout_s)}
            out = STAGES[stage.stage](ctx)
        except (StepFailed, ValueError) as exc:         # the parameters' and the stage's
            out = failed_outcome(exc)
        if out.inconclusive and not out.passed:
            out = self.human_verdict(head, stage, out)      # GateInterrupted: resume asks again
        shared = {k: v for k, v in out.facts.items() if k != "per_node"}
        own = out.facts.get("per_node") or {}
        return {m: replace(out, facts={**shared, **own.get(m, {}), "replica_role": "head" if m == head else "worker"})
                for m in rep["nodes"]}

    def replica_gate(self, nodes: list[str]) -> None:
        """Before uncordon, with a model profile: a replica serves whole or not at all. A node
        goes back into service only when every node of its replica passed all its stages; when
        one failed, the others are failed here (still cordoned) and rolled back by their
        recorded plans, and the reason names the node that caused it."""
        groups = run_plan(self.view).get("groups") or {}
        back = STAGE_TABLES.with_role(RETURNS_TO_SERVICE)
        waiting = {n for n in nodes if STATE_STAGE.get(NodeState(self.view.node(n).state)) == back}
        for rid, members in groups.items():
            here = [n for n in members if n in waiting and n not in self._replica_released]
            if not here:
                continue
            culprits = [n for n in members if n not in waiting]
            if not culprits:
                self._replica_released.update(here)
                continue
            why = "; ".join(f"{c} failed" + (f" at {v.failed_stage}" if (v := self.view.node(c)).failed_stage else "")
                            + (f" ({v.reason[:200]})" if v.reason else "") for c in culprits)
            reason = f"replica {rid} is not serving: {why}; its nodes are rolled back together"
            cause = next((c for c in culprits if c in self.view.nodes and self.view.nodes[c].triage), None)
            for n in here:
                self.record("stage_started", node=n, stage=back, name="replica check")
                if cause:       # its triage is the failed node's, naming it
                    self.record("triage", node=n, stage=back,
                                **caused_by(self.view.nodes[cause].triage or {}, cause, rid).to_dict())
                self.record("stage_done", node=n, stage=back, passed=False, reason=self.redact(reason))
                self.log.warning("replica_failed", node=n, replica=rid, culprits=culprits)
                self.transition(n, Event.ROLLBACK_REQUESTED)

    def stage_gate(self, nodes: list[str], idx: int | None, kind: str, pause: Pause) -> None:
        """A stage's ``pause``: the batch waits before it; a rejection stops the batch."""
        stage = self.stages[self.kinds.index(kind)]
        waiting = [n for n in nodes if STATE_STAGE.get(NodeState(self.view.node(n).state)) == kind]
        reason = pause.reason or f"batch {idx}: approve before '{stage.name}' runs on {', '.join(waiting)}"
        decision = self.gates.pause(f"batch{idx}-before-{kind}", reason, pause.duration, batch=idx, at_stage=kind)
        if decision in ("approved", "timer", "stopped"):
            return
        who = "rejected by a person" if decision == "rejected" else "the window ended"
        self._rejected = (decision, f"{who} at the gate before {kind} in batch {idx}")
        for n in waiting:
            st = NodeState(self.view.node(n).state)
            if (st, Event.HOLD) in self.table:
                self.transition(n, Event.HOLD)          # nothing changed on it yet
            else:
                self.record("stage_done", node=n, stage=kind, passed=False, reason=self._rejected[1])
                self.transition(n, Event.ROLLBACK_REQUESTED)

    def run(self) -> str:
        """The rollout: confirm it, pre-stage, then hand batch after batch, as the batch
        policy picks them, to the part that runs it; the run's end status."""
        plan = run_plan(self.view)
        if not self.gates.run_hooks("confirm_rollout", {"plan": {k: plan.get(k) for k in (
                "hosts", "min_serving", "max_fail_percentage", "fits_window", "playbook_sha256")},
                "batches": [{"index": b["index"], "nodes": b["nodes"]} for b in plan["batches"]]}, "run"):
            return self.halt("hook", "the confirm_rollout hook did not confirm the rollout", None)
        if self.playbook.play.prestage is not None and self.in_place:
            why = prestage.run(self, [n for b in plan["batches"] if self.view.batches[b["index"]]["status"]
                                      == "not_started" for n in b["nodes"]])
            if why:
                return self.halt("prestage", why, None)
        position = 0
        while (nxt := self.policy.next(self.view, position, self.clock.now)) is not None:
            if isinstance(nxt, Halt):
                return self.halt(nxt.kind, nxt.reason, nxt.batch)
            position = nxt.position + 1
            stop = self.run_next(nxt)
            if stop:
                return stop
        return self.finish("completed" if self.in_place else "no_change")

    def run_next(self, nxt: NextBatch) -> str | None:
        """One batch as the policy decided it; None to go on, else the run's end."""
        batch, idx = nxt.batch, nxt.index
        if nxt.action == "window":
            return self.run_window(batch, run_plan(self.view).get("policy") or {})
        if nxt.action == "replay":
            # what a stop right after the batch left undone: its post_batch hooks (a hook
            # that completed is not called again) and its gate
            b = self.view.batches[idx]
            self.post_batch(idx, batch["nodes"], b["status"], b["failed"])
            return self.after_batch_gate(idx)
        if nxt.action == "start":
            if not self.gates.run_hooks("pre_batch", {"batch": idx, "nodes": batch["nodes"]}, f"batch{idx}"):
                return self.halt("hook", f"a pre_batch hook refused batch {idx}", idx)
            self.record("batch_started", batch=idx, nodes=batch["nodes"])
            self.log.info("batch_started", batch=idx, nodes=batch["nodes"])
        self.run_batch(batch["nodes"], idx)
        if self.stopping.is_set() and self.view.batches[idx]["status"] == "running" and \
                any(STATE_STAGE.get(NodeState(self.view.node(n).state)) for n in batch["nodes"]):
            raise KeyboardInterrupt      # SIGTERM while waiting at a gate: resume continues here
        status, failed, halt = self.policy.verdict(self.view, batch)
        self.record("batch_done", batch=idx, status=status, failed=failed)
        self.log.info("batch_done", batch=idx, status=status, failed=failed)
        self.post_batch(idx, batch["nodes"], status, failed)
        if self._rejected:
            return self.halt(*self._rejected, idx)
        if halt:
            return self.halt(halt[0], halt[1], idx)
        over = self.over_budget()
        if over:
            return self.halt("failure_budget", over, idx)
        return self.after_batch_gate(idx)

    def run_window(self, batch: dict[str, Any], policy: dict[str, Any]) -> str | None:
        """The sliding window after the canary batches (engine/window.py); the run's end or None."""
        idx = batch["index"]
        if self.view.batches[idx]["status"] == "not_started" and \
                not self.gates.run_hooks("pre_batch", {"batch": idx, "nodes": batch["nodes"]}, f"batch{idx}"):
            return self.halt("hook", f"a pre_batch hook refused batch {idx}", idx)
        stop = window.run(self, batch, policy)
        if stop:
            return self.halt(stop[0], stop[1], idx)
        over = self.over_budget()
        if over:
            return self.halt("failure_budget", over, idx)
        return None

    def post_batch(self, idx: int, nodes: list[str], status: str, failed: list[str]) -> None:
        self.gates.run_hooks("post_batch", {"batch": idx, "nodes": nodes, "status": status, "failed": failed}, f"batch{idx}")

    def after_batch_gate(self, idx: int) -> str | None:
        """The play's pause after batch ``idx``, if any: None to go on, else the run's end."""
        gate = next((p for p in self.playbook.play.pauses if p.after_batch == idx), None)
        if gate is None or idx >= len(run_plan(self.view)["batches"]):
            return None
        decision = self.gates.pause(f"after-batch{idx}", gate.reason or f"batch {idx} done: approve to start batch "
                              f"{idx + 1}", gate.duration, batch=idx)
        if decision == "stopped":
            raise KeyboardInterrupt
        if decision in ("rejected", "window"):
            who = "rejected by a person" if decision == "rejected" else "window ended"
            return self.halt(decision, f"{who} at the gate after batch {idx}", idx)
        return None

    def halt(self, kind: str, reason: str, batch: int | None) -> str:
        self.record("run_halted", kind=kind, reason=self.redact(reason), batch=batch)
        self.log.error("run_halted", kind=kind, reason=reason)
        return self.finish("halted")

    def finish(self, status: str) -> str:
        self.record("run_finished", status=status)
        return status

    # ------------------------------------------------------------------ the policy, as window.py asks it

    def over_budget(self) -> str | None:
        """Why the rollout-wide failure budget is spent, or None (``BatchPolicy.over_budget``)."""
        return self.policy.over_budget(self.view)

    def capacity_short(self, nodes: list[str], what_for: str, extra_out: Iterable[str] = frozenset()) -> str | None:
        """Why taking ``nodes`` out of service now would cross the capacity floor, or None."""
        return self.policy.capacity_short(self.view, nodes, what_for, extra_out)
