"""Pure functions over OpenAI-style chat completion streams (server-sent events).

No I/O: the HTTP client hands over the decoded ``data:`` events; the stage gates fold
them here the way OpenAI's clients do.
"""

from __future__ import annotations

from typing import Any


def has_output(delta: dict[str, Any]) -> bool:
    """Whether a streamed delta carries generated output (the first one marks the time to
    first token)."""
    return bool(delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"))


def assemble_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold streamed chat deltas into one message (content, and tool calls by index), the
    way OpenAI clients do; returns {"content", "tool_calls", "finish_reason", "usage"}."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for ev in events:
        usage = ev.get("usage") or usage
        for ch in ev.get("choices", []):
            d = ch.get("delta") or {}
            if d.get("content"):
                content.append(d["content"])
            for tc in d.get("tool_calls") or []:
                cur = calls.setdefault(int(tc.get("index", 0)), {"id": None, "type": "function",
                                                                 "function": {"name": "", "arguments": ""}})
                cur["id"] = tc.get("id") or cur["id"]
                fn = tc.get("function") or {}
                cur["function"]["name"] += fn.get("name") or ""
                cur["function"]["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return {"content": "".join(content), "tool_calls": [calls[i] for i in sorted(calls)],
            "finish_reason": finish, "usage": usage}
