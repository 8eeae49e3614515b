"""result.json: the contract other tools read (its fields: docs/guide.md, "The run directory")."""

from __future__ import annotations

from typing import Any

from k3rollout.runlog.view import NodeView, RunView

FINAL = {"upgrade-done": "upgraded", "rolled-back": "rolled_back", "rollback-failed": "rollback_failed",
         "failed": "failed", "skipped": "skipped", "pending": "pending"}


def final_of(state: str) -> str:
    """A node caught mid-flight (a crash before resume) is reported by what it needs next."""
    return FINAL.get(state, "failed" if state == "rollback-required" else "pending")


# a replica serves only when every node of it does; one node that failed (or could not be
# rolled back, or was quarantined) is the replica's failure, whichever node caused it
_REPLICA_FAILED = frozenset({"failed", "rollback_failed", "quarantined"})


def _replicas(v: RunView, nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The serving groups of the plan (a model profile's replicas, or ``group_by``'s groups)
    with what became of each: ``serving`` (every node upgraded, or not touched), ``rolled_back``,
    ``failed``, or ``pending`` (a node of it is mid-change: the run stopped before it finished),
    and the node that caused a failure when the evidence named one."""
    plan = v.plan or {}
    listed = plan.get("replicas") or [{"id": rid, "nodes": members} for rid, members in
                                      (plan.get("groups") or {}).items()]
    out: dict[str, dict[str, Any]] = {}
    for rep in listed:
        members = [n for n in rep["nodes"] if n in nodes]
        finals = {nodes[n]["final"] for n in members}
        in_flight = any(nodes[n]["final"] == "pending" and v.nodes[n].state != "pending" for n in members)
        final = ("failed" if finals & _REPLICA_FAILED else "rolled_back" if "rolled_back" in finals
                 else "pending" if in_flight else "serving")
        culprit = next((v.nodes[n].facts.get("replica_culprit") for n in members
                        if v.nodes[n].facts.get("replica_culprit")), None)
        if culprit is None and final != "serving":
            culprit = next((n for n in members if nodes[n]["failed_stage"] and not
                            str(nodes[n]["reason"] or "").startswith(f"replica {rep['id']}")), None)
        layout = rep.get("layout")
        out[rep["id"]] = {"nodes": list(rep["nodes"]),
                          "layout": ({k: layout.get(k) for k in ("tp", "pp", "dp", "ep", "nnodes")}
                                     if isinstance(layout, dict) else None),
                          "final": final, "caused_by": culprit if final != "serving" else None}
    return out


def _plan_nodes(v: RunView) -> list[NodeView]:
    """The plan's nodes, batch by batch, as the view has them."""
    return [n for n in (v.nodes.get(name) for b in (v.plan or {}).get("batches", []) for name in b["nodes"])
            if n is not None]


def _reason(n: NodeView) -> str | None:
    return n.reason or n.facts.get("no_change") or None


def build_result(v: RunView) -> dict[str, Any]:
    nodes = {}
    for n in _plan_nodes(v):
        name = n.name
        after = n.facts.get("driver_version") if n.state != "pending" else None
        nodes[name] = {
            "final": final_of(n.state), "state": n.state, "batch": n.batch, "replica": None,
            "driver_before": n.baseline.get("driver_version"),
            "driver_after": after,
            "failed_stage": n.failed_stage, "reason": _reason(n),
            # the play left it alone: already on (or past) the target driver (plan/target.py)
            **({"no_change": n.facts["no_change"]} if n.facts.get("no_change") else {}),
            "triage": n.triage["category"] if n.triage else None,
            "rollback": ({"attempts": n.rollback_attempts, "results": n.rollback_results}
                         if n.rollback_attempts else None),
        }
    replicas = _replicas(v, nodes)
    for rid, rep in replicas.items():
        for n in rep["nodes"]:
            if n in nodes:
                nodes[n]["replica"] = rid
    batches = []
    for idx in sorted(v.batches):
        b = v.batches[idx]
        batches.append({
            "index": idx, "nodes": b["nodes"], "status": b["status"],
            "started": b["started"], "finished": b["finished"], "failed_nodes": b["failed"],
            "rollback_ran": b["rollback_ran"],
            "rollback_plan": [{"node": n, "steps": v.nodes[n].rollback_described}
                              for n in b["nodes"] if n in v.nodes and v.nodes[n].rollback_plan is not None],
        })
    return {"run_id": v.run_id, "status": v.status, "started": v.started, "finished": v.finished,
            "halt": v.halt, "window_end": v.window_end_iso, "resumes": v.resumes,
            "playbook": (v.plan or {}).get("playbook"), "playbook_sha256": (v.plan or {}).get("playbook_sha256"),
            "inventory": (v.plan or {}).get("inventory"), "nodes": nodes,
            **({"replicas": replicas} if replicas else {}), "batches": batches}


def tallies(v: RunView) -> dict[str, Any]:
    """What the metrics count of ``build_result(v)``, without building the rest of it (at
    1,000 nodes that is most of a scrape): each node's and replica's final, each batch's
    status, the triage category of each node that failed a stage (None: untriaged), and the
    rollback attempts. Each figure comes from the same functions as result.json's."""
    plan = list({n.name: n for n in _plan_nodes(v)}.values())      # a name once, as in result.json
    nodes = {n.name: {"final": final_of(n.state), "failed_stage": n.failed_stage, "reason": _reason(n)}
             for n in plan}
    return {"nodes": [x["final"] for x in nodes.values()],
            "replicas": [r["final"] for r in _replicas(v, nodes).values()],
            "batches": [v.batches[i]["status"] for i in sorted(v.batches)],
            "failures": [n.triage["category"] if n.triage else None for n in plan if n.failed_stage],
            "rollbacks": sum(n.rollback_attempts for n in plan if n.rollback_attempts)}
