"""How many nodes a sliding window lets walk their in-service stages ahead of a free slot:
from the stages' estimates, and more once the nodes' measured lead is longer than that."""

from __future__ import annotations

from types import SimpleNamespace

from k3rollout.engine.window import _Window


def _window(k: int) -> _Window:
    stages = [SimpleNamespace(stage=s, estimate_s=m * 60) for s, m in
              (("baseline", 3), ("cordon", 5), ("driver_upgrade", 25), ("uncordon", 50))]
    part = SimpleNamespace(stages=stages, max_fail_percentage=25)      # the SlidingWindow's
    return _Window(part, 2, [], {"max_unavailable": k, "unit_estimate_s": 0, "rollback_estimate_s": 0})


def _measured(k: int, leads: list[float], outs: list[float]) -> _Window:
    """A window whose nodes took these spans, in this order (as its slots record them)."""
    w = _window(k)
    w.leads.extend(leads)
    w.outs.extend(outs)
    return w


def test_lookahead_from_estimates_until_three_nodes_were_measured():
    assert _window(10).ahead == 2                               # ceil(10 * 3 / 80) + 1
    assert _measured(10, [2.0, 2.0], [4.0, 4.0]).ahead == 2     # two of each: not yet


def test_a_lead_longer_than_estimated_lets_more_nodes_walk_ahead():
    assert _measured(10, [2.0] * 3, [4.0] * 3).ahead == 6      # ceil(10 * 2 / 4) + 1
    assert _measured(10, [40.0] * 3, [4.0] * 3).ahead == 10    # never more than the slots
    # faster than estimated: the estimate stays
    assert _measured(10, [0.01] * 3, [4.0] * 3).ahead == 2
    # the last twenty count
    assert _measured(10, [0.01] * 30 + [2.0] * 20, [4.0] * 3).ahead == 6
