"""A freed slot of the sliding window goes to the node first in the plan's order among those
waiting at their cordon, not to whichever waiting thread wakes first; a node the capacity
floor holds back does not hold the ones behind it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from k3rollout.engine.window import _Window


class Policy:
    def __init__(self, held: set[str]):
        self.held = held

    def capacity_short(self, view: Any, nodes: list[str], what_for: str, extra_out: Any = ()) -> str | None:
        return f"floor holds {nodes[0]}" if nodes[0] in self.held else None

    def over_budget(self, view: Any) -> str | None:
        return None


def _window(nodes: list[str], held: set[str] = frozenset(), k: int = 1) -> _Window:
    stages = [SimpleNamespace(stage=s, estimate_s=60) for s in ("baseline", "cordon", "uncordon")]
    view = SimpleNamespace(window_end=None, node=lambda n: SimpleNamespace(state="pending"))
    part = SimpleNamespace(stages=stages, kinds=[s.stage for s in stages], max_fail_percentage=100, view=view,
                           policy=Policy(set(held)), stopping=threading.Event(), clock=None)
    return _Window(part, 2, nodes, {"max_unavailable": k, "unit_estimate_s": 0, "rollback_estimate_s": 0})


def _arrive(w: _Window, node: str, took: list[str]) -> threading.Thread:
    def go() -> None:
        if w.before_cordon(node):
            took.append(node)
    t = threading.Thread(target=go)
    t.start()
    return t


def _queued(w: _Window, n: int) -> None:
    # wait (no clock involved) until n nodes wait at their cordon
    with w.cond:
        while len(w.queued) < n:
            w.cond.wait(0.05)


def _free(w: _Window, node: str) -> None:
    with w.cond:
        w.out.discard(node)
        w.cond.notify_all()


def test_the_slot_goes_to_the_first_node_of_the_plan_that_waits():
    w = _window(["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    w.out.add("gpu-01")                           # the one slot is taken
    took: list[str] = []
    threads = [_arrive(w, "gpu-04", took)]
    _queued(w, 1)
    threads.append(_arrive(w, "gpu-03", took))
    _queued(w, 2)
    threads.append(_arrive(w, "gpu-02", took))    # arrives last, first in the plan
    _queued(w, 3)
    for _ in range(3):
        before = len(took)
        _free(w, next(iter(w.out)))
        with w.cond:
            while len(took) == before:
                w.cond.wait(0.05)
    for t in threads:
        t.join(timeout=30)
    assert took == ["gpu-02", "gpu-03", "gpu-04"]


def test_a_node_the_floor_holds_back_does_not_hold_the_ones_behind_it():
    # two slots, both taken; gpu-00 stays out, so the floor's refusal waits rather than ends the window
    w = _window(["gpu-00", "gpu-01", "gpu-02", "gpu-03"], held={"gpu-02"}, k=2)
    w.out.update({"gpu-00", "gpu-01"})
    took: list[str] = []
    held = _arrive(w, "gpu-02", took)
    _queued(w, 1)
    behind = _arrive(w, "gpu-03", took)
    _queued(w, 2)
    _free(w, "gpu-01")
    behind.join(timeout=30)
    assert took == ["gpu-03"] and "gpu-02" in w.queued
    w.stop = ("test", "over")                     # the window ends: the held node stays serving
    _free(w, "gpu-00")
    held.join(timeout=30)
    assert took == ["gpu-03"] and not held.is_alive()
