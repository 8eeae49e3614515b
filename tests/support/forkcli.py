"""Start the real CLI in a new process without paying for its libraries' import each time.

A CLI process spends most of its CPU before its first line of work importing the
Kubernetes client (its CoreV1Api module alone is tens of thousands of lines), pydantic,
httpx, jinja2, structlog and jsonschema: about a second on this machine's shared cores. The
kill-and-resume tests start two or three processes each. So each test worker keeps one server
process that has imported those third-party libraries (never k3rollout itself, whose
modules read some settings from the environment when imported) and forks a child per CLI
run, as ``multiprocessing``'s forkserver does. The child is an ordinary process of its own:
it gets the caller's stdin, its own stdout and stderr pipes, environment, working directory
and ``sys.argv``, seeds ``random`` afresh, runs ``python -m k3rollout`` (or a script, such
as the fault injector) through ``runpy`` exactly as the interpreter's ``-m`` does, and ends
through the interpreter's normal shutdown (non-daemon threads joined, ``atexit`` run). Its
exit status is the one ``subprocess`` reports: ``-9`` for SIGKILL.

    python tests/support/forkcli.py SOCKET      # the server (started by ``ForkServer``)

Requests are one connection each on a Unix socket: a JSON line (argv, env, cwd) with the
three standard descriptors attached (SCM_RIGHTS); the server answers ``pid N`` when the
child runs and ``exit STATUS`` when it has ended (a pidfd per child tells it when).
"""

from __future__ import annotations

import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

# what the server imports before it forks (all third-party: their import does not depend on
# the environment variables the tests set, which ForkServer.usable checks)
PRELOAD = ("kubernetes.client", "kubernetes.config", "kubernetes.client.exceptions", "pydantic", "yaml", "jinja2",
           "httpx", "structlog", "jsonschema", "prometheus_client.parser", "orjson", "rich")
# environment variables a child may differ in from the server's: read by k3rollout (imported
# in the child, after its environment is set) and by the simulator, never by PRELOAD
CHILD_ENV_PREFIXES = ("K3ROLLOUT_", "K3SIM_", "K3_", "PYTEST_CURRENT_TEST")


# ---------------------------------------------------------------- the server (its own process)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import kubernetes.client as kc

    # the client's API classes are imported lazily, on first use of the attribute
    for attr in ("ApiClient", "Configuration", "CoreV1Api", "CoordinationV1Api", "CustomObjectsApi"):
        getattr(kc, attr)


def _child(conn: socket.socket, fds: list[int], req: dict, others: list[int]) -> None:
    """In the forked child: become the requested CLI process, then return to let the
    interpreter run it (the caller raises SystemExit with its status)."""
    for fd in others:
        os.close(fd)
    conn.close()
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    import random

    random.seed()
    argv = req["argv"]
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = req["cwd"]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).resolve().parent)
        runpy.run_path(argv[0], run_name="__main__")


def serve(path: str) -> None:
    _preload()
    assert threading.active_count() == 1, "a thread in the server would be copied half-way into its children"
    sys.stdout.flush()
    sys.stderr.flush()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # the client waits for ``path`` to appear: it appears only once the socket listens (a
    # connect between bind and listen is refused)
    srv.bind(path + ".new")
    srv.listen(64)
    os.rename(path + ".new", path)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    sel.register(sys.stdin, selectors.EVENT_READ, "parent")     # EOF: the test worker has gone
    children: dict[int, tuple[int, socket.socket]] = {}           # pidfd -> (pid, connection)
    while True:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 1):
                    return
            elif key.data is None:
                conn, _ = srv.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                req = json.loads(msg)
                others = [srv.fileno(), sys.stdin.fileno(), *children, *(c.fileno() for _, c in children.values())]
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    _child(conn, fds, req, [fd for fd in others if fd != sys.stdin.fileno()])
                    raise _ChildReady
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, "child")
                conn.sendall(f"pid {pid}\n".encode())
            else:
                pidfd = key.fd
                pid, conn = children.pop(pidfd)
                sel.unregister(pidfd)
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


class _ChildReady(BaseException):
    """Unwinds the forked child out of the server loop so that it runs as __main__ would."""


# ---------------------------------------------------------------- the client (in the test worker)


class ForkServer:
    """One per test worker, started on first use; ``run`` mirrors ``subprocess.run`` with
    ``capture_output=True, text=True``."""

    def __init__(self) -> None:
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="k3fork-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=None, env=self.env)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the CLI fork server did not start (exit {self.proc.poll()})")
            time.sleep(0.01)

    def usable(self, env: dict[str, str]) -> bool:
        """Whether a child with this environment is what a fresh interpreter would be: it may
        differ only in variables PRELOAD never reads."""
        if self.proc.poll() is not None:
            return False
        keys = set(env) | set(self.env)
        return all(env.get(k) == self.env.get(k) for k in keys if not k.startswith(CHILD_ENV_PREFIXES))

    def run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
            socket.send_fds(sock, [json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()], [0, out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        reply = sock.makefile("rb")
        pid = int(reply.readline().split()[1])
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}

        def drain(fd: int) -> None:
            while data := os.read(fd, 65536):
                chunks[fd].append(data)
            os.close(fd)

        readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
        for t in readers:
            t.start()
        sock.settimeout(timeout)
        try:
            line = reply.readline()
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        finally:
            for t in readers:
                t.join(timeout)
        sock.close()
        code = int(line.split()[1])

        def text(fd: int) -> str:
            # as subprocess's text mode reads it: the locale's encoding, universal newlines
            data = b"".join(chunks[fd]).decode(locale.getpreferredencoding(False))
            return data.replace("\r\n", "\n").replace("\r", "\n")

        return subprocess.CompletedProcess([sys.executable, *argv], code, text(out_r), text(err_r))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    try:
        serve(sys.argv[1])
    except _ChildReady:
        pass        # a forked child: the module is run; leaving here is its interpreter's exit
    else:           # the server, its worker gone (a child leaves by an exception, never here)
        import shutil

        shutil.rmtree(os.path.dirname(sys.argv[1]), ignore_errors=True)
