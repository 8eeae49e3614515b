"""The engine's threads on one CPU; child processes on every CPU the engine was allowed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading

import pytest

from k3rollout.engine import cpu


def test_choice_of_cpu():
    assert cpu.choose({0, 1, 2, 3}, None, pid=6) == 2          # spread by process id
    assert cpu.choose({0, 1, 2, 3}, "", pid=7) == 3
    assert cpu.choose({4, 9}, "auto", pid=3) == 9              # from the allowed set only
    for off in ("0", "off", "no", "false", " OFF "):
        assert cpu.choose({0, 1}, off, pid=1) is None
    assert cpu.choose({0, 1, 2}, "cpu0", pid=5) == 0
    assert cpu.choose({0, 1, 2}, "cpu7", pid=5) is None        # not allowed here: unpinned
    assert cpu.choose({3}, None, pid=1) is None                 # one CPU: nothing to gain


needs_two = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                               reason="needs two CPUs and sched_setaffinity")


def _child_mask() -> set[int]:
    out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(ast.literal_eval(out))


@needs_two
def test_one_cpu_pins_the_thread_and_its_threads_and_restores(monkeypatch):
    monkeypatch.delenv(cpu.ENV, raising=False)
    before = os.sched_getaffinity(0)
    seen: dict[str, set[int]] = {}
    with cpu.one_cpu() as chosen:
        assert chosen in before
        assert os.sched_getaffinity(0) == {chosen}
        assert cpu.planned() == chosen
        t = threading.Thread(target=lambda: seen.update(worker=os.sched_getaffinity(0)))
        t.start()
        t.join()
        assert _child_mask() == {chosen}            # a plain child would inherit the pin ...
        with cpu.all_cpus():
            assert _child_mask() == before          # ... so children are started with every CPU
        assert os.sched_getaffinity(0) == {chosen}
    assert seen["worker"] == {chosen}
    assert os.sched_getaffinity(0) == before


@needs_two
def test_pinning_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(cpu.ENV, "0")
    before = os.sched_getaffinity(0)
    with cpu.one_cpu() as chosen:
        assert chosen is None
        assert os.sched_getaffinity(0) == before
