"""Operator controls: human gates (pause / approve / reject), inconclusive gates, hooks,
quarantine with a rollout-wide failure budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from support import (
    api_changes,
    assert_reports_match_journal,
    cli,
    journal,
    journal_so_far,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

FAST = {"K3ROLLOUT_APPROVAL_POLL_S": "0.05"}


def setup(tmp_path, n=2, faults=None, **play):
    hosts = {f"gpu-{i:02d}": {"sim_faults": (faults or {}).get(f"gpu-{i:02d}", [])} for i in range(1, n + 1)}
    inv = write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01})
    play.setdefault("serial", [1])
    play.setdefault("min_serving", 0)
    pb = write_playbook(tmp_path / "pb.yml", **play)
    return pb, inv, tmp_path / "run"


def start(pb, inv, run_dir, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--plain",
                             "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **FAST, **(env or {})})


def wait_for_pause(run_dir, proc, pause_id=None, timeout=60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if (run_dir / "journal.jsonl").exists():
            recs = journal_so_far(run_dir)
            resolved = {r["pause"] for r in recs if r["type"] == "pause_resolved"}
            open_ = [r for r in recs if r["type"] == "pause_started" and r["pause"] not in resolved
                     and (pause_id is None or r["pause"] == pause_id)]
            if open_:
                return open_[0]
        time.sleep(0.05)
    raise AssertionError("the run never paused")


def test_stage_pause_waits_for_approve_and_records_who(tmp_path):
    pb, inv, run_dir = setup(tmp_path, stage_set={"driver_upgrade": {"pause": {"reason": "CAB approval"}}})
    proc = start(pb, inv, run_dir)
    p = wait_for_pause(run_dir, proc, "batch1-before-driver_upgrade")
    assert p["reason"] == "CAB approval"
    time.sleep(0.3)
    # nothing destructive ran while waiting: the node is cordoned, the driver untouched
    assert not any("apt-get install" in c for c in (run_dir / "sim-hosts" / "gpu-01" / "commands.log")
                   .read_text().splitlines())
    a = cli("approve", str(run_dir), "--by", "alice", "--note", "CHG-1234")
    assert a.returncode == 0 and "approved: batch1-before-driver_upgrade" in a.stdout
    # batch 2 pauses at the same gate and waits again
    wait_for_pause(run_dir, proc, "batch2-before-driver_upgrade")
    again = cli("approve", str(run_dir), "--pause", "batch1-before-driver_upgrade")
    assert again.returncode == 2 and "no open pause" in again.stderr
    assert cli("approve", str(run_dir), "--by", "bob").returncode == 0
    assert proc.wait(60) == 0
    res = [r for r in journal(run_dir) if r["type"] == "pause_resolved"]
    assert [(r["pause"], r["decision"], r["by"]) for r in res] == [
        ("batch1-before-driver_upgrade", "approved", "alice"), ("batch2-before-driver_upgrade", "approved", "bob")]
    assert res[0]["note"] == "CHG-1234" and (run_dir / "evidence" / res[0]["evidence"]).is_file()
    assert "CHG-1234" in (run_dir / "report.md").read_text()
    assert_reports_match_journal(run_dir)


def test_timed_pause_after_a_batch_goes_on_by_itself(tmp_path):
    pb, inv, run_dir = setup(tmp_path, pauses=[{"after_batch": 1, "duration": "1s"}])
    t = time.monotonic()
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=FAST)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t >= 1.0
    r = next(r for r in journal(run_dir) if r["type"] == "pause_resolved")
    assert (r["pause"], r["decision"]) == ("after-batch1", "timer")


def test_rejecting_before_the_driver_stage_rolls_the_batch_back_and_halts(tmp_path):
    pb, inv, run_dir = setup(tmp_path, stage_set={"driver_upgrade": {"pause": {}}})
    proc = start(pb, inv, run_dir)
    wait_for_pause(run_dir, proc)
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] != "schedulable"
    assert cli("approve", str(run_dir), "--reject", "--note", "not tonight").returncode == 0
    assert proc.wait(60) == 1
    res = result(run_dir)
    assert res["status"] == "halted"
    assert res["nodes"]["gpu-01"]["final"] == "rolled_back" and res["nodes"]["gpu-02"]["final"] == "pending"
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] == "schedulable"      # uncordoned again
    halt = next(r for r in journal(run_dir) if r["type"] == "run_halted")
    assert halt["kind"] == "rejected"


def test_rejecting_before_cordon_changes_nothing(tmp_path):
    pb, inv, run_dir = setup(tmp_path, n=1, stage_set={"cordon": {"pause": {}}})
    proc = start(pb, inv, run_dir)
    wait_for_pause(run_dir, proc)
    assert cli("approve", str(run_dir), "--reject").returncode == 0
    assert proc.wait(60) == 1
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "skipped"
    assert not api_changes(run_dir, "gpu-01")      # nothing asked of the Kubernetes API: no cordon, no label
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] == "schedulable"


def test_sigterm_while_paused_then_resume_asks_again(tmp_path):
    pb, inv, run_dir = setup(tmp_path, n=1, stage_set={"driver_upgrade": {"pause": {}}})
    proc = start(pb, inv, run_dir)
    wait_for_pause(run_dir, proc)
    proc.terminate()
    assert proc.wait(30) != 0
    resumed = subprocess.Popen([sys.executable, "-m", "k3rollout", "resume", str(run_dir), "--plain"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **FAST})
    time.sleep(1.0)
    assert resumed.poll() is None                      # still waiting at the same gate
    assert cli("approve", str(run_dir)).returncode == 0
    assert resumed.wait(60) == 0
    assert [r["pause"] for r in journal(run_dir) if r["type"] == "pause_started"] == \
        ["batch1-before-driver_upgrade"]


@pytest.mark.parametrize("decision,final", [("approve", "upgraded"), ("reject", "rolled_back")])
def test_inconclusive_gate_asks_a_person(tmp_path, decision, final):
    args = ["--tensor-parallel-size", "8", "--trust-remote-code", "--enable-prefix-caching",
            "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--disable-log-stats"]
    pb, inv, run_dir = setup(tmp_path, n=1, stage_with={"features": {"args": args}})
    proc = start(pb, inv, run_dir)
    p = wait_for_pause(run_dir, proc)
    assert p["pause"] == "gpu-01-features-inconclusive-1" and "no prefix-cache counters" in p["reason"]
    cmd = ["approve", str(run_dir), "--by", "carol"] + (["--reject"] if decision == "reject" else [])
    assert cli(*cmd).returncode == 0
    proc.wait(60)
    node = result(run_dir)["nodes"]["gpu-01"]
    assert node["final"] == final
    facts = {k: v for r in journal(run_dir) if r["type"] == "facts" and r["node"] == "gpu-01"
             for k, v in r["facts"].items()}
    if decision == "approve":
        assert facts["accepted_by"] == "carol" and "no prefix-cache counters" in facts["accepted_inconclusive"]
    else:
        assert node["failed_stage"] == "features"


class _Sink(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Sink.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_hooks_command_and_webhook_are_called_and_journaled(tmp_path):
    srv = HTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Sink.received = []
    out = tmp_path / "events.txt"
    script = tmp_path / "hook.py"
    script.write_text("import sys, json\nopen(sys.argv[1], 'a').write(json.dumps(json.load(sys.stdin)) + '\\n')\n")
    hooks = {"pre_batch": [{"command": [sys.executable, str(script), str(out)]}],
             "post_batch": [{"webhook": f"http://127.0.0.1:{srv.server_port}/chatops"}],
             "on_rollback": [{"command": [sys.executable, str(script), str(out)]}]}
    pb, inv, run_dir = setup(tmp_path, faults={"gpu-02": ["cuda_init_fails"]}, hooks=hooks, max_fail_percentage=100)
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir))
    srv.shutdown()
    assert p.returncode == 0, p.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(e["event"], e.get("batch")) for e in events] == [("pre_batch", 1), ("pre_batch", 2), ("on_rollback", 2)]
    assert events[2]["node"] == "gpu-02" and events[2]["ok"] is True
    assert [(e["event"], e["batch"], e["status"]) for e in _Sink.received] == [("post_batch", 1, "passed"),
                                                                             ("post_batch", 2, "failed")]
    done = [r for r in journal(run_dir) if r["type"] == "hook_done"]
    assert len(done) == 5 and all(r["ok"] for r in done)
    assert_reports_match_journal(run_dir)


def test_a_failing_confirm_hook_stops_the_rollout_before_anything_changes(tmp_path):
    pb, inv, run_dir = setup(tmp_path, hooks={"confirm_rollout": [{"command": ["false"]}]})
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir))
    assert p.returncode == 1
    res = result(run_dir)
    assert res["status"] == "halted" and all(b["status"] == "not_started" for b in res["batches"])
    assert next(r for r in journal(run_dir) if r["type"] == "run_halted")["kind"] == "hook"


def test_quarantine_keeps_the_failed_node_cordoned_and_labelled(tmp_path):
    pb, inv, run_dir = setup(tmp_path, n=3, faults={"gpu-02": ["cuda_init_fails"]}, serial=[1, 2],
                             on_node_failure="quarantine", failure_budget=1, max_fail_percentage=50)
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir))
    assert p.returncode == 0, p.stderr
    res = result(run_dir)
    assert res["nodes"]["gpu-02"]["final"] == "rolled_back"
    st = sim_state(run_dir, "gpu-02")
    assert st["scheduler"]["state"] != "schedulable"
    assert st["scheduler"]["labels"]["k3rollout.io/quarantine"] == journal(run_dir)[0]["run_id"]
    assert st["loaded_driver"] == "575.57.08"                      # rolled back all the same
    assert sim_state(run_dir, "gpu-03")["scheduler"]["state"] == "schedulable"
    assert_reports_match_journal(run_dir)


def test_failure_budget_halts_the_rollout_across_batches(tmp_path):
    # each batch alone is within max_fail_percentage (1 of 2 = 50%), the rollout is not
    pb, inv, run_dir = setup(tmp_path, n=6, faults={"gpu-02": ["cuda_init_fails"], "gpu-04": ["cuda_init_fails"]},
                             serial=[2], on_node_failure="quarantine", failure_budget=1, max_fail_percentage=50)
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir))
    assert p.returncode == 1
    res = result(run_dir)
    halt = next(r for r in journal(run_dir) if r["type"] == "run_halted")
    assert halt["kind"] == "failure_budget" and halt["batch"] == 2 and "gpu-02, gpu-04" in halt["reason"]
    assert res["batches"][2]["status"] == "not_started"


def test_serving_groups_run_as_whole_replicas_and_the_floor_counts_replicas(tmp_path):
    hosts = {f"{g}-n{i}": {"serving_group": g} for g in ("r1", "r2", "r3") for i in range(2)}
    hosts["r1-n1"]["sim_faults"] = ["cuda_init_fails"]          # quarantined: replica r1 stays down
    inv = write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1], min_serving=2, group_by="serving_group",
                        max_fail_percentage=100, on_node_failure="quarantine")
    run = tmp_path / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run))
    res = result(run)
    assert [b["nodes"] for b in res["batches"]] == [["r1-n0", "r1-n1"], ["r2-n0", "r2-n1"], ["r3-n0", "r3-n1"]]
    # r1-n1 is quarantined, so replica r1 is out; taking r2 would leave 1 of 3 replicas serving
    assert p.returncode == 1 and res["nodes"]["r1-n1"]["final"] == "rolled_back"
    halt = next(r for r in journal(run) if r["type"] == "run_halted")
    assert halt["kind"] == "capacity" and halt["batch"] == 2
    assert "leave 1 replica(s) serving, below min_serving 2" in halt["reason"] and "r1" in halt["reason"]


def test_a_gate_after_a_finished_batch_still_holds_after_a_restart(tmp_path):
    pb, inv, run_dir = setup(tmp_path, pauses=[{"after_batch": 1}])
    proc = start(pb, inv, run_dir)
    wait_for_pause(run_dir, proc, "after-batch1")
    proc.terminate()
    assert proc.wait(30) != 0
    resumed = subprocess.Popen([sys.executable, "-m", "k3rollout", "resume", str(run_dir), "--plain"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **FAST})
    time.sleep(1.0)
    assert resumed.poll() is None                       # batch 2 does not start without the approval
    assert result(run_dir)["batches"][1]["status"] == "not_started"
    assert cli("approve", str(run_dir), "--reject").returncode == 0
    assert resumed.wait(60) == 1
    assert next(r for r in journal(run_dir) if r["type"] == "run_halted")["kind"] == "rejected"
    assert result(run_dir)["nodes"]["gpu-02"]["final"] == "pending"
