"""What a reviewer approves in a plan, its digest, and how a run compares against it.

The approvable content of a plan is what would change and how: the playbook (by sha256),
the hosts, the batches with their nodes in order, the stages in order, the capacity floor
and failure threshold. Timings and window offsets are left out: they move with the clock
and are re-checked by the run itself. ``k3rollout plan --json`` prints ``plan_sha256``;
``run --approved-plan FILE`` refuses to start when the plan it computes now differs, and
the run records the digest so the report can diff the approved plan against what ran.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def approvable(plan: dict[str, Any]) -> dict[str, Any]:
    return {"playbook_sha256": plan.get("playbook_sha256"), "hosts": list(plan.get("hosts", [])),
            "batches": [list(b["nodes"]) for b in plan.get("batches", [])],
            "stages": [s["stage"] for s in plan.get("stages", [])],
            "min_serving": plan.get("min_serving"), "max_fail_percentage": plan.get("max_fail_percentage"),
            "in_place_change": plan.get("in_place_change")}


def plan_digest(plan: dict[str, Any]) -> str:
    blob = json.dumps(approvable(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def differences(approved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Human-readable differences between an approved plan and the one computed now."""
    a, b = approvable(approved), approvable(now)
    out = []
    for key in ("playbook_sha256", "min_serving", "max_fail_percentage", "in_place_change", "stages"):
        if a[key] != b[key]:
            out.append(f"{key}: approved {a[key]!r}, now {b[key]!r}")
    if set(a["hosts"]) != set(b["hosts"]):
        gone, new = sorted(set(a["hosts"]) - set(b["hosts"])), sorted(set(b["hosts"]) - set(a["hosts"]))
        out.append("hosts: " + "; ".join(x for x in (f"no longer in the plan: {', '.join(gone)}" if gone else "",
                                                     f"added: {', '.join(new)}" if new else "") if x))
    if a["batches"] != b["batches"]:
        for i in range(max(len(a["batches"]), len(b["batches"]))):
            x = a["batches"][i] if i < len(a["batches"]) else None
            y = b["batches"][i] if i < len(b["batches"]) else None
            if x != y:
                out.append(f"batch {i + 1}: approved {x}, now {y}")
                break
    return out


def plan_vs_actual(plan: dict[str, Any], view: Any) -> dict[str, Any]:
    """What ran against what was planned: batches (order and nodes), stages per node
    (skipped, and steps the plan did not have: rollbacks, retries, gates, settled steps)."""
    kinds = [s["stage"] for s in plan.get("stages", [])]
    batches = []
    for b in plan.get("batches", []):
        vb = view.batches.get(b["index"], {})
        batches.append({"index": b["index"], "planned": list(b["nodes"]), "status": vb.get("status", "not_started"),
                        "ran": list(vb.get("nodes", [])) if vb.get("status") not in (None, "not_started") else [],
                        "changed": vb.get("status") not in (None, "not_started") and
                        list(vb.get("nodes", [])) != list(b["nodes"])})
    started_order = [b["index"] for b in sorted(
        (b for b in view.batches.values() if b.get("started")), key=lambda b: b["started"])]
    nodes = []
    for name, n in view.nodes.items():
        entered = [s["stage"] for s in n.timeline if s["stage"] != "rollback"]
        skipped = [k for k in kinds if k not in entered]
        added = []
        if n.rollback_attempts:
            added.append(f"rollback x{n.rollback_attempts}")
        repeats = {k: entered.count(k) for k in set(entered) if entered.count(k) > 1}
        added += [f"{k} ran {c} times (resumed)" for k, c in sorted(repeats.items())]
        added += [f"settled after interruption: {key.split('/', 1)[1]}" for (node, key) in view.steps_settled
                  if node == name]
        added += [f"gate {p['id']}: {p.get('decision') or 'waiting'}" for p in view.pauses.values()
                  if p.get("node") == name]
        started = bool(entered)
        if (started and skipped) or added:
            nodes.append({"node": name, "batch": n.batch, "skipped": skipped if started else [], "added": added})
    never = [name for name, n in view.nodes.items() if n.state == "pending" and not n.timeline]
    return {"batches": batches, "batch_order_ok": started_order == sorted(started_order),
            "started_order": started_order, "nodes": sorted(nodes, key=lambda x: (x["batch"] or 0, x["node"])),
            "never_started": sorted(never)}
