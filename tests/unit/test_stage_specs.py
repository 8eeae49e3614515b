"""Stage kinds are declared once (model/playbook.py's ``STAGE_KINDS``, each stage module's
``SPEC``), and every table that lists stages is derived from the declarations.

Two things are checked: the derived tables are exactly the hand-written tables they
replaced (written out here as they were), and a new declaration is all a new stage
needs: a dummy kind and its spec appear in every derived table.
"""

from __future__ import annotations

import sys
import types

import pytest

from k3rollout.checks import triage
from k3rollout.engine import states
from k3rollout.engine.states import AFTER_CHANGE_STATES, STAGE_STATE, STATE_STAGE, Event, NodeState, build_table
from k3rollout.model import playbook
from k3rollout.model.stagekinds import StageKind, Undo, derive
from k3rollout.report.render import RUNBOOK_FILES
from k3rollout.stages import baseline, cordon, cuda_check, driver_upgrade, features, multinode, uncordon, vllm_smoke
from k3rollout.stages.base import StageOutcome
from k3rollout.stages.registry import SPECS, STAGES, registry
from k3rollout.stages.spec import StageSpec, UndoAction


def test_the_derived_tables_are_the_tables_they_replaced():
    assert playbook.STAGE_ORDER == ("baseline", "cordon", "driver_upgrade", "cuda_check", "vllm_smoke",
                                    "features", "multinode", "uncordon")
    assert playbook.DEFAULT_ESTIMATES == {"baseline": 120, "cordon": 300, "driver_upgrade": 1200, "cuda_check": 180,
                                          "vllm_smoke": 900, "features": 600, "multinode": 300, "uncordon": 60}
    assert all(type(v) is int for v in playbook.DEFAULT_ESTIMATES.values())     # plan.json prints them as before
    assert playbook.BATCH_SCOPED_STAGES == frozenset({"multinode"})
    assert playbook.REPLICA_SCOPED_STAGES == frozenset({"vllm_smoke", "features"})    # was replica_serve.REPLICA_STAGES
    assert playbook.PARAMS_BY_KIND == {
        "baseline": playbook.BaselineParams, "cordon": playbook.CordonParams, "driver_upgrade": playbook.DriverParams,
        "cuda_check": playbook.CudaParams, "vllm_smoke": playbook.SmokeParams, "features": playbook.FeatureParams,
        "multinode": playbook.MultinodeParams, "uncordon": playbook.UncordonParams}
    assert playbook.ROLLBACK_UNDOES == {"restore_driver": "driver_upgrade", "stop_test_server": "vllm_smoke",
                                        "restore_serving_image": "vllm_smoke", "uncordon_if_healthy": "cordon",
                                        "quarantine": "cordon"}
    # the rule engine/states.py always applied: every stage from cordon on owes a rollback
    # when it fails (the old DESTRUCTIVE_STAGES left out cuda_check and multinode, and nothing read it)
    assert playbook.DESTRUCTIVE_STAGES == frozenset(playbook.STAGE_ORDER) - {"baseline"}
    assert {k: v.value for k, v in STAGE_STATE.items()} == {
        "baseline": "baseline-required", "cordon": "cordon-required", "driver_upgrade": "upgrade-required",
        "cuda_check": "validation-required", "vllm_smoke": "smoke-test-required",
        "features": "feature-test-required", "multinode": "multinode-test-required",
        "uncordon": "uncordon-required"}
    assert [(m.name, m.value) for m in NodeState] == [
        ("PENDING", "pending"), ("BASELINE_REQUIRED", "baseline-required"), ("CORDON_REQUIRED", "cordon-required"),
        ("DRIVER_UPGRADE_REQUIRED", "upgrade-required"), ("CUDA_CHECK_REQUIRED", "validation-required"),
        ("VLLM_SMOKE_REQUIRED", "smoke-test-required"), ("FEATURES_REQUIRED", "feature-test-required"),
        ("MULTINODE_REQUIRED", "multinode-test-required"), ("UNCORDON_REQUIRED", "uncordon-required"),
        ("UPGRADE_DONE", "upgrade-done"), ("ROLLBACK_REQUIRED", "rollback-required"), ("ROLLED_BACK", "rolled-back"),
        ("ROLLBACK_FAILED", "rollback-failed"), ("FAILED", "failed"), ("SKIPPED", "skipped")]
    assert NodeState.CORDON_REQUIRED == "cordon-required" and isinstance(NodeState.PENDING, str)
    # the runner's "stopped mid-stage after the cordon": every stage but baseline and cordon
    assert {STATE_STAGE[s] for s in AFTER_CHANGE_STATES} == set(playbook.STAGE_ORDER) - {"baseline", "cordon"}
    assert playbook.STAGE_TABLES.image_stages == frozenset({"cuda_check", "vllm_smoke", "features"})
    # triage's step-3 stages (the literal LOAD_STAGES it kept), from the declarations
    assert playbook.STAGE_TABLES.load_stages == frozenset({"vllm_smoke", "features"})
    assert triage.LOAD_STAGES is playbook.STAGE_TABLES.load_stages
    assert triage.STAGE_PRIOR == {"cuda_check": {"driver_incompatible": 0.75, "container_runtime": 0.75},
                                  "vllm_smoke": {"model_load_capacity": 0.75},
                                  "features": {"model_load_capacity": 0.75}, "multinode": {"communication": 1.0}}
    assert RUNBOOK_FILES == {"baseline": "01-baseline.md", "cordon": "02-cordon.md",
                             "driver_upgrade": "03-driver-upgrade.md", "cuda_check": "04-cuda-check.md",
                             "vllm_smoke": "05-vllm-smoke.md", "features": "06-features-multinode.md",
                             "multinode": "06-features-multinode.md", "uncordon": "07-uncordon.md",
                             "rollback": "rollback.md", "index": "README.md"}
    assert list(RUNBOOK_FILES)[-2:] == ["rollback", "index"]
    runs = {k: s.run for k, s in SPECS.items()}
    assert runs == {"baseline": baseline.run, "cordon": cordon.run, "driver_upgrade": driver_upgrade.run,
                    "cuda_check": cuda_check.run, "vllm_smoke": vllm_smoke.run, "features": features.run,
                    "multinode": multinode.run, "uncordon": uncordon.run}
    assert SPECS["multinode"].run_batch is multinode.run_group
    assert [k for k, s in SPECS.items() if s.publishes_on_pass] == ["driver_upgrade"]
    assert list(STAGES) == list(playbook.STAGE_ORDER)


def test_a_playbook_naming_an_unknown_stage_lists_the_declared_ones(tmp_path):
    with pytest.raises(Exception) as exc:
        playbook.Stage.model_validate({"name": "x", "stage": "reboot"})
    assert "'baseline', 'cordon', 'driver_upgrade', 'cuda_check', 'vllm_smoke', 'features', 'multinode' or " \
           "'uncordon'" in str(exc.value)


class DummyParams(playbook.CordonParams):
    pass


DUMMY = StageKind("dummy_check", scope="batch", params=DummyParams, destructive=True, state="dummy-check-required",
                  runbook="09-dummy.md", estimate_s=42, undone_by=(Undo("undo_dummy"),), runs_image=True,
                  loads_model=True)


DUMMY_UNDO = UndoAction(plan=lambda step, p: step, describe=lambda step: "undo_dummy",
                        execute=lambda ctx, step, untouched: (True, "undone"))


def real_load_stages() -> frozenset[str]:
    return playbook.STAGE_TABLES.load_stages


def _dummy_group(ctx, nodes):
    return {n: StageOutcome(True) for n in nodes}


def test_a_new_declaration_and_spec_is_all_a_new_stage_takes(monkeypatch):
    kinds = (*playbook.STAGE_KINDS[:-1], DUMMY, playbook.STAGE_KINDS[-1])     # before uncordon
    t = derive(kinds)
    assert t.order[-2:] == ("dummy_check", "uncordon")
    assert t.estimates["dummy_check"] == 42
    assert "dummy_check" in t.destructive and "dummy_check" in t.batch_scoped
    assert "dummy_check" not in t.replica_scoped
    assert "dummy_check" in t.image_stages and "dummy_check" in t.after_change
    assert "dummy_check" in t.load_stages and t.load_stages - {"dummy_check"} == real_load_stages()
    assert t.params["dummy_check"] is DummyParams
    assert t.states["dummy_check"] == "dummy-check-required"
    assert t.runbooks["dummy_check"] == "09-dummy.md"
    assert t.rollback_undoes["undo_dummy"] == "dummy_check"
    # everything the real declarations derive is unchanged by one more
    real = playbook.STAGE_TABLES
    assert {k: v for k, v in t.estimates.items() if k != "dummy_check"} == real.estimates

    # the state machine: its state is a member, named for it, and the table walks through it
    ns = states.node_states(t.kinds)
    assert ns.DUMMY_CHECK_REQUIRED.value == "dummy-check-required"
    table = build_table(t.order, tables=t, node_state=ns)
    assert table[(ns.MULTINODE_REQUIRED, Event.PASSED)] == ns.DUMMY_CHECK_REQUIRED
    assert table[(ns.DUMMY_CHECK_REQUIRED, Event.PASSED)] == ns.UNCORDON_REQUIRED
    assert table[(ns.DUMMY_CHECK_REQUIRED, Event.FAILED)] == ns.ROLLBACK_REQUIRED
    assert table[(ns.DUMMY_CHECK_REQUIRED, Event.ROLLBACK_REQUESTED)] == ns.ROLLBACK_REQUIRED
    # a non-destructive stage first: its failure owes no rollback
    harmless = StageKind("dummy_check", scope="node", params=DummyParams, destructive=False,
                         state="dummy-check-required", runbook="09-dummy.md", estimate_s=1)
    t2 = derive((harmless, *playbook.STAGE_KINDS))
    ns2 = states.node_states(t2.kinds)
    table2 = build_table(["dummy_check", "baseline", "cordon", "uncordon"], tables=t2, node_state=ns2)
    assert table2[(ns2.DUMMY_CHECK_REQUIRED, Event.FAILED)] == ns2.FAILED
    assert table2[(ns2.BASELINE_REQUIRED, Event.FAILED)] == ns2.FAILED
    assert table2[(ns2.CORDON_REQUIRED, Event.FAILED)] == ns2.ROLLBACK_REQUIRED

    # the registry finds its spec in the module of the same name
    module = types.ModuleType("k3rollout.stages.dummy_check")
    module.SPEC = StageSpec(DUMMY, run=lambda ctx: StageOutcome(True), run_batch=_dummy_group,
                            undo={"undo_dummy": DUMMY_UNDO})
    monkeypatch.setitem(sys.modules, "k3rollout.stages.dummy_check", module)
    specs = registry(t)
    assert list(specs) == list(t.order)
    assert specs["dummy_check"] is module.SPEC


def test_a_declaration_without_its_spec_or_with_a_clash_fails_loudly(monkeypatch):
    t = derive((*playbook.STAGE_KINDS, DUMMY))
    monkeypatch.setitem(sys.modules, "k3rollout.stages.dummy_check", types.ModuleType("k3rollout.stages.dummy_check"))
    with pytest.raises(ImportError, match="declares no SPEC"):
        registry(t)
    wrong = types.ModuleType("k3rollout.stages.dummy_check")
    wrong.SPEC = SPECS["cordon"]
    monkeypatch.setitem(sys.modules, "k3rollout.stages.dummy_check", wrong)
    with pytest.raises(ImportError, match="declared for cordon, not dummy_check"):
        registry(t)
    with pytest.raises(ValueError, match="state declared twice: cordon-required"):
        derive((*playbook.STAGE_KINDS, StageKind("x", scope="node", params=DummyParams, destructive=True,
                                                 state="cordon-required", runbook="x.md", estimate_s=1)))
    with pytest.raises(ValueError, match="name declared twice: cordon"):
        derive((*playbook.STAGE_KINDS, playbook.STAGE_KINDS[1]))
    with pytest.raises(ValueError, match="a batch-scoped stage, and only one, declares run_batch"):
        StageSpec(DUMMY, run=lambda ctx: StageOutcome(True))
    with pytest.raises(ValueError, match="a batch-scoped stage, and only one, declares run_batch"):
        StageSpec(playbook.STAGE_KINDS[1], run=lambda ctx: StageOutcome(True), run_batch=_dummy_group)


def test_a_spec_publishes_its_state_only_on_pass():
    published: list[str] = []

    class Ctx:
        def publish_progress(self, state: str) -> None:
            published.append(state)

    for passed in (False, True):
        spec = StageSpec(playbook.STAGE_KINDS[2], run=lambda ctx, p=passed: StageOutcome(p),
                         publishes_on_pass="validation-required", undo=SPECS["driver_upgrade"].undo)
        assert spec(Ctx()).passed is passed
    assert published == ["validation-required"]
