"""A crash without a process: the real CLI run in the test's own process until a chosen
journal record, where it stops as a killed process stops. Most points of the crash matrix
(tests/e2e/test_crash.py) run so; a handful still kill a real process with SIGKILL
(tests/support/faultinject.py), and those hold this stand-in to what it stands in for.

    got = run_cli(["run", PB, "-i", INV, "--yes", "--run-dir", RUN], fault=("KILL", 12))
    got.returncode == KILLED                # -9, as subprocess reports a SIGKILL

MODE as in faultinject.py: KILL right after record N is written (and committed, when it
is a durable one), TEAR writes the first half of record N and stops, BEFORE stops just
before record N is written. Without ``fault`` the CLI runs to its end (a resume).

What a SIGKILL does to the run, and how this stands in for each:

- the process runs no further line: the journal's hooks raise ``HardStop``
  (k3rollout/errors.py), a ``BaseException`` no ``except Exception`` takes, and Session
  skips its cleanup while it unwinds: the transports and the simulated network stay open,
  the lock files and the Leases are not released, result.json and the reports are not
  written;
- its threads stop: from the stop on the journal takes no record (each try raises
  ``HardStop`` again), so no thread starts a further step or API call (each is journaled
  first), and the worker pool waits for those in flight before the stop reaches the caller;
- its pid is gone: the run's lock files name a stand-in process (a ``sleep``), killed and
  reaped at the stop, so the lock is stale exactly as a dead run's is: a new run is refused
  with how to resume, and resume takes it over;
- the kernel closes its descriptors and its Lease renewal ends with it: the journal's
  descriptor is closed, the Leases abandoned (``ClusterLeases.abandon``), and the collector
  closes the sockets to the simulated hosts.

Signal handlers the CLI sets are put back, and its output is captured, as ``subprocess.run``
would capture it. One run at a time per process (the journal and lock classes are patched
for its length).
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

KILLED = -signal.SIGKILL
SEQ = re.compile(rb'^\{"seq":(\d+),')
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Ran:
    """What ``subprocess.run(..., capture_output=True, text=True)`` answers, for one CLI run."""

    returncode: int
    stdout: str
    stderr: str


def _seq(data: bytes | memoryview) -> int:
    m = SEQ.match(bytes(data[:32]))
    return int(m.group(1)) if m else 0


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def run_cli(args: Sequence[str], fault: tuple[str, int] | None = None) -> Ran:
    """``k3rollout ARGS`` in this process; with ``fault=(MODE, N)`` it stops at record N as
    a killed process would, and answers ``KILLED``."""
    from k3rollout import cli

    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in _HANDLED}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if fault is None:
                code = cli.main(list(args))
            else:
                code = _until(list(args), *fault)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        # the simulated clusters' daemons this "process" let go of: a process that ends stops
        # them at its exit, a killed one leaves them running (k3sim/transport.py)
        from k3sim import transport as sim_transport

        if fault is None:
            sim_transport.stop_let_go()
        else:
            sim_transport.forget_let_go()
    return Ran(code, out.getvalue(), err.getvalue())


def _until(args: list[str], mode: str, n: int) -> int:
    from k3rollout import cli
    from k3rollout.engine import session
    from k3rollout.errors import HardStop
    from k3rollout.runlog import journal as journal_mod
    from k3rollout.runlog import lock as lock_mod
    from k3rollout.scheduler.k8s_lock import ClusterLeases

    if mode not in ("KILL", "TEAR", "BEFORE"):
        raise ValueError(f"no such fault mode {mode!r} in process (KILL, TEAR, BEFORE)")
    dead = [False]
    journals: list[journal_mod.Journal] = []
    leases: list[ClusterLeases] = []

    def die() -> None:
        dead[0] = True
        raise HardStop(f"{mode} at journal record {n}")

    def write(fd: int, data: bytes | memoryview) -> int:
        if _seq(data) == n:
            if mode == "BEFORE":
                die()
            if mode == "TEAR":
                os.write(fd, data[: max(1, len(data) // 2)])
                os.fsync(fd)
                die()
        return os.write(fd, data)

    def after_append(rec: dict[str, Any]) -> None:
        if mode == "KILL" and rec["seq"] == n:
            die()

    class DyingJournal(journal_mod.Journal):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, write=write, after_append=after_append, **kw)
            journals.append(self)

        def append(self, *a: Any, **kw: Any) -> dict[str, Any]:
            if dead[0]:
                raise HardStop("the process is gone: no thread of it writes a record")
            return super().append(*a, **kw)

        def commit(self, seq: int | None = None) -> None:
            if dead[0]:
                raise HardStop("the process is gone: no thread of it commits")
            super().commit(seq)

    # the lock files name a process that dies at the stop (this one lives on)
    standin = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
    real_init = lock_mod.RunLock.__init__

    def lock_init(self: Any, *a: Any, **kw: Any) -> None:
        real_init(self, *a, **kw)
        self.info["pid"] = standin.pid

    real_acquire = ClusterLeases.acquire

    def lease_acquire(self: ClusterLeases) -> None:
        leases.append(self)
        real_acquire(self)

    # what this process held before the run is not the run's: set apart from the collector
    # (gc.freeze) for the run's length, so the collection at the stop, which closes what the
    # stopped run left unreachable (its sockets to the simulated hosts), walks the run's own
    # objects only and not the whole test process's heap (about 0.1 s of CPU a stop)
    gc.freeze()
    try:
        # a subclass, not a partial: the session also calls Journal.read (as faultinject.py)
        with _patched(session, "Journal", DyingJournal), _patched(lock_mod.RunLock, "__init__", lock_init), \
                _patched(ClusterLeases, "acquire", lease_acquire):
            try:
                return cli.main(args)
            except HardStop:
                if not dead[0]:
                    raise
                return KILLED
    finally:
        standin.kill()
        standin.wait()
        if dead[0]:
            for lease in leases:
                lease.abandon()
            for j in journals:
                j.close()
            gc.collect()
        gc.unfreeze()
