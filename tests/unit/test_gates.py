"""Gates and hooks, built alone over a recorder, a real journal and evidence store: a pause
ends by an approval file or by its timer and is never asked twice; a hook that completed
is not called again on resume."""

from __future__ import annotations

import sys
import threading

import pytest

from k3rollout.engine.clock import Clock
from k3rollout.engine.gates import Gates
from k3rollout.engine.recorder import Recorder
from k3rollout.engine.states import build_table
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.playbook import Hook, Hooks
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.rundir import RunDir


class ManualClock(Clock):
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


class Log:
    def __getattr__(self, name):
        return lambda *a, **kw: None


@pytest.fixture
def parts(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    clock = ManualClock(1_000_000.0)
    journal = Journal(run_dir / "journal.jsonl", clock.iso)
    evidence = EvidenceStore(run_dir / "evidence")
    recorder = Recorder(journal, build_table(["baseline"]))
    recorder.record("run_started", run_id="r1", plan={"hosts": ["gpu-01"], "min_serving": 0,
                                                      "batches": [{"index": 1, "nodes": ["gpu-01"]}]})

    def make(hooks: Hooks | None = None) -> Gates:
        return Gates(record=recorder.record, view=recorder.view, evidence=evidence, clock=clock,
                     stopping=threading.Event(), redact=str, hooks=hooks or Hooks(), run_id="r1", log=Log(),
                     api=lambda: pytest.fail("no webhook here"))

    yield make, run_dir, clock, journal
    journal.close()
    evidence.close()


def types(journal: Journal, run_dir) -> list[str]:
    return [r["type"] for r in Journal.read(run_dir / "journal.jsonl")]


def test_a_pause_ends_with_the_approval_file_and_is_not_asked_again(parts):
    make, run_dir, clock, journal = parts
    gates = make()
    RunDir(run_dir).write_approval("after-batch1", decision="approved", by="alice", note="looks good",
                                   at=clock.iso())
    assert gates.pause("after-batch1", "batch 1 done", None, batch=1) == "approved"
    assert gates.view.pauses["after-batch1"]["by"] == "alice"
    before = types(journal, run_dir)
    assert before[-2:] == ["pause_started", "pause_resolved"]
    # a resumed run finds the decision in the journal: nothing is asked or recorded again
    assert gates.pause("after-batch1", "batch 1 done", None, batch=1) == "approved"
    assert types(journal, run_dir) == before


def test_a_pause_with_a_duration_ends_by_its_timer(parts):
    make, run_dir, clock, journal = parts
    gates = make()

    def later(timeout=None):
        clock.t += 61                       # the run's clock moves on while the gate waits
        return False

    gates.stopping.wait = later
    assert gates.pause("soak", "soak the canary", 60.0, batch=1) == "timer"
    assert gates.view.pauses["soak"]["decision"] == "timer"


def test_a_failed_hook_refuses_and_a_completed_hook_is_not_called_again(parts, tmp_path):
    make, run_dir, clock, journal = parts
    marker = tmp_path / "calls"
    hook = Hook(command=[sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x'); raise SystemExit(3)"])
    gates = make(Hooks(pre_batch=[hook]))
    assert gates.run_hooks("pre_batch", {"batch": 1, "nodes": ["gpu-01"]}, "batch1") is False
    done = [r for r in Journal.read(run_dir / "journal.jsonl") if r["type"] == "hook_done"]
    assert [(d["hook"], d["ok"], d["detail"]) for d in done] == [("pre_batch-batch1-1", False, "exit 3")]
    assert marker.read_text() == "x"
    # on resume the recorded outcome stands: the command does not run a second time
    assert gates.run_hooks("pre_batch", {"batch": 1, "nodes": ["gpu-01"]}, "batch1") is False
    assert marker.read_text() == "x"
    assert types(journal, run_dir).count("hook_started") == 1
