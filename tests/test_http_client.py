"""The gates' HTTP client (httpx underneath) against a real server (the standard library's
http.server on loopback): body framing, keep-alive reuse, a server that closed a pooled
connection, streaming, and errors that name the URL instead of raising; and through the
injected transport, the seam unit tests use."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3rollout.checks.openai_stream import assemble_stream
from k3rollout.transport.http import ApiClient, sse_lines


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    peers: list[tuple[str, int]] = []

    closed = 0

    def log_message(self, *args):        # quiet
        pass

    def finish(self):
        super().finish()
        Handler.closed += 1

    def _body(self, code: int, data: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    drop_next: set[tuple[str, int]] = set()

    def do_GET(self):
        Handler.peers.append(self.client_address)
        if self.client_address in Handler.drop_next:
            # the close of an idle keep-alive connection racing the client's next request:
            # the request is read, then the connection closes with no reply
            Handler.drop_next.discard(self.client_address)
            self.close_connection = True
            return
        if self.path == "/then-drop":
            Handler.drop_next.add(self.client_address)
            return self._body(200, b"ok")
        if self.path == "/length":
            return self._body(200, b'{"ok": true}')
        if self.path == "/latin1":
            return self._body(200, "caf\xe9".encode("latin-1"), "text/plain; charset=iso-8859-1")
        if self.path == "/close-delimited":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
            return
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
            return
        if self.path == "/no-content":
            self.send_response(204)
            self.end_headers()
            return
        if self.path == "/bye":
            # answers, then closes this keep-alive connection behind the client's back
            self._body(200, b"bye")
            self.close_connection = True
            return
        if self.path == "/garbage":
            self.wfile.write(b"SPDY/9 what\r\n\r\n")
            self.close_connection = True
            return
        return self._body(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        Handler.peers.append(self.client_address)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.client_address in Handler.drop_next:
            Handler.drop_next.discard(self.client_address)
            self.close_connection = True
            return
        req = json.loads(body)
        time.sleep(req.get("hold_s", 0))
        if req.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = [{"choices": [{"delta": {"content": "Hel"}}]}, {"choices": [{"delta": {"content": "lo"}}]},
                      {"choices": [{"delta": {}, "finish_reason": "stop"}]}]
            if req.get("fail_midway"):
                # vLLM 0.33: an error after the 200 went out is an event, then [DONE]
                events[1:] = [{"error": {"message": "Internal server error", "type": "InternalServerError",
                                         "param": None, "code": 500}}]
            for ev in events:
                data = f"data: {json.dumps(ev)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            return
        return self._body(200, json.dumps({"echo": req}).encode())


@pytest.fixture
def server():
    Handler.peers = []
    Handler.drop_next = set()
    # uvicorn's backlog (vLLM's server), not socketserver's 5: hundreds of connects at once
    # would otherwise overflow the accept queue and be reset by the kernel
    srv = type("Srv", (ThreadingHTTPServer,), {"request_queue_size": 2048})(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_bodies_by_length_chunked_close_and_none(server):
    api = ApiClient()
    r = api.request("GET", server + "/length")
    assert (r.ok, r.json()) == (True, {"ok": True})
    r = api.request("GET", server + "/chunked")
    assert (r.status, r.text) == (200, "hello chunked world")
    r = api.request("GET", server + "/close-delimited")
    assert (r.status, r.text) == (200, "until the end")
    r = api.request("GET", server + "/no-content")
    assert (r.status, r.text, r.ok) == (204, "", True)
    r = api.request("GET", server + "/latin1")
    assert r.text == "caf\xe9"
    r = api.request("GET", server + "/missing")
    assert (r.status, r.ok, r.json()) == (404, False, {"detail": "Not Found"})
    api.close()


def test_keep_alive_reuses_one_connection(server):
    api = ApiClient()
    for _ in range(5):
        assert api.request("GET", server + "/length").ok
        assert api.request("POST", server + "/echo", {"n": 1}).json() == {"echo": {"n": 1}}
    assert len(set(Handler.peers)) == 1         # one client port for every GET
    api.close()


def test_a_connection_the_server_closed_is_not_reused(server):
    api = ApiClient()
    assert api.request("GET", server + "/bye").text == "bye"
    r = api.request("GET", server + "/length")
    assert r.ok, r.error
    assert len(set(Handler.peers)) == 2         # a new connection for the second request
    api.close()


def test_a_pooled_connection_closed_as_it_is_reused_is_retried_once_for_a_get(server):
    """Deterministic form of the race: the server takes the next request on the kept-alive
    connection and closes it without a reply. A GET is sent once more on a new connection;
    a POST is not (it may have been acted on), and says what happened."""
    api = ApiClient()
    assert api.request("GET", server + "/then-drop").ok
    r = api.request("GET", server + "/length")
    assert r.ok and r.json() == {"ok": True}, r.error
    assert len(Handler.peers) == 3 and len(set(Handler.peers)) == 2     # dropped once, then a new connection
    assert api.request("GET", server + "/then-drop").ok
    r = api.request("POST", server + "/echo", {"n": 1})
    assert not r.ok and "connection closed mid-reply" in r.error
    api.close()


def test_streamed_events_are_read_and_assembled(server):
    api = ApiClient()
    r = api.stream(server + "/v1/chat/completions", {"messages": []})
    assert r.ok and r.done and r.ttft_s is not None, r.error
    assert assemble_stream(r.events)["content"] == "Hello"
    # the chunked stream was read to its end: the connection carries the next request
    assert api.request("GET", server + "/length").ok
    assert len(set(Handler.peers)) == 1
    api.close()


def test_a_streams_times_count_from_its_request_on_the_wire_not_from_the_clients_queue(server):
    # what the client spends before its request goes out (its own threads, a pool, a
    # connect) is the client's, not the server's: ttft_s and elapsed_s start once the whole
    # request is sent (the server's histograms start at its arrival), the wait before it is
    # kept apart
    class QueuedTransport(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            time.sleep(0.5)                 # the client's own queue, before anything is sent
            return super().handle_request(request)

    queued = ApiClient(transport=QueuedTransport())
    called = time.perf_counter()
    r = queued.stream(server + "/v1/chat/completions", {"messages": []})
    wall = time.perf_counter() - called
    queued.close()
    assert r.ok and r.send_wait_s is not None and r.send_wait_s >= 0.5, r
    # the clocks started after the queue: whatever the machine's load, neither holds the half second
    assert r.ttft_s is not None and r.ttft_s <= r.elapsed_s <= wall - 0.5, (r.ttft_s, r.elapsed_s, wall)


def test_an_error_event_inside_a_200_stream_is_a_failed_result(server):
    api = ApiClient()
    r = api.stream(server + "/v1/chat/completions", {"messages": [], "fail_midway": True})
    assert r.status == 200 and r.done and not r.ok
    assert r.stream_error == "InternalServerError (500): Internal server error"
    assert "the stream failed after HTTP 200: InternalServerError" in r.describe()
    assert assemble_stream(r.events)["error"] == r.stream_error
    api.close()


def test_time_to_first_token_counts_a_reasoning_token_and_names_its_channel():
    # vLLM 0.33 streams thinking as "reasoning"; "reasoning_content" is the name it no longer sends
    def reply(first: dict) -> httpx.MockTransport:
        body = b"".join(b"data: " + json.dumps(ev).encode() + b"\n\n" for ev in (
            {"choices": [{"delta": {"role": "assistant", "content": ""}}]}, {"choices": [{"delta": first}]},
            {"choices": [{"delta": {"content": "Hi"}}]}, {"choices": [{"delta": {}, "finish_reason": "stop"}]}))
        return httpx.MockTransport(lambda req: httpx.Response(200, content=body + b"data: [DONE]\n\n"))

    for first, channel in (({"reasoning": "Let me think."}, "reasoning"), ({"content": "Hello"}, "content"),
                           ({"reasoning_content": "Older name."}, "reasoning")):
        api = ApiClient(transport=reply(first))
        r = api.stream("http://gpu-01:8000/v1/chat/completions", {})
        assert r.ok and r.ttft_s is not None and r.ttft_channel == channel, (first, r.ttft_channel)
        folded = assemble_stream(r.events)
        assert folded["content"].endswith("Hi")
        assert folded["reasoning"] == (first.get("reasoning") or first.get("reasoning_content") or "")


def test_errors_name_the_url_and_do_not_raise(server):
    api = ApiClient()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]           # nothing listens there once closed
    url = f"http://127.0.0.1:{free}/health"
    r = api.request("GET", url)
    assert not r.ok and r.error.startswith(url) and "connection refused" in r.error
    r = api.request("GET", server + "/garbage")
    assert not r.ok and "not a valid HTTP reply" in r.error
    r = api.request("GET", "ftp://example/x")
    assert not r.ok and "http:// or https://" in r.error
    api.close()


def test_request_paths_cannot_smuggle_a_second_request(server):
    api = ApiClient()
    r = api.request("GET", server + "/length HTTP/1.1\r\nHost: evil\r\n\r\nGET /y")
    # either refused before sending or sent as one (escaped) path: never two requests
    assert len(Handler.peers) <= 1 and not r.ok
    api.close()


def test_the_injected_transport_is_the_test_seam():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.headers.get("content-type"), request.content))
        if request.url.path == "/v1/chat/completions":
            body = (b'data: {"choices": [{"delta": {"content": "ok"}}]}\n\n'
                    b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(503, json={"detail": "loading"})

    api = ApiClient(transport=httpx.MockTransport(handler))
    r = api.request("POST", "http://gpu-01:8000/health", {"a": 1})
    assert (r.status, r.ok, r.json()) == (503, False, {"detail": "loading"})
    s = api.stream("http://gpu-01:8000/v1/chat/completions", {"messages": []})
    assert s.ok and s.done and assemble_stream(s.events) == {"content": "ok", "reasoning": "", "tool_calls": [],
                                                             "finish_reason": "stop", "usage": None,
                                                             "error": None}
    assert seen[0][:3] == ("POST", "/health", "application/json")
    assert json.loads(seen[1][3]) == {"messages": [], "stream": True}
    cut = ApiClient(transport=httpx.MockTransport(lambda req: httpx.Response(200, content=b"data: {}\n\n")))
    r = cut.stream("http://gpu-01:8000/v1/chat/completions", {})
    assert not r.ok and "without 'data: [DONE]'" in r.error




def test_many_concurrent_streams_all_succeed_and_no_idle_connection_is_trimmed(server):
    """A load-ladder rung on several nodes at once: a hundred streams in flight on one
    client, twice; every one succeeds, and the client closes none of its connections.
    httpcore 1.0.9's pool, told to keep at most K idle connections, closes "surplus idle"
    ones counting every connection rather than the idle ones, and can close one it has just
    handed to a waiting request, which then reads a closed socket (EBADF mid-rung;
    encode/httpcore#1000, #1110). The client sets no cap, so that path is never taken: the
    server sees no connection closed before the keep-alive expiry."""
    from concurrent.futures import ThreadPoolExecutor

    # idle connections expire only after the test (with the default 5 s, a round that took
    # longer on a loaded machine let the first round's connections expire before the second)
    api = ApiClient(keepalive_expiry_s=3600.0)
    bad = []
    Handler.peers, Handler.closed = [], 0
    for _ in range(2):
        with ThreadPoolExecutor(max_workers=100) as pool:
            results = list(pool.map(lambda _: api.stream(server + "/v1/chat/completions",
                                                         {"messages": [], "hold_s": 0.2}), range(100)))
        bad += [r.error for r in results if not (r.ok and r.done)]
    time.sleep(0.3)
    opened, closed = len(set(Handler.peers)), Handler.closed
    api.close()
    assert not bad, f"{len(bad)} of 200 streams failed; first: {bad[0]}"
    assert opened > 50 and closed == 0, f"{closed} of {opened} connections closed by the client mid-run"


def test_a_level_of_streams_runs_each_on_its_own_client_and_connection(server):
    api = ApiClient()
    results = api.stream_many(server + "/v1/chat/completions", [{"messages": [], "hold_s": 0.2}] * 8)
    assert all(r.ok and r.done and r.ttft_s is not None for r in results), [r.error for r in results]
    # eight connections, one per stream's own client, none taken from a shared pool
    assert len(set(Handler.peers)) == 8
    api.close()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab:{}\r\n", max_size=12).map(str.encode), max_size=12))
def test_sse_lines_split_as_the_sse_grammar_does_whatever_the_chunks(chunks):
    # a line ends at CRLF, LF or CR, which bytes.splitlines also takes, even across two chunks
    assert list(sse_lines(chunks)) == b"".join(chunks).splitlines()
