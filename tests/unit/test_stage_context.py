"""The narrow context a stage gets as ``ctx.runner`` (``stages.base.StageContext``).

mypy checks the stages against the protocol (pyproject.toml lists k3rollout/stages), so a
stage cannot call what the protocol does not name. Here: the protocol names exactly what
a stage may ask for, and the engine's two step runners (a run's ``StepRunner``, which the
``Engine`` holds and hands to every stage, and observation's ``ReadOnlyRunner``) offer every
member of it with the parameters it declares.
"""

from __future__ import annotations

import inspect

from k3rollout.engine.clock import Clock
from k3rollout.engine.observe import ReadOnlyRunner
from k3rollout.engine.steps import StepRunner
from k3rollout.stages.base import StageContext

MEMBERS = {"step", "call", "can_run_ansible", "ansible_step", "prior_meta", "http", "http_many", "kube",
           "record_evidence", "wait_for_host", "clock", "scheduler"}


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_the_protocol_is_exactly_what_a_stage_may_ask_for():
    assert {n for n in vars(StageContext) if not n.startswith("_")} == MEMBERS


def test_both_step_runners_offer_every_member_with_its_parameters():
    for impl in (StepRunner, ReadOnlyRunner):
        for name in MEMBERS:
            want = vars(StageContext)[name]
            if isinstance(want, property):
                continue                # an attribute or a property: checked on instances below
            have = getattr(impl, name)
            sig = inspect.signature(have)
            forwards = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())     # **kw passed on
            missing = [p for p in _params(want) if p not in sig.parameters
                       and not (forwards and inspect.signature(want).parameters[p].kind is inspect.Parameter.KEYWORD_ONLY)]
            assert not missing, f"{impl.__name__}.{name} lacks {missing}"


def test_a_stage_context_answers_through_the_protocol(stage_harness):
    h = stage_harness(scheduler="slurm")
    assert isinstance(h.engine.steps, StepRunner) and isinstance(h.engine.steps, StageContext)
    ctx = h.ctx("cordon")
    # a stage gets the held step runner, never the engine itself
    assert ctx.runner is h.engine.steps and ctx.runner is not h.engine
    assert ctx.runner.clock is h.engine.clock
    assert ctx.scheduler.kind == "slurm"            # NodeCtx asks its runner for the node's scheduler
    assert ctx.runner.can_run_ansible is False      # the fake executor is not SSH


def test_the_observation_runner_is_a_stage_context(tmp_path, fake_executor):
    from k3rollout.evidence.store import EvidenceStore
    from k3rollout.runlog.journal import Journal

    journal = Journal(tmp_path / "journal.jsonl", Clock().iso)
    try:
        runner = ReadOnlyRunner(journal, EvidenceStore(tmp_path / "evidence"), fake_executor, None, str, None)
        assert isinstance(runner, StageContext)
        assert isinstance(runner.clock, Clock)
    finally:
        journal.close()


def test_one_template_context_for_assertions_vendor_steps_and_rollback(stage_harness):
    from k3rollout.stages import rollback
    from k3rollout.stages.driver import host

    h = stage_harness(hosts={"gpu-01": {"rack": "r7"}})
    base = {"driver_version": "575.57.08", "pkg_mgr": "apt", "os_family": "Debian",
            "driver_packages": [{"name": "nvidia-driver-575", "version": "575.57.08-0ubuntu1"}]}
    ctx = h.ctx("driver_upgrade", baseline=base, facts=base)
    seen = host.template_context(ctx)
    h.engine.record("facts", node="gpu-01", stage="baseline", facts=base)
    assert seen == h.engine.assertion_context("gpu-01")
    assert seen["vars"]["rack"] == "r7" and seen["rack"] == "r7"
    assert seen["node"] == seen["inventory_hostname"] == "gpu-01"
    # the rollback's restore steps are rendered with the same names (its facts: the baseline)
    steps = rollback.plan_rollback(h.engine.playbook, "gpu-01", base, h.engine.tvars("gpu-01"))
    restore = next(s for s in steps if s["action"] == "restore_driver")
    assert "error" not in restore
    assert restore["commands"] == [["apt-get", "install", "-y", "--allow-downgrades",
                                    "nvidia-driver-575=575.57.08-0ubuntu1"]]
