"""The rollback executor, built alone over a recorder, a real journal and evidence store and
the batch policy: an operator's rollback that would cross the capacity floor is refused,
journaled, and changes nothing; an interrupted one is found for resume."""

from __future__ import annotations

import threading

import pytest

from k3rollout.engine.clock import Clock
from k3rollout.engine.policy import BatchPolicy
from k3rollout.engine.recorder import Recorder
from k3rollout.engine.rollback import RollbackExecutor
from k3rollout.engine.states import NodeState, build_table
from k3rollout.evidence.store import EvidenceStore
from k3rollout.runlog.journal import Journal


class Log:
    def __getattr__(self, name):
        return lambda *a, **kw: None


def untouched(*_a, **_kw):
    pytest.fail("the executor reached a node")


@pytest.fixture
def made(tmp_path):
    clock = Clock()
    journal = Journal(tmp_path / "journal.jsonl", clock.iso)
    evidence = EvidenceStore(tmp_path / "evidence")
    recorder = Recorder(journal, build_table(["baseline", "cordon", "driver_upgrade", "uncordon"]))

    def make(*, min_serving: int, states: dict[str, str]) -> RollbackExecutor:
        hosts = list(states)
        recorder.record("run_started", run_id="r1", plan={
            "hosts": hosts, "min_serving": min_serving,
            "batches": [{"index": 1, "nodes": hosts, "estimate_s": 600.0, "rollback_estimate_s": 300.0}]})
        for n, st in states.items():
            recorder.record("node_state", node=n, batch=1, to=st, event="passed", **{"from": "pending"})
        return executor(recorder)

    def executor(rec: Recorder) -> RollbackExecutor:
        return RollbackExecutor(recorder=rec, steps=None, policy=BatchPolicy(max_fail_percentage=0),
                                run_hooks=untouched, pool=untouched, make_ctx=untouched, cordon_params=untouched,
                                evidence=evidence, clock=clock, stopping=threading.Event(), redact=str, log=Log())

    def reopen() -> RollbackExecutor:
        """As ``resume`` does: the journal opened again, its records folded again."""
        journal.close()
        again = opened[0] = Journal(tmp_path / "journal.jsonl", clock.iso)
        return executor(Recorder(again, recorder.table))

    opened = [journal]
    yield make, tmp_path, reopen
    opened[0].close()
    evidence.close()


def test_an_operator_rollback_that_would_cross_the_floor_changes_nothing(made):
    make, tmp_path, _ = made
    done = NodeState.UPGRADE_DONE.value
    rb = make(min_serving=2, states={"gpu-01": done, "gpu-02": done})
    assert rb.rollback_batches([1]) is False
    assert rb.halt_reason == ("rolling back gpu-01 of batch 1 would leave 1 node(s) serving, below min_serving 2 "
                              "(0 out of service: none); nothing more was changed")
    recs = Journal.read(tmp_path / "journal.jsonl")
    tail = [r["type"] for r in recs][-3:]
    assert tail == ["operator_rollback", "operator_rollback_halted", "operator_rollback_finished"]
    planned = recs[-3]
    assert planned["batches"][0]["in_service"] == ["gpu-01", "gpu-02"]
    assert planned["evidence"].endswith("rollback/operator-rollback-1.json")
    assert '"in_service"' in (tmp_path / "evidence" / planned["evidence"]).read_text()     # the plan, kept as evidence
    assert recs[-2]["remaining"] == ["gpu-01", "gpu-02"]
    # no node changed state
    assert {n: v.state for n, v in rb.view.nodes.items()} == {"gpu-01": done, "gpu-02": done}


def test_an_interrupted_operator_rollback_is_found_for_resume(made):
    make, _, reopen = made
    rb = make(min_serving=0, states={"gpu-01": NodeState.ROLLBACK_REQUIRED.value})
    rb.record("operator_rollback", batches=[{"batch": 1, "nodes": ["gpu-01"]}], min_serving=0,
              evidence="_run/rollback/operator-rollback-1.json", sha256="0" * 64)
    rb = reopen()
    assert rb.pending_operator_rollback() == [1]
    rb.record("operator_rollback_finished", ok=True)
    assert reopen().pending_operator_rollback() is None
    # a node between its rollback's request and its end is held out of service by this run
    assert rb.rolling_back() == {"gpu-01"}


def test_an_operator_rollback_leaves_a_node_held_before_its_cordon_alone(made):
    """A sliding window that stopped while a node waited for a slot leaves it at
    cordon-required with only its baseline run: it still serves, so a rollback of the batch
    does not drain it; a node whose cordon started (then a crash) is rolled back."""
    make, _, _ = made
    done, held = NodeState.UPGRADE_DONE.value, NodeState.CORDON_REQUIRED.value
    rb = make(min_serving=0, states={"gpu-01": done, "gpu-02": held, "gpu-03": held})
    rb.recorder.record("stage_started", node="gpu-03", stage="cordon", batch=1)
    assert rb._todo(1) == ["gpu-01", "gpu-03"]


# ---------------------------------------------------------------- what the journal proves unchanged


def _driver_stage(*steps: dict) -> list[dict]:
    recs = [{"type": "stage_started", "node": "a", "stage": "driver_upgrade", "ts": "t"}]
    for s in steps:
        key = f"03-driver_upgrade/{s['step']}"
        recs.append({"type": "step_started", "node": "a", "stage": "driver_upgrade", "step": s["step"], "key": key,
                     "once": s.get("once", False), "ts": "t"})
        if "done" in s:
            recs.append({"type": "step_done", "node": "a", "stage": "driver_upgrade", "step": s["step"], "key": key,
                         "once": s.get("once", False), "ts": "t", **s["done"]})
    return recs


@pytest.mark.parametrize("steps,unchanged", [
    # reads, released holds and stopped services only: nothing installed or rebooted
    ([{"step": "kernel", "done": {"rc": 0}}, {"step": "stop-gpu-services", "done": {"rc": 0}}], True),
    # the vendor tasks failed at their first task, no task reported a change (issue #33 item 7)
    ([{"step": "vendor-tasks", "once": True, "done": {"rc": 2, "changed_tasks": [], "failed_task": "Refresh"}}], True),
    # a task changed something, or the play never ended, or it lost the host, or it succeeded
    ([{"step": "vendor-tasks", "once": True, "done": {"rc": 2, "changed_tasks": ["Install"]}}], False),
    ([{"step": "vendor-tasks", "once": True}], False),
    ([{"step": "vendor-tasks", "once": True, "done": {"rc": 2, "changed_tasks": [], "unreachable": True}}], False),
    ([{"step": "vendor-tasks", "once": True, "done": {"rc": 0, "changed_tasks": []}}], False),
    # a journal from before changed_tasks was recorded proves nothing
    ([{"step": "vendor-tasks", "once": True, "done": {"rc": 2}}], False),
    # an inline install or a reboot started
    ([{"step": "vendor-step-2", "once": True, "done": {"rc": 100}}], False),
    ([{"step": "reboot", "once": True}], False),
])
def test_driver_untouched_only_when_the_journal_proves_no_install_or_reboot(steps, unchanged):
    from k3rollout.engine.rollback import driver_untouched
    from k3rollout.runlog.view import fold

    assert (driver_untouched(fold(_driver_stage(*steps)), "a") is not None) is unchanged
    assert driver_untouched(fold([]), "a") is None          # the driver stage never started
