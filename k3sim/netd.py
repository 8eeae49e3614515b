"""The simulated cluster's network: real TCP sockets for the vLLM servers the sim starts.

Each simulated host has its own loopback address (``127.A.B.C``, kept in its state), so
two hosts can both serve on port 8000, as two real nodes do. One daemon per sim root
(the directory holding the hosts' state directories) listens on ``(address, port)`` for
every server the hosts' states say is running, and answers vLLM's OpenAI-compatible API
there: ``/health``, ``/v1/models``, ``/v1/chat/completions`` (with streaming),
``/metrics``. Nothing listens on a port whose container is stopped, crashed or on a host
that is rebooting, so a client sees "connection refused" exactly when it would in
production.

The host state stays the single source of truth for *what* runs; the daemon holds what a
real server process holds in memory (its prefix cache, its counters), which is lost when
the container restarts. Commands that change a host's servers call ``sync(state_dir)``
after their state transaction commits; the daemon rereads that host and binds or closes
sockets. A daemon that is not running is started on demand and rebinds every running
server it finds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from k3sim import thin

# in the daemon's own process (run_here): its netd_daemon.Daemon (not imported here: the
# daemon's module imports this one)
_RUNNING: Any = None


def run_here(daemon: Any) -> None:
    """Called by the daemon in its own process: ``sync`` from there goes to it directly, not
    through its control socket (which may not listen yet)."""
    global _RUNNING
    _RUNNING = daemon


# ---------------------------------------------------------------- addresses


# Each sim root holds a block of /24s of 127.0.0.0/8, claimed machine-wide: two sim clusters
# alive at once (tests in parallel, a demo beside a test run) must never share an address,
# or one's client would reach the other's server (a listener that cannot bind because its
# address is taken leaves the port to the other cluster). A hash alone collides: with a few
# hundred roots alive in one test session, two of 64,516 /24s coincide more often than not.
NETS = 254 * 256                  # /24s: 127.1.0.0 .. 127.254.255.0
BLOCK = 8                         # /24s per root: 8 x 254 = 2,032 hosts before it wraps
CLAIMS = Path(os.environ.get("K3SIM_NET_CLAIMS") or f"/tmp/k3sim-net-{os.getuid()}")


def _held(claim: Path, root: Path, serving: bool = False) -> bool:
    """Whether another root holds this claim: its root still records a block
    (``.net-prefix``), and with ``serving`` its daemon also answers."""
    try:
        owner = claim.read_text()
    except FileNotFoundError:
        return False
    if owner == str(root) or not (Path(owner) / ".net-prefix").is_file():
        return False
    if not serving:
        return True
    try:
        return _ask(Path(owner), "ping", timeout=2.0) == "pong"
    except OSError:
        return False


def _prefix(root: Path) -> int:
    """The first /24 number of this sim root's block, claimed once (kept in ``.net-prefix``)."""
    root = Path(root).resolve()
    mine = root / ".net-prefix"
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int(mine.read_text())
    root.mkdir(parents=True, exist_ok=True)
    CLAIMS.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(CLAIMS / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(mine.read_text())          # claimed meanwhile by another process
        blocks = NETS // BLOCK
        start = int(hashlib.sha256(str(root).encode()).hexdigest()[:8], 16) % blocks
        order = [(start + i) % blocks for i in range(blocks)]
        # first a block nobody holds (or whose root is gone); failing that, the block of a
        # root whose daemon is not running (an old run directory nothing serves from)
        block = next((b for b in order if not _held(CLAIMS / str(b), root)), None)
        if block is None:
            block = next((b for b in order if not _held(CLAIMS / str(b), root, serving=True)), None)
        if block is None:
            raise RuntimeError(f"no free loopback block for a simulated cluster: all {blocks} are held by running "
                               f"simulated clusters (claims under {CLAIMS})")
        tmp = CLAIMS / f".{block}.{os.getpid()}"
        tmp.write_text(str(root))
        os.replace(tmp, CLAIMS / str(block))
        prefix = block * BLOCK
        tmp = root / f".net-prefix.{os.getpid()}"
        tmp.write_text(str(prefix))
        os.replace(tmp, mine)
        return prefix
    finally:
        os.close(fd)


def address_of(root: Path, index: int) -> str:
    """The ``index``-th host's loopback address under ``root`` (254 hosts per /24)."""
    n = (_prefix(root) + index // 254) % NETS
    return f"127.{1 + n // 256}.{n % 256}.{1 + index % 254}"


KUBE_PORT = 6443


def kube_address(root: Path) -> str:
    """Where this root's simulated Kubernetes API server listens: the .255 of the root's
    first /24 (no host gets a .255 address, see ``address_of``)."""
    n = _prefix(root)
    return f"127.{1 + n // 256}.{n % 256}.255"


def kubeconfig_path(root: Path) -> Path:
    return Path(root) / "kubeconfig"


def allocate(root: Path) -> str:
    """The next free host address under ``root`` (a counter kept next to the host dirs)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".net.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        counter = root / ".net-next"
        index = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(index + 1))
        return address_of(root, index)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- control (client side)


def control_name(root: Path) -> bytes:
    """Where the daemon takes control requests (``sync``, ``ping``...)."""
    return thin.control_name(str(Path(root).absolute()))


def command_name(root: Path) -> bytes:
    """Where the daemon takes the hosts' commands (one JSON line each; see transport.py)."""
    return thin.command_name(str(Path(root).absolute()))


def _ask(root: Path, line: str, timeout: float = 30.0) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(control_name(root))
        s.sendall(line.encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            got = s.recv(4096)
            if not got:
                break
            data += got
    return data.decode().strip()


def running(root: Path) -> bool:
    try:
        return _ask(root, "ping", timeout=5.0) == "pong"
    except OSError:
        return False


def ensure(root: Path) -> None:
    """Start this root's daemon unless it runs; return once it answers."""
    root = Path(root)
    if running(root):
        return
    fd = os.open(root / ".netd.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if running(root):
            return
        env = dict(os.environ)
        deadline = time.monotonic() + 30
        proc = None
        while not running(root):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the simulated network daemon for {root} did not start; see {root}/netd.log")
            if proc is None or proc.poll() is not None:
                # (again) when the one started gave up: a daemon told to shut down a moment
                # ago (the preflight's executor closing) may still hold the root's sockets,
                # and the new one exits on "Address already in use" once it is gone
                if proc is not None:
                    time.sleep(0.1)
                with open(root / "netd.log", "ab") as log:
                    proc = subprocess.Popen([sys.executable, "-c",
                                             "import sys; from k3sim.netd_daemon import main; sys.exit(main())",
                                             str(root)], stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=env)
            time.sleep(0.02)
    finally:
        os.close(fd)


def sync(state_dir: Path) -> None:
    """Tell the daemon that this host's servers changed (starting the daemon if needed)."""
    root = Path(state_dir).parent
    daemon = _RUNNING
    if daemon is not None and daemon.root == root:
        if threading.current_thread() is threading.main_thread():
            daemon.sync_soon(Path(state_dir).name)          # the daemon's own loop (its start-up)
        else:
            daemon.sync_from_thread(Path(state_dir).name)   # a command the daemon itself runs
        return
    for attempt in (1, 2):
        try:
            if _ask(root, f"sync {Path(state_dir).name}") == "ok":
                return
        except OSError:
            if attempt == 2:
                raise
        ensure(root)


def shutdown(root: Path) -> None:
    with contextlib.suppress(OSError):
        _ask(Path(root), "shutdown", timeout=5.0)


def stop(root: Path, timeout: float = 30.0) -> None:
    """Shut this root's daemon down and return once it no longer answers (a daemon told to
    shut down answers a ping until its loop has ended)."""
    shutdown(root)
    deadline = time.monotonic() + timeout
    while running(root):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the simulated network daemon for {root} did not stop; see {root}/netd.log")
        time.sleep(0.02)


def kill_all_under(base: Path) -> int:
    """Stop every daemon whose sim root lies under ``base`` (test clean-up); returns how many."""
    n = 0
    for pidfile in Path(base).rglob("netd.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
            n += 1
    return n
