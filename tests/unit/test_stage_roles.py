"""Stage kinds carry their roles as data (model/stagekinds.py): the kind that takes a node
out of service, the one that returns it, the one that records its baseline. The engine,
the window, the planner and the state machine ask the role, so a kind declared with a role
under another name is treated as the one it replaces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k3rollout.engine import states
from k3rollout.engine.states import Event, build_table
from k3rollout.model import playbook
from k3rollout.model.stagekinds import RECORDS_BASELINE, RETURNS_TO_SERVICE, ROLES, TAKES_OUT_OF_SERVICE, derive
from k3rollout.plan.timing import split_at_cordon
from k3rollout.runlog.view import BASELINE_STAGE

T = playbook.STAGE_TABLES


def test_each_role_is_played_by_one_declared_kind():
    assert {r: T.with_role(r) for r in ROLES} == {TAKES_OUT_OF_SERVICE: "cordon", RETURNS_TO_SERVICE: "uncordon",
                                                  RECORDS_BASELINE: "baseline"}
    assert [k.name for k in T.kinds if k.role is not None] == ["baseline", "cordon", "uncordon"]
    assert T.plays("cordon", TAKES_OUT_OF_SERVICE) and not T.plays("uncordon", TAKES_OUT_OF_SERVICE)
    assert not T.plays(None, RECORDS_BASELINE) and not T.plays("rollback", RETURNS_TO_SERVICE)


def test_a_play_without_the_kind_that_plays_a_role_has_no_index_for_it():
    assert T.index(["baseline", "cordon", "driver_upgrade", "uncordon"], TAKES_OUT_OF_SERVICE) == 1
    assert T.index(["baseline", "cordon", "driver_upgrade", "uncordon"], RETURNS_TO_SERVICE) == 3
    assert T.index(["baseline", "cuda_check"], TAKES_OUT_OF_SERVICE) is None
    assert split_at_cordon(["baseline", "cordon", "uncordon"], [1.0, 2.0, 4.0]) == (1.0, 6.0)
    assert split_at_cordon(["baseline", "cuda_check"], [1.0, 2.0]) == (3.0, 0.0)


def test_a_role_declared_twice_or_unknown_is_refused():
    kinds = list(playbook.STAGE_KINDS)
    kinds[3] = replace(kinds[3], role=TAKES_OUT_OF_SERVICE)          # cuda_check besides cordon
    with pytest.raises(ValueError, match="role declared twice: takes_out_of_service"):
        derive(kinds)
    kinds[3] = replace(kinds[3], role="serves")
    with pytest.raises(ValueError, match="cuda_check: role must be one of"):
        derive(kinds)


def test_the_state_machine_asks_the_role_not_the_name():
    # the cordon kind renamed: a rejected pause right before it still holds the node unchanged
    kinds = [replace(k, name="isolate", state="isolate-required") if k.name == "cordon" else k
             for k in playbook.STAGE_KINDS]
    t = derive(kinds)
    assert t.with_role(TAKES_OUT_OF_SERVICE) == "isolate"
    ns = states.node_states(t.kinds)
    table = build_table(["baseline", "isolate", "uncordon"], tables=t, node_state=ns)
    assert table[(ns.ISOLATE_REQUIRED, Event.HOLD)] == ns.SKIPPED
    # a play whose second stage plays no such role has no such hold
    table = build_table(["baseline", "cuda_check", "uncordon"], tables=t, node_state=ns)
    assert (ns.CUDA_CHECK_REQUIRED, Event.HOLD) not in table


def test_the_run_view_names_the_baseline_stage_as_the_kinds_declare_it():
    # the fold stays free of the models (``watch`` runs it): its name for the stage whose
    # facts are the baseline is held to the declarations here
    assert BASELINE_STAGE == T.with_role(RECORDS_BASELINE)
