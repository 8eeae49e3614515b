"""The engine's one worker pool (engine/pool.py) and its one rule for a stop: the stop flag
is set, nothing new starts, the units in flight end, and the exception goes on.

A signal is sent as the kernel delivers SIGINT or SIGTERM to the process: to the main thread
(where pytest, xdist workers included, runs tests), whose handler raises KeyboardInterrupt
wherever that thread is, as cli.py's does. Units wait on events, not on the clock, for what
they need to have happened; the short sleeps only give a pool that did not wait the time to
show it."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from k3rollout.engine.pool import WorkerPool, run_each


@pytest.fixture(autouse=True)
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in the main thread (Python's own handler)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def interrupt_main() -> None:
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def test_results_come_in_the_items_order_with_at_most_workers_at_once():
    lock = threading.Lock()
    running, most = [0], [0]
    first_three = threading.Barrier(3, timeout=30)      # broken unless three run at once

    def unit(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if i < 3:
            first_three.wait()
        time.sleep(0.001 * (10 - i))
        with lock:
            running[0] -= 1
        return i * i

    assert run_each(unit, list(range(10)), workers=3) == [i * i for i in range(10)]
    assert most[0] == 3
    assert run_each(unit, [], workers=3) == []


def test_units_run_off_the_main_thread_and_a_single_one_in_a_worker_runs_in_place():
    def where(_: object) -> threading.Thread:
        return threading.current_thread()

    # from the main thread, even one unit gets a worker: a signal then interrupts the wait only
    assert run_each(where, [1], workers=4)[0] is not threading.main_thread()
    inner: list[threading.Thread] = []

    def slot(_: object) -> None:
        # a window's slot running its node's batch: already a worker, no thread of its own
        inner.append(run_each(where, ["node"], workers=4)[0])
        assert inner[-1] is threading.current_thread()

    run_each(slot, [1], workers=1)
    assert len(inner) == 1


def test_an_interrupt_starts_nothing_new_and_waits_for_the_units_in_flight():
    """Ctrl-C or SIGTERM while the pool waits: the stop flag is set, the units not started
    never start, the one in flight runs to its end (its step is journaled), and only then does
    KeyboardInterrupt reach the caller."""
    stopping = threading.Event()
    started: list[int] = []
    ended: list[int] = []

    def unit(i: int) -> None:
        started.append(i)
        if i == 0:
            interrupt_main()
            assert stopping.wait(30)            # the step in flight goes on after the stop
            time.sleep(0.2)
        ended.append(i)

    with pytest.raises(KeyboardInterrupt):
        run_each(unit, [0, 1, 2, 3], workers=1, stopping=stopping)
    assert started == [0] and ended == [0]


def test_an_interrupt_while_handing_out_work_stops_the_pool_the_same_way():
    """The sliding window hands out nodes as slots free: a signal then lands in its loop."""
    stopping = threading.Event()
    running = threading.Event()
    ended: list[str] = []

    def unit(name: str) -> None:
        running.set()
        assert stopping.wait(30)
        time.sleep(0.2)
        ended.append(name)

    with pytest.raises(KeyboardInterrupt):
        with WorkerPool(1, stopping=stopping) as pool:
            pool.submit(unit, "in flight")
            pool.submit(unit, "queued")
            assert running.wait(30)
            raise KeyboardInterrupt             # what the handler raises in the loop
    assert ended == ["in flight"]


def test_a_unit_that_raises_stops_the_others_at_their_next_boundary_and_its_error_goes_on():
    """An exception in one unit (a journal that cannot be written, a bug) stops the pool as
    an interrupt does: the flag is set at once (units in flight see it between their steps),
    nothing new starts, the units in flight end, and the first error, in the order handed
    out, is raised."""
    stopping = threading.Event()
    zero_runs = threading.Event()
    ran: list[int] = []

    def unit(i: int) -> None:
        ran.append(i)
        if i == 0:
            zero_runs.set()
            assert stopping.wait(30)            # told at once, without the caller's help
            raise ValueError("unit 0 broke too, later")
        if i == 1:
            assert zero_runs.wait(30)
            raise RuntimeError("unit 1 broke")

    with pytest.raises(ValueError, match="unit 0"):
        run_each(unit, [0, 1, 2, 3], workers=2, stopping=stopping)
    assert sorted(ran) == [0, 1]                 # 2 and 3 never started


def test_an_interrupt_during_the_stop_for_an_error_does_not_cut_the_wait_short():
    """A unit failed and the pool waits for the one still in flight; the operator's Ctrl-C
    (the first signal, the only one cli.py lets raise) comes meanwhile: the unit in flight
    still ends before anything reaches the caller."""
    stopping = threading.Event()
    ended: list[str] = []

    def unit(name: str) -> None:
        if name == "broken":
            raise RuntimeError("broken")
        assert stopping.wait(30)
        interrupt_main()
        time.sleep(0.2)
        ended.append(name)

    with pytest.raises((RuntimeError, KeyboardInterrupt)):
        run_each(unit, ["slow", "broken"], workers=2, stopping=stopping)
    assert ended == ["slow"]


def test_without_a_stop_the_pool_leaves_the_flag_alone():
    stopping = threading.Event()
    with WorkerPool(2, stopping=stopping) as pool:
        futures = [pool.submit(lambda x: x + 1, i) for i in range(4)]
    assert [f.result() for f in futures] == [1, 2, 3, 4]
    assert not stopping.is_set()
