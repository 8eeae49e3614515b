"""Shared by the smoke and feature stages: start a vLLM container, wait for /health, stop it."""

from __future__ import annotations

import time

from k3rollout.stages.base import NodeCtx


def launch(ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
           health_timeout: float, poll_s: float = 5.0) -> tuple[bool, str, str]:
    """Start ``name``; return (healthy, reason, logs)."""
    ctx.step(f"{name}-cleanup", ["docker", "rm", "-f", name])
    run = ctx.step(f"{name}-run", ["docker", "run", "-d", "--name", name, "--gpus", "all", "--ipc=host",
                                   "-p", f"{port}:{port}", image, model, *args, "--port", str(port)], timeout=3600)
    if not run.ok:
        return False, f"container did not start (rc {run.rc})", run.stdout + run.stderr
    deadline = time.monotonic() + health_timeout
    attempt = 0
    while True:
        attempt += 1
        health = ctx.step(f"{name}-health", ["curl", "-sf", "-m", "5", f"http://127.0.0.1:{port}/health"],
                          evidence=False)
        if health.ok:
            return True, "", ""
        st = ctx.step(f"{name}-state", ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name],
                      evidence=False)
        if not st.stdout.startswith("running"):
            logs = ctx.step(f"{name}-logs", ["docker", "logs", name])
            return False, f"vLLM exited before becoming healthy ({st.stdout.strip()})", logs.stdout + logs.stderr
        if time.monotonic() >= deadline:
            logs = ctx.step(f"{name}-logs", ["docker", "logs", name])
            return False, f"vLLM not healthy after {health_timeout:.0f}s", logs.stdout + logs.stderr
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def stop(ctx: NodeCtx, name: str) -> None:
    ctx.step(f"{name}-logs", ["docker", "logs", name])
    ctx.step(f"{name}-remove", ["docker", "rm", "-f", name])


def chat(ctx: NodeCtx, step: str, port: int, body: dict) -> tuple[bool, dict | str]:
    rc, resp = ctx.http(step, port, "/v1/chat/completions", body)
    if rc != 0 or not isinstance(resp, dict):
        return False, resp
    if "choices" not in resp:
        return False, resp
    return True, resp
