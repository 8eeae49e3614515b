"""HTTP from the controller to a node's vLLM server, for the stage gates (and webhooks).

Errors never raise: a refused connection, a timeout or a non-JSON body come back as an
``HttpResult`` with ``error`` set, because the gates decide what a failure means (a
health poll keeps waiting; a feature check fails with the reason). Streaming replies are
read as server-sent events, with the time to the first token measured on the wire.

The client is a small HTTP/1.1 connection (``transport/http11.py``) with keep-alive
connections pooled per (scheme, host, port): a gate sends a few hundred requests per
node, and a full HTTP library's per-request cost was a third of the engine's CPU at a
thousand nodes (the standard ``http.client``'s header parsing still cost several
percent). A pooled connection the server has closed (a restarted container) is noticed
before reuse, and a request that fails on a reused connection before any reply byte is
sent again once on a fresh one, as browsers and urllib3 do. No proxy from the
environment is used: gates talk to the node itself.
"""

from __future__ import annotations

import select
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from k3rollout import fastjson
from k3rollout.transport import http11 as wire


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
            return fastjson.loads(self.text)
        except ValueError:
            return None

    def describe(self) -> str:
        if self.error:
            return self.error
        return f"HTTP {self.status}: {self.text[:300]}"


class _Stale(Exception):
    """A reused keep-alive connection failed before the reply began: send again, fresh."""


class _NoConnection(Exception):
    """Opening the connection failed (refused, unreachable, timed out)."""

    def __init__(self, cause: OSError):
        super().__init__(str(cause))
        self.cause = cause


_Key = tuple[str, str, int]


class ApiClient:
    """Keep-alive connections for a run, shared by the worker threads (one request per
    connection at a time; a thread takes an idle one or opens its own)."""

    def __init__(self, max_idle_per_host: int = 8):
        self.max_idle = max_idle_per_host
        self._idle: dict[_Key, list[wire.Connection]] = {}
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    # ---------------------------------------------------------------- connections

    def _target(self, url: str) -> tuple[_Key, str]:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        return (u.scheme, u.hostname, port), path

    def _checkout(self, key: _Key, timeout: float, fresh: bool) -> tuple[wire.Connection, bool]:
        with self._lock:
            pool = None if fresh else self._idle.get(key)
            while pool:
                conn = pool.pop()
                if _usable(conn):
                    conn.settimeout(timeout)
                    return conn, True
                conn.close()
        scheme, host, port = key
        if scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        return wire.Connection(scheme, host, port, timeout, self._ssl), False

    def _checkin(self, key: _Key, conn: wire.Connection, resp: wire.Response) -> None:
        if resp.will_close or not resp.complete or self._closed:
            conn.close()
            return
        with self._lock:
            pool = self._idle.setdefault(key, [])
            if len(pool) < self.max_idle:
                pool.append(conn)
                return
        conn.close()

    def _send(self, method: str, url: str, body: Any,
              timeout: float) -> tuple[_Key, wire.Connection, wire.Response]:
        key, path = self._target(url)
        payload = None if body is None else fastjson.dumps(body)
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "k3rollout"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            conn, reused = self._checkout(key, timeout, fresh=attempt == 2)
            try:
                if not reused:
                    try:
                        conn.connect()
                    except OSError as exc:
                        raise _NoConnection(exc) from exc
                try:
                    return key, conn, conn.request(method, path, payload, headers)
                except (wire.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                    if reused:
                        raise _Stale() from exc
                    raise
            except _Stale:
                conn.close()
                continue
            except BaseException:
                conn.close()
                raise
        raise AssertionError("the second try uses a new connection, which is never stale")

    # ---------------------------------------------------------------- requests

    def _exchange(self, res: HttpResult, body: Any, timeout: float,
                  read: Callable[[wire.Response, float], None]) -> HttpResult:
        """One request on a pooled connection; ``read`` takes the reply into ``res``. The
        connection goes back to the pool only if the reply was read to its end; a failure
        becomes ``res.error``, naming the URL."""
        started = time.perf_counter()
        conn = None
        try:
            key, conn, resp = self._send(res.method, res.url, body, timeout)
            res.status = resp.status
            read(resp, started)
            self._checkin(key, conn, resp)
            conn = None
        except (_NoConnection, OSError, ValueError) as exc:
            res.error = _describe(exc, res.url)
        finally:
            if conn is not None:
                conn.close()
        res.elapsed_s = time.perf_counter() - started
        return res

    def request(self, method: str, url: str, body: Any = None, timeout: float = 60.0) -> HttpResult:
        def read(resp: wire.Response, started: float) -> None:
            res.text = resp.read().decode(_charset(resp), errors="replace")

        res = HttpResult(method, url)
        return self._exchange(res, body, timeout, read)

    def stream(self, url: str, body: dict[str, Any], timeout: float = 300.0) -> HttpResult:
        """POST with ``stream: true``; collect the SSE ``data:`` events."""
        def read(resp: wire.Response, started: float) -> None:
            if resp.status != 200:
                res.text = resp.read().decode(_charset(resp), errors="replace")
                return
            while True:
                raw = resp.readline()
                if not raw:
                    return
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    res.done = True
                    resp.read()             # the rest of the body (the chunked terminator)
                    return
                try:
                    ev = fastjson.loads(data)
                except ValueError:
                    res.error = f"{url}: a streamed event is not JSON: {data[:200]!r}"
                    return
                if res.ttft_s is None and any(_has_output(c.get("delta", {}))
                                              for c in ev.get("choices", []) if isinstance(c, dict)):
                    res.ttft_s = time.perf_counter() - started
                res.events.append(ev)

        res = HttpResult("POST", url)
        self._exchange(res, {**body, "stream": True}, timeout, read)
        if res.status == 200 and not res.error and not res.done:
            res.error = f"{url}: the stream ended without 'data: [DONE]'"
        return res

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._idle = self._idle, {}
        for pool in pools.values():
            for conn in pool:
                conn.close()


def _usable(conn: wire.Connection) -> bool:
    """An idle keep-alive connection is still good when nothing is waiting to be read: a
    readable idle socket means the server closed it (or sent bytes nobody asked for)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _charset(resp: wire.Response) -> str:
    ctype = resp.headers.get("content-type", "")
    for part in ctype.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        if k.lower() == "charset" and v:
            return v.strip('"') if _known(v.strip('"')) else "utf-8"
    return "utf-8"


def _known(codec: str) -> bool:
    try:
        "".encode(codec)
        return True
    except LookupError:
        return False


def _has_output(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"))


def _describe(exc: BaseException, url: str) -> str:
    if isinstance(exc, _NoConnection):
        if isinstance(exc.cause, ssl.SSLError):
            return f"{url}: TLS error ({exc.cause})"
        if isinstance(exc.cause, TimeoutError):
            return f"{url}: connect timeout ({exc.cause or 'timed out'})"
        return f"{url}: connection refused or unreachable ({exc.cause})"
    if isinstance(exc, wire.ProtocolError):
        return f"{url}: not a valid HTTP reply ({exc})"
    if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError):
        return f"{url}: {exc}"
    if isinstance(exc, TimeoutError):
        return f"{url}: read timeout ({exc or 'timed out'})"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return f"{url}: connection closed mid-reply ({exc!r})"
    if isinstance(exc, ssl.SSLError):
        return f"{url}: TLS error ({exc})"
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
