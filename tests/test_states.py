"""The node state machine is a table: every declared pair is walked, undeclared ones raise."""

import pytest

from k3rollout.engine.states import STAGE_STATE, Event, IllegalTransition, NodeState, build_table, render_table, step
from k3rollout.model.playbook import STAGE_ORDER

# The machine for the default stage order, written out by hand from the rules (states named
# for what must happen next; a failure before cordon needs no rollback, one from cordon on
# does; an operator may ask a rollback of a finished, failed-rollback or mid-stage node).
# The code builds its table from the stage list: this is the independent statement of it.
_PASS = [("pending", "start", "baseline-required"), ("baseline-required", "passed", "cordon-required"),
         ("cordon-required", "passed", "upgrade-required"), ("upgrade-required", "passed", "validation-required"),
         ("validation-required", "passed", "smoke-test-required"),
         ("smoke-test-required", "passed", "feature-test-required"),
         ("feature-test-required", "passed", "multinode-test-required"),
         ("multinode-test-required", "passed", "uncordon-required"), ("uncordon-required", "passed", "upgrade-done")]
_CHANGING = ["cordon-required", "upgrade-required", "validation-required", "smoke-test-required",
             "feature-test-required", "multinode-test-required", "uncordon-required"]
EXPECTED = {(a, e): b for a, e, b in _PASS}
EXPECTED[("baseline-required", "failed")] = "failed"
EXPECTED |= {(s, "failed"): "rollback-required" for s in _CHANGING}
EXPECTED |= {(s, "rollback_requested"): "rollback-required" for s in _CHANGING + ["upgrade-done", "rollback-failed"]}
EXPECTED |= {("baseline-required", "hold"): "skipped", ("cordon-required", "hold"): "skipped",
             ("rollback-required", "rollback_done"): "rolled-back",
             ("rollback-required", "rollback_failed"): "rollback-failed"}


def test_the_table_is_exactly_the_machine_the_rules_describe():
    table = build_table(STAGE_ORDER)
    assert {(s.value, e.value): n.value for (s, e), n in table.items()} == EXPECTED


def test_every_declared_pair_walks_and_every_other_pair_raises():
    table = build_table(STAGE_ORDER)
    for state in NodeState:
        for event in Event:
            want = EXPECTED.get((state.value, event.value))
            if want is not None:
                assert step(table, state, event) == NodeState(want), (state, event)
            else:
                with pytest.raises(IllegalTransition):
                    step(table, state, event)


def test_a_play_without_optional_stages_skips_their_states():
    table = build_table(["baseline", "cordon", "driver_upgrade", "cuda_check", "uncordon"])
    assert step(table, NodeState.CUDA_CHECK_REQUIRED, Event.PASSED) == NodeState.UNCORDON_REQUIRED
    for absent in (NodeState.VLLM_SMOKE_REQUIRED, NodeState.FEATURES_REQUIRED, NodeState.MULTINODE_REQUIRED):
        for event in Event:
            with pytest.raises(IllegalTransition):
                step(table, absent, event)


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
