"""One CPU for the engine's Python threads.

The engine's node threads share one interpreter lock, so its Python code never runs on
more than one CPU at a time. Spread over several CPUs, the threads instead hand that lock
to each other across cores at every system call (each journal write, evidence file,
socket read), and on a 2-vCPU controller that hand-off cost as much CPU as the work
itself: a 1,000-node simulated rollout spent half its time in ``futex``. On one CPU the
thread that gives up the lock for a short call usually takes it straight back. Measured
here: a 100-node simulated rollout at forks 16 went from 7.4 s to 3.9 s, and the SSH
fan-out to 100 hosts from 3.4-3.8 s to 3.2 s (paramiko's transport threads are engine
threads too).

Only threads are pinned: the calling thread while inside ``one_cpu()``, and the threads
it starts. Child processes get every CPU back (``all_cpus()`` around ansible-playbook and
hook commands; the simulated network daemon resets its own mask). The CPU is picked from
the allowed set by process id, so concurrent runs on one controller spread out.
``K3ROLLOUT_PIN_CPU=0`` (or ``off``) turns this off; ``K3ROLLOUT_PIN_CPU=cpuN`` picks
CPU N (a CPU outside the allowed set leaves the threads unpinned).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

ENV = "K3ROLLOUT_PIN_CPU"
_full: set[int] | None = None          # the mask before pinning, for child processes


def _supported() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def choose(allowed: set[int], setting: str | None, pid: int) -> int | None:
    """The CPU to pin to, or None (off, or nothing to gain with fewer than two CPUs)."""
    if len(allowed) < 2:
        return None
    setting = (setting or "").strip().lower()
    if setting in ("0", "no", "off", "false"):
        return None
    if setting.startswith("cpu") and setting[3:].isdigit():
        cpu = int(setting[3:])
        return cpu if cpu in allowed else None
    cpus = sorted(allowed)
    return cpus[pid % len(cpus)]


def planned() -> int | None:
    """The CPU this process's engine threads run on (or will, inside ``one_cpu()``)."""
    if not _supported():
        return None
    try:
        mask = os.sched_getaffinity(0)
    except OSError:
        return None
    if _full is not None and len(mask) == 1:
        return next(iter(mask))
    return choose(mask, os.environ.get(ENV), os.getpid())


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Run the calling thread (and threads it starts) on one CPU while inside."""
    global _full
    if not _supported():
        yield None
        return
    try:
        before = os.sched_getaffinity(0)
        cpu = choose(before, os.environ.get(ENV), os.getpid())
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
    except OSError:
        yield None
        return
    if cpu is None:
        yield None
        return
    _full = set(before)
    try:
        yield cpu
    finally:
        _full = None
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, before)


@contextlib.contextmanager
def all_cpus() -> Iterator[None]:
    """Around starting a child process: it gets the CPUs the engine was allowed."""
    full = _full
    if full is None or not _supported():
        yield
        return
    try:
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, full)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, mine)
