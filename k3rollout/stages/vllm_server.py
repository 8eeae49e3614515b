"""Shared by the smoke and feature stages: start a vLLM container, wait for /health, talk
to it over HTTP from the controller, stop it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from k3rollout.stages.base import NodeCtx
from k3rollout.stages.cuda_check import not_started
from k3rollout.transport.base import CommandResult


def launch(ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
           health_timeout: float, poll_s: float = 5.0, env: dict[str, str] | None = None,
           start: Callable[[], CommandResult] | None = None) -> tuple[bool, str, str]:
    """Start ``name``; return (healthy, reason, logs). Healthy means /health answered 200
    and /v1/models lists the model (weights loaded: the ladder's first step).
    ``env`` set: a replica's head (its launch environment, on the host network); ``start``:
    how the server starts when not by ``start_server`` (a replica that is one job)."""
    wl = ctx.workload
    wl.remove_server(ctx, name, f"{name}-cleanup")
    run = start() if start is not None else wl.start_server(ctx, name, image, model, args, port, env)
    if not run.ok:
        return False, f"container did not start (rc {run.rc}){not_started(ctx, run)}", run.stdout + run.stderr
    deadline = time.monotonic() + health_timeout
    last = ""
    while True:
        health = ctx.api(f"{name}-health", "GET", port, "/health", timeout=5, evidence=False)
        if health.ok:
            break
        last = health.describe()
        st = wl.server_state(ctx, name, f"{name}-state", evidence=False)
        if not st.running:
            logs = wl.server_logs(ctx, name, f"{name}-logs")
            return False, f"vLLM exited before becoming healthy ({st.text})", logs.stdout + logs.stderr
        if time.monotonic() >= deadline:
            logs = wl.server_logs(ctx, name, f"{name}-logs")
            return False, f"vLLM not healthy after {health_timeout:.0f}s (last: {last})", logs.stdout + logs.stderr
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    models = ctx.api(f"{name}-models", "GET", port, "/v1/models", timeout=30)
    served = [m.get("id") for m in ((models.json() or {}).get("data") or []) if isinstance(m, dict)]
    if not models.ok or model not in served:
        return False, f"/v1/models does not list {model} ({models.describe() if not models.ok else served})", ""
    return True, "", ""


def stop(ctx: NodeCtx, name: str) -> None:
    ctx.workload.server_logs(ctx, name, f"{name}-logs")
    ctx.workload.remove_server(ctx, name, f"{name}-remove")


def chat(ctx: NodeCtx, step: str, port: int, body: dict[str, Any], timeout: float = 300.0) -> tuple[bool, Any]:
    """POST /v1/chat/completions; (True, reply) or (False, what went wrong)."""
    res = ctx.api(step, "POST", port, "/v1/chat/completions", body, timeout=timeout)
    resp = res.json()
    if not res.ok or not isinstance(resp, dict) or not resp.get("choices"):
        return False, res.describe()
    return True, resp


def message(resp: dict[str, Any]) -> dict[str, Any]:
    return (resp.get("choices") or [{}])[0].get("message") or {}
