"""Parts of the report that read every span, step or piece of evidence of a run (at 1,000
nodes: 8,000 spans and 100,000 pieces of evidence, rendered again at every batch's end):
what they show, however they are read."""

from __future__ import annotations

from k3rollout.plan.approval import plan_vs_actual
from k3rollout.plan.timing import actual, parsed_once
from k3rollout.report import checklist
from k3rollout.report.timeline import render_svg
from k3rollout.runlog.view import NodeView, RunView, fold

PLAN = {"stages": [{"stage": s} for s in ("baseline", "driver_upgrade", "uncordon")], "unit": "node",
        "hosts": ["n1", "n2"], "forks": 2,
        "batches": [{"index": 1, "nodes": ["n1", "n2"], "serving_before": 2, "serving_floor": 0}]}


def span(stage: str, start: str, end: str | None, passed: bool | None = True) -> dict:
    return {"stage": stage, "start": f"2026-12-05T10:{start}+00:00", "end": end and f"2026-12-05T10:{end}+00:00",
            "passed": passed}


def test_the_runs_own_evidence_is_the_run_entries_of_all_in_their_order():
    recs = [{"seq": 1, "ts": "t", "type": "run_started", "run_id": "r", "plan": PLAN,
             "preflight": {"evidence": "_run/preflight.json", "evidence_sha256": "a"},
             "playbook_evidence": "_run/playbook.yml", "playbook_evidence_sha256": "b"}]
    for i in range(50):
        recs.append({"seq": len(recs) + 1, "ts": "t", "type": "step_done", "node": f"n{i % 2 + 1}",
                     "stage": "baseline", "key": f"baseline/s{i}", "step": f"s{i}", "evidence": f"n/s{i}",
                     "sha256": "c"})
    recs += [{"seq": len(recs) + 1, "ts": "t", "type": "pause_resolved", "pause": "g1", "decision": "approved",
              "evidence": "_run/approvals/g1.json", "sha256": "d"},
             {"seq": len(recs) + 2, "ts": "t", "type": "step_done", "node": "_run", "stage": "lock", "key": "lock/l",
              "step": "lock", "evidence": "_run/lock", "sha256": "e"},
             {"seq": len(recs) + 3, "ts": "t", "type": "hook_done", "hook": "h1", "name": "notify", "ok": True,
              "evidence": "_run/hooks/h1", "sha256": "f"},
             {"seq": len(recs) + 4, "ts": "t", "type": "evidence", "node": "_run", "stage": "x", "path": "_run/x",
              "sha256": "g"}]
    v = fold(recs)
    assert v.run_evidence == [e for e in v.evidence if e["node"] == "_run"]
    assert [e["path"] for e in v.run_evidence] == ["_run/preflight.json", "_run/playbook.yml",
                                                   "_run/approvals/g1.json", "_run/lock", "_run/hooks/h1", "_run/x"]
    # sign-off item 9 cites the first four, as it did when it read every piece of evidence
    item9 = next(i for i in checklist.evaluate(v) if i["item"] == 9)
    assert [e["path"] for e in item9["evidence"]] == [e["path"] for e in v.run_evidence[:4]]


def test_what_ran_against_the_plan_names_each_nodes_settled_steps_repeats_and_gates():
    v = RunView(plan=PLAN)
    n1 = v.node("n1")
    n1.timeline = [span("baseline", "00:00", "00:10"), span("driver_upgrade", "00:10", "00:20", None),
                   span("driver_upgrade", "01:00", "01:30"), span("uncordon", "01:30", "01:40")]
    n2 = v.node("n2")
    n2.timeline = [span("baseline", "00:00", "00:05"), span("rollback", "00:05", "00:09")]
    n2.rollback_attempts = 1
    v.steps_settled = {("n1", "driver_upgrade/reboot"): {}, ("n2", "baseline/y"): {}, ("n1", "uncordon/z"): {}}
    v.pauses = {"g1": {"id": "g1", "node": "n1", "decision": "approved"}, "g2": {"id": "g2", "node": None},
                "g3": {"id": "g3", "node": "n2", "decision": None}}
    diff = plan_vs_actual(PLAN, v)
    assert diff["nodes"] == [
        {"node": "n1", "batch": None, "skipped": [],
         "added": ["driver_upgrade ran 2 times (resumed)", "settled after interruption: reboot",
                   "settled after interruption: z", "gate g1: approved"]},
        {"node": "n2", "batch": None, "skipped": ["driver_upgrade", "uncordon"],
         "added": ["rollback x1", "settled after interruption: y", "gate g3: waiting"]}]


def test_the_timeline_and_the_timing_read_each_time_once_and_show_the_same():
    nodes = {"n1": NodeView("n1", timeline=[span("baseline", "00:00", "00:10"),
                                            span("driver_upgrade", "00:10", None, None)]),
             "n2": NodeView("n2", timeline=[span("baseline", "00:00", "00:05"),
                                            span("driver_upgrade", "00:05", "00:40", False),
                                            span("rollback", "00:40", "00:50", True)])}
    batches = [{"index": 1, "nodes": ["n1", "n2"]}]
    svg = render_svg(batches, nodes, "2026-12-05T10:01:00+00:00", parsed_once())
    assert svg == render_svg(batches, nodes, "2026-12-05T10:01:00+00:00")
    assert svg.count("<rect") == 5 + 4        # the spans, then the legend
    assert "n1 driver_upgrade: unfinished 2026-12-05T10:00:10+00:00" in svg
    assert 'stroke="#000"' in svg and "n2 rollback: passed" in svg
    timelines = {n: v.timeline for n, v in nodes.items()}
    assert actual(PLAN, timelines, "2026-12-05T10:00:00+00:00", "2026-12-05T10:01:00+00:00", parsed_once()) == \
        actual(PLAN, timelines, "2026-12-05T10:00:00+00:00", "2026-12-05T10:01:00+00:00")


def test_every_label_of_the_timeline_is_escaped():
    bad = "<b>'n\"&"
    nodes = {bad: NodeView(bad, timeline=[{"stage": "base<line>", "start": "2026-12-05T10:00:00+00:00<x>",
                                            "end": "2026-12-05T10:00:10+00:00", "passed": True}])}
    svg = render_svg([{"index": 1, "nodes": [bad]}], nodes, None, lambda t: 0.0 if t and "<x>" in t else 10.0)
    assert "<b>" not in svg and "<line>" not in svg and "<x>" not in svg
    assert "<title>&lt;b&gt;&#x27;n&quot;&amp; base&lt;line&gt;: passed 2026-12-05T10:00:00+00:00&lt;x&gt;</title>" in svg
