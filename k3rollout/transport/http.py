"""HTTP from the controller to a node's vLLM server, for the stage gates (and webhooks).

Built on httpx (sync client, pooled keep-alive connections shared by the engine's worker
threads; an idle connection the server closed is noticed and replaced by httpcore).
``ApiClient(transport=httpx.MockTransport(handler))`` is the test seam.

Errors never raise: a refused connection, a timeout or a non-JSON body come back as an
``HttpResult`` with ``error`` set, because the gates decide what a failure means (a
health poll keeps waiting; a feature check fails with the reason). Streaming replies are
read as server-sent events, with the time to the first token measured on the wire; an
error event inside a 200 stream makes the result a failure (``stream_error``). No
proxy from the environment is used: gates talk to the node itself.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from k3rollout import fastjson
from k3rollout.checks.openai_stream import output_channel, stream_error


@dataclass
class HttpResult:
    method: str
    url: str
    status: int | None = None
    text: str = ""
    error: str = ""
    elapsed_s: float = 0.0
    ttft_s: float | None = None
    ttft_channel: str | None = None  # where the first token came: "reasoning", "content", "tool_calls"
    # a stream's time before its request went on the wire (connect, the client's own queueing):
    # kept apart, since elapsed_s and ttft_s count from the request's first byte sent
    send_wait_s: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False               # a stream ended with "data: [DONE]"
    stream_error: str | None = None  # an error event inside a 200 stream (the result is not ok)

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


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
HEADERS = {"Accept": "application/json, text/event-stream", "User-Agent": "k3rollout"}


class ApiClient:
    """One pooled httpx client for a run, shared by the worker threads."""

    def __init__(self, transport: httpx.BaseTransport | None = None, keepalive_expiry_s: float = 5.0, *,
                 headers: dict[str, str] | None = None, verify: Any = True, cert: Any = None,
                 on_request: Callable[[str, str], None] | None = None):
        """``headers``, ``verify`` and ``cert``: a client for the Kubernetes API server's pod
        proxy, with the kubeconfig's credentials (KubernetesApi.proxy_settings);
        ``on_request(method, url)`` is told of each request as it is sent (httpx's request
        event hook), to count them."""
        self._transport = transport
        self._ssl: ssl.SSLContext | None = None
        self._headers, self._verify, self._cert = headers, verify, cert
        self._on_request = on_request
        hooks = {"request": [lambda r: on_request(r.method, str(r.url))]} if on_request else {}
        # No cap on idle connections and none on connections: httpcore 1.0.9's pool enforces
        # either cap by closing an "idle" connection, counting all connections rather than the
        # idle ones, and may pick one it has just handed to a waiting request, which then reads
        # a closed socket (EBADF) in the middle of a load-ladder rung (encode/httpcore#1000,
        # #1110). Idle connections still go after keepalive_expiry.
        self._client = httpx.Client(transport=transport, trust_env=False, headers={**HEADERS, **(headers or {})},
                                    verify=verify, cert=cert, event_hooks=hooks,
                                    limits=httpx.Limits(max_keepalive_connections=None, max_connections=None,
                                                        keepalive_expiry=keepalive_expiry_s))

    def _build(self, method: str, url: str, body: Any, timeout: float) -> httpx.Request:
        u = httpx.URL(url)
        if u.scheme not in ("http", "https") or not u.host:
            raise httpx.UnsupportedProtocol(f"not an http:// or https:// URL: {url!r}")
        return self._client.build_request(method, u, json=body, timeout=timeout)

    def request(self, method: str, url: str, body: Any = None, timeout: float = 60.0) -> HttpResult:
        res = HttpResult(method, url)
        started = time.perf_counter()
        for attempt in (1, 2):
            try:
                reply = self._client.send(self._build(method, url, body, timeout))
                res.status = reply.status_code
                res.text = reply.text
            except httpx.RemoteProtocolError as exc:
                # A server may close an idle keep-alive connection just as the pool hands it
                # out (its FIN not yet read): the request then gets no reply at all. An
                # idempotent request is sent once more, on a new connection, as browsers and
                # urllib3 do; anything else, or a second failure, is the answer.
                if attempt == 1 and method in IDEMPOTENT and "without sending a response" in str(exc):
                    continue
                res.error = _describe(exc, url)
            except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
                res.error = _describe(exc, url)
            break
        res.elapsed_s = time.perf_counter() - started
        return res

    def stream(self, url: str, body: dict[str, Any], timeout: float = 300.0) -> HttpResult:
        """POST with ``stream: true``; collect the SSE ``data:`` events. The time to the first
        token and the elapsed time count from the moment the whole request is on the wire
        (httpcore's ``send_request_body`` trace), as the server's own histograms count from
        the request's arrival, once its body is read: connecting, and waiting for this
        process's other threads before that (between the headers and the body too, when many
        streams start at once), is the client's time, kept in ``send_wait_s``."""
        res = HttpResult("POST", url)
        called = time.perf_counter()
        sent: list[float] = []

        def trace(event: str, info: dict[str, Any]) -> None:
            if not sent and event.endswith("send_request_body.complete"):
                sent.append(time.perf_counter())

        def started() -> float:
            return sent[0] if sent else called

        try:
            request = self._build("POST", url, {**body, "stream": True}, timeout)
            request.extensions["trace"] = trace
            reply = self._client.send(request, stream=True)
            try:
                res.status = reply.status_code
                if reply.status_code != 200:
                    reply.read()
                    res.text = reply.text
                else:
                    _read_events(reply, res, started())
            finally:
                reply.close()
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            res.error = _describe(exc, url)
        res.elapsed_s = time.perf_counter() - started()
        res.send_wait_s = round(started() - called, 6) if sent else None
        if res.status == 200 and not res.error and res.stream_error:
            res.error = f"{url}: the stream failed after HTTP 200: {res.stream_error}"
        elif res.status == 200 and not res.error and not res.done:
            res.error = f"{url}: the stream ended without 'data: [DONE]'"
        return res

    def stream_many(self, url: str, bodies: list[dict[str, Any]], timeout: float = 300.0) -> list[HttpResult]:
        """Streams sent at once, for a load-ladder level: each on a client of its own (its own
        pool, one connection), all made before the first is sent and released together, so no
        stream waits on another's pool lock (issue #35: at concurrency 64 on one shared client,
        42% of the profiled samples waited on httpcore's pool lock, so the ladder timed the
        client). An injected transport (the test seam) is shared instead."""
        if len(bodies) <= 1 or self._transport is not None:
            return self._send_all(url, bodies, timeout, lambda i: self)
        verify: Any = self._verify
        if verify is True and self._cert is None:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()    # made once: each client would make its own
            verify = self._ssl
        # the same credentials as this client (the API server's pod proxy needs them)
        clients = [ApiClient(transport=httpx.HTTPTransport(verify=verify, cert=self._cert,
                                                          limits=httpx.Limits(max_connections=1)),
                             headers=self._headers, on_request=self._on_request) for _ in bodies]
        try:
            return self._send_all(url, bodies, timeout, lambda i: clients[i])
        finally:
            for c in clients:
                c.close()

    @staticmethod
    def _send_all(url: str, bodies: list[dict[str, Any]], timeout: float, client_for: Any) -> list[HttpResult]:
        results: list[HttpResult | None] = [None] * len(bodies)
        go = threading.Barrier(len(bodies) + 1) if len(bodies) > 1 else None

        def send(i: int) -> None:
            if go is not None:
                go.wait()
            results[i] = client_for(i).stream(url, bodies[i], timeout)

        if go is None:
            for i in range(len(bodies)):
                send(i)
        else:
            threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(bodies))]
            for t in threads:
                t.start()
            go.wait()
            for t in threads:
                t.join()
        return [r if r is not None else HttpResult("POST", url, error=f"{url}: the stream was not sent")
                for r in results]

    def close(self) -> None:
        self._client.close()


def sse_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a server-sent event stream, from its body in any chunks: a line ends at
    CRLF, LF or CR (the SSE grammar), which may fall across two chunks. Bytes, not text:
    an event's JSON is parsed as it came, without decoding every line first."""
    tail = b""
    for chunk in chunks:
        buf = tail + chunk
        cr = buf.endswith(b"\r")               # maybe the first half of a CRLF: wait for the next
        if cr:
            buf = buf[:-1]
        *lines, tail = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if cr:
            tail += b"\r"
        yield from lines
    if tail:
        yield from tail.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")[:1]


def _read_events(reply: httpx.Response, res: HttpResult, started: float) -> None:
    for line in sse_lines(reply.iter_bytes()):
        # after [DONE] the rest of the body is still read, so the connection goes back to
        # the pool; after a bad event it is not (close() drops it)
        if res.done or not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            res.done = True
            continue
        try:
            ev = fastjson.loads(data)
        except ValueError:
            res.error = f"{res.url}: a streamed event is not JSON: {data[:200].decode('utf-8', 'replace')!r}"
            return
        if not isinstance(ev, dict):
            res.error = f"{res.url}: a streamed event is not a JSON object: {data[:200].decode('utf-8', 'replace')!r}"
            return
        res.stream_error = res.stream_error or stream_error(ev)
        if res.ttft_s is None:
            channel = next((ch for ch in (output_channel(c.get("delta") or {}) for c in ev.get("choices", [])
                                          if isinstance(c, dict)) if ch), None)
            if channel:
                res.ttft_s, res.ttft_channel = time.perf_counter() - started, channel
        res.events.append(ev)


def _describe(exc: BaseException, url: str) -> str:
    """One line an operator can act on, starting with the URL."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"{url}: connect timeout ({exc or 'timed out'})"
    if isinstance(exc, httpx.ConnectError):
        if "SSL" in str(exc) or "certificate" in str(exc):
            return f"{url}: TLS error ({exc})"
        return f"{url}: connection refused or unreachable ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return f"{url}: read timeout ({exc or 'timed out'})"
    if isinstance(exc, httpx.RemoteProtocolError):
        if "closed" in str(exc).lower() or "disconnect" in str(exc).lower():
            return f"{url}: connection closed mid-reply ({exc})"
        return f"{url}: not a valid HTTP reply ({exc})"
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        text = str(exc)
        return f"{url}: {text}" if text.startswith("not an http") else f"{url}: not an http:// or https:// URL ({text})"
    if isinstance(exc, httpx.ReadError):
        return f"{url}: connection closed mid-reply ({exc!r})"
    return f"{url}: {type(exc).__name__}: {exc}"
