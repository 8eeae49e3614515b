"""Fold journal records into the state of a run. Pure: records in, a RunView out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BASELINE_STAGE = "baseline"       # the journal's name for the stage that records the baseline


@dataclass
class NodeView:
    name: str
    batch: int | None = None
    state: str = "pending"
    stage: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    entered: list[str] = field(default_factory=list)
    failed_stage: str | None = None
    reason: str = ""
    triage: dict[str, Any] | None = None
    rollback_plan: list[dict[str, Any]] | None = None
    rollback_described: list[str] = field(default_factory=list)
    rollback_attempts: int = 0
    rollback_results: list[dict[str, Any]] = field(default_factory=list)
    rollback_reason: str = ""
    rollback_requested_seq: int = 0
    rollback_done_seq: int = 0
    rollback_ok: bool | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)   # stage spans: {stage, start, end, passed}


@dataclass
class RunView:
    run_id: str | None = None
    plan: dict[str, Any] | None = None
    started: str | None = None
    finished: str | None = None
    window_end: float | None = None
    window_end_iso: str | None = None
    status: str = "running"
    halt: dict[str, Any] | None = None
    nodes: dict[str, NodeView] = field(default_factory=dict)
    batches: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps_done: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    steps_started: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    steps_settled: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    step_starts: dict[tuple[str, str], int] = field(default_factory=dict)     # how often each step started
    evidence: list[dict[str, Any]] = field(default_factory=list)
    # the entries of ``evidence`` about the run rather than a node (node ``_run``: preflight,
    # playbook, approvals, hooks), in the same order: a handful among 100,000 at 1,000 nodes
    run_evidence: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0
    manual_rollbacks: list[dict[str, Any]] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    last_ts: str | None = None
    plan_sha256: str | None = None
    approved_plan: str | None = None
    # run_started's preflight record (None: a run from before the preflight was recorded)
    preflight: dict[str, Any] | None = None
    pauses: dict[str, dict[str, Any]] = field(default_factory=dict)     # id -> started/until/decision/by ...
    hooks: dict[str, dict[str, Any]] = field(default_factory=dict)      # id -> name/ok/detail/evidence
    # ``k3rollout observe`` passes after the run (they never change the run's own state)
    observations: list[dict[str, Any]] = field(default_factory=list)
    observation_stops: list[dict[str, Any]] = field(default_factory=list)

    def node(self, name: str) -> NodeView:
        if name not in self.nodes:
            self.nodes[name] = NodeView(name)
        return self.nodes[name]


def fold(records: list[dict[str, Any]]) -> RunView:
    v = RunView()
    for r in records:
        apply(v, r)
    return v


def apply(v: RunView, r: dict[str, Any]) -> None:
    """Apply one record to the view (the engine calls this for each record it appends)."""
    t = r["type"]
    v.last_ts = r.get("ts", v.last_ts)
    # the commonest records first: three in four are a step's start or end
    if t == "step_started":
        key = (r["node"], r["key"])
        v.step_starts[key] = v.step_starts.get(key, 0) + 1
        if r.get("once"):
            # only destructive steps are replayed or settled on resume; read-only ones are
            # not kept here (at 1,000 nodes they would be most of the view's memory)
            v.steps_started[key] = r
        return
    if t == "step_done":
        if r.get("once"):
            v.steps_done[(r["node"], r["key"])] = r
        if r.get("evidence"):
            e = {"node": r["node"], "stage": r["stage"], "path": r["evidence"], "sha256": r["sha256"], "step": r["step"]}
            v.evidence.append(e)          # as _evidence() does, on the commonest record
            if e["node"] == "_run":
                v.run_evidence.append(e)
        return
    n = v.node(r["node"]) if "node" in r and r["node"] else None
    if t == "run_started":
        v.run_id, v.plan, v.started = r["run_id"], r["plan"], r["ts"]
        v.plan_sha256, v.approved_plan = r.get("plan_sha256"), r.get("approved_plan")
        v.window_end, v.window_end_iso = r.get("window_end"), r.get("window_end_iso")
        for b in r["plan"]["batches"]:
            v.batches[b["index"]] = {"index": b["index"], "nodes": list(b["nodes"]), "status": "not_started",
                                     "started": None, "finished": None, "failed": [], "rollback_ran": False}
            for node in b["nodes"]:
                v.node(node).batch = b["index"]
        pre = v.preflight = r.get("preflight")
        if pre and pre.get("evidence"):
            _evidence(v, {"node": "_run", "stage": "preflight", "path": pre["evidence"],
                               "sha256": pre.get("evidence_sha256"), "step": "preflight"})
        if r.get("playbook_evidence"):
            _evidence(v, {"node": "_run", "stage": "inputs", "path": r["playbook_evidence"],
                               "sha256": r.get("playbook_evidence_sha256"), "step": "playbook"})
    elif t == "run_resumed":
        v.resumes += 1
        v.status = "running"
    elif t == "batch_started":
        v.batches[r["batch"]].update(status="running", started=r["ts"])
    elif t == "node_state":
        assert n is not None             # records.check refuses a node record without a node
        n.state = r["to"]
        if r["to"] == "rollback-required":
            n.rollback_requested_seq = r["seq"]
        if r.get("stage"):
            n.stage = r["stage"]
    elif t == "stage_started":
        assert n is not None             # records.check refuses a node record without a node
        if r["stage"] not in n.entered:
            n.entered.append(r["stage"])
        n.stage = r["stage"]
        n.timeline.append({"stage": r["stage"], "start": r["ts"], "end": None, "passed": None})
    elif t == "stage_done":
        assert n is not None             # records.check refuses a node record without a node
        for span in reversed(n.timeline):
            if span["stage"] == r["stage"] and span["end"] is None:
                span.update(end=r["ts"], passed=r["passed"])
                break
        if not r["passed"]:
            n.failed_stage, n.reason = r["stage"], r.get("reason", "")
    elif t == "facts":
        assert n is not None             # records.check refuses a node record without a node
        n.facts.update(r["facts"])
        # the facts of the stage kind that records the baseline (its role in model/playbook.py's
        # STAGE_KINDS; tests/unit/test_stage_roles.py holds the two together): named here, as
        # the journal names it, so that the fold, which `watch` runs, loads no models
        if r["stage"] == BASELINE_STAGE:
            n.baseline.update(r["facts"])
    elif t == "triage":
        assert n is not None             # records.check refuses a node record without a node
        n.triage = {k: r[k] for k in ("category", "evidence", "reasons", "next_steps", "stage", "confidence",
                                      "runner_up", "scores", "candidates", "contributions", "caused_by") if k in r}
    elif t == "rollback_plan":
        assert n is not None             # records.check refuses a node record without a node
        n.rollback_plan, n.rollback_described = r["steps"], r.get("described", [])
    elif t == "rollback_started":
        assert n is not None             # records.check refuses a node record without a node
        n.rollback_attempts = r["attempt"]
        n.rollback_reason = r.get("reason", "")
        n.timeline.append({"stage": "rollback", "start": r["ts"], "end": None, "passed": None})
    elif t == "rollback_done":
        assert n is not None             # records.check refuses a node record without a node
        n.rollback_results = r["results"]
        n.rollback_done_seq, n.rollback_ok = r["seq"], r["ok"]
        for span in reversed(n.timeline):
            if span["stage"] == "rollback" and span["end"] is None:
                span.update(end=r["ts"], passed=r["ok"])
                break
        if n.batch in v.batches:
            v.batches[n.batch]["rollback_ran"] = True
    elif t == "step_settled":
        v.steps_settled[(r["node"], r["key"])] = r
        if r["took_effect"]:
            v.steps_done[(r["node"], r["key"])] = {**r, "rc": 0}
    elif t == "evidence":
        _evidence(v, {"node": r["node"], "stage": r["stage"], "path": r["path"], "sha256": r["sha256"],
                           "step": r.get("name")})
    elif t == "batch_done":
        v.batches[r["batch"]].update(status=r["status"], finished=r["ts"], failed=r.get("failed", []))
    elif t == "batch_rolled_back":
        v.batches[r["batch"]].update(status="rolled_back")
        v.manual_rollbacks.append({"batch": r["batch"], "ts": r["ts"], "ok": r.get("ok")})
    elif t == "run_halted":
        v.halt = {"reason": r["reason"], "kind": r["kind"], "ts": r["ts"]}
    elif t == "run_finished":
        v.status, v.finished = r["status"], r["ts"]
    elif t == "journal_repaired":
        v.repaired.append(r["torn_bytes_file"])
    elif t == "pause_started":
        v.pauses[r["pause"]] = {"id": r["pause"], "started": r["ts"], "reason": r.get("reason", ""),
                                "until": r.get("until"), "until_iso": r.get("until_iso"), "batch": r.get("batch"),
                                "stage": r.get("at_stage"), "node": r.get("for_node"), "decision": None}
    elif t == "pause_resolved":
        p = v.pauses.setdefault(r["pause"], {"id": r["pause"]})
        p.update(decision=r["decision"], by=r.get("by"), note=r.get("note"), resolved=r["ts"],
                 evidence=r.get("evidence"))
        if r.get("evidence"):
            _evidence(v, {"node": "_run", "stage": "approvals", "path": r["evidence"], "sha256": r["sha256"],
                               "step": f"approval {r['pause']}"})
    elif t == "observation":
        v.observations.append(r)
    elif t == "observation_stopped":
        v.observation_stops.append(r)
    elif t == "hook_started":
        v.hooks[r["hook"]] = {"id": r["hook"], "name": r["name"], "target": r.get("target"), "started": r["ts"],
                              "done": False}
    elif t == "hook_done":
        v.hooks.setdefault(r["hook"], {"id": r["hook"], "name": r["name"]}).update(
            done=True, ok=r["ok"], detail=r.get("detail"), finished=r["ts"], evidence=r.get("evidence"))
        if r.get("evidence"):
            _evidence(v, {"node": "_run", "stage": "hooks", "path": r["evidence"], "sha256": r["sha256"],
                               "step": f"hook {r['hook']}"})


def _evidence(v: RunView, entry: dict[str, Any]) -> None:
    v.evidence.append(entry)
    if entry["node"] == "_run":
        v.run_evidence.append(entry)
