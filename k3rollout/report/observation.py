"""The report's "Observation" section: what ``k3rollout observe`` found after the window.

Pure over the run's view: the timeline of passes, the four pieces of evidence (docs/domain.md
"Staying power") as the latest pass saw them, and the decision the playbook's rules gave.
A rollback recommended by any pass stays the decision of record (a fault that came back
once has recurred, even if a later pass did not see it), naming that pass. The decision
is a recommendation with the rollback command and owner; nothing here acts.
"""

from __future__ import annotations

from typing import Any

from k3rollout.runlog.view import RunView

PIECES = (("recurrence", "Does the same fault recur?"),
          ("prefix_cache", "Do prefix-cache hits still reproduce?"),
          ("tool_calls", "Do agent tool calls still behave?"),
          ("maintainability", "Can the team maintain the environment (no drift, no restarts)?"))


def summarise(v: RunView) -> dict[str, Any] | None:
    if not v.observations and not v.observation_stops:
        return None
    passes = [{"index": o["index"], "ts": o["ts"], "decision": o["decision"], "nodes": sorted(o["nodes"]),
               "hours": o["obs"].get("hours_since_run"),
               "not_ok": [k for k, e in o["evidence"].items() if e.get("ok") is False]} for o in v.observations]
    last = v.observations[-1] if v.observations else None
    first_rollback = next((o for o in v.observations if o["decision"] == "rollback"), None)
    chosen = first_rollback or last
    return {
        "passes": passes,
        "stopped": [{"index": s["index"], "ts": s["ts"], "reason": s["reason"]} for s in v.observation_stops],
        "evidence": [{"key": k, "question": q, **(last["evidence"].get(k) or {"ok": None, "detail": "-"})}
                     for k, q in PIECES] if last else [],
        "decision": chosen["decision"] if chosen else None,
        "decided_at": chosen["index"] if chosen else None,
        "recommendation": chosen["recommendation"] if chosen else None,
        "rules": chosen["rules"] if chosen else None,
        "last_index": last["index"] if last else None,
    }
