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


def test_a_node_its_rollback_returned_to_service_is_not_called_kept_out():
    # the rollback uncordoned it, then its owners' pods did not come back: rollback_failed, and
    # schedulable again (cordon.uncordon_if_healthy's result says in_service)
    back = {"final": "rollback_failed", "rollback": {"attempts": 1, "results": [
        {"action": "uncordon_if_healthy", "status": "failed", "detail": "uncordoned, but ...", "in_service": True}]}}
    held = {"final": "rollback_failed", "rollback": {"attempts": 1, "results": [
        {"action": "restore_driver", "status": "failed", "detail": "..."},
        {"action": "uncordon_if_healthy", "status": "skipped", "detail": "..."}]}}
    nodes = {"a": {"final": "upgraded"}, "b": back, "c": held}
    b = render.verdict_banner({"status": "completed", "nodes": nodes}, [])
    assert b["text"] == ("Rollout completed with 1 node failed and kept out of service; 1 node failed and "
                         "returned to service, its workloads not proven back")
    # a replica is kept out while any failed node of it is
    reps = {"r1": {"final": "failed", "nodes": ["b"]}, "r2": {"final": "failed", "nodes": ["b", "c"]}}
    b = render.verdict_banner({"status": "completed", "nodes": nodes, "replicas": reps}, [])
    assert b["detail"] == ("1 replica failed and kept out of service; 1 replica failed and returned to service, "
                           "its workloads not proven back")
