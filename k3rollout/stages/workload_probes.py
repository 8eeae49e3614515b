"""Existing workloads are proven, not only restarted: each of the node's serving workloads is
probed at baseline, and each one the run brought back itself again once it is back after the
uncordon; both results are kept side by side (``workload_probes`` in the baseline's facts,
``workload_probes_after`` in the uncordon stage's).

A probe is the playbook's (``baseline`` stage parameter ``workload_probes``: an HTTP path and
the status it must answer, or a command on the node) or the default: the serving
endpoint's /health, then one short chat request to the model /v1/models lists. Requests go
where the node's workload runtime routes them (the node's address for Docker; the API
server's pod proxy to a ready pod of the workload's owner for Kubernetes). A workload whose
probe failed at baseline was not working before the change: failing again afterwards is
recorded, and is not the new driver's regression.
"""

from __future__ import annotations

import fnmatch
import re
import time
from typing import Any

from k3rollout.model.playbook import WorkloadProbe
from k3rollout.stages.base import NodeCtx

DEFAULT = "default: GET /health, then one short chat request"
RETRY_S = 15.0


def port_of(args: list[str], default: int = 8000) -> int:
    for i, a in enumerate(args):
        key, eq, val = a.partition("=")
        if key == "--port":
            val = val if eq else (args[i + 1] if i + 1 < len(args) else "")
            if val.isdigit():
                return int(val)
    return default


def _spec_for(w: dict[str, Any], specs: list[WorkloadProbe]) -> WorkloadProbe | None:
    names = [w["name"], w["name"].rpartition("/")[2], str((w.get("owner") or {}).get("name") or "")]
    return next((s for s in specs if any(n and fnmatch.fnmatchcase(n, s.match) for n in names)), None)


def describe(spec: WorkloadProbe | None) -> str:
    if spec is None:
        return DEFAULT
    if spec.command:
        return "command: " + " ".join(spec.command)
    return f"GET {spec.path} -> {spec.status}"


def probe_one(ctx: NodeCtx, w: dict[str, Any], spec: WorkloadProbe | None, when: str) -> dict[str, Any]:
    args = [str(a) for a in w.get("args") or []]
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", w["name"])
    out: dict[str, Any] = {"name": w["name"], "probe": describe(spec), "when": when}
    if "--headless" in args and spec is None:
        # a multi-node replica's worker rank serves no API: its head's workload is probed
        return {**out, "ok": True, "skipped": "headless worker rank"}
    if spec is not None and spec.command:
        res = ctx.step(f"probe-{when}-{tag}", list(spec.command))
        return {**out, "ok": res.ok, "detail": f"rc {res.rc}" + ("" if res.ok else f": {res.tail(200).strip()}")}
    port = (spec.port if spec and spec.port else None) or port_of(args, (w.get("ports") or [8000])[0])
    out["port"] = port
    wl = ctx.workload
    why = wl.route_to_serving(ctx, w, port)
    if why:
        return {**out, "ok": False, "detail": why}
    try:
        if spec is not None:
            res = ctx.api(f"probe-{when}-{tag}", "GET", port, str(spec.path), timeout=30)
            return {**out, "ok": res.status == spec.status, "status": res.status,
                    "detail": "" if res.status == spec.status else res.describe()[:300]}
        health = ctx.api(f"probe-{when}-{tag}-health", "GET", port, "/health", timeout=10)
        out["health_status"] = health.status
        if not health.ok:
            return {**out, "ok": False, "detail": f"/health: {health.describe()[:300]}"}
        listed = ctx.api(f"probe-{when}-{tag}-models", "GET", port, "/v1/models", timeout=30)
        body = listed.json() if listed.ok else None
        models = [m.get("id") for m in (body.get("data") or [] if isinstance(body, dict) else []) if isinstance(m, dict)]
        if not models:
            return {**out, "ok": False, "detail": f"/v1/models lists no model ({listed.describe()[:200]})"}
        chat = ctx.api(f"probe-{when}-{tag}-request", "POST", port, "/v1/chat/completions", {
            "model": models[0], "messages": [{"role": "user", "content": "Say hello in one word."}], "max_tokens": 16},
            timeout=120)
        reply = chat.json() if chat.ok else None
        msg = ((reply.get("choices") or [{}])[0].get("message") or {}) if isinstance(reply, dict) else {}
        ok = bool(msg.get("content") or msg.get("reasoning") or msg.get("reasoning_content"))
        return {**out, "ok": ok, "model": models[0], "detail": "" if ok else f"short request: {chat.describe()[:300]}"}
    finally:
        wl.unroute(ctx, port)


def run(ctx: NodeCtx, workloads: list[dict[str, Any]], specs: list[WorkloadProbe], when: str) -> list[dict[str, Any]]:
    return [probe_one(ctx, w, _spec_for(w, specs), when) for w in workloads]


def prove_again(ctx: NodeCtx, timeout_s: float, back: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """After the uncordon: each workload the run brought back itself (``back``: the containers
    the smoke test stopped, the owners waited for) probed as at baseline, retried until it
    passes or ``timeout_s`` (a restarted server loads its weights first); (results, the
    workloads that passed at baseline and do not now)."""
    specs = [WorkloadProbe.model_validate(s) for s in ctx.baseline.get("workload_probe_specs") or []]
    before = {r["name"]: r for r in ctx.baseline.get("workload_probes") or []}
    workloads = [w for w in ctx.baseline.get("serving_containers", []) if w["name"] in before and w["name"] in back]
    deadline = time.monotonic() + timeout_s
    results: dict[str, dict[str, Any]] = {}
    pending = list(workloads)
    attempt = 0
    while pending:
        attempt += 1
        for w in list(pending):
            r = probe_one(ctx, w, _spec_for(w, specs), "after" if attempt == 1 else f"after-{attempt}")
            results[w["name"]] = r
            if r["ok"] or not before[w["name"]]["ok"]:
                pending.remove(w)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))
    ordered = [results[w["name"]] for w in workloads]
    lost = [r["name"] for r in ordered if before[r["name"]]["ok"] and not r["ok"]]
    return ordered, lost
