"""The live view's parts alone: the estimates from measured stage times, the window's
colour, the view's text, and reading a journal that is still being written. Hand-made
records in the journal's shapes; no engine, no run."""

from __future__ import annotations

import json
from contextlib import nullcontext
from datetime import datetime, timezone

from rich.console import Console

from k3rollout.live.follow import JournalTail
from k3rollout.live.state import LiveRun
from k3rollout.live.view import render

T0 = 1_800_000_000.0
STAGES = [("baseline", 60.0), ("driver_upgrade", 600.0), ("uncordon", 60.0)]


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")


class Records:
    def __init__(self) -> None:
        self.out: list[dict] = []

    def add(self, t: float, type_: str, **data) -> dict:
        r = {"seq": len(self.out) + 1, "ts": iso(T0 + t), "type": type_, **data}
        self.out.append(r)
        return r


def started(window_end: float | None = None, batches=(["n1"], ["n2", "n3"])) -> Records:
    recs = Records()
    plan = {"stages": [{"stage": s, "estimate_s": e} for s, e in STAGES], "forks": 4, "unit": "node",
            "total_estimate_s": 720.0 * len(batches),
            "batches": [{"index": i, "nodes": list(b), "estimate_s": 720.0, "rollback_estimate_s": 300.0}
                        for i, b in enumerate(batches, start=1)]}
    recs.add(0, "run_started", run_id="r1", plan=plan, window_end=window_end, pid=1)
    return recs


def walk(recs: Records, node: str, t: float, took: dict[str, float], batch: int = 1) -> float:
    """``node`` through every stage from time ``t``, each taking ``took[stage]`` seconds."""
    for stage, _ in STAGES:
        recs.add(t, "node_state", node=node, batch=batch, to=f"{stage}-required", stage=stage)
        recs.add(t, "stage_started", node=node, stage=stage)
        t += took[stage]
        recs.add(t, "stage_done", node=node, stage=stage, passed=True)
    recs.add(t, "node_state", node=node, batch=batch, to="upgrade-done")
    return t


def fold(recs: Records) -> LiveRun:
    s = LiveRun()
    for r in recs.out:
        s.apply(r)
    return s


def test_before_any_stage_the_estimate_is_the_plans():
    recs = started()
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    s = fold(recs)
    # batch 1: one node, 720 s; batch 2: two nodes side by side (forks 4), 720 s
    assert s.remaining(T0) == 1440.0


def test_measured_stage_times_replace_the_plans_estimate():
    recs = started()
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    end = walk(recs, "n1", 0, {"baseline": 6.0, "driver_upgrade": 60.0, "uncordon": 6.0})
    recs.add(end, "batch_done", batch=1, status="passed", failed=[])
    s = fold(recs)
    # the fleet runs ten times as fast as planned: batch 2 is expected to take 72 s, not 720 s
    assert s.estimate("driver_upgrade", "unknown") == 60.0
    assert abs(s.remaining(T0 + end) - 72.0) < 1e-6
    assert abs(s.calibration() - 0.1) < 1e-9


def test_a_stage_nobody_has_passed_is_scaled_by_how_the_measured_ones_compared():
    recs = started()
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    recs.add(0, "stage_started", node="n1", stage="baseline")
    recs.add(30.0, "stage_done", node="n1", stage="baseline", passed=True)     # half the plan's 60 s
    s = fold(recs)
    assert s.estimate("driver_upgrade", "unknown") == 300.0


def test_the_window_turns_amber_then_red_as_the_estimate_nears_it():
    def state_at(window_left: float) -> str:
        recs = started(window_end=T0 + window_left)
        recs.add(0, "batch_started", batch=1, nodes=["n1"])
        return fold(recs).window_state(T0)
    assert state_at(3000.0) == "ok"          # 1440 s of 3000
    assert state_at(1600.0) == "tight"       # 1440 s of 1600: over 80%
    assert state_at(1000.0) == "over"        # does not fit
    assert fold(started()).window_state(T0) == "none"


def test_view_shows_batch_stage_window_and_the_approve_command():
    recs = started(window_end=T0 + 60.0)
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    recs.add(0, "node_state", node="n1", batch=1, to="baseline-required", stage="baseline")
    recs.add(0, "stage_started", node="n1", stage="baseline")
    recs.add(5, "stage_done", node="n1", stage="baseline", passed=True)
    recs.add(5, "node_state", node="n1", batch=1, to="upgrade-required", stage="driver_upgrade")
    recs.add(5, "pause_started", pause="batch1-before-driver_upgrade", reason="CAB approval", batch=1,
             at_stage="driver_upgrade")
    console = Console(width=160, record=True, color_system=None)
    console.print(render(fold(recs), T0 + 10, "/runs/my run"))
    text = console.export_text()
    assert "batch 1/2" in text and "n1" in text and "driver_upgrade: waiting for approval" in text
    assert "k3rollout approve '/runs/my run' --pause batch1-before-driver_upgrade" in text
    # baseline took 5 s of its planned 60: what is left (about 2 min) still overruns the 50 s left
    assert "window ends" in text and "50s left" in text and "does not fit" in text


def test_failures_stay_on_screen_with_triage_and_rollback():
    recs = started()
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    recs.add(0, "stage_started", node="n1", stage="baseline")
    recs.add(1, "stage_done", node="n1", stage="baseline", passed=False, reason="CUDA init failed")
    recs.add(1, "triage", node="n1", stage="baseline", category="driver_incompatible", evidence=[])
    recs.add(1, "node_state", node="n1", batch=1, to="rollback-required")
    recs.add(1, "rollback_started", node="n1", attempt=1, reason="failed")
    recs.add(2, "rollback_done", node="n1", attempt=1, ok=True, results=[])
    recs.add(2, "node_state", node="n1", batch=1, to="rolled-back")
    recs.add(2, "batch_done", batch=1, status="failed", failed=["n1"])
    recs.add(3, "batch_started", batch=2, nodes=["n2", "n3"])
    console = Console(width=160, record=True, color_system=None)
    console.print(render(fold(recs), T0 + 4, "run"))
    text = console.export_text()
    assert "batch 2/2" in text
    row = next(line for line in text.splitlines() if "n1" in line and "driver_incompatible" in line)
    assert "baseline" in row and "done" in row and "CUDA init failed" in row


def test_a_record_is_folded_once():
    recs = started()
    s = LiveRun()
    assert s.apply(recs.out[0]) and not s.apply(recs.out[0])


def test_tail_keeps_back_a_partly_written_last_line(tmp_path):
    path = tmp_path / "journal.jsonl"
    recs = started().out
    lines = [json.dumps(r).encode() + b"\n" for r in recs]
    second = json.dumps({"seq": 2, "ts": iso(T0), "type": "batch_started", "batch": 1, "nodes": ["n1"]}).encode()
    path.write_bytes(lines[0] + second[:20])
    tail = JournalTail(path)
    assert [r["seq"] for r in tail.read()] == [1]
    with open(path, "ab") as f:
        f.write(second[20:])                      # still no newline: still being written
    assert tail.read() == []
    with open(path, "ab") as f:
        f.write(b"\n")
    assert [r["seq"] for r in tail.read()] == [2]
    assert tail.read() == []


def test_tail_starts_again_when_the_journal_is_cut_back(tmp_path):
    path = tmp_path / "journal.jsonl"
    a = json.dumps({"seq": 1, "ts": iso(T0), "type": "x"}).encode() + b"\n"
    b = json.dumps({"seq": 2, "ts": iso(T0), "type": "y"}).encode() + b"\n"
    path.write_bytes(a + b)
    tail = JournalTail(path)
    assert len(tail.read()) == 2 and not tail.reset
    path.write_bytes(a)                           # a repair cut the file back (same inode)
    assert [r["seq"] for r in tail.read()] == [1] and tail.reset


def test_a_view_that_fails_says_so_once_and_never_raises_into_the_run(tmp_path, monkeypatch):
    import io

    from k3rollout.live import screen
    from k3rollout.live.feed import Feed

    def broken(*a, **kw):
        raise KeyError("plan")

    monkeypatch.setattr(screen, "render", broken)
    out = io.StringIO()
    feed = Feed(tmp_path / "journal.jsonl")
    for r in started().out:
        feed(r)
    view = screen.LiveScreen(feed, str(tmp_path), out, every=0.01)
    view.start()
    view.stop()                                   # the run's end: nothing raised to the caller
    assert out.getvalue().count("the live view stopped (KeyError") == 1
    assert "the run was not affected" in out.getvalue()


def test_records_nobody_looked_at_are_read_back_from_the_journal(tmp_path):
    from k3rollout.live.feed import Feed

    path = tmp_path / "journal.jsonl"
    recs = started()
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    walk(recs, "n1", 0, {"baseline": 6.0, "driver_upgrade": 60.0, "uncordon": 6.0})
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in recs.out))
    feed = Feed(path, max_pending=3)
    for r in recs.out:
        feed(r)
    assert len(feed._pending) == 3                # the rest was left on disk
    with feed.current() as s:
        assert s.seq == len(recs.out) and s.view.nodes["n1"].state == "upgrade-done"
        assert s.samples[("driver_upgrade", "unknown")] == [60.0]


def test_metric_names_follow_the_prometheus_conventions():
    from prometheus_client.parser import text_string_to_metric_families

    from k3rollout.live import metrics

    recs = started(window_end=T0 + 3600.0)
    recs.add(0, "batch_started", batch=1, nodes=["n1"])
    walk(recs, "n1", 0, {"baseline": 6.0, "driver_upgrade": 60.0, "uncordon": 6.0})
    s = fold(recs)
    reg = metrics.registry(lambda: nullcontext(s), lambda: T0 + 100)
    fams = list(text_string_to_metric_families(metrics.text(reg)))
    for f in fams:
        assert f.name.startswith("k3rollout_"), f.name
        if f.type == "counter":
            assert all(x.name == f.name + "_total" for x in f.samples), f.name
        if "time" in f.documentation.lower() or f.name.endswith("_end") or "duration" in f.name:
            assert f.name.endswith(("_seconds", "_timestamp_seconds")), f.name
    by = {f.name: f for f in fams}
    assert by["k3rollout_stage_duration_seconds"].type == "histogram"
    assert by["k3rollout_window_end_timestamp_seconds"].samples[0].value == T0 + 3600.0
    # the estimated end: now, plus batch 2's 720 s scaled by the measured 72 s against 720 planned
    assert abs(by["k3rollout_estimated_end_timestamp_seconds"].samples[0].value - (T0 + 100 + 72.0)) < 1e-6


def test_a_run_on_another_machine_is_never_taken_for_gone():
    import os
    import socket

    from k3rollout.live.screen import alive

    here = socket.gethostname()
    assert alive(os.getpid(), here) is True and alive(os.getpid(), None) is True
    assert alive(os.getpid(), here + "-elsewhere") is None      # its pid means nothing here
    assert alive(None, here) is None


def test_the_runs_view_draws_within_its_share_of_the_runs_cpu():
    from k3rollout.live.screen import MAX_WAIT_S, RUN_SHARE, frame_due

    cost = 0.030                                   # a 1,000-node frame
    # the run spent less than RUN_SHARE frames' worth of CPU since: no frame yet
    assert not frame_due(cost, cost + RUN_SHARE * cost * 0.9, 5.0)
    assert frame_due(cost, cost + RUN_SHARE * cost, 5.0)
    # a run that only waits (a reboot, an approval) still sees its clocks move
    assert not frame_due(cost, cost, MAX_WAIT_S - 0.5)
    assert frame_due(cost, cost, MAX_WAIT_S)
    # the first frame (nothing drawn yet) is due at once
    assert frame_due(0.0, 0.0, 0.0)
    # over a long run the view's CPU stays at or under 1 / (RUN_SHARE + 1) of the process's
    # whenever the run keeps the CPU busy enough that the wall-clock cap never fires
    spent, drawn, wall, run_rate = 0.0, 0.0, 0.0, 0.25        # the run uses a quarter of a CPU
    last_cpu, last_wall, c = 0.0, 0.0, 0.0
    while wall < 3600:
        wall += 1.0
        spent += run_rate
        if frame_due(c, spent + drawn - last_cpu, wall - last_wall):
            last_cpu, last_wall, c = spent + drawn, wall, cost
            drawn += cost
    assert drawn / (spent + drawn) <= 1 / (RUN_SHARE + 1) + 1e-9


def replica_run() -> Records:
    """Two replicas of two nodes. In batch 1, n1 fails its driver stage (triaged) and n2 its
    uncordon (untriaged); both are rolled back and the run halts before batch 2."""
    recs = Records()
    plan = {"stages": [{"stage": s, "estimate_s": e} for s, e in STAGES], "forks": 4, "unit": "replica",
            "groups": {"r1": ["n1", "n2"], "r2": ["n3", "n4"]},
            "replicas": [{"id": "r1", "nodes": ["n1", "n2"]}, {"id": "r2", "nodes": ["n3", "n4"]}],
            "total_estimate_s": 1440.0,
            "batches": [{"index": i, "nodes": nodes, "estimate_s": 720.0, "rollback_estimate_s": 300.0}
                        for i, nodes in ((1, ["n1", "n2"]), (2, ["n3", "n4"]))]}
    recs.add(0, "run_started", run_id="r1", plan=plan, window_end=None, pid=1)
    recs.add(0, "batch_started", batch=1, nodes=["n1", "n2"])
    for node, bad in (("n1", "driver_upgrade"), ("n2", "uncordon")):
        t = 0.0
        for stage, took in (("baseline", 0.5), ("driver_upgrade", 900.0), ("uncordon", 60.0)):
            recs.add(t, "node_state", node=node, batch=1, to=f"{stage}-required", stage=stage)
            recs.add(t, "stage_started", node=node, stage=stage)
            t += took
            recs.add(t, "step_done", node=node, stage=stage, key=f"{stage}/x", step="x", rc=0)
            if stage == bad:
                recs.add(t, "stage_done", node=node, stage=stage, passed=False, reason=f"{stage} failed")
                break
            recs.add(t, "stage_done", node=node, stage=stage, passed=True)
    recs.add(901, "triage", node="n1", stage="driver_upgrade", category="driver_incompatible", evidence=[])
    for node in ("n1", "n2"):
        recs.add(961, "node_state", node=node, batch=1, to="rollback-required")
        recs.add(961, "rollback_started", node=node, attempt=1, reason="failed")
        recs.add(990, "rollback_done", node=node, attempt=1, ok=True, results=[])
        recs.add(990, "node_state", node=node, batch=1, to="rolled-back")
    recs.add(991, "batch_done", batch=1, status="failed", failed=["n1", "n2"])
    recs.add(991, "run_halted", reason="batch 1 failed", kind="failures")
    recs.add(992, "run_finished", status="halted")
    return recs


def test_the_metrics_counts_are_result_jsons_at_every_record():
    from k3rollout.report.result import build_result, tallies
    from k3rollout.runlog.view import RunView, apply

    v = RunView()
    for r in replica_run().out:
        apply(v, r)
        res = build_result(v)
        assert tallies(v) == {
            "nodes": [n["final"] for n in res["nodes"].values()],
            "replicas": [x["final"] for x in (res.get("replicas") or {}).values()],
            "batches": [b["status"] for b in res["batches"]],
            "failures": [n["triage"] for n in res["nodes"].values() if n["failed_stage"]],
            "rollbacks": sum(n["rollback"]["attempts"] for n in res["nodes"].values() if n["rollback"])}
    assert tallies(v)["failures"] == ["driver_incompatible", None] and tallies(v)["replicas"] == ["rolled_back", "serving"]


def test_the_stage_histogram_counts_each_span_as_it_comes():
    from k3rollout.live.state import BUCKETS

    recs = started(batches=(["n1", "n2", "n3"],))
    recs.add(0, "batch_started", batch=1, nodes=["n1", "n2", "n3"])
    # on a bucket's bound, between two, and over the last
    walk(recs, "n1", 0, {"baseline": 1.0, "driver_upgrade": 600.0, "uncordon": 0.25})
    walk(recs, "n2", 0, {"baseline": 7.5, "driver_upgrade": 9000.0, "uncordon": 60.0})
    walk(recs, "n3", 0, {"baseline": 1.5, "driver_upgrade": 7200.0, "uncordon": 59.5})
    s = LiveRun()
    for r in recs.out:
        s.apply(r)
        for stage, hw, counts, k, total in s.histogram():
            xs = s.samples[(stage, hw)]
            assert counts == [sum(1 for x in xs if x <= b) for b in BUCKETS]
            assert k == len(xs) and abs(total - sum(xs)) < 1e-9
    assert [(stage, k) for stage, _, _, k, _ in s.histogram()] == [("baseline", 3), ("driver_upgrade", 3),
                                                                   ("uncordon", 3)]


def test_a_scrape_shows_every_record_folded_before_it():
    from k3rollout.live import metrics

    clock = [T0]

    def made_anew(state: LiveRun) -> str:
        return metrics.text(metrics.registry(lambda: nullcontext(state), lambda: clock[0]))

    s = LiveRun()
    reg = metrics.registry(lambda: nullcontext(s), lambda: clock[0])      # the endpoint's, kept
    for r in replica_run().out:
        s.apply(r)
        clock[0] += 1.0
        # what it keeps from one scrape to the next shows what the families show made anew
        assert metrics.text(reg) == made_anew(s)
    # a record the view does not show changes the count of records and the times only
    before = metrics.text(reg)
    s.apply({"seq": s.seq + 1, "ts": iso(T0 + 999), "type": "step_started", "node": "n3", "key": "x", "step": "x"})
    after = metrics.text(reg)
    assert after == made_anew(s) and after != before
    # a state folded anew (``watch`` after the journal was cut back) never gets the last one's
    s = LiveRun()
    for r in started().out:
        s.apply(r)
    assert metrics.text(reg) == made_anew(s) and 'k3rollout_nodes{state="failed"} 0.0' in made_anew(s)
