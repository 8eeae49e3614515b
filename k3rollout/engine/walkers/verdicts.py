"""A stage's assertions and its outcome, recorded the same way whichever walker ran it:
``pre``/``post`` assertions, facts, triage of a failure, ``stage_done``, and the person
asked when a gate is inconclusive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3rollout.checks.triage import caused_by, classify
from k3rollout.engine.gates import Gates
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.model.assertions import evaluate_all
from k3rollout.model.playbook import STAGE_TABLES, Stage
from k3rollout.stages.base import StageOutcome


class GateInterrupted(Exception):
    """The run was told to stop while a node waited for a person."""


class StageVerdicts:
    """Built from the recorder, the gates (a person's verdict), ``assertion_context(node)``
    (what a node's assertions are evaluated against), the redactor and the log."""

    def __init__(self, *, recorder: Recorder, gates: Gates, assertion_context: Callable[[str], dict[str, Any]],
                 redact: Callable[[str], str], log: Any):
        self.record = recorder.record
        self.view = recorder.view
        self.gates = gates
        self.assertion_context = assertion_context
        self.redact = redact
        self.log = log

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

    def finish(self, node: str, stage: Stage, out: StageOutcome) -> None:
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

    def last_passed(self, node: str, kind: str) -> bool:
        """Whether the node's last run of stage ``kind`` passed (as recorded)."""
        for span in reversed(self.view.node(node).timeline):
            if span["stage"] == kind:
                return bool(span["passed"])
        return False
