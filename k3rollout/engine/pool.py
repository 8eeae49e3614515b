"""The engine's one worker pool, and its one rule for stopping.

Every place that works on several units side by side goes through here: a batch's nodes
(``Engine.pool``: their stage walks, their rollbacks), the sliding window's slots
(engine/window.py), the pre-staging (engine/prestage.py), an observation pass
(engine/observe.py), the preflight (engine/preflight.py) and a concurrency step's requests
(``StepRunner.http_many``).

The rule
--------

Units run in worker threads; the thread that hands them out only hands out and waits.
cli.py's SIGINT/SIGTERM handler raises ``KeyboardInterrupt`` in the main thread (Python runs
signal handlers there, and nowhere else), so a signal interrupts the wait, never a unit in the
middle of a step. Called from a worker thread already (a window's slot runs its node's batch
through ``Engine.pool``), a single unit runs in the caller's thread: no signal reaches it there.

Whatever ends the wait early, ``KeyboardInterrupt`` (Ctrl-C, SIGTERM) or an exception a unit
raised (a journal that cannot be written, a missing controller tool, a bug), stops the pool
the same way:

1. the stop flag (``stopping``: the engine's, or the step runner's) is set, so each unit in
   flight stops at its next boundary: the engine before its next stage, a gate stops waiting,
   an observation before its next command, a window starts no further node;
2. units not started yet are cancelled: they never start and leave nothing in the journal;
3. the units in flight are waited for: the step each one is in finishes (or times out) and is
   journaled, so no step is left started and unrecorded when the caller then closes the
   journal and the transports (runlog/journal.py defers a signal that comes while the main
   thread writes a record to that record's end). cli.py lets only the first signal raise,
   and the first ``KeyboardInterrupt`` never cuts this wait short (one that comes while the
   pool stops for a unit's exception is taken in by that stop, whose exception goes on); a
   second one, where no handler holds signals back (``k3rollout preflight``), gets out at
   once, so a person can still leave;
4. the exception is raised again: ``KeyboardInterrupt`` unwinds to cli.py, which releases the
   lock, writes the reports and says ``resume`` continues (a cancelled unit starts then, as
   one that had not been reached); a unit's exception is the first, in the order the units were
   handed out, of those that raised.

Without an exception, the pool returns once every unit has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class NotStarted(Exception):
    """A unit the pool did not start: it was stopped first (rule 2)."""


class WorkerPool:
    """At most ``workers`` units at once, handed out with ``submit`` inside ``with``; the
    ``with`` block ends once every unit has, and stops the pool by the module's rule when it
    ends with an exception or a unit raises one."""

    def __init__(self, workers: int, *, stopping: threading.Event | None = None, name: str = "k3pool") -> None:
        self.stopping = stopping if stopping is not None else threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=name)
        self._futures: list[Future[Any]] = []
        # the units running now, and whether the pool stops (then it starts nothing more); the
        # count, not the executor's threads, is what a stop waits for: a signal that lands while
        # the executor starts a thread leaves that thread out of its own list
        self._cond = threading.Condition()
        self._running = 0
        self._halted = False

    def submit(self, fn: Callable[[T], R], item: T) -> Future[R]:
        """Start ``fn(item)`` on a worker when one is free, unless the pool stops by then."""

        def unit() -> R:
            with self._cond:
                if self._halted:
                    raise NotStarted        # taken up by a worker as the pool stopped
                self._running += 1
            try:
                return fn(item)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

        fut = self._executor.submit(unit)
        self._futures.append(fut)
        fut.add_done_callback(self._ended)
        return fut

    def _ended(self, fut: Future[Any]) -> None:
        # (in the worker's thread, before it takes up another unit) a unit that raised stops
        # the others at their next boundary at once, without waiting for the thread that
        # hands out work to notice
        if _raised(fut):
            self._halt()

    def _halt(self) -> None:
        with self._cond:
            self._halted = True
        self.stopping.set()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.join()
        else:
            self._stop(exc)         # the exception goes on once the units in flight ended

    def join(self) -> None:
        """Wait for every unit handed out; stop the pool when one raises, and raise it."""
        try:
            wait(self._futures, return_when=FIRST_EXCEPTION)
            cause = next((f.exception() for f in self._futures if _raised(f)), None)
            if cause is None:
                self._executor.shutdown(wait=True)      # every unit has ended
                return
        except BaseException as exc:
            self._stop(exc)
            raise
        self._stop(cause)
        for f in self._futures:
            if _raised(f):
                f.result()          # the first, in the order handed out, of those that raised

    def _stop(self, cause: BaseException | None) -> None:
        """Steps 1 to 3 of the rule: the stop flag, nothing new starts, the units in flight end."""
        self._halt()
        held = isinstance(cause, KeyboardInterrupt)      # the one interrupt this wait takes
        while True:
            try:
                self._executor.shutdown(wait=False, cancel_futures=True)
                with self._cond:
                    while self._running:
                        self._cond.wait(0.5)
                self._executor.shutdown(wait=True)      # idle workers, gone at once
                return
            except KeyboardInterrupt:
                if held:
                    raise
                held = True


def _raised(fut: Future[Any]) -> bool:
    """Whether a unit ended with an exception of its own (not one the pool did not start)."""
    return fut.done() and not fut.cancelled() and fut.exception() is not None \
        and not isinstance(fut.exception(), NotStarted)


def run_each(fn: Callable[[T], R], items: Sequence[T], *, workers: int, stopping: threading.Event | None = None,
             name: str = "k3pool") -> list[R]:
    """``fn`` on every item, at most ``workers`` at once, by the module's rule; the results in
    the items' order."""
    if not items:
        return []
    if len(items) == 1 and threading.current_thread() is not threading.main_thread():
        return [fn(items[0])]       # a worker already: no signal reaches this thread
    with WorkerPool(min(workers, len(items)), stopping=stopping, name=name) as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]
