"""Stage 6a: the reference launch, prefix-cache proof, tool calling, structured output.

Prefix-cache proof (DOMAIN.md "After launch"): send the same long prefix ``prefix_repeats``
times, then vary only the tail; it passes only if ``vllm:prefix_cache_hits_total`` rises
on the repeat. All counter readings are kept as facts and evidence. Tool calling passes
only if the reply has a parsed ``tool_calls`` entry for the offered function with JSON
arguments; an empty tool call is recorded as such.
"""

from __future__ import annotations

import json

from k3rollout.checks.parsers import ParseError, parse_vllm_metrics
from k3rollout.stages import vllm_server
from k3rollout.stages.base import NodeCtx, StageOutcome

NAME = "k3rollout-features"

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

SCHEMA = {"type": "object", "properties": {"node": {"type": "string"}, "ok": {"type": "boolean"}},
          "required": ["node", "ok"]}


def long_prefix(words: int) -> str:
    """A deterministic system prompt: token-identical on every request (same text, same order)."""
    vocab = ("cluster", "driver", "rollout", "evidence", "prefix", "cache", "tensor", "parallel", "window", "batch")
    return " ".join(f"{vocab[i % len(vocab)]}{i}" for i in range(words))


def _counters(ctx: NodeCtx, port: int, step: str) -> dict[str, float] | None:
    rc, text = ctx.http(step, port, "/metrics")
    if rc != 0 or not isinstance(text, str):
        return None
    try:
        m = parse_vllm_metrics(text)
    except ParseError:
        return None
    return {"queries": m.get("vllm:prefix_cache_queries_total", m.get("vllm:prefix_cache_queries", 0.0)),
            "hits": m.get("vllm:prefix_cache_hits_total", m.get("vllm:prefix_cache_hits", 0.0))}


def prefix_cache_proof(ctx: NodeCtx, port: int, model: str, repeats: int, words: int) -> dict:
    system = long_prefix(words)
    readings = []
    before = _counters(ctx, port, "metrics-before")
    if before is None:
        return {"ok": False, "reason": "no prefix-cache counters in /metrics", "readings": []}
    prev = before
    tails = ["Question: what is batch 1?"] * repeats + ["Question: what is batch 2, with a changed tail?"]
    for i, tail in enumerate(tails, start=1):
        good, resp = vllm_server.chat(ctx, f"prefix-request-{i}", port, {
            "model": model, "max_tokens": 8,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": tail}]})
        now = _counters(ctx, port, f"metrics-after-{i}")
        if not good or now is None:
            return {"ok": False, "reason": f"request {i} failed: {str(resp)[:200]}", "readings": readings}
        readings.append({"request": i, "tail_changed": i > repeats,
                         "prompt_tokens": resp.get("usage", {}).get("prompt_tokens"),
                         "queries_delta": now["queries"] - prev["queries"], "hits_delta": now["hits"] - prev["hits"]})
        prev = now
    repeat_hits = [r["hits_delta"] for r in readings[1:repeats]]
    ok = bool(repeat_hits) and all(h > 0 for h in repeat_hits) and readings[0]["hits_delta"] < min(repeat_hits) + 1e-9 \
        and readings[-1]["hits_delta"] > 0
    reason = "" if ok else ("no prefix-cache hits on the repeated prefix" if not any(repeat_hits)
                            else "hits did not behave as a prefix cache should")
    return {"ok": ok, "reason": reason, "readings": readings}


def run(ctx: NodeCtx) -> StageOutcome:
    p = ctx.params
    args = list(p.args)
    f: dict = {"feature_args": args, "prefix_caching_flag": "--enable-prefix-caching" in args}
    ok, why, logs = vllm_server.launch(ctx, NAME, p.image, p.model, args, p.port, p.health_timeout)
    if not ok:
        ctx.step(f"{NAME}-remove", ["docker", "rm", "-f", NAME])
        return StageOutcome(False, why, f, logs)
    failures = []
    proof = prefix_cache_proof(ctx, p.port, p.model, p.prefix_repeats, p.prefix_words)
    f["prefix_cache"] = proof
    ctx.evidence("prefix-cache-proof.json", json.dumps(proof, indent=2))
    if not proof["ok"]:
        failures.append(f"prefix cache: {proof['reason']}")
    if p.tool_call:
        good, resp = vllm_server.chat(ctx, "tool-call", p.port, {
            "model": p.model, "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 64,
            "messages": [{"role": "user", "content": "What's the weather in Beijing?"}]})
        calls = resp["choices"][0]["message"].get("tool_calls") or [] if good else []
        f["tool_calls"] = len(calls)
        f["empty_tool_call"] = good and not calls
        valid = False
        for c in calls:
            try:
                valid = c["function"]["name"] == "get_weather" and isinstance(json.loads(c["function"]["arguments"]),
                                                                              dict)
            except (KeyError, TypeError, ValueError):
                valid = False
        f["tool_call_ok"] = valid
        if not valid:
            failures.append("tool call: " + ("empty tool_calls" if good else str(resp)[:200]))
    good, resp = vllm_server.chat(ctx, "structured-output", p.port, {
        "model": p.model, "max_tokens": 64,
        "response_format": {"type": "json_schema", "json_schema": {"name": "status", "schema": SCHEMA}},
        "messages": [{"role": "user", "content": "Report status as JSON."}]})
    try:
        obj = json.loads(resp["choices"][0]["message"]["content"]) if good else None
        f["structured_output_ok"] = isinstance(obj, dict) and all(k in obj for k in SCHEMA["required"])
    except (KeyError, TypeError, ValueError):
        f["structured_output_ok"] = False
    if not f["structured_output_ok"]:
        failures.append("structured output did not match the schema")
    vllm_server.stop(ctx, NAME)
    return StageOutcome(not failures, "; ".join(failures), f, "; ".join(failures))
