"""result.json: the contract other tools read (shape in DESIGN.md)."""

from __future__ import annotations

from typing import Any

from k3rollout.runlog.view import RunView

FINAL = {"upgrade-done": "upgraded", "rolled-back": "rolled_back", "rollback-failed": "rollback_failed",
         "failed": "failed", "skipped": "skipped", "pending": "pending"}


def final_of(state: str) -> str:
    """A node caught mid-flight (a crash before resume) is reported by what it needs next."""
    return FINAL.get(state, "failed" if state == "rollback-required" else "pending")


def build_result(v: RunView) -> dict[str, Any]:
    nodes = {}
    plan_nodes = [n for b in (v.plan or {}).get("batches", []) for n in b["nodes"]]
    for name in plan_nodes:
        n = v.nodes.get(name)
        if n is None:
            continue
        after = n.facts.get("driver_version") if n.state != "pending" else None
        nodes[name] = {
            "final": final_of(n.state), "state": n.state, "batch": n.batch,
            "driver_before": n.baseline.get("driver_version"),
            "driver_after": after,
            "failed_stage": n.failed_stage, "reason": n.reason or None,
            "triage": n.triage["category"] if n.triage else None,
            "rollback": ({"attempts": n.rollback_attempts, "results": n.rollback_results}
                         if n.rollback_attempts else None),
        }
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
            "inventory": (v.plan or {}).get("inventory"), "nodes": nodes, "batches": batches}
