"""What a reviewer approves in a plan, its digest, and how a run compares against it.

The approvable content of a plan is what would change and how: the playbook (by sha256),
the inventory's content (by sha256: every host with its merged vars and groups, so a var
in ``group_vars/`` or ``host_vars/`` counts as much as one in the main file), the hosts,
the batches with their nodes in order, the stages in order, the capacity floor and failure
threshold. Timings and window offsets are left out: they move with the clock
and are re-checked by the run itself. ``k3rollout plan --json`` prints ``plan_sha256``;
``run --approved-plan FILE`` refuses to start when the plan it computes now differs, and
the run records the digest so the report can diff the approved plan against what ran.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def inventory_digest(inventory: Any) -> str:
    """sha256 of an inventory's content as loaded (``model.inventory.Inventory``): each host
    with its merged vars and its groups, and each group's hosts, children and vars.
    Comments, layout and the order of keys do not count; any value does."""
    content = {"hosts": {n: {"vars": h.vars, "groups": sorted(h.groups)} for n, h in inventory.hosts.items()},
               "host_order": list(inventory.hosts),
               "groups": {n: {"hosts": list(g.hosts), "children": list(g.children), "vars": g.vars}
                          for n, g in sorted(inventory.groups.items())}}
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


def approvable(plan: dict[str, Any]) -> dict[str, Any]:
    return {"playbook_sha256": plan.get("playbook_sha256"), "inventory_sha256": plan.get("inventory_sha256"),
            "hosts": list(plan.get("hosts", [])),
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
    if a["inventory_sha256"] != b["inventory_sha256"]:
        out.append(f"inventory content (host vars, group vars, groups): approved sha256 {a['inventory_sha256']}, "
                   f"now {b['inventory_sha256']}")
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
    # each node's settled steps and gates, in their order (read once, not once per node)
    settled: dict[str, list[str]] = {}
    for node, key in view.steps_settled:
        settled.setdefault(node, []).append(key)
    gates: dict[Any, list[dict[str, Any]]] = {}
    for p in view.pauses.values():
        gates.setdefault(p.get("node"), []).append(p)
    nodes = []
    for name, n in view.nodes.items():
        entered = [s["stage"] for s in n.timeline if s["stage"] != "rollback"]
        skipped = [k for k in kinds if k not in entered]
        added = []
        if n.rollback_attempts:
            added.append(f"rollback x{n.rollback_attempts}")
        if len(set(entered)) < len(entered):
            repeats = {k: entered.count(k) for k in set(entered) if entered.count(k) > 1}
            added += [f"{k} ran {c} times (resumed)" for k, c in sorted(repeats.items())]
        added += [f"settled after interruption: {key.split('/', 1)[1]}" for key in settled.get(name, ())]
        added += [f"gate {p['id']}: {p.get('decision') or 'waiting'}" for p in gates.get(name, ())]
        started = bool(entered)
        if (started and skipped) or added:
            nodes.append({"node": name, "batch": n.batch, "skipped": skipped if started else [], "added": added})
    never = [name for name, n in view.nodes.items() if n.state == "pending" and not n.timeline]
    return {"batches": batches, "batch_order_ok": started_order == sorted(started_order),
            "started_order": started_order, "nodes": sorted(nodes, key=lambda x: (x["batch"] or 0, x["node"])),
            "never_started": sorted(never)}


def input_changes(records: list[dict[str, Any]], *, playbook_sha256: str, inventory_sha256: str,
                  inventory_content_sha256: str) -> dict[str, tuple[str, str]]:
    """What changed in the run's inputs since it started, or since the last change an
    operator accepted (``inputs_changed`` records): name -> (was, now). The playbook and
    the inventory file by their bytes, the inventory's content (group_vars/, host_vars/
    included) by ``inventory_digest``; a digest the run never recorded is not compared."""
    first = records[0] if records else {}
    was = {"playbook_sha256": first.get("playbook_sha256"), "inventory_sha256": first.get("inventory_sha256"),
           "inventory_content_sha256": (first.get("plan") or {}).get("inventory_sha256") or None}
    for r in records:
        if r.get("type") == "inputs_changed":
            was.update({k: r[k] for k in was if r.get(k)})
    now = {"playbook_sha256": playbook_sha256, "inventory_sha256": inventory_sha256,
           "inventory_content_sha256": inventory_content_sha256}
    return {k: (w, now[k]) for k, w in was.items() if w and w != now[k]}
