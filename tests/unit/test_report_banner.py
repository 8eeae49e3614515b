"""The report's headline: green only for a clean completed run."""

from __future__ import annotations

from k3rollout.report import render


def test_banner_is_green_only_for_a_clean_completed_run():
    # issue #33 item 5: the headline counts units rolled back or kept out, replicas when planned
    clean = render.verdict_banner({"status": "completed", "nodes": {"a": {"final": "upgraded"}}}, [])
    assert (clean["text"], clean["class"]) == ("Rollout completed", "completed")
    reps = {"r1": {"final": "serving"}, "r2": {"final": "rolled_back"}, "r3": {"final": "failed"}}
    b = render.verdict_banner({"status": "completed", "nodes": {}, "replicas": reps}, ["gpu-09"])
    assert b["class"] == "completed_partial" and b["mark"] != clean["mark"]
    assert b["text"] == ("Rollout completed with 1 replica of 3 rolled back; 1 replica failed and kept out of "
                         "service; 1 node left out with --skip-node")
    assert render.verdict_banner({"status": "halted", "nodes": {}}, [])["class"] == "halted"
