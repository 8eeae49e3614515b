"""The simulated network's daemon (see netd.py for what it serves and why): one process
per sim root, an asyncio server for the hosts' vLLM listeners and the Kubernetes API server,
a Unix socket for control lines and one for the k3sim transport's commands. Kept apart from
netd.py, whose client side every simulated command imports: asyncio alone was a third of a
command's start-up."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3sim import netd, vllm, vllm_multinode
from k3sim import state as st

# The shortest gap between two writes of one stream after its first token (Daemon.pace): the
# simulated decode step is a few milliseconds, and a write per step costs the daemon and the
# client a send, a wake-up and a read each, for timings nothing measures.
STREAM_TICK_S = 0.02
IDLE_EXIT_S = float(os.environ.get("K3SIM_NETD_IDLE_S", "900"))
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}

class Listener:
    def __init__(self, host: str, addr: str, port: int, config: dict[str, Any], token_s: float):
        self.host, self.addr, self.port = host, addr, port
        self.rt = vllm.Runtime(config)
        self.token_s = token_s
        self.sem = asyncio.Semaphore(self.rt.max_num_seqs)
        self.server: asyncio.base_events.Server | None = None
        self.conns: set[asyncio.StreamWriter] = set()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.conns):
            w.transport.abort()     # the process died: in-flight requests see a reset


class Daemon:
    def __init__(self, root: Path):
        self.root = root
        self.loop: asyncio.AbstractEventLoop | None = None
        self.listeners: dict[tuple[str, int], Listener] = {}
        self.by_host: dict[str, dict[tuple[str, int], Listener]] = {}   # the same, per host
        self.host_dirs: dict[str, Path] = {}
        self.last_activity = time.monotonic()
        self.stop = asyncio.Event()
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.soon: set[asyncio.Task[None]] = set()
        self.host_locks: dict[str, asyncio.Lock] = {}

    def _read(self, host: str) -> dict[str, Any] | None:
        try:
            return st.load(self.root / host)       # unlocked: load() reads a torn file again
        except (OSError, ValueError):
            return None

    async def sync_host(self, host: str) -> None:
        # one sync of a host at a time: two at once would both bind a new server's address
        async with self.host_locks.setdefault(host, asyncio.Lock()):
            await self._sync_host(host)

    async def _sync_host(self, host: str) -> None:
        state = self._read(host)
        desired: dict[tuple[str, int], dict[str, Any]] = {}
        if state is not None and state.get("address") and not state.get("dead"):
            wait = float(state.get("down_until", 0)) - time.time()
            if wait > 0:
                # rebooting: nothing answers until the host is up; look again then
                old = self.timers.pop(host, None)
                if old:
                    old.cancel()
                self.timers[host] = asyncio.get_running_loop().call_later(
                    wait + 0.01, lambda: asyncio.ensure_future(self.host_up(host)))
            else:
                for port, cfg in state.get("servers", {}).items():
                    if cfg.get("status") == "running":
                        # a pod's server listens on the pod's own address (sim/containers.py)
                        desired[(cfg.get("address") or state["address"], int(str(port).rsplit(":", 1)[-1]))] = cfg
        mine = self.by_host.setdefault(host, {})
        for key, lst in list(mine.items()):
            if key not in desired or desired[key].get("instance") != lst.rt.instance:
                lst.close()
                del mine[key]
                if self.listeners.get(key) is lst:
                    del self.listeners[key]
        for key, cfg in desired.items():
            if key in self.listeners:
                continue
            lst = Listener(host, key[0], key[1], cfg, float(state.get("token_s", 0.0)))
            try:
                lst.server = await asyncio.start_server(lambda r, w, _l=lst: self.serve(_l, r, w), key[0], key[1],
                                                        reuse_address=True, backlog=2048)  # uvicorn's default
            except OSError as exc:
                print(f"{host}: cannot listen on {key[0]}:{key[1]}: {exc}", flush=True)
                continue
            self.listeners[key] = mine[key] = lst

    async def host_up(self, host: str) -> None:
        """A host is up from its reboot: its servers listen, and multi-node heads its restarted
        containers were waiting for look again (sim/vllm_multinode.py)."""
        await self.sync_host(host)
        await self.settle_heads()

    async def settle_heads(self) -> None:
        for d in await asyncio.to_thread(vllm_multinode.settle_waiting_heads, self.root):
            await self.sync_host(d.name)

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One command per line (a connection may send several)."""
        try:
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                self.last_activity = time.monotonic()
                cmd, _, arg = raw.decode().strip().partition(" ")
                if cmd == "ping":
                    writer.write(b"pong\n")
                elif cmd == "sync" and arg and "/" not in arg:
                    await self.sync_host(arg)
                    writer.write(b"ok\n")
                elif cmd == "shutdown":
                    writer.write(b"ok\n")
                    await writer.drain()
                    self.stop.set()
                    break
                else:
                    writer.write(b"error unknown command\n")
                await writer.drain()
                self.last_activity = time.monotonic()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def serve_commands(self, conn: socket.socket) -> None:
        """The hosts' commands from one engine thread: a request line, then its answer, in
        this connection's own thread (a command may sleep, take a host's lock, or ask the
        event loop to rebind that host's sockets)."""
        with conn, conn.makefile("rb") as reader:
            while True:
                try:
                    line = reader.readline()
                    if not line.endswith(b"\n"):
                        return
                    self.last_activity = time.monotonic()
                    conn.sendall(fastjson.dumps_line(self.run_command(line)))
                    self.last_activity = time.monotonic()
                except OSError:
                    return

    def accept_commands(self, srv: socket.socket) -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return          # closed: the daemon is stopping
            threading.Thread(target=self.serve_commands, args=(conn,), name="k3sim-host", daemon=True).start()

    def run_command(self, payload: bytes) -> dict[str, Any]:
        """One command on one simulated host."""
        from k3sim.dispatch import dispatch

        try:
            req = fastjson.loads(payload)
            host = str(req["host"])
            if not host or "/" in host or host in (".", ".."):
                return {"error": f"bad host name {host!r}"}
            stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
            state_dir = self.host_dirs.get(host)
            if state_dir is None:
                state_dir = self.host_dirs[host] = self.root / host
            res = dispatch(state_dir, [str(a) for a in req["argv"]], stdin)
            return {"rc": res.rc, "stdout": res.stdout, "stderr": res.stderr, "unreachable": res.unreachable,
                    "dropped": res.dropped}
        except Exception:  # noqa: BLE001 - a simulator bug: the engine reports it, it does not pass as output
            return {"error": traceback.format_exc()[-4000:]}

    def sync_from_thread(self, host: str) -> None:
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(self.sync_host(host), self.loop).result(30)

    def sync_soon(self, host: str) -> None:
        """On the daemon's own loop (its start-up, seeding the API server's pods, runs there):
        sync the host when the loop next turns; waiting here would block the loop it needs."""
        assert self.loop is not None
        task = self.loop.create_task(self.sync_host(host))
        self.soon.add(task)
        task.add_done_callback(self.soon.discard)

    # ---- HTTP/1.1

    async def serve(self, lst: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lst.conns.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.last_activity = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    k, sep, v = ln.partition(":")
                    if sep:
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                await self.route(lst, method, target.split("?", 1)[0], body, writer)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            lst.conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def send(writer: asyncio.StreamWriter, code: int, payload: Any, ctype: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else fastjson.dumps(payload))
        writer.write(f"HTTP/1.1 {code} {REASONS.get(code, '')}\r\ndate: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}"
                     f"\r\nserver: uvicorn\r\ncontent-length: {len(body)}\r\ncontent-type: {ctype}\r\n\r\n".encode()
                     + body)
        await writer.drain()

    async def route(self, lst: Listener, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        rt = lst.rt
        if path == "/health" and method in ("GET", "HEAD"):
            return await self.send(writer, 200, b"")
        if path == "/metrics" and method == "GET":
            return await self.send(writer, 200, vllm.metrics(rt), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/v1/models" and method == "GET":
            return await self.send(writer, 200, rt.models())
        if path == "/version" and method == "GET":
            return await self.send(writer, 200, {"version": rt.opts.get("_vllm_version", "")})
        if path == "/tokenize" and method == "POST":
            try:
                req = fastjson.loads(body or b"")
            except ValueError as exc:
                return await self.send(writer, 400, vllm.error(400, "BadRequestError", f"Invalid JSON: {exc}")[1])
            return await self.send(writer, *vllm.tokenize(rt, req))
        if path == "/v1/chat/completions":
            if method != "POST":
                return await self.send(writer, 405, {"detail": "Method Not Allowed"})
            try:
                req = fastjson.loads(body or b"")
            except ValueError as exc:
                return await self.send(writer, 400, vllm.error(400, "BadRequestError", f"Invalid JSON: {exc}")[1])
            return await self.chat(lst, req, writer)
        return await self.send(writer, 404, {"detail": "Not Found"})

    async def chat(self, lst: Listener, req: Any, writer: asyncio.StreamWriter) -> None:
        rt = lst.rt
        comp = vllm.admit(rt, req)
        if isinstance(comp, tuple):
            return await self.send(writer, comp[0], comp[1])
        loop = asyncio.get_running_loop()
        started = loop.time()
        rt.waiting += 1
        async with lst.sem:
            rt.waiting -= 1
            rt.running += 1
            try:
                # prefill only the uncached tokens; each decode step slows as the batch grows
                await asyncio.sleep((comp.prompt - comp.cached) * lst.token_s / 500)
                step = lst.token_s * (1 + rt.running / 32)
                stream = bool(req.get("stream"))
                if not stream:
                    await asyncio.sleep(comp.gen * step)
                    rt.ttft.append(loop.time() - started)
                    payload = vllm.response(rt, comp)
                else:
                    opts = req.get("stream_options") or {}
                    chunks = vllm.stream_chunks(rt, comp, bool(isinstance(opts, dict) and opts.get("include_usage")))
                    writer.write(b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; "
                                 b"charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")
                    per = comp.gen * step / max(1, len(chunks))
                    await self.pace(writer, chunks, per, lambda: rt.ttft.append(loop.time() - started))
            except (ConnectionError, asyncio.CancelledError):
                rt.c["aborted"] += 1
                raise
            finally:
                rt.running -= 1
        rt.c["gen"] += comp.gen
        rt.c["ok"] += 1
        rt.e2e.append(loop.time() - started)
        if not stream:
            await self.send(writer, 200, payload)

    @staticmethod
    async def pace(writer: asyncio.StreamWriter, chunks: list[dict[str, Any]], per: float,
                   first_token: Callable[[], None], clock: Callable[[], float] | None = None,
                   sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, tick: float = STREAM_TICK_S) -> None:
        """Stream ``chunks`` as server-sent events, one event and one HTTP chunk each, chunk
        ``i`` due ``i * per`` after the first and ``[DONE]`` one ``per`` after the last, as the
        engine's decode steps produce them. Each write is at a chunk's due time, never before,
        and carries every chunk due by then: on a machine whose event loop runs late the events
        are not drawn out past their due times (a sleep per token would add the loop's lateness
        to every token), and the bytes the client reads are the same. ``first_token`` is called
        as the first chunk after the role chunk is written (the server's time to first token).
        Between the first token and ``[DONE]`` writes are at least ``tick`` apart: the tokens
        in between arrive in bursts, as over a congested network, while the first token and the
        end of the stream (what the gates time) keep their due times.
        ``clock`` and ``sleep`` are the event loop's, or a test's."""
        now_of = clock or asyncio.get_running_loop().time
        t0 = now_of()
        n = len(chunks)
        i = 0
        last = t0
        while i <= n:                          # i == n: the closing [DONE]
            due = t0 + i * per
            if 2 <= i < n:                     # a token after the first: on the next tick
                due = min(max(due, last + tick), t0 + n * per)
            wait = due - now_of()
            if wait > 0:
                await sleep(wait)
            now = now_of()
            j = i + 1
            while j <= n and t0 + j * per <= now:
                j += 1
            out = []
            for k in range(i, min(j, n)):
                data = b"data: " + fastjson.dumps(chunks[k]) + b"\n\n"
                out.append(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            if j > n:
                done = b"data: [DONE]\n\n"
                out.append(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
            if i <= 1 < j and n > 1:
                first_token()
            writer.write(b"".join(out))
            await writer.drain()
            last, i = now, j

    def start_kubeapi(self) -> None:
        """The cluster's Kubernetes API server (k3sim/kubeapi.py), one per sim root,
        at an address fixed by the root (so a restarted daemon answers where the kubeconfig
        says), with the controller's kubeconfig written next to the hosts."""
        from k3sim.kubeapi import KubeApiServer

        self.kubeapi = KubeApiServer(self.root, address=(netd.kube_address(self.root), netd.KUBE_PORT))
        self.kubeapi.__enter__()
        self.kubeapi.kubeconfig(netd.kubeconfig_path(self.root))

    async def main(self) -> None:
        self.loop = asyncio.get_running_loop()
        # the API server's first reconcile starts the seeded pods' servers: their syncs are
        # this daemon's own, not a request to a control socket that does not listen yet
        netd.run_here(self)
        self.start_kubeapi()
        srv = await asyncio.start_unix_server(self.control, path=netd.control_name(self.root))
        cmd_srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd_srv.bind(netd.command_name(self.root))
        cmd_srv.listen(256)
        threading.Thread(target=self.accept_commands, args=(cmd_srv,), name="k3sim-accept", daemon=True).start()
        (self.root / "netd.pid").write_text(str(os.getpid()))
        for d in sorted(p for p in self.root.iterdir() if (p / "state.json").is_file()):
            await self.sync_host(d.name)
        await self.settle_heads()              # hosts that came up while no daemon ran
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        api_seen = 0
        while not self.stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 1.0)
            # a client of the API server (a run polling its pods) keeps the cluster up, as much
            # as one of the hosts' commands does
            if len(self.kubeapi.requests) != api_seen:
                api_seen = len(self.kubeapi.requests)
                self.last_activity = time.monotonic()
            idle = time.monotonic() - self.last_activity
            if not self.root.is_dir() or (idle > IDLE_EXIT_S and not any(lst.rt.running for lst in
                                                                       self.listeners.values())):
                break
        srv.close()
        cmd_srv.close()
        self.kubeapi.__exit__(None, None, None)
        for lst in self.listeners.values():
            lst.close()
        with contextlib.suppress(OSError):
            if (self.root / "netd.pid").read_text() == str(os.getpid()):
                (self.root / "netd.pid").unlink()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        sys.stderr.write("usage: python -m k3sim.netd_daemon SIM_ROOT\n")
        return 2
    try:
        asyncio.run(Daemon(Path(args[0])).main())
    except OSError as exc:      # another daemon already owns this root's control socket
        sys.stderr.write(f"netd: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
