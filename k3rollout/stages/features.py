"""Stage 6a: the reference launch, and the load ladder's steps 3-5 (docs/domain.md) on it.

The ladder runs one variable at a time and stops at the first step that fails:

3. ``context``: one request at the target context length (``context_tokens``).
4. ``concurrency``: rising concurrency (``concurrency`` levels, streamed requests sent at
   once), recording latency percentiles, time to first token, GPU memory and container
   restarts after every level, each judged against the playbook's thresholds.
5. ``prefix_cache``: the same long prefix ``prefix_repeats`` times, then only the tail
   changed; passes only if ``vllm:prefix_cache_hits_total`` rises on the repeat (all
   counter readings kept as evidence). ``tools``: a tool call parsed into a
   ``tool_calls`` entry, streamed and not, with an empty tool call detected and recorded,
   and a retry of the same request checked. ``structured``: a ``json_schema`` reply that
   matches. ``vision``: an image input answered.

Cross-node communication (step 6) is the multinode stage.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema

from k3rollout import fastjson
from k3rollout.checks.openai_stream import assemble_stream
from k3rollout.checks.parsers import ParseError, cache_block_tokens, parse_cache_config_info, parse_vllm_metrics
from k3rollout.checks.server_timing import timing_check
from k3rollout.stages import replica_serve, thinking, vllm_server
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind

NAME = "k3rollout-features"

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

# the agent flow's tools: a trip planned one call at a time (strict schemas: every argument
# is checked against them, as Moonshot's K2-Vendor-Verifier checks schema accuracy)
AGENT_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search_flights", "description": "Find flights between two cities.",
        "parameters": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
                       "required": ["origin", "destination"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "book_hotel", "description": "Book a hotel for some nights.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "nights": {"type": "integer",
                                                                                               "minimum": 1}},
                       "required": ["city", "nights"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "send_summary", "description": "Send the itinerary to the traveller.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                       "additionalProperties": False}}},
]

SCHEMA = {"type": "object", "properties": {"node": {"type": "string"}, "ok": {"type": "boolean"}},
          "required": ["node", "ok"]}

# the agent flow thinks as served: room for K3's thinking and a call, per reply
AGENT_MAX_TOKENS = 4096

# a 1x1 PNG: the smallest valid image input
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
         "RU5ErkJggg==")


@functools.lru_cache(maxsize=16)
def long_prefix(words: int, seed: str = "") -> str:
    """A deterministic system prompt: token-identical on every request (same text, same order)."""
    vocab = ("cluster", "driver", "rollout", "evidence", "prefix", "cache", "tensor", "parallel", "window", "batch")
    return " ".join(f"{seed}{vocab[i % len(vocab)]}{i}" for i in range(words))


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (the value at or below which ``pct`` percent of samples lie)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(pct / 100 * len(s)) - 1)]


def _counters(ctx: NodeCtx, port: int, step: str) -> dict[str, float] | None:
    return _read_metrics(ctx, port, step)[0]


def _read_metrics(ctx: NodeCtx, port: int, step: str) -> tuple[dict[str, float] | None, dict[str, str] | None]:
    """(prefix-cache counters, ``vllm:cache_config_info`` labels) from one /metrics read."""
    res = ctx.api(step, "GET", port, "/metrics", timeout=30)
    if not res.ok:
        return None, None
    try:
        m = parse_vllm_metrics(res.text, only=("vllm:prefix_cache_", "vllm:gpu_prefix_cache_"))
        info = parse_cache_config_info(res.text)
    except ParseError:
        return None, None
    return prefix_counters(m), info


def prefix_counters(m: dict[str, float]) -> dict[str, float] | None:
    """vLLM's prefix-cache counters under their current or earlier names (0.10 also had the
    deprecated ``gpu_prefix_cache_*``); None when the server exports none of them."""
    for q, h in (("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
                 ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"),
                 ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total")):
        if q in m:
            return {"queries": m[q], "hits": m.get(h, 0.0)}
    return None


def prefix_words(words: int, block_tokens: int | None) -> int:
    """How long the shared prefix is: as given, or at least two full cache blocks plus half a
    block of tail when the block size is known (vLLM never reuses the last matched block, so a
    prefix of under two blocks scores zero hits by design; docs/domain.md "Prefix cache")."""
    if not block_tokens:
        return words
    return max(words, 2 * block_tokens + max(16, block_tokens // 2))


def prefix_sized(ctx: NodeCtx, port: int, model: str, words: int, need: int, seed: str) -> tuple[int, int | None]:
    """(words, tokens): the fewest words (from ``words``, which hold ``need`` at one token a
    word) whose system prompt the server counts at ``need`` tokens or more; ``words`` with
    None when /tokenize does not answer."""
    def make(n: int) -> dict[str, Any]:
        return thinking.off({"model": model, "messages": [{"role": "system", "content": long_prefix(n, seed=seed)}]})

    best, best_n = words, None
    for i in range(1, 5):
        data, _ = count_tokens(ctx, port, f"prefix-tokenize-{i}", make(words))
        if data is None:
            return best, best_n
        n = data["count"]
        if n >= need and (best_n is None or n < best_n):
            best, best_n = words, n
        if need <= n <= 1.05 * need:
            break
        words = max(1, -(-words * need // max(n, 1)) + (1 if n < need else 0))
    return best, best_n


def prefix_cache_proof(ctx: NodeCtx, port: int, model: str, repeats: int, words: int,
                       block_tokens: int | None = None, seed: str = "p") -> dict[str, Any]:
    """``seed`` makes the prefix new to the server (``observe`` passes each send their own,
    so a prefix cached by an earlier pass does not hit on the first request). ``block_tokens``
    (the profile's) is used only when the server does not publish its own block in
    ``vllm:cache_config_info`` (vLLM computes it at start-up; --kv-cache-dtype changes it)."""
    before, info = _read_metrics(ctx, port, "metrics-before")
    served = cache_block_tokens(info) if info else None
    block, source = (served, "server") if served else (block_tokens, "profile" if block_tokens else None)
    words = prefix_words(words, block)
    # recorded with the proof when a block size sized it
    sized: dict[str, Any] = {"prefix_words": words, "block_tokens": block, "block_source": source} if block else {}
    if served and block_tokens and served != block_tokens:
        sized["profile_block_tokens"] = block_tokens
    if info:
        sized["cache_config"] = {k: info[k] for k in ("block_size", "mamba_block_size", "cache_hit_alignment_tokens",
                                                      "enable_prefix_caching", "cache_dtype") if k in info}
    if block:
        # the words above count one token a word, at least the blocks needed; /tokenize says how
        # many tokens the prefix really is, and it is trimmed to two blocks and a half
        need = 2 * block + max(16, block // 2)
        words, tokens = prefix_sized(ctx, port, model, words, need, seed)
        sized.update(prefix_words=words, prefix_tokens=tokens)
    system = long_prefix(words, seed=seed)
    readings: list[dict[str, Any]] = []
    if before is None:
        return {"ok": False, "inconclusive": True, "reason": "no prefix-cache counters in /metrics",
                "readings": [], **sized}
    prev = before
    tails = ["Question: what is batch 1?"] * repeats + ["Question: what is batch 2, with a changed tail?"]
    for i, tail in enumerate(tails, start=1):
        good, resp = vllm_server.chat(ctx, f"prefix-request-{i}", port, thinking.off({
            "model": model, "max_tokens": 8,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": tail}]}))
        now = _counters(ctx, port, f"metrics-after-{i}")
        if not good or now is None:
            return {"ok": False, "reason": f"request {i} failed: {str(resp)[:200]}", "readings": readings, **sized}
        readings.append({"request": i, "tail_changed": i > repeats,
                         "prompt_tokens": resp.get("usage", {}).get("prompt_tokens"),
                         "queries_delta": now["queries"] - prev["queries"], "hits_delta": now["hits"] - prev["hits"]})
        prev = now
    repeat_hits = [r["hits_delta"] for r in readings[1:repeats]]
    ok = bool(repeat_hits) and all(h > 0 for h in repeat_hits) and readings[0]["hits_delta"] < min(repeat_hits) + 1e-9 \
        and readings[-1]["hits_delta"] > 0
    reason = "" if ok else ("no prefix-cache hits on the repeated prefix" if not any(repeat_hits)
                            else "hits did not behave as a prefix cache should")
    return {"ok": ok, "reason": reason, "readings": readings, **sized}


def repeat_hit_rate(proof: dict[str, Any]) -> float | None:
    """Cached tokens over queried tokens on the repeated requests of a prefix-cache proof
    (not the first, which fills the cache, nor the changed tail); None without readings."""
    rows = [r for r in proof.get("readings") or [] if r.get("request", 0) > 1 and not r.get("tail_changed")]
    queries = sum(r.get("queries_delta") or 0 for r in rows)
    if not rows or queries <= 0:
        return None
    return round(sum(r.get("hits_delta") or 0 for r in rows) / queries, 4)


def _container(ctx: NodeCtx, step: str) -> tuple[str, int]:
    return ctx.workload.server_restarts(ctx, NAME, step)


# the context step's output budget: the prompt gets the rest of the target context
CONTEXT_MAX_TOKENS = 16
TOKENIZE_KEYS = ("model", "messages", "tools", "chat_template_kwargs")


def count_tokens(ctx: NodeCtx, port: int, step: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(the server's count of a chat request's prompt tokens, why not): POST /tokenize renders
    ``messages`` with the served model's chat template and tokenizer and answers
    ``{"count", "max_model_len", "tokens"}`` (vllm/entrypoints/serve/tokenize/protocol.py).
    The token ids are not kept as evidence (a long prompt's run to megabytes); the count is."""
    res = ctx.api(step, "POST", port, "/tokenize", {k: body[k] for k in TOKENIZE_KEYS if k in body},
                  timeout=120, evidence=False)
    data = res.json() if res.ok else None
    if not isinstance(data, dict) or not isinstance(data.get("count"), int):
        return None, f"POST /tokenize did not count the prompt: {res.describe()[:200]}"
    return data, ""


def fit_prompt(ctx: NodeCtx, port: int, make: Any, target: int, step: str, tries: int = 6
               ) -> tuple[int, int | None, str]:
    """(words, tokens, why not): the longest ``make(words)`` the server counts at ``target``
    tokens or fewer, sized by /tokenize (words are not tokens): a short prompt first gives the
    tokens a word, so the long one is counted about twice, not sent at a wild guess."""
    words, best, best_n = max(1, min(target, 512)), 0, None
    for i in range(1, tries + 1):
        data, why = count_tokens(ctx, port, f"{step}-tokenize-{i}", make(words))
        if data is None:
            return best, best_n, why
        n = data["count"]
        if n <= target and (best_n is None or n > best_n):
            best, best_n = words, n
        if 0.98 * target <= n <= target:
            break
        words = max(1, int(words * target / max(n, 1)) - (1 if n > target else 0))
    return best, best_n, "" if best_n is not None else f"no prompt of {target} tokens or fewer found"


def context_step(ctx: NodeCtx, p: Any) -> dict[str, Any]:
    """One request at the target context (prompt plus output), never beyond the server's
    --max-model-len (read from /tokenize); the row says which limit it used."""
    def make(words: int) -> dict[str, Any]:
        return thinking.off({"model": p.model, "max_tokens": CONTEXT_MAX_TOKENS, "messages": [
            {"role": "user", "content": long_prefix(words, seed="c") + " Summarise in one word."}]})

    row: dict[str, Any] = {"step": "context", "asked_tokens": p.context_tokens}
    probe, why = count_tokens(ctx, p.port, "ladder-context-tokenize", make(1))
    limit = probe.get("max_model_len") if probe else None
    if probe is None or not isinstance(limit, int):
        return {**row, "passed": False, "reason": why or "POST /tokenize gave no max_model_len"}
    target = min(p.context_tokens, limit)
    row.update(target_tokens=target, max_model_len=limit,
               limit="context_tokens" if target == p.context_tokens else "max_model_len")
    words, planned, why = fit_prompt(ctx, p.port, make, target - CONTEXT_MAX_TOKENS, "ladder-context")
    row["prompt_tokens_planned"] = planned
    if planned is None or planned < 0.9 * (target - CONTEXT_MAX_TOKENS):
        return {**row, "passed": False, "reason": f"could not size a {target}-token request: {why or planned}"}
    good, resp = vllm_server.chat(ctx, "ladder-context", p.port, make(words), timeout=p.request_timeout)
    got = (resp.get("usage") or {}).get("prompt_tokens") if good else None
    row["prompt_tokens"] = got
    ok = bool(good and got and got >= planned)
    return {**row, "passed": ok, "reason": "" if ok else
            f"a {planned}-token prompt ({target} with the output, limit {row['limit']}) failed: {str(resp)[:300]}"}


def concurrency_step(ctx: NodeCtx, p: Any, level: int, restarts0: int) -> dict[str, Any]:
    # thinking as served: the load a reasoning model carries; max_tokens counts its thinking,
    # and the time to first token is the first token of either channel
    bodies = [thinking.on({"model": p.model, "stream_options": {"include_usage": True},
                           "messages": [{"role": "user", "content": f"Request {i} of {level}: count to ten."}]},
                          p.ladder_max_tokens) for i in range(level)]
    before = ctx.api(f"ladder-metrics-before-{level}", "GET", p.port, "/metrics", timeout=30)
    results = ctx.api_many(f"ladder-concurrency-{level}", p.port, "/v1/chat/completions", bodies,
                           timeout=p.request_timeout)
    after = ctx.api(f"ladder-metrics-after-{level}", "GET", p.port, "/metrics", timeout=30)
    lat = [r.elapsed_s for r in results if r.ok]
    ttft = [r.ttft_s for r in results if r.ok and r.ttft_s is not None]
    # the first token of either channel: K3 thinks first, so it is usually a reasoning token
    channels: dict[str, int] = {}
    for r in results:
        if r.ok and r.ttft_channel:
            channels[r.ttft_channel] = channels.get(r.ttft_channel, 0) + 1
    errors = [r.describe() for r in results if not r.ok]
    gpu = ctx.read_gpu()
    status, restarts = _container(ctx, f"ladder-container-{level}")
    used, total = gpu.get("gpu_mem_used_mib"), gpu.get("gpu_mem_total_mib")
    row = {"step": "concurrency", "level": level, "requests": level, "errors": len(errors),
           "error_rate": round(len(errors) / level, 4),
           "p50_s": _r(percentile(lat, 50)), "p95_s": _r(percentile(lat, 95)), "max_s": _r(max(lat, default=None)),
           "ttft_p50_s": _r(percentile(ttft, 50)), "ttft_p95_s": _r(percentile(ttft, 95)), "ttft_channels": channels,
           # the client's own time before each request went on the wire (not in the figures above)
           "send_wait_max_s": _r(max((r.send_wait_s for r in results if r.send_wait_s is not None), default=None)),
           "gpu_mem_used_mib": used, "gpu_mem_total_mib": total,
           "gpu_mem_pct": round(100 * used / total, 1) if used is not None and total else None,
           "container": status, "restarts": restarts - restarts0 if restarts >= 0 and restarts0 >= 0 else None}
    # the client's timings against the server's histograms for the same level
    timing = timing_check(ttft, lat, before.text if before.ok else "", after.text if after.ok else "")
    row["server_timing"] = timing
    why, slow = [], []
    if row["error_rate"] > p.max_error_rate:
        why.append(f"{len(errors)}/{level} requests failed (first: {errors[0][:200]})")
    if row["p95_s"] is not None and row["p95_s"] > p.p95_latency_max_s:
        slow.append(f"p95 latency {row['p95_s']}s > {p.p95_latency_max_s}s")
    if row["ttft_p95_s"] is not None and row["ttft_p95_s"] > p.ttft_p95_max_s:
        slow.append(f"p95 time to first token {row['ttft_p95_s']}s > {p.ttft_p95_max_s}s")
    if status != "running" or row["restarts"] is None or row["restarts"] > p.max_restarts:
        why.append(f"server container {status}, restarts {row['restarts']} (allowed {p.max_restarts})")
    if p.gpu_mem_max_pct is not None and row["gpu_mem_pct"] is not None and row["gpu_mem_pct"] > p.gpu_mem_max_pct:
        why.append(f"GPU memory {row['gpu_mem_pct']}% > {p.gpu_mem_max_pct}%")
    if not lat:
        why.append("no request completed")
    if timing["agree"] is False:
        # the client timed itself, not the server: its figures decide nothing about the server
        row["measurement_problem"] = timing["reason"]
        if slow:
            slow = [f"measurement problem, client and server timings disagree ({timing['reason']}); "
                    f"not judged on the client's figures: {'; '.join(slow)}"]
            row["inconclusive"] = not why       # a person decides, unless the server failed otherwise
    why += slow
    row["passed"], row["reason"] = not why, "; ".join(why)
    return row


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _valid_call(calls: list[dict[str, Any]]) -> bool:
    for c in calls:
        try:
            if c["function"]["name"] == "get_weather" and isinstance(json.loads(c["function"]["arguments"]), dict):
                return True
        except (KeyError, TypeError, ValueError):
            continue
    return False


def tools_step(ctx: NodeCtx, p: Any) -> dict[str, Any]:
    body = thinking.off({"model": p.model, "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 64,
                         "messages": [{"role": "user", "content": "What's the weather in Beijing?"}]})
    good, resp = vllm_server.chat(ctx, "tool-call", p.port, body)
    msg = vllm_server.message(resp) if good else {}
    calls = msg.get("tool_calls") or []
    row: dict[str, Any] = {"step": "tools", "tool_calls": len(calls), "empty_tool_call": bool(good and not calls),
                           "content_instead": (msg.get("content") or "")[:200] if good and not calls else None,
                           "tool_call_ok": _valid_call(calls)}
    # the same request again, as an agent retries: it must give a valid call again
    good2, resp2 = vllm_server.chat(ctx, "tool-call-retry", p.port, body)
    row["retry_ok"] = bool(good2 and _valid_call(vllm_server.message(resp2).get("tool_calls") or []))
    streamed = ctx.api("tool-call-stream", "POST", p.port, "/v1/chat/completions", body, stream=True)
    folded = assemble_stream(streamed.events) if streamed.ok else {}
    row["stream_ok"] = bool(streamed.ok and streamed.done)
    row["stream_tool_call_ok"] = _valid_call(folded.get("tool_calls") or [])
    why = []
    if not good:
        why.append(f"tool call request failed: {str(resp)[:200]}")
    elif not calls:
        why.append("empty tool_calls: the reply carried no parsed tool call (check --tool-call-parser)")
    elif not row["tool_call_ok"]:
        why.append("tool call not for get_weather with JSON arguments")
    if good and not row["retry_ok"]:
        why.append("the retried tool call did not return a valid call")
    if not row["stream_ok"]:
        why.append(f"streamed reply incomplete: {streamed.describe()}")
    elif calls and not row["stream_tool_call_ok"]:
        why.append("the streamed tool-call deltas do not assemble into a valid call")
    row["passed"], row["reason"] = not why, "; ".join(why)
    return row


def check_call(call: dict[str, Any], tools: dict[str, dict[str, Any]]) -> str | None:
    """Why a tool call is not valid for the tools offered (None: valid): a known tool, JSON
    arguments, and those arguments valid against the tool's JSON schema."""
    fn = call.get("function") or {}
    schema = tools.get(fn.get("name") or "")
    if schema is None:
        return f"unknown tool {fn.get('name')!r}"
    try:
        args = json.loads(fn.get("arguments") or "")
    except (TypeError, ValueError) as exc:
        return f"{fn.get('name')}: arguments are not JSON ({exc})"
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(args))
    return f"{fn.get('name')}: {err.message}" if err is not None else None


def agent_loop(ctx: NodeCtx, p: Any, stream: bool) -> dict[str, Any]:
    """One multi-turn tool loop: call, tool result, next call ... final answer. Every reply's
    finish_reason must agree with it ("tool_calls" exactly when calls came back); an empty or
    invalid call is retried up to ``agent_retries`` times in its turn, and counted."""
    tools = AGENT_TOOLS[:p.agent_turns]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    mode = "stream" if stream else "non_stream"
    messages: list[dict[str, Any]] = [{"role": "user", "content": (
        "Plan a trip from Beijing to Shanghai. Use the tools one at a time, in the order given, then answer.")}]
    n = {"replies": 0, "thinking_replies": 0, "calls": 0, "valid_calls": 0, "empty": 0, "retries": 0,
         "finish_disagree": 0}
    invalid: list[str] = []
    final, error = None, None
    for turn in range(1, p.agent_turns + 2):
        calls: list[dict[str, Any]] = []
        for attempt in range(p.agent_retries + 1):
            # thinking on, as agents run K3: the budget holds the thinking and the call
            body = thinking.on({"model": p.model, "tools": tools, "tool_choice": "auto", "messages": messages},
                               AGENT_MAX_TOKENS)
            step = f"agent-{mode}-turn{turn}-try{attempt + 1}"
            if stream:
                res = ctx.api(step, "POST", p.port, "/v1/chat/completions", body, stream=True)
                got = assemble_stream(res.events) if res.ok and res.done else None
            else:
                good, resp = vllm_server.chat(ctx, step, p.port, body, timeout=p.request_timeout)
                msg = vllm_server.message(resp) if good else {}
                got = {"content": msg.get("content") or "", "reasoning": msg.get("reasoning") or "",
                       "tool_calls": msg.get("tool_calls") or [],
                       "finish_reason": (resp.get("choices") or [{}])[0].get("finish_reason")} if good else None
                res = resp
            if got is None:
                said = res.describe() if hasattr(res, "describe") else str(res)
                error = f"turn {turn}: request failed: {said[:200]}"
                break
            n["replies"] += 1
            n["thinking_replies"] += bool(got.get("reasoning"))
            calls = got["tool_calls"] or []
            if (got["finish_reason"] == "tool_calls") != bool(calls):
                n["finish_disagree"] += 1
            bad = [why for why in (check_call(c, schemas) for c in calls) if why]
            n["calls"] += len(calls)
            n["valid_calls"] += len(calls) - len(bad)
            invalid += bad
            if not calls and not (got["content"] or "").strip() or got["finish_reason"] == "tool_calls" and not calls:
                n["empty"] += 1             # neither a call nor an answer: retried
            elif not bad:
                break
            if attempt < p.agent_retries:
                n["retries"] += 1
        if error:
            break
        if not calls:
            final = got["content"] if got and got["content"].strip() and got["finish_reason"] != "tool_calls" else None
            break
        assert got is not None          # a request that failed ended the loop above, with its error
        messages.append({"role": "assistant", "content": got.get("content") or None, "tool_calls": calls})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c.get("id") or "", "content": json.dumps(
                {"tool": c["function"]["name"], "ok": True})})
    tool_turns = sum(1 for m in messages if m["role"] == "assistant")
    accuracy = n["valid_calls"] / n["calls"] if n["calls"] else 0.0
    agreement = 1 - n["finish_disagree"] / n["replies"] if n["replies"] else 0.0
    empty_rate = n["empty"] / n["replies"] if n["replies"] else 1.0
    why = []
    if error:
        why.append(error)
    elif final is None:
        why.append(f"no final answer after {tool_turns} tool turn(s)")
    if not error and tool_turns < p.agent_turns:
        why.append(f"{tool_turns} tool turn(s), {p.agent_turns} expected")
    if n["calls"] and accuracy < p.agent_min_schema_accuracy:
        why.append(f"schema accuracy {accuracy:.2%} < {p.agent_min_schema_accuracy:.0%} ({'; '.join(invalid[:3])})")
    if agreement < p.agent_min_finish_agreement:
        why.append(f"finish_reason agreed with the reply in {agreement:.2%} < {p.agent_min_finish_agreement:.0%}")
    if empty_rate > p.agent_max_empty_rate:
        why.append(f"{n['empty']} empty replies of {n['replies']} ({empty_rate:.0%} > {p.agent_max_empty_rate:.0%})")
    return {"mode": mode, "tool_turns": tool_turns, **n, "schema_accuracy": round(accuracy, 4),
            "finish_agreement": round(agreement, 4), "empty_rate": round(empty_rate, 4), "invalid": invalid[:8],
            "final_answer": (final or "")[:200], "passed": not why, "reason": "; ".join(why)}


def agent_step(ctx: NodeCtx, p: Any) -> dict[str, Any]:
    """The agent flow in both modes; the thresholds are the playbook's (``agent_*``)."""
    runs = [agent_loop(ctx, p, stream=False), agent_loop(ctx, p, stream=True)]
    failed = [r for r in runs if not r["passed"]]
    return {"step": "agent", "runs": runs, "thresholds": {
        "turns": p.agent_turns, "retries": p.agent_retries, "min_schema_accuracy": p.agent_min_schema_accuracy,
        "min_finish_agreement": p.agent_min_finish_agreement, "max_empty_rate": p.agent_max_empty_rate},
        "passed": not failed, "reason": "; ".join(f"{r['mode']}: {r['reason']}" for r in failed)}


def structured_step(ctx: NodeCtx, p: Any) -> dict[str, Any]:
    good, resp = vllm_server.chat(ctx, "structured-output", p.port, thinking.off({
        "model": p.model, "max_tokens": 64,
        "response_format": {"type": "json_schema", "json_schema": {"name": "status", "schema": SCHEMA}},
        "messages": [{"role": "user", "content": "Report status as JSON."}]}))
    try:
        obj = json.loads(vllm_server.message(resp).get("content") or "") if good else None
        ok = isinstance(obj, dict) and all(k in obj for k in SCHEMA["required"])
    except (TypeError, ValueError):
        ok = False
    return {"step": "structured", "passed": ok, "reason": "" if ok else "structured output did not match the schema"}


def vision_step(ctx: NodeCtx, p: Any) -> dict[str, Any]:
    good, resp = vllm_server.chat(ctx, "vision-input", p.port, thinking.off({
        "model": p.model, "max_tokens": 32,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe this image in one word."},
                                                  {"type": "image_url", "image_url": {"url": PIXEL}}]}]}))
    ok = bool(good and vllm_server.message(resp).get("content"))
    return {"step": "vision", "passed": ok, "reason": "" if ok else f"image input failed: {str(resp)[:200]}"}


def run(ctx: NodeCtx) -> StageOutcome:
    p = ctx.params
    if ctx.replica:
        # a multi-node replica: one launch across its nodes (the profile's command), checked on the head
        ok, why, logs, rf = replica_serve.launch(ctx, NAME, p.image, p.model, list(p.args), p.port)
        args = rf["replica_args"][ctx.node]
        f: dict[str, Any] = replica_serve.per_node({"prefix_caching_flag": "--enable-prefix-caching" in args, **rf},
                                         feature_args=rf["replica_args"])
        stop: Callable[[], None] = lambda: replica_serve.stop(ctx, NAME)  # noqa: E731
        # the target context is what the launch serves at most (Hopper's recipe: 32k); the
        # context step reads the server's own limit from /tokenize and keeps under it
        if "--max-model-len" in args and p.context_tokens:
            served = int(args[args.index("--max-model-len") + 1])
            if p.context_tokens > served:
                f["context_tokens_capped"] = {"asked": p.context_tokens, "max_model_len": served}
    else:
        args = list(p.args)
        f = {"feature_args": args, "prefix_caching_flag": "--enable-prefix-caching" in args}
        ok, why, logs = vllm_server.launch(ctx, NAME, p.image, p.model, args, p.port, p.health_timeout)
        stop = lambda: vllm_server.stop(ctx, NAME)  # noqa: E731
    if not ok:
        if ctx.replica:
            stop()
        else:
            ctx.workload.remove_server(ctx, NAME, f"{NAME}-remove")
        return StageOutcome(False, why, f, logs)
    ladder: list[dict[str, Any]] = []
    f["ladder"] = ladder
    _, restarts0 = _container(ctx, "ladder-container-start")

    def steps() -> Iterator[Callable[[], dict[str, Any]]]:
        if p.context_tokens:
            yield lambda: context_step(ctx, p)
        for level in p.concurrency:
            yield functools.partial(concurrency_step, ctx, p, level, restarts0)
        yield lambda: {"step": "prefix_cache", **prefix_cache_proof(ctx, p.port, p.model, p.prefix_repeats,
                                                                    p.prefix_words, p.prefix_block_tokens)}
        if p.tool_call:
            yield lambda: tools_step(ctx, p)
        if p.tool_call and p.agent_turns:
            yield lambda: agent_step(ctx, p)
        yield lambda: structured_step(ctx, p)
        if p.vision:
            yield lambda: vision_step(ctx, p)

    failed = None
    undecided = []
    for make in steps():
        row = make()
        row.setdefault("passed", row.get("ok", False))
        ladder.append(row)
        if row["step"] == "prefix_cache":
            f["prefix_cache"] = {k: v for k, v in row.items() if k != "step"}
            ctx.evidence("prefix-cache-proof.json", fastjson.dumps_pretty(f["prefix_cache"]))
        if not row["passed"] and row.get("inconclusive"):
            undecided.append(row)           # a person decides at the end; the ladder goes on
        elif not row["passed"]:
            failed = row
            break
    tools = next((r for r in ladder if r["step"] == "tools"), None)
    if tools:
        f.update(tool_calls=tools["tool_calls"], empty_tool_call=tools["empty_tool_call"],
                 tool_call_ok=tools["tool_call_ok"], tool_call_retry_ok=tools["retry_ok"],
                 stream_ok=tools["stream_ok"])
    agent = next((r for r in ladder if r["step"] == "agent"), None)
    if agent:
        f["agent_flow"] = {r["mode"]: {k: v for k, v in r.items() if k != "mode"} for r in agent["runs"]}
        f["agent_flow_ok"] = agent["passed"]
    conc = [r for r in ladder if r["step"] == "concurrency"]
    f["concurrency_levels_passed"] = [r["level"] for r in conc if r["passed"]]
    f["ladder_complete"] = failed is None
    structured = next((r for r in ladder if r["step"] == "structured"), None)
    if structured:
        f["structured_output_ok"] = structured["passed"]
    ctx.evidence("load-ladder.json", fastjson.dumps_pretty({"thresholds": {
        "context_tokens": p.context_tokens, "concurrency": list(p.concurrency), "p95_latency_max_s": p.p95_latency_max_s,
        "ttft_p95_max_s": p.ttft_p95_max_s, "max_error_rate": p.max_error_rate, "max_restarts": p.max_restarts,
        "gpu_mem_max_pct": p.gpu_mem_max_pct}, "steps": ladder}))
    stop()
    if failed is None and undecided:
        reason = "inconclusive: " + "; ".join(f"{r['step']}: {r.get('reason')}" for r in undecided)
        return StageOutcome(False, reason, f, reason, inconclusive=True)
    if failed:
        reason = f"load ladder stopped at {failed['step']}" + (f" {failed['level']}" if "level" in failed else "") \
            + f": {failed.get('reason')}"
        return StageOutcome(False, reason, f, reason)
    return StageOutcome(True, "", f)


SPEC = StageSpec(kind("features"), run=run)
