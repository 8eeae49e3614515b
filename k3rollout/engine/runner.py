"""The rollout engine: batches and the per-node state machine, handed to the parts it holds.

- ``Recorder`` (engine/recorder.py): journal first, every transition, step and fact is
  appended (and fsynced) before the side effect starts and again after it ends; the
  engine's own state is the fold of its journal (``runlog.view``), so a resumed run and a
  fresh one decide from the same data.
- ``StepRunner`` (engine/steps.py): what a stage gets as ``ctx.runner``.
- ``Gates`` (engine/gates.py): pauses for a person, and hooks.
- ``BatchPolicy`` (engine/policy.py): the next batch or a halt, a batch's verdict, the
  failure budget and the capacity floor, decided from the view alone.
- ``RollbackExecutor`` (engine/rollback.py): a node's recorded rollback plan, and an
  operator's rollback of whole batches.
- ``PreStaging`` (engine/prestage.py) before the first batch, and ``SlidingWindow``
  (engine/window.py) after the canary batches.
- the walkers (engine/walkers): one per stage scope (node, replica, batch).

Per batch: every node walks its stages in parallel (``forks``) up to a stage its replica
or its batch runs (the multinode stage runs once for the batch), which the walker of that
stage kind's scope runs; then the nodes go on; then nodes that failed are rolled back by
their recorded plan. The batch verdict is checked against ``max_fail_percentage``
(Ansible's rule: halt when failed/batch > the percentage), and a rollback that itself
failed always halts. Before a batch starts, the window and the
capacity floor are checked against the batch's estimate plus its rollback estimate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from k3rollout.engine.clock import Clock
from k3rollout.engine.gates import Gates
from k3rollout.engine.policy import BatchPolicy, Halt, NextBatch
from k3rollout.engine.pool import run_each
from k3rollout.engine.prestage import PreStaging
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.engine.rollback import RollbackExecutor
from k3rollout.engine.states import STATE_STAGE, Event, NodeState, build_table
from k3rollout.engine.steps import StepRunner
from k3rollout.engine.walkers.batch import BatchWalker
from k3rollout.engine.walkers.node import BeforeCordon, NodeWalker
from k3rollout.engine.walkers.replica import ReplicaWalker
from k3rollout.engine.walkers.scopes import GroupWalker, Scopes, waiting_at
from k3rollout.engine.walkers.verdicts import StageVerdicts
from k3rollout.engine.window import SlidingWindow
from k3rollout.evidence.redact import mask_credentials
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.assertions import render, template_context, templated
from k3rollout.model.inventory import Inventory
from k3rollout.model.playbook import (
    PARAMS_BY_KIND,
    STAGE_TABLES,
    Pause,
    Playbook,
    Stage,
    play_vars,
)
from k3rollout.model.stagekinds import RETURNS_TO_SERVICE, TAKES_OUT_OF_SERVICE, Scope
from k3rollout.plan.planner import out_of_service_before
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.view import RunView
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.registry import SPECS
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


class Engine:
    """A rollout: the recorder (journal and view), the step runner (``ctx.runner`` for every
    stage), the gates and hooks, the batch policy, the rollback executor, the walkers, the
    pre-staging and the sliding window, held and handed each its part of the work. What stays here is the loop over batches and,
    within a batch, over the stages its nodes wait before: which walker runs one, and the
    pauses a batch waits at."""

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
        self._param_templates: dict[int, tuple[dict[str, Any], list[str]]] = {}   # stage parameters: dump, templated keys
        self._rejected: tuple[str, str] | None = None   # (rejected|window, why) a gate stopped the rollout
        # the walk of a batch's nodes through their stages, one walker per stage scope
        # (engine/walkers): which one runs a node's stage is its kind's scope's (``Scopes``)
        self.scopes = Scopes(self.view)
        self.verdicts = StageVerdicts(recorder=self.recorder, gates=self.gates,
                                      assertion_context=self.assertion_context, redact=self.redact, log=self.log)

        def make_ctx(node: str, stage: Stage, params: Any) -> NodeCtx:
            return self.ctx(node, stage, self.folder(stage), params)

        self.replica_walker = ReplicaWalker(recorder=self.recorder, verdicts=self.verdicts, scopes=self.scopes,
                                            playbook=playbook, make_ctx=make_ctx, render_params=self.render_params,
                                            redact=self.redact, log=self.log)
        self.batch_walker = BatchWalker(recorder=self.recorder, verdicts=self.verdicts, stages=self.stages,
                                        make_ctx=make_ctx, render_params=self.render_params, policy=self.policy)
        self.node_walker = NodeWalker(recorder=self.recorder, verdicts=self.verdicts, scopes=self.scopes,
                                      playbook=playbook, make_ctx=make_ctx, render_params=self.render_params,
                                      tvars=self.tvars, folder=self.folder, replica_holds=self.replica_walker.holds,
                                      in_place=self.in_place, rollback_owner=self.play_vars.get("rollback_owner"),
                                      evidence=evidence, clock=clock, stopping=self.stopping, redact=self.redact,
                                      log=self.log)
        self.groups: dict[Scope, GroupWalker] = {"replica": self.replica_walker, "batch": self.batch_walker}
        # pre-staging ahead of the batches, while every node still serves
        self.prestaging = PreStaging(recorder=self.recorder, config=play.prestage, run_id=run_id, tvars=self.tvars,
                                     steps=self.steps, stopping=self.stopping, redact=self.redact, log=self.log)
        # the sliding window after the canary batches: each of its nodes a batch of one
        self.window = SlidingWindow(recorder=self.recorder, stages=self.stages,
                                    max_fail_percentage=play.max_fail_percentage, policy=self.policy,
                                    run_batch=self.run_batch, post_batch=self.post_batch, clock=clock,
                                    stopping=self.stopping, log=self.log)

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

    # ------------------------------------------------------------------ batches

    def pool(self, fn: Callable[[str], Any], nodes: list[str]) -> None:
        """``fn`` on every node, ``forks`` at once, in the engine's worker pool (engine/pool.py,
        the one rule for Ctrl-C and SIGTERM): on a stop no new step starts, what is running now
        finishes (or times out) and is journaled, and only then does the caller close the
        journal and the transports."""
        run_each(fn, nodes, workers=self.playbook.play.forks, stopping=self.stopping, name="k3node")

    def walker(self, kind: str) -> GroupWalker:
        """The walker that runs stage ``kind`` for a group of nodes: its kind's scope's."""
        return self.groups[SPECS[kind].kind.scope]

    def run_batch(self, nodes: list[str], idx: int | None = None, before_cordon: BeforeCordon | None = None) -> None:
        """The nodes through their stages: each walks its node-scoped ones (``forks`` at once) up
        to a stage its replica or its batch runs (the walker of that stage's scope runs it), a
        pause, or its replica's return to service; then they roll back by their plans if they
        failed. ``before_cordon`` may hold a node before its cordon (engine/window.py)."""
        held = {s.stage: s.pause for s in self.stages if s.pause}
        # the nodes of a multi-node replica wait before their cordon until all of them are through
        # their baselines, then go out together in the next pass (ReplicaWalker.out_waits)

        def before_out(n: str) -> bool:
            return not self.replica_walker.out_waits(n, nodes) and (before_cordon is None or before_cordon(n))

        while True:
            self.pool(lambda n: self.node_walker.advance(n, held, before_out), nodes)
            if self.stopping.is_set():
                break
            if self.replica_walker.release_out(nodes):
                continue
            at = {STATE_STAGE.get(NodeState(self.view.node(n).state)) for n in nodes}
            gate = next((k for k in self.kinds if k in at and (k in held or any(
                self.scopes.of(n, k) != "node" for n in waiting_at(self.view, nodes, k)))), None)
            back = STAGE_TABLES.with_role(RETURNS_TO_SERVICE)
            if gate is None and back in at and any(self.replica_walker.holds(n) for n in waiting_at(self.view, nodes, back)):
                gate = "replica"
            if gate is None:
                break
            if gate == "replica":
                self.replica_walker.release(nodes)
            elif gate in held:
                self.stage_gate(nodes, idx, gate, held.pop(gate))
            else:
                self.walker(gate).run(nodes, gate)
        need = [n for n in nodes if self.view.node(n).state == NodeState.ROLLBACK_REQUIRED.value]
        self.pool(lambda n: self.rollbacks.rollback(n, self.view.node(n).reason or "stage failed"), need)

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
            why = self.prestaging.run([n for b in plan["batches"] if self.view.batches[b["index"]]["status"]
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
        over = self.policy.over_budget(self.view)
        if over:
            return self.halt("failure_budget", over, idx)
        return self.after_batch_gate(idx)

    def run_window(self, batch: dict[str, Any], policy: dict[str, Any]) -> str | None:
        """The sliding window after the canary batches (engine/window.py); the run's end or None."""
        idx = batch["index"]
        if self.view.batches[idx]["status"] == "not_started" and \
                not self.gates.run_hooks("pre_batch", {"batch": idx, "nodes": batch["nodes"]}, f"batch{idx}"):
            return self.halt("hook", f"a pre_batch hook refused batch {idx}", idx)
        stop = self.window.run(batch, policy)
        if stop:
            return self.halt(stop[0], stop[1], idx)
        over = self.policy.over_budget(self.view)
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
