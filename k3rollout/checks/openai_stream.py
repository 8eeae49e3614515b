"""Pure functions over OpenAI-style chat completion streams (server-sent events).

No I/O: the HTTP client hands over the decoded ``data:`` events; the stage gates fold
them here the way OpenAI's clients do.
"""

from __future__ import annotations

from typing import Any


def stream_error(ev: dict[str, Any]) -> str | None:
    """The error a streamed event carries, as one line, or None.

    vLLM sends a failure inside a stream (HTTP 200 already sent) as ``data: {"error":
    {"message", "type", "param", "code"}}`` and then ``data: [DONE]``
    (vllm/entrypoints/openai/chat_completion/serving.py, ``create_streaming_error_response``
    in vllm/entrypoints/generate/base/serving.py); the official client raises on it."""
    err = ev.get("error")
    if not err:
        return None
    if isinstance(err, dict):
        return f"{err.get('type') or 'error'} ({err.get('code')}): {err.get('message')}"
    return str(err)


# Where a streamed delta carries output. vLLM 0.33 streams a reasoning model's thinking as
# ``reasoning`` (DeltaMessage in vllm/entrypoints/generate/base/protocol.py); ``reasoning_content``
# is the name before the rename, which 0.33 only accepts on input
# (vllm/entrypoints/openai/chat_completion/protocol.py) and an older server may still send.
CHANNELS = (("reasoning", "reasoning"), ("reasoning_content", "reasoning"), ("content", "content"),
            ("tool_calls", "tool_calls"))


def output_channel(delta: dict[str, Any]) -> str | None:
    """Which channel a streamed delta carries generated output on ("reasoning", "content"
    or "tool_calls"), or None: the first such delta marks the time to first token, whichever
    channel it is on."""
    for key, channel in CHANNELS:
        if delta.get(key):
            return channel
    return None


def assemble_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold streamed chat deltas into one message (content, and tool calls by index), the
    way OpenAI clients do; returns {"content", "reasoning", "tool_calls", "finish_reason",
    "usage", "error"}, ``error`` the first error event's line (None without one)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, usage, error = None, None, None
    for ev in events:
        error = error or stream_error(ev)
        usage = ev.get("usage") or usage
        for ch in ev.get("choices", []):
            d = ch.get("delta") or {}
            if d.get("content"):
                content.append(d["content"])
            if d.get("reasoning") or d.get("reasoning_content"):
                reasoning.append(d.get("reasoning") or d["reasoning_content"])
            for tc in d.get("tool_calls") or []:
                cur = calls.setdefault(int(tc.get("index", 0)), {"id": None, "type": "function",
                                                                 "function": {"name": "", "arguments": ""}})
                cur["id"] = tc.get("id") or cur["id"]
                fn = tc.get("function") or {}
                cur["function"]["name"] += fn.get("name") or ""
                cur["function"]["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return {"content": "".join(content), "reasoning": "".join(reasoning), "tool_calls": [calls[i] for i in sorted(calls)],
            "finish_reason": finish, "usage": usage, "error": error}
