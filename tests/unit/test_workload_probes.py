"""Existing workloads are proven, not only restarted (k3rollout/stages/workload_probes.py):
each serving workload is probed at baseline and again after it is back, with the default
probe (/health, then one short request) or the playbook's (an HTTP path and status, or a
command on the node). HTTP goes through the engine's own client over httpx's MockTransport."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import ValidationError

from k3rollout.model.playbook import WorkloadProbe
from k3rollout.stages import workload_probes
from k3rollout.transport.http import ApiClient

K2 = {"name": "vllm-k2", "image": "vllm/vllm-openai:v0.15.1", "args": ["moonshotai/Kimi-K2", "--port", "8001"]}


def serve(h, answers: dict[str, list[int]]):
    """The node's server: each path answers the next status of its list (the last repeats)."""
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(f"{req.method} {req.url}")
        queue = answers[req.url.path]
        status = queue.pop(0) if len(queue) > 1 else queue[0]
        if req.url.path == "/v1/models":
            return httpx.Response(status, json={"data": [{"id": "moonshotai/Kimi-K2"}]})
        if req.url.path == "/v1/chat/completions":
            assert json.loads(req.content)["model"] == "moonshotai/Kimi-K2"
            return httpx.Response(status, json={"choices": [{"message": {"content": "Hello"}}]})
        return httpx.Response(status, text="")

    h.engine.steps._api = ApiClient(transport=httpx.MockTransport(handler))
    h.executor.addresses["gpu-01"] = "10.0.0.1"
    return seen


def test_the_default_probe_is_health_then_one_short_request_on_the_serving_port(stage_harness):
    h = stage_harness(scheduler="none")
    seen = serve(h, {"/health": [200], "/v1/models": [200], "/v1/chat/completions": [200]})
    (r,) = workload_probes.run(h.ctx("baseline"), [K2], [], "baseline")
    assert r["ok"] and r["probe"] == workload_probes.DEFAULT and r["model"] == "moonshotai/Kimi-K2"
    assert seen == ["GET http://10.0.0.1:8001/health", "GET http://10.0.0.1:8001/v1/models",
                    "POST http://10.0.0.1:8001/v1/chat/completions"]


def test_a_declared_http_probe_and_a_command_probe(stage_harness, fake_executor):
    h = stage_harness(scheduler="none")
    seen = serve(h, {"/ping": [204]})
    specs = [WorkloadProbe(match="vllm-*", path="/ping", status=204, port=9000),
             WorkloadProbe(match="embed*", command=["curl", "-fsS", "localhost:7000/ready"])]
    fake_executor.expect(["curl", "-fsS", "localhost:7000/ready"], rc=7, stderr="curl: (7) refused\n")
    a, b = workload_probes.run(h.ctx("baseline"), [K2, {"name": "embedder", "args": []}], specs, "baseline")
    assert a["ok"] and a["probe"] == "GET /ping -> 204" and seen == ["GET http://10.0.0.1:9000/ping"]
    assert not b["ok"] and b["detail"].startswith("rc 7") and "refused" in b["detail"]
    with pytest.raises(ValidationError, match="exactly one of path"):
        WorkloadProbe(match="x", path="/a", command=["true"])


def test_after_the_uncordon_a_workload_that_passed_at_baseline_must_pass_again(stage_harness, monkeypatch):
    h = stage_harness(scheduler="none")
    monkeypatch.setattr(workload_probes.time, "sleep", lambda s: None)
    base = {"serving_containers": [K2], "workload_probe_specs": [],
            "workload_probes": [{"name": "vllm-k2", "ok": True}]}
    # loading its weights after the restart: /health answers 503 twice, then 200
    serve(h, {"/health": [503, 503, 200], "/v1/models": [200], "/v1/chat/completions": [200]})
    after, lost = workload_probes.prove_again(h.ctx("uncordon", baseline=base), 600, ["vllm-k2"])
    assert lost == [] and after[0]["ok"] and after[0]["when"] == "after-3"

    h2 = stage_harness(scheduler="none")
    serve(h2, {"/health": [500]})
    after, lost = workload_probes.prove_again(h2.ctx("uncordon", baseline=base), 0, ["vllm-k2"])
    assert lost == ["vllm-k2"] and "/health: HTTP 500" in after[0]["detail"]


def test_a_workload_that_failed_its_probe_at_baseline_is_recorded_not_blamed(stage_harness):
    h = stage_harness(scheduler="none")
    serve(h, {"/health": [500]})
    base = {"serving_containers": [K2], "workload_probes": [{"name": "vllm-k2", "ok": False}]}
    after, lost = workload_probes.prove_again(h.ctx("uncordon", baseline=base), 600, ["vllm-k2"])
    assert lost == [] and not after[0]["ok"]


def test_only_the_workloads_the_run_brought_back_are_proven_again(stage_harness):
    h = stage_harness(scheduler="none")
    seen = serve(h, {"/health": [500]})
    base = {"serving_containers": [K2], "workload_probes": [{"name": "vllm-k2", "ok": True}]}
    assert workload_probes.prove_again(h.ctx("uncordon", baseline=base), 600, []) == ([], [])
    assert seen == []
