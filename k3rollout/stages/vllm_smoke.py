"""Stage 5: smoke test with only the recipe's minimal launch flags (docs/domain.md step 5).

Stops the node's existing serving containers (their GPUs are needed; the uncordon stage
or the rollback restarts them), launches the target image with the minimal flags, and
walks the ladder's first two steps over HTTP from the controller: the model is loaded
(/health, and /v1/models lists it), one short request generates text, and a bad request
is answered with an OpenAI-format error (error reporting works). "The server answers" is
proven here; "the cache hits" is the feature stage's job.

Its undo: ``stop_test_server`` (first in a node's rollback: the test servers hold the
GPUs) and ``restore_serving_image`` (the serving containers baseline saw, back on their
image digest, after the driver is restored).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from k3rollout.model.backends import WORKLOAD_KUBERNETES, WORKLOAD_SLURM, workload_backend_name
from k3rollout.stages import replica_serve, thinking, vllm_server
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import Planning, StageSpec, UndoAction, kind
from k3rollout.workload import workload_for

NAME = "k3rollout-smoke"
# what stop_test_server removes: this stage's server and the feature stage's
TEST_CONTAINERS = (NAME, "k3rollout-features")


def run(ctx: NodeCtx) -> StageOutcome:
    p = ctx.params
    if ctx.replica:
        # a multi-node replica: one launch across its nodes, checked on the head
        stopped_by_node = replica_serve.stop_serving(ctx)
        ok, why, logs, rf = replica_serve.launch(ctx, NAME, p.image, p.model, list(p.args), p.port)
        f = replica_serve.per_node({**rf, "smoke_healthy": ok}, stopped_serving=stopped_by_node,
                                   smoke_args=rf["replica_args"])
        if not ok:
            replica_serve.stop(ctx, NAME)
            return StageOutcome(False, why, f, logs)
        return _requests(ctx, p, f, lambda: replica_serve.stop(ctx, NAME))
    stopped = ctx.workload.release_gpus(ctx)
    f = {"stopped_serving": stopped, "smoke_args": list(p.args)}
    ok, why, logs = vllm_server.launch(ctx, NAME, p.image, p.model, list(p.args), p.port, p.health_timeout)
    f["smoke_healthy"] = ok
    if not ok:
        ctx.workload.remove_server(ctx, NAME, f"{NAME}-remove")
        return StageOutcome(False, why, f, logs)
    return _requests(ctx, p, f, lambda: vllm_server.stop(ctx, NAME))


def _requests(ctx: NodeCtx, p: Any, f: dict[str, Any], stop: Callable[[], None]) -> StageOutcome:
    """The ladder's first two steps against the healthy server, then the server is stopped."""
    # instruct mode: a 16-token budget checks the answer, not the thinking (stages/thinking.py)
    good, resp = vllm_server.chat(ctx, "short-request", p.port, thinking.off({
        "model": p.model, "messages": [{"role": "user", "content": p.prompt}], "max_tokens": 16}))
    text = vllm_server.message(resp).get("content") if good else None
    f["smoke_request_ok"] = bool(good and text)
    f["smoke_reply"] = (text or "")[:200]
    # error reporting: a request for a model the server does not serve must be refused
    # with a 4xx and an OpenAI-format error object, not a 5xx or a hang
    bad = ctx.api("error-reporting", "POST", p.port, "/v1/chat/completions", thinking.off({
        "model": p.model + "-does-not-exist", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
    err = bad.json() if bad.status else None
    # vLLM 0.33 answers {"error": {"message", "type", "param", "code"}} (ErrorResponse,
    # vllm/entrypoints/serve/engine/protocol.py); servers before it sent the fields at the top
    # ({"object": "error", "message", ...}), still accepted and recorded as such
    inner = err.get("error") if isinstance(err, dict) else None
    f["error_reply"] = ({"format": "error_object", "type": inner.get("type"), "code": inner.get("code")}
                        if isinstance(inner, dict) else {"format": "top_level", "type": err.get("type"),
                                                         "code": err.get("code")} if isinstance(err, dict) else None)
    f["error_reporting_ok"] = bool(bad.status and 400 <= bad.status < 500 and isinstance(err, dict)
                                   and ((inner or {}).get("message") if isinstance(inner, dict) else err.get("message")))
    stop()
    if not f["smoke_request_ok"]:
        return StageOutcome(False, f"short request failed: {str(resp)[:300]}", f, str(resp))
    if not f["error_reporting_ok"]:
        return StageOutcome(False, f"a bad request was not reported as an API error: {bad.describe()}", f,
                            bad.describe())
    return StageOutcome(True, "", f)


def plan_stop_test(step: dict[str, Any], p: Planning) -> dict[str, Any]:
    step["commands"] = workload_for(p.tvars).removal_plan(TEST_CONTAINERS)
    return step


def describe_stop_test(step: dict[str, Any]) -> str:
    return "stop_test_server: " + "; ".join(shlex.join(c) for c in step["commands"])


def stop_test_servers(ctx: NodeCtx, step: dict[str, Any], untouched: str | None = None) -> tuple[bool, str]:
    # the plan's commands are what the node's runtime runs for these names (its removal_plan)
    for i, name in enumerate(TEST_CONTAINERS, start=1):
        ctx.workload.remove_server(ctx, name, f"stop-test-{i}")
    return True, "test containers removed"


def plan_restore_serving(step: dict[str, Any], p: Planning) -> dict[str, Any]:
    step["containers"] = [{"name": c["name"], "image": c["image"], "digest": c.get("digest")}
                          for c in p.baseline.get("serving_containers", [])]
    # what the restore does depends on the node's workloads (workload/*.restore_images)
    step["workload"] = workload_backend_name(p.tvars)
    return step


def describe_restore_serving(step: dict[str, Any]) -> str:
    items = ", ".join(f"{c['name']} on {c['image']}@{(c.get('digest') or '?').split('@')[-1][:19]}"
                      for c in step["containers"])
    if step.get("workload") == WORKLOAD_KUBERNETES:
        return ("restore_serving_image: check that the owners of " + (items or "the node's serving Pods")
                + " still run these image digests (they bring their Pods back after the uncordon; nothing is "
                  "started by hand)")
    if step.get("workload") == WORKLOAD_SLURM:
        return "restore_serving_image: nothing to restart (a Slurm node runs no serving containers)"
    return f"restore_serving_image: restart {items or 'none were running'}"


def restore_serving(ctx: NodeCtx, step: dict[str, Any], untouched: str | None = None) -> tuple[bool, str]:
    return ctx.workload.restore_images(ctx, step["containers"])


SPEC = StageSpec(kind("vllm_smoke"), run=run, undo={
    "stop_test_server": UndoAction(plan_stop_test, describe_stop_test, stop_test_servers),
    "restore_serving_image": UndoAction(plan_restore_serving, describe_restore_serving, restore_serving),
})
