"""HTTP from the controller to a node's vLLM server (httpx), for the stage gates.

Errors never raise: a refused connection, a timeout or a non-JSON body come back as an
``HttpResult`` with ``error`` set, because the gates decide what a failure means (a
health poll keeps waiting; a feature check fails with the reason). Streaming replies are
read as server-sent events, with the time to the first token measured on the wire.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class HttpResult:
    method: str
    url: str
    status: int | None = None
    text: str = ""
    error: str = ""
    elapsed_s: float = 0.0
    ttft_s: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False               # a stream ended with "data: [DONE]"

    @property
    def ok(self) -> bool:
        return not self.error and self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None

    def describe(self) -> str:
        if self.error:
            return self.error
        return f"HTTP {self.status}: {self.text[:300]}"


class ApiClient:
    """One connection pool for a run, shared by the worker threads."""

    def __init__(self, max_connections: int = 256):
        self.limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=64)
        self.client = httpx.Client(limits=self.limits, trust_env=False)

    def request(self, method: str, url: str, body: Any = None, timeout: float = 60.0) -> HttpResult:
        res = HttpResult(method, url)
        started = time.perf_counter()
        try:
            r = self.client.request(method, url, json=body, timeout=timeout)
            res.status, res.text = r.status_code, r.text
        except httpx.HTTPError as exc:
            res.error = _describe(exc, url)
        res.elapsed_s = time.perf_counter() - started
        return res

    def stream(self, url: str, body: dict[str, Any], timeout: float = 300.0) -> HttpResult:
        """POST with ``stream: true``; collect the SSE ``data:`` events."""
        res = HttpResult("POST", url)
        started = time.perf_counter()
        try:
            with self.client.stream("POST", url, json={**body, "stream": True}, timeout=timeout) as r:
                res.status = r.status_code
                if r.status_code != 200:
                    res.text = r.read().decode(errors="replace")
                else:
                    for line in r.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            res.done = True
                            break
                        try:
                            ev = json.loads(data)
                        except ValueError:
                            res.error = f"{url}: a streamed event is not JSON: {data[:200]!r}"
                            break
                        if res.ttft_s is None and any(_has_output(c.get("delta", {}))
                                                      for c in ev.get("choices", [])):
                            res.ttft_s = time.perf_counter() - started
                        res.events.append(ev)
        except httpx.HTTPError as exc:
            res.error = _describe(exc, url)
        res.elapsed_s = time.perf_counter() - started
        if res.status == 200 and not res.error and not res.done:
            res.error = f"{url}: the stream ended without 'data: [DONE]'"
        return res

    def close(self) -> None:
        self.client.close()


def _has_output(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"))


def _describe(exc: httpx.HTTPError, url: str) -> str:
    kind = {httpx.ConnectError: "connection refused or unreachable", httpx.ConnectTimeout: "connect timeout",
            httpx.ReadTimeout: "read timeout", httpx.RemoteProtocolError: "connection closed mid-reply"}
    for cls, words in kind.items():
        if isinstance(exc, cls):
            return f"{url}: {words} ({exc})"
    return f"{url}: {type(exc).__name__}: {exc}"


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
