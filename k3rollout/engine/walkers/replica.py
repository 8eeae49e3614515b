"""A serving stage once per multi-node replica, and a replica's return to service whole."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from k3rollout.checks.triage import caused_by
from k3rollout.engine.outcome import failed_outcome
from k3rollout.engine.recorder import Recorder, run_plan
from k3rollout.engine.states import STAGE_STATE, Event, NodeState
from k3rollout.engine.walkers.base import Walker
from k3rollout.engine.walkers.scopes import Scopes, waiting_at
from k3rollout.engine.walkers.verdicts import GateInterrupted, StageVerdicts
from k3rollout.errors import StepFailed
from k3rollout.model.playbook import STAGE_TABLES, Playbook, Stage
from k3rollout.model.stagekinds import RETURNS_TO_SERVICE, TAKES_OUT_OF_SERVICE
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.registry import STAGES


class ReplicaWalker(Walker):
    """Built from the recorder, the stage verdicts, the scopes, the playbook (its stages and
    model profile), ``make_ctx(node, stage, params)``, ``render_params(stage, node)``, the
    redactor and the log. It keeps which nodes' replicas returned to service whole."""

    def __init__(self, *, recorder: Recorder, verdicts: StageVerdicts, scopes: Scopes, playbook: Playbook,
                 make_ctx: Callable[[str, Stage, Any], NodeCtx], render_params: Callable[[Stage, str], Any],
                 redact: Callable[[str], str], log: Any):
        super().__init__(recorder=recorder, verdicts=verdicts, stages=playbook.stages, make_ctx=make_ctx,
                         render_params=render_params)
        self.scopes = scopes
        self.playbook = playbook
        self.redact = redact
        self.log = log
        self.released: set[str] = set()     # nodes whose whole replica reached uncordon
        self.out_released: set[str] = set()     # replicas whose nodes may be taken out (release_out)

    def out_waits(self, node: str, nodes: list[str]) -> bool:
        """Whether ``node`` waits before it is taken out of service for the rest of its replica
        (the other nodes of it in ``nodes``, its batch), until ``release_out`` lets the replica's
        nodes go out together. Taking one node of a multi-node replica out takes the replica's
        serving group down (a LeaderWorkerSet deletes and recreates its group whole), so every
        node's baseline must have seen the replica serving first: evidence from before anything
        changed."""
        rid = self._replica_in(node, nodes)
        return rid is not None and rid not in self.out_released

    def release_out(self, nodes: list[str]) -> bool:
        """After a pass of the batch's walks: the replicas whose nodes in ``nodes`` are all
        through the stages before their take-out may go out (together, in the next pass).
        True when one was let go."""
        i = STAGE_TABLES.index(self.kinds, TAKES_OUT_OF_SERVICE)
        if i is None:
            return False
        # the states of a node not yet through the stages before its take-out
        before = {NodeState.PENDING.value, *(STAGE_STATE[k].value for k in self.kinds[:i])}
        batch = set(nodes)
        let = False
        for rid, members in (run_plan(self.view).get("groups") or {}).items():
            here = [m for m in members if m in batch]
            if rid not in self.out_released and len(here) > 1 and \
                    not any(self.view.node(m).state in before for m in here):
                self.out_released.add(rid)
                let = True
        return let

    def _replica_in(self, node: str, nodes: list[str]) -> str | None:
        """The replica of ``node`` when another node of it is in ``nodes``."""
        for rid, members in (run_plan(self.view).get("groups") or {}).items():
            if node in members:
                return rid if any(m != node and m in nodes for m in members) else None
        return None

    def holds(self, node: str) -> bool:
        """Whether ``node`` waits before its return to service for its replica (``release``)."""
        return bool(run_plan(self.view).get("replicas")) and node not in self.released

    def run(self, nodes: list[str], kind: str) -> None:
        """A serving stage once per multi-node replica whose nodes all wait before it: the launch
        across its nodes, health and the ladder on its head (stages/replica_serve.py). The
        outcome is every member's; a replica with a member that failed before does not launch,
        and its waiting nodes fail naming that member (then all roll back by their plans)."""
        stage = self.stages[self.kinds.index(kind)]
        waiting = [n for n in waiting_at(self.view, nodes, kind) if self.scopes.of(n, kind) == "replica"]
        done: set[str] = set()
        for n in waiting:
            if n in done:
                continue
            rep = self.scopes.replica_of(n)
            if rep is None:             # (scoped to a replica: every waiting node has its replica)
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
                pre = {m: self.verdicts.check(m, stage, "pre") for m in here}
                bad = [m for m in here if not pre[m][0]]
                if bad:
                    reason = f"replica {rep['id']}: {bad[0]}: {pre[bad[0]][1]}"
                    outcomes = {m: StageOutcome(False, pre[m][1] if m in bad else reason, logs=reason) for m in here}
                else:
                    try:
                        outcomes = self.serve(rep, stage)
                    except GateInterrupted:
                        return              # stopped while a person was asked: resume runs it again
            # the node that caused a failure first: its triage is the others'
            for m in sorted(here, key=lambda m: outcomes[m].facts.get("replica_culprit") != m):
                self.verdicts.finish(m, stage, outcomes[m])
            for m in here:
                self.transition(m, Event.PASSED if self.verdicts.last_passed(m, kind) else Event.FAILED)

    def serve(self, rep: dict[str, Any], stage: Stage) -> dict[str, StageOutcome]:
        """The stage on the replica's head, for all its nodes: an outcome per member."""
        head = rep["nodes"][0]
        try:
            params = self.render_params(stage, head)
            ctx = self.make_ctx(head, stage, params)
            ctx.replica = {**rep, "baselines": {m: dict(self.view.node(m).baseline) for m in rep["nodes"]},
                           "ready_timeout": float(self.playbook.profile.engine_ready_timeout_s)}
            out = STAGES[stage.stage](ctx)
        except (StepFailed, ValueError) as exc:         # the parameters' and the stage's
            out = failed_outcome(exc)
        if out.inconclusive and not out.passed:
            out = self.verdicts.human_verdict(head, stage, out)      # GateInterrupted: resume asks again
        shared = {k: v for k, v in out.facts.items() if k != "per_node"}
        own = out.facts.get("per_node") or {}
        return {m: replace(out, facts={**shared, **own.get(m, {}), "replica_role": "head" if m == head else "worker"})
                for m in rep["nodes"]}

    def release(self, nodes: list[str]) -> None:
        """Before uncordon, with a model profile: a replica serves whole or not at all. A node
        goes back into service only when every node of its replica passed all its stages; when
        one failed, the others are failed here (still cordoned) and rolled back by their
        recorded plans, and the reason names the node that caused it."""
        groups = run_plan(self.view).get("groups") or {}
        back = STAGE_TABLES.with_role(RETURNS_TO_SERVICE)
        waiting = set(waiting_at(self.view, nodes, back))
        for rid, members in groups.items():
            here = [n for n in members if n in waiting and n not in self.released]
            if not here:
                continue
            culprits = [n for n in members if n not in waiting]
            if not culprits:
                self.released.update(here)
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
