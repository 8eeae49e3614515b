"""How many nodes a sliding window lets walk their in-service stages ahead of a free slot:
from the stages' estimates, and more once the nodes' measured lead is longer than that."""

from __future__ import annotations

from types import SimpleNamespace

from k3rollout.engine.window import _Window


def _window(k: int) -> _Window:
    stages = [SimpleNamespace(stage=s, estimate_s=m * 60) for s, m in
              (("baseline", 3), ("cordon", 5), ("driver_upgrade", 25), ("uncordon", 50))]
    engine = SimpleNamespace(stages=stages, playbook=SimpleNamespace(play=SimpleNamespace(max_fail_percentage=25)))
    return _Window(engine, 2, [], {"max_unavailable": k, "unit_estimate_s": 0, "rollback_estimate_s": 0})


def test_lookahead_from_estimates_until_three_nodes_were_measured():
    w = _window(10)
    assert w.ahead == 2                         # ceil(10 * 3 / 80) + 1
    w.leads, w.outs = [2.0, 2.0], [4.0, 4.0]
    assert w.ahead == 2                         # two of each: not yet


def test_a_lead_longer_than_estimated_lets_more_nodes_walk_ahead():
    w = _window(10)
    w.leads, w.outs = [2.0] * 3, [4.0] * 3
    assert w.ahead == 6                         # ceil(10 * 2 / 4) + 1
    w.leads = [40.0] * 3
    assert w.ahead == 10                        # never more than the slots
    w.leads = [0.01] * 3                        # faster than estimated: the estimate stays
    assert w.ahead == 2
    w.leads = [0.01] * 30 + [2.0] * 20          # the last twenty count
    assert w.ahead == 6
