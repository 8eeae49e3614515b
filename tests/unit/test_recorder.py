"""The recorder, built alone over a real journal: what it appends is folded into the run
view at once, in journal order, and a resume folds the file into the same view."""

from __future__ import annotations

import pytest

from k3rollout.engine.clock import Clock
from k3rollout.engine.recorder import Recorder
from k3rollout.engine.states import Event, NodeState, build_table
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.view import fold


@pytest.fixture
def journal(tmp_path):
    j = Journal(tmp_path / "journal.jsonl", Clock().iso)
    yield j
    j.close()


def test_the_recorder_folds_each_record_it_appends(journal, tmp_path):
    seen: list[dict] = []
    rec = Recorder(journal, build_table(["baseline", "cordon", "driver_upgrade", "uncordon"]), seen.append)
    plan = {"hosts": ["gpu-01"], "min_serving": 0, "batches": [{"index": 1, "nodes": ["gpu-01"]}]}
    rec.record("run_started", run_id="r1", plan=plan)
    rec.record("batch_started", batch=1, nodes=["gpu-01"])
    to = rec.transition("gpu-01", Event.START)
    assert to != NodeState.PENDING
    assert rec.view.node("gpu-01").state == to.value and rec.view.batches[1]["status"] == "running"
    assert rec.applied == 3 == journal.last_seq
    assert [r["type"] for r in seen] == ["run_started", "batch_started", "node_state"]
    last = seen[-1]
    assert (last["from"], last["to"], last["event"], last["batch"]) == ("pending", to.value, "start", 1)
    # a resume folds the journal on disk into the same view
    journal.close()
    again = Journal(tmp_path / "journal.jsonl", Clock().iso)
    try:
        assert fold(again.records) == rec.view
        assert Recorder(again, rec.table).applied == 3
    finally:
        again.close()


def test_the_recorder_commits_decisions_at_once_and_observations_with_the_next_commit(journal):
    rec = Recorder(journal, build_table(["baseline"]))
    rec.record("run_started", run_id="r1", plan={"hosts": ["gpu-01"], "min_serving": 0,
                                                 "batches": [{"index": 1, "nodes": ["gpu-01"]}]})
    commits = journal.commits
    rec.record("facts", node="gpu-01", stage="baseline", facts={"driver_version": "575.57.08"})
    assert journal.commits == commits                     # an observation waits for the next commit
    rec.record("batch_started", batch=1, nodes=["gpu-01"])
    assert journal.commits == commits + 1                 # a decision is durable before record() returns
    rec.record("facts", node="gpu-01", stage="baseline", facts={}, durable=True)
    assert journal.commits == commits + 2                 # unless the caller asks
    assert rec.view.node("gpu-01").baseline == {"driver_version": "575.57.08"}


def test_a_read_of_the_view_holds_off_another_threads_record(journal):
    # the rollback reads the view's step tables from a worker thread while other nodes'
    # workers append: a record folded under the iteration raised "dictionary changed size"
    import threading

    rec = Recorder(journal, build_table(["baseline"]))
    rec.record("run_started", run_id="r1", plan={"hosts": ["gpu-01"], "min_serving": 0,
                                                 "batches": [{"index": 1, "nodes": ["gpu-01"]}]})
    reading, release, recorded = threading.Event(), threading.Event(), threading.Event()

    def read(view):
        reading.set()
        assert release.wait(30)
        return len(view.step_starts)

    def writer():
        assert reading.wait(30)
        rec.record("step_started", node="gpu-01", stage="baseline", step="x", key="01-baseline/x", argv=["true"],
                   once=False)
        recorded.set()

    t = threading.Thread(target=writer)
    t.start()
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(rec.read(read)))
    reader.start()
    assert reading.wait(30)
    # the writer is held while the read runs: the fold waits for the read's lock
    assert not recorded.wait(0.3)
    release.set()
    reader.join(30)
    t.join(30)
    assert got == [0] and recorded.is_set() and len(rec.view.step_starts) == 1
