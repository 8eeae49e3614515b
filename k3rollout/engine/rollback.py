"""The rollback executor: a node's recorded rollback plan, run when a stage failed, and an
operator's rollback of whole batches (``k3rollout rollback``).

A node's plan was recorded at its baseline, before anything changed (stages/rollback.py
builds and executes it). An operator's rollback is a rollout in reverse: batch by batch in
the order asked, within a batch in waves that never take serving capacity below
``min_serving`` (the batch policy's ``capacity_short``), each node in service cordoned and
drained first through the run's cordon stage. Its request and plan are journaled, and kept
as evidence, before anything changes, so ``resume`` finishes an interrupted one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from k3rollout import fastjson
from k3rollout.engine.outcome import failed_outcome
from k3rollout.engine.policy import BatchPolicy
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.engine.states import AFTER_CHANGE_STATES, STAGE_STATE, Event, NodeState
from k3rollout.engine.steps import StepRunner
from k3rollout.errors import StepFailed
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.playbook import STAGE_TABLES
from k3rollout.model.stagekinds import TAKES_OUT_OF_SERVICE
from k3rollout.runlog.view import RunView
from k3rollout.stages import rollback as rb
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.registry import STAGES

# steps of the driver stage that change the node's driver: the inline vendor steps, the
# vendor task file and the reboot. What the stage does before them (reads, releasing holds,
# stopping the services that hold the GPU) is put back without a driver restore.
_CHANGING_STEPS = ("vendor-step-", "vendor-tasks", "reboot")


def driver_untouched(view: RunView, node: str) -> str | None:
    """Why the journal proves the driver stage changed nothing on ``node`` (no install and no
    reboot step started; a vendor task file that ended with no task reporting a change), or
    None. Then its rollback restores no driver: it starts again what the stage stopped and
    returns the node to service as it was (issue #33 item 7)."""
    n = view.node(node)
    if "driver_upgrade" not in n.entered:
        return None
    started = [key.split("/", 1)[1] for (host, key) in view.step_starts
               if host == node and key.split("/", 1)[0].endswith("-driver_upgrade")]
    changing = [s for s in started if s.startswith(_CHANGING_STEPS)]
    proof = []
    for name in changing:
        if name != "vendor-tasks":
            return None
        done = next((r for (host, key), r in view.steps_done.items()
                     if host == node and key.endswith("-driver_upgrade/vendor-tasks")), None)
        if done is None or done.get("unreachable") or done.get("rc", 1) == 0 or "changed_tasks" not in done \
                or done["changed_tasks"]:
            return None
        proof.append(f"its vendor tasks failed at {done.get('failed_task')!r} with no task reporting a change")
    return "; ".join(["the journal shows no install or reboot step of the driver stage started"
                      if not proof else "no install or reboot ran", *proof])


class RollbackExecutor:
    """Built from the recorder, the step runner, the batch policy (capacity), the hooks
    (``run_hooks``), the engine's worker pool (``pool``), a ``make_ctx(node, folder)`` for a
    node's rollback context, ``cordon_params(node)`` (the run's cordon stage parameters,
    rendered for the node), the evidence store, the clock, the stop flag and the redactor."""

    def __init__(self, *, recorder: Recorder, steps: StepRunner, policy: BatchPolicy,
                 run_hooks: Callable[[str, dict[str, Any], str], bool], pool: Callable[[Callable[[str], Any], list[str]], None],
                 make_ctx: Callable[[str, str], NodeCtx], cordon_params: Callable[[str], Any],
                 evidence: EvidenceStore, clock: Any, stopping: threading.Event, redact: Callable[[str], str],
                 log: Any):
        self.recorder = recorder
        self.record = recorder.record
        self.view = recorder.view
        self.steps = steps
        self.policy = policy
        self.run_hooks = run_hooks
        self.pool = pool
        self.make_ctx = make_ctx
        self.cordon_params = cordon_params
        self.evidence = evidence
        self.clock = clock
        self.stopping = stopping
        self.redact = redact
        self.log = log
        self.halt_reason: str | None = None     # why an operator rollback stopped short (capacity)

    # ------------------------------------------------------------------ one node

    def rollback(self, node: str, reason: str, take_out: bool = False) -> bool:
        """Run the node's recorded rollback plan. ``take_out``: the node may be in service
        (an operator's rollback of a node the run returned): cordon and drain it first,
        with the cordon stage the run uses; a node that cannot be drained is not touched."""
        n = self.view.node(node)
        if n.rollback_done_seq > n.rollback_requested_seq:
            # the rollback ran to its end before a crash; only its transition is missing
            self.recorder.transition(node, Event.ROLLBACK_DONE if n.rollback_ok else Event.ROLLBACK_FAILED)
            return bool(n.rollback_ok)
        mid = n.timeline and n.timeline[-1]["stage"] == "rollback" and n.timeline[-1]["end"] is None
        attempt = n.rollback_attempts if mid else n.rollback_attempts + 1
        if not mid:
            self.record("rollback_started", node=node, attempt=attempt, reason=self.redact(reason))
        self.log.warning("rollback_started", node=node, reason=reason)
        ctx = self.make_ctx(node, f"rollback-{attempt}")
        if n.rollback_plan is None:
            ok, results = False, [{"action": "none", "status": "failed", "detail": "no rollback plan was recorded"}]
        else:
            # a node that failed mid-reboot may still be booting: give it its reboot timeout
            patience = max([float(s["reboot_timeout"]) for s in n.rollback_plan if "reboot_timeout" in s] or [60.0])
            try:
                self.steps.wait_for_host(ctx, patience)
                drained = self.take_out_of_service(ctx) if take_out else None
                if drained is not None and drained["status"] == "failed":
                    ok, results = False, [drained, {"action": "rollback", "status": "skipped", "detail":
                                                    "the node could not be drained: nothing was restored"}]
                else:
                    ok, results = rb.execute(ctx, n.rollback_plan, set(n.entered),
                                             untouched=self.recorder.read(lambda v: driver_untouched(v, node)))
                    results = ([drained] if drained else []) + results
            except StepFailed as exc:
                ok, results = False, [{"action": "reach_host", "status": "failed", "detail": str(exc)}]
                # what needs only the scheduler still runs: a node that never came back is quarantined
                results += rb.unreachable(ctx, n.rollback_plan)
        try:
            after = ctx.read_gpu()
        except StepFailed as exc:
            after = {"driver_version": None, "gpu_error": str(exc)}
        self.record("facts", node=node, stage="rollback", facts={
            "driver_version": after.get("driver_version"), "driver_branch": after.get("driver_branch"),
            "gpu_count": after.get("gpu_count"), "gpu_error": after.get("gpu_error")})
        self.record("rollback_done", node=node, attempt=attempt, ok=ok, results=results)
        self.recorder.transition(node, Event.ROLLBACK_DONE if ok else Event.ROLLBACK_FAILED)
        if not ok:
            self.log.error("rollback_failed", node=node, results=results)
        self.run_hooks("on_rollback", {"node": node, "batch": n.batch, "ok": ok, "reason": self.redact(reason),
                                       "results": results, "quarantined": any(
                                           r["action"] == "quarantine" and r["status"] == "done" for r in results)},
                       f"{node}-{attempt}")
        return ok

    def take_out_of_service(self, ctx: NodeCtx) -> dict[str, Any]:
        """Cordon and drain a node before its rollback changes anything, through the cordon
        stage of the run (its drain step is a ``once`` step of the rollback's folder: never
        run twice, settled by its probe after a crash). A node the scheduler already holds
        out of service is left as it is."""
        if (ctx.node, f"{ctx.folder}/drain") not in self.view.steps_started:
            state = ctx.read_scheduler()
            if state in ("cordoned", "drained"):
                return {"action": "cordon", "status": "not_needed", "detail": f"already out of service ({state})"}
        try:
            params = self.cordon_params(ctx.node)
            out = STAGES[STAGE_TABLES.with_role(TAKES_OUT_OF_SERVICE)](replace(ctx, params=params))
        except ValueError as exc:        # its parameters, or output it did not parse (a StepFailed goes on)
            out = failed_outcome(exc, parameters="cordon stage parameters")
        if not out.passed:
            return {"action": "cordon", "status": "failed", "detail": f"{out.reason}: node kept cordoned"}
        return {"action": "cordon", "status": "done", "detail": out.reason or "cordoned and drained"}

    def rolling_back(self) -> set[str]:
        """Nodes this run holds out of service: between a rollback's request and its end,
        or stopped mid-stage after their cordon (a halted or interrupted batch)."""
        held = {NodeState.ROLLBACK_REQUIRED.value} | {st.value for st in AFTER_CHANGE_STATES}
        return {n for n, v in self.view.nodes.items() if v.state in held}

    # ------------------------------------------------------------------ an operator's rollback

    def pending_operator_rollback(self) -> list[int] | None:
        """The batches of an operator's rollback that was interrupted (resume finishes it)."""
        for r in reversed(self.recorder.journal.records):
            if r["type"] == "operator_rollback_finished":
                return None
            if r["type"] == "operator_rollback":
                return [b["batch"] for b in r["batches"]]
        return None

    def _todo(self, idx: int) -> list[str]:
        """The batch's nodes the run changed, or may have: not those it never reached, and
        not one held right before its cordon (a sliding window that stopped while the node
        waited for a slot: only its read-only baseline ran, and it still serves; draining
        it to "roll back" nothing would only take capacity away)."""
        skip = (NodeState.PENDING, NodeState.ROLLED_BACK, NodeState.FAILED, NodeState.SKIPPED,
                NodeState.BASELINE_REQUIRED)

        def untouched(n: str) -> bool:
            v = self.view.node(n)
            out = STAGE_TABLES.with_role(TAKES_OUT_OF_SERVICE)
            return v.state == STAGE_STATE[out].value and out not in v.entered

        return [n for n in self.view.batches[idx]["nodes"]
                if NodeState(self.view.node(n).state) not in skip and not untouched(n)]

    def _capacity_short(self, nodes: list[str], what_for: str) -> str | None:
        return self.policy.capacity_short(self.view, nodes, what_for, self.rolling_back())

    def rollback_batches(self, batches: list[int], *, resumed: bool = False) -> bool:
        """Operator-requested rollback of whole batches, by the recorded plans: a rollout in
        reverse. Batch by batch in the order given; within a batch, waves that never take
        the serving capacity below ``min_serving``; each node in service is cordoned and
        drained before its rollback changes anything. The request and its plan are
        journaled (and kept as evidence) first, so ``resume`` finishes an interrupted one."""
        self.halt_reason = None
        if resumed:
            self.record("operator_rollback_resumed", batches=batches)
        else:
            out = self.policy.out_of_service(self.view)
            plan = {"requested_at": self.clock.iso(), "min_serving": run_plan(self.view)["min_serving"],
                    "order": "batch by batch as listed; within a batch, waves that keep min_serving; each node in "
                             "service is cordoned and drained first, then its recorded rollback plan runs",
                    "batches": [{"batch": i, "nodes": self._todo(i),
                                 "in_service": [n for n in self._todo(i) if n not in out
                                                and self.view.node(n).state == NodeState.UPGRADE_DONE.value],
                                 "rollback_estimate_s": next((b["rollback_estimate_s"] for b in
                                                              run_plan(self.view)["batches"] if b["index"] == i), None)}
                                for i in batches]}
            k = 1 + sum(1 for r in self.recorder.journal.records if r["type"] == "operator_rollback")
            ref = self.evidence.write("_run", "rollback", f"operator-rollback-{k}.json", fastjson.dumps_pretty(plan))
            self.record("operator_rollback", batches=plan["batches"], min_serving=plan["min_serving"],
                        evidence=ref.path, sha256=ref.sha256)
        ok_all = True
        for idx in batches:
            todo = self._todo(idx)
            done: list[str] = []
            results: dict[str, bool] = {}
            while todo and not self.stopping.is_set():
                wave: list[str] = []
                already_out = self.policy.out_of_service(self.view) | self.rolling_back()
                for n in todo:
                    # a node already out of service costs no capacity; one in service joins
                    # the wave only while the floor holds
                    if n in already_out or self._capacity_short(
                            wave + [n], f"rolling back {', '.join(wave + [n])} of batch {idx}") is None:
                        wave.append(n)
                if not wave:
                    why = self._capacity_short(todo[:1], f"rolling back {todo[0]} of batch {idx}")
                    self.halt_reason = f"{why}; nothing more was changed"
                    self.record("operator_rollback_halted", batch=idx, reason=self.redact(self.halt_reason),
                                remaining=todo)
                    self.log.error("operator_rollback_halted", batch=idx, reason=self.halt_reason)
                    self.record("operator_rollback_finished", ok=False, halted=True)
                    return False
                for n in wave:
                    if NodeState(self.view.node(n).state) != NodeState.ROLLBACK_REQUIRED:
                        self.recorder.transition(n, Event.ROLLBACK_REQUESTED)
                def one(n: str, results: dict[str, bool] = results) -> None:
                    results[n] = self.rollback(n, "operator requested rollback", take_out=True)

                self.pool(one, wave)
                done += wave
                todo = [n for n in todo if n not in wave]
            if self.stopping.is_set():
                raise KeyboardInterrupt
            ok = all(results.values())
            ok_all &= ok
            self.record("batch_rolled_back", batch=idx, ok=ok, nodes=done)
        self.record("operator_rollback_finished", ok=ok_all)
        if self.view.status == "running":
            self.record("run_finished", status="aborted")
        return ok_all
