"""The node state machine is a table: every declared pair is walked, undeclared ones raise."""

import pytest

from k3rollout.engine.states import (STAGE_STATE, Event, IllegalTransition, NodeState, build_table, render_table,
                                     step)
from k3rollout.model.playbook import STAGE_ORDER


def test_every_declared_pair_walks_and_every_other_pair_raises():
    table = build_table(STAGE_ORDER)
    for state in NodeState:
        for event in Event:
            if (state, event) in table:
                assert step(table, state, event) == table[(state, event)]
            else:
                with pytest.raises(IllegalTransition):
                    step(table, state, event)


def test_happy_path_walks_all_stages_in_order_to_upgrade_done():
    table = build_table(STAGE_ORDER)
    s = step(table, NodeState.PENDING, Event.START)
    seen = [s]
    while s != NodeState.UPGRADE_DONE:
        s = step(table, s, Event.PASSED)
        seen.append(s)
    assert seen == [STAGE_STATE[k] for k in STAGE_ORDER] + [NodeState.UPGRADE_DONE]


def test_failure_before_any_change_needs_no_rollback_after_it_does():
    table = build_table(STAGE_ORDER)
    assert step(table, NodeState.BASELINE_REQUIRED, Event.FAILED) == NodeState.FAILED
    for kind in STAGE_ORDER[1:]:
        assert step(table, STAGE_STATE[kind], Event.FAILED) == NodeState.ROLLBACK_REQUIRED
    assert step(table, NodeState.ROLLBACK_REQUIRED, Event.ROLLBACK_FAILED) == NodeState.ROLLBACK_FAILED
    with pytest.raises(IllegalTransition):
        step(table, NodeState.ROLLED_BACK, Event.PASSED)


def test_table_renders_for_the_runbooks():
    text = render_table(build_table(STAGE_ORDER))
    assert "| `upgrade-required` | `failed` | `rollback-required` |" in text
