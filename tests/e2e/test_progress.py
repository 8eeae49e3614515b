"""Live progress: the live view on a terminal, one line per event otherwise."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest
from support import ROOT, journal, no_docker, result, sim_state
from support.term import terminal_env

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def read_all(fd: int) -> bytes:
    buf = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


@pytest.mark.long
def test_terminal_gets_the_live_view(tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
    env = {**terminal_env(), "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks"), "TERM": "xterm-256color"}
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    out = read_all(master)
    p.wait(timeout=900)               # a hang guard: the demo under a loaded machine takes minutes
    assert p.returncode == 0
    raw = out.decode(errors="replace")
    assert "\x1b[" in raw                   # drawn in place, not scrolled
    text = ANSI.sub("", raw)
    # the last frame: every batch and replica done, the failure with its triage and rollback
    last = text[text.rindex("batch 5/5"):]
    assert "completed" in last and "12/12 replicas" in last and "run completed" in last
    row = next(line for line in last.splitlines() if "gpu-a08" in line and "cuda_check" in line)
    assert "container_runtime" in row and "done" in row
    # while it ran: the ETA from measured stage times, and units in flight with their stage
    assert "left (measured)" in text and "in flight" in text


@pytest.mark.long
def test_demo_on_a_pipe_upgrades_all_but_the_faulty_replica_one_line_per_event(tmp_path):
    # the main job as the README runs it (its default preflight included), in a process of its own
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(run_dir)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert p.returncode == 0
    assert f"report: {run_dir / 'report.html'}" in p.stdout
    assert "\x1b[" not in p.stderr
    # the default cluster plans K3 replicas: gpu-a08 fails and its replica partner gpu-a07 with it
    assert "batch 3 failed (failed: gpu-a07, gpu-a08)" in p.stderr
    assert "ROLLBACK gpu-a08" in p.stderr and "ROLLBACK gpu-a07" in p.stderr
    # 14 nodes walk all 8 stages; gpu-a08 stops at its 4th (cuda_check), gpu-a07 at its 5th
    # (vllm_smoke: its replica cannot launch without gpu-a08)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e["event"] == "stage_done") == 14 * 8 + 4 + 5
    r = result(run_dir)
    assert r["status"] == "completed"
    assert len(r["nodes"]) == 16
    # the default cluster plans Kimi K3 replicas: gpu-a08's CUDA init fails after the upgrade,
    # and its replica rack-a/4 (gpu-a07, gpu-a08) is rolled back whole, naming gpu-a08
    a08 = r["nodes"]["gpu-a08"]
    assert a08["final"] == "rolled_back"
    assert a08["failed_stage"] == "cuda_check"
    assert a08["triage"] == "container_runtime"
    assert (a08["driver_before"], a08["driver_after"]) == ("575.57.08", "575.57.08")
    a07 = r["nodes"]["gpu-a07"]
    assert (a07["final"], a07["failed_stage"], a07["driver_after"]) == ("rolled_back", "vllm_smoke", "575.57.08")
    assert a07["reason"].startswith("replica rack-a/4 is not serving: gpu-a08 failed at cuda_check")
    assert a07["triage"] == "container_runtime"          # gpu-a08's, which caused it
    assert (r["replicas"]["rack-a/4"]["final"], r["replicas"]["rack-a/4"]["caused_by"]) == ("rolled_back", "gpu-a08")
    assert {k: v["final"] for k, v in r["replicas"].items() if k != "rack-a/4"} == dict.fromkeys(
        [f"rack-a/{i}" for i in (1, 2, 3)] + [f"rack-b/{i}" for i in range(1, 9)], "serving")
    others = {n: v for n, v in r["nodes"].items() if n not in ("gpu-a07", "gpu-a08")}
    assert {v["final"] for v in others.values()} == {"upgraded"}
    assert {v["driver_after"] for v in others.values()} == {"580.95.05"}
    # 1 failed replica of batch 3's 4 is within max_fail_percentage 25: the rollout goes on
    assert [b["status"] for b in r["batches"]] == ["passed", "passed", "failed", "passed", "passed"]
    assert r["batches"][2]["rollback_ran"] is True
    # both shapes served with the profile's launch: the H200 replica across its two nodes as TP16
    # with expert parallel (data parallel 1: vLLM builds no all-to-all manager, so neither the
    # backend nor DeepEP's module options are asked for), the B300 node alone with Blackwell's arguments
    facts = {(e["node"], e["stage"]): e["facts"] for e in journal(run_dir) if e["type"] == "facts"}
    h200 = facts[("gpu-a02", "vllm_smoke")]
    assert (h200["replica"], h200["replica_role"], h200["all2all_built"]) == ("rack-a/1", "worker", False)
    assert "driver_params_ok" not in h200 and "--headless" in h200["smoke_args"]
    assert "--all2all-backend" not in h200["smoke_args"]
    b300 = facts[("gpu-b01", "features")]
    assert (b300["replica"], b300["replica_role"]) == ("rack-b/1", "head")
    for flag in ("fastsafetensors", "--enable-prefix-caching", "1048576"):
        assert flag in b300["feature_args"]
    assert b300["prefix_cache"]["ok"] and b300["prefix_cache"]["block_tokens"] == 1536
    # the shared prefix is sized in tokens the server counted (/tokenize), not in words
    assert 2 * 1536 + 768 <= b300["prefix_cache"]["prefix_tokens"] <= 1.05 * (2 * 1536 + 768)
    # every batch carries a rollback plan for each of its nodes, recorded at baseline
    for b in r["batches"]:
        assert [rp["node"] for rp in b["rollback_plan"]] == b["nodes"]
        for rp in b["rollback_plan"]:
            assert any("575.57.08" in s for s in rp["steps"])
    # containerd nodes run through Pods: no docker command reached a node; the checks and the
    # test servers were pinned Pods, and each node's serving pod was seen with the owner that
    # brings it back (a LeaderWorkerSet on rack_a, a Deployment on rack_b)
    no_docker(run_dir, r["nodes"])
    steps = [e for e in journal(run_dir) if e["type"] == "step_started"]
    for node in r["nodes"]:
        base = facts[(node, "baseline")]
        assert base["container_runtime"].startswith("containerd://")
        owner = ("LeaderWorkerSet", "k3-h200") if node.startswith("gpu-a") else ("Deployment", "k3-b300")
        assert [(s["owner"]["kind"], s["owner"]["name"]) for s in base["serving_containers"]] == [owner]
        assert any(s["step"] == "cuda-init-pod" and s["node"] == node for s in steps)
        if r["nodes"][node]["final"] == "upgraded":
            # back: every owner at its baseline readyReplicas on baseline's digest
            back = facts[(node, "uncordon")]["serving_owners"]
            want = 4 if node.startswith("gpu-a") else 8
            (got,) = [(o["ready"], o["baseline_ready"]) for o in back.values()]
            if got != (want, want):
                # short only of pods waiting for GPUs on nodes out of service (gpu-a07/a08 while
                # they are rolled back), this node running its own: said, not failed
                (note,) = facts[(node, "uncordon")]["serving_short_elsewhere"]
                assert got[1] == want and f"has {got[0]} ready replicas of {want}" in note, (node, got, note)
    md = (run_dir / "report.md").read_text()
    assert "## Serving Pods and their owners: before and after" in md
    assert "| LeaderWorkerSet inference/k3-h200 | 4 → 4 |" in md and "| Deployment inference/k3-b300 | 8 → 8 |" in md
    # the hosts themselves: the rolled-back node is on 575 and schedulable again
    st = sim_state(run_dir, "gpu-a08")
    assert st["loaded_driver"] == "575.57.08" and st["scheduler"]["state"] == "schedulable"
    assert sim_state(run_dir, "gpu-a01")["loaded_driver"] == "580.95.05"
    for f in ("journal.jsonl", "result.json", "report.md", "report.html", "report.json", "evidence/MANIFEST.sha256"):
        assert (run_dir / f).is_file(), f
    # the read-only preflight ran on all 16 nodes before the first change, and is on record
    started = next(x for x in journal(run_dir) if x["type"] == "run_started")
    assert started["preflight"]["ran"] and started["preflight"]["ok"]
    assert len(json.loads((run_dir / "evidence" / started["preflight"]["evidence"]).read_text())["nodes"]) == 16
    assert "Preflight: passed; evidence" in (run_dir / "report.md").read_text()
