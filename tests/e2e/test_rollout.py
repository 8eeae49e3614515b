"""End-to-end rollouts on the simulated cluster, asserting on result.json, the journal,
the evidence store and the simulated hosts themselves."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

from support import (
    DOCKER_HOST,
    PLAYBOOK,
    api_changes,
    assert_reports_match_journal,
    commands,
    journal,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.cli import main
from k3rollout.engine.clock import Clock


def run(tmp_path, inventory, playbook=PLAYBOOK, *extra) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    code = main(["run", str(playbook), "-i", str(inventory), "--yes", "--run-dir", str(run_dir), *extra])
    return code, run_dir


def test_journal_pairs_every_step_and_evidence_verifies(tmp_path):
    # Docker hosts: the baseline's evidence of the failed K3 attempt is its container's logs
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["vllm_oom"]}}, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", serial=2, max_fail_percentage=50, min_serving=0)
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 0
    recs = journal(run_dir)
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    started = {(r["node"], r["key"]) for r in recs if r["type"] == "step_started"}
    ended = {(r["node"], r["key"]) for r in recs if r["type"] in ("step_done", "step_error")}
    assert started <= ended
    # journal first: each stage's stage_started precedes its first step
    first_step = next(i for i, r in enumerate(recs) if r["type"] == "step_started")
    assert any(r["type"] == "stage_started" for r in recs[:first_step])
    ev = run_dir / "evidence"
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=ev, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    files = [p for p in ev.rglob("*.txt")]
    assert files and all(not (p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) for p in files)
    r = result(run_dir)
    assert r["nodes"]["gpu-02"]["triage"] == "model_load_capacity"
    assert r["nodes"]["gpu-02"]["failed_stage"] == "vllm_smoke"
    # the baseline kept the original r575 failure logs of the K3 container
    logs = (ev / "gpu-01" / "01-baseline" / "failed-container-logs-kimi-k3.txt").read_text()
    assert "CUDA driver version is insufficient for CUDA runtime version" in logs


def test_every_destructive_command_runs_only_after_all_before_it_is_durable(tmp_path, monkeypatch):
    """Write-ahead: when a destructive command reaches the host, its step_started record and
    everything before it (baseline evidence, the rollback plan, the previous destructive
    step's outcome) are durable. Read-only records and a destructive step's outcome, which
    its probe settles after a power cut, are committed with the next commit, not their own."""
    from k3rollout.runlog import journal as journal_mod
    from k3sim.transport import SimExecutor

    def last_record(path: Path) -> dict:

        return json.loads(path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1])

    committed = []                         # (journal bytes durable, the record that asked)
    synced: set[str] = set()               # every file and folder fsynced so far
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.add(str(path))
        if path.name == "journal.jsonl":
            committed.append((os.fstat(fd).st_size, last_record(path)))

    def evidence_durable(jpath: Path) -> None:
        # every evidence file the journal cites so far, and the folders naming it, were fsynced

        for line in jpath.read_bytes().splitlines():
            rec = json.loads(line)
            if rec["type"] == "evidence":
                f = jpath.parent / "evidence" / rec["path"]
                for p in (f, f.parent, f.parent.parent, f.parent.parent.parent):
                    assert str(p) in synced, f"{p} is cited by record {rec['seq']} but was never fsynced"

    destructive = []
    real_run = SimExecutor.run

    def run_cmd(self, host, argv, **kw):
        jpath = self.root.parent / "journal.jsonl"
        rec = last_record(jpath)
        if rec["type"] == "step_started" and rec.get("once") and rec["argv"][-len(argv):] == argv[-len(rec["argv"]):]:
            destructive.append((rec["step"], jpath.stat().st_size, committed[-1][0] if committed else 0))
            evidence_durable(jpath)
        return real_run(self, host, argv, **kw)

    from k3rollout.engine.steps import StepRunner

    real_call = StepRunner.call

    def api_call(self, ctx, name, what, fn, **kw):
        # a change through the Kubernetes API: the same rule when the request is sent
        def send():
            jpath = self.evidence.root.parent / "journal.jsonl"
            rec = last_record(jpath)
            if rec["type"] == "step_started" and rec.get("once") and rec["step"] == name:
                destructive.append((rec["step"], jpath.stat().st_size, committed[-1][0] if committed else 0))
                evidence_durable(jpath)
            return fn()
        return real_call(self, ctx, name, what, send, **kw)

    monkeypatch.setattr(journal_mod.os, "fsync", fsync)
    monkeypatch.setattr(SimExecutor, "run", run_cmd)
    monkeypatch.setattr(StepRunner, "call", api_call)
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})       # one node: nothing else writes meanwhile
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
    assert code == 0 and result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    # a containerd node: the check pods and test servers are created through the API, each a
    # once step whose record is durable before the POST, as the driver's steps are
    assert [d[0] for d in destructive] == ["upgrade-state-cordon-required", "drain", "upgrade-state-upgrade-required",
                                           "vendor-step-2", "reboot", "upgrade-state-validation-required",
                                           "container-nvidia-smi-pod", "cuda-init-pod", "k3rollout-smoke-run",
                                           "k3rollout-features-run",
                                           "upgrade-state-uncordon-required", "uncordon", "upgrade-state-upgrade-done"]
    for step, written, durable in destructive:
        assert durable == written, f"{step} ran with {written - durable} journal bytes not yet durable"
    asked = [(r["type"], r.get("step")) for _, r in committed]
    assert not any(t in ("step_done", "rollback_plan", "facts", "evidence", "node_state") for t, _ in asked), asked
    assert asked.count(("step_started", "drain")) == 1 and ("run_finished", None) in asked


def test_canary_failure_halts_rollout_and_rolls_back(tmp_path):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 6)}
    hosts["gpu-01"] = {"sim_faults": ["driver_install_fails"]}
    # the node-level play (the shipped one plans K3 replicas, which single nodes cannot hold)
    code, run_dir = run(tmp_path, write_inventory(tmp_path / "inv", hosts), write_playbook(tmp_path / "pb.yml"))
    assert code == 1
    r = result(run_dir)
    assert r["status"] == "halted" and r["halt"]["kind"] == "failure"
    n = r["nodes"]["gpu-01"]
    assert (n["final"], n["failed_stage"], n["driver_after"]) == ("rolled_back", "driver_upgrade", "575.57.08")
    assert all(r["nodes"][h]["final"] == "pending" for h in ("gpu-02", "gpu-03", "gpu-04", "gpu-05"))
    assert [b["status"] for b in r["batches"]] == ["failed", "not_started", "not_started", "not_started"]
    # nothing was done to the nodes of batches that never started
    assert not (run_dir / "sim-hosts" / "gpu-02" / "commands.log").exists() or commands(run_dir, "gpu-02") == []
    st = sim_state(run_dir, "gpu-01")
    assert st["loaded_driver"] == "575.57.08" and st["scheduler"]["state"] == "schedulable"
    installs = [c for c in commands(run_dir, "gpu-01") if c.startswith("apt-get install")]
    assert len(installs) == 2 and "575.57.08" in installs[1]


def test_failed_rollback_keeps_node_cordoned_and_halts_loudly(tmp_path, capsys):
    hosts = {"gpu-01": {"sim_faults": ["no_boot_after_upgrade"]}, "gpu-02": {}}
    pb = write_playbook(tmp_path / "pb.yml", serial=1, max_fail_percentage=100, reboot_timeout=1)
    code, run_dir = run(tmp_path, write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01}), pb)
    assert code == 1
    r = result(run_dir)
    assert r["nodes"]["gpu-01"]["final"] == "rollback_failed"
    assert r["halt"]["kind"] == "rollback_failed"       # even though max_fail_percentage is 100
    assert r["nodes"]["gpu-02"]["final"] == "pending"
    assert "ROLLBACK FAILED" in capsys.readouterr().err
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] in ("cordoned", "drained")      # spec.unschedulable


def test_max_fail_percentage_decides_whether_the_rollout_goes_on(tmp_path):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 9)}
    hosts["gpu-02"] = {"sim_faults": ["prefix_cache_miss"]}
    inv = write_inventory(tmp_path / "inv", hosts)
    # 1 of 4 failed = 25%: allowed at 25 (Ansible halts only when the percentage is exceeded)
    code, run_dir = run(tmp_path / "a", inv, write_playbook(tmp_path / "a.yml", serial=4, max_fail_percentage=25))
    r = result(run_dir)
    assert code == 0 and r["status"] == "completed"
    assert r["nodes"]["gpu-02"]["final"] == "rolled_back" and r["nodes"]["gpu-02"]["failed_stage"] == "features"
    assert r["nodes"]["gpu-08"]["final"] == "upgraded"
    code, run_dir = run(tmp_path / "b", inv, write_playbook(tmp_path / "b.yml", serial=4, max_fail_percentage=24))
    r = result(run_dir)
    assert code == 1 and r["status"] == "halted"
    assert r["nodes"]["gpu-08"]["final"] == "pending"


class StepClock(Clock):
    """Virtual time: every reading of the clock moves it one minute on (journal timestamps
    included), so a batch of ~100 records uses up well over an hour, deterministically."""

    def __init__(self) -> None:
        self.t = time.time()

    def now(self) -> float:
        self.t += 60
        return self.t


def test_window_too_short_starts_no_new_batch_and_leaves_nodes_pending(tmp_path):
    inv = write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 4)})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    run_dir = tmp_path / "run"
    # 78 min per batch + 28 min rollback reserve: batch 1 fits a 2 h window (a few clock
    # readings before it start), and once it has used its (virtual) time batch 2 no longer does
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--window", "2h"],
                clock=StepClock())
    assert code == 1
    r = result(run_dir)
    assert r["status"] == "halted" and r["halt"]["kind"] == "window"
    assert r["nodes"]["gpu-01"]["final"] == "upgraded"
    assert [r["nodes"][h]["final"] for h in ("gpu-02", "gpu-03")] == ["pending", "pending"]
    assert r["window_end"] is not None


def test_second_concurrent_run_is_refused_naming_the_lock_holder(tmp_path, capsys):
    from k3rollout.runlog.lock import RunLock

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    holder = RunLock(str(inv), tmp_path / "other-run", "2026-12-02T01:00:00Z")
    holder.acquire()
    try:
        code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
        assert code == 1
        err = capsys.readouterr().err
        assert f"pid {os.getpid()}" in err and "other-run" in err
        assert not (run_dir / "journal.jsonl").exists()
    finally:
        holder.release()


def test_stale_lock_is_reported_with_how_to_clear_it_never_stolen(tmp_path, capsys):

    from k3rollout.model import load_inventory
    from k3rollout.runlog.lock import lock_paths

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    dead = subprocess.Popen(["true"])
    dead.wait()
    [path] = lock_paths(load_inventory(str(inv)))
    path.parent.mkdir(parents=True, exist_ok=True)
    import socket

    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "user": "ops",
                                "run_dir": "/runs/old", "started": "2026-12-01T02:00:00Z"}))
    code, _ = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
    err = capsys.readouterr().err
    assert code == 1
    assert "stale" in err and "k3rollout resume /runs/old" in err and f"rm {path}" in err
    assert path.exists()


def test_node_cordoned_before_the_run_stays_cordoned(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_cordoned": True}, "gpu-02": {}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] != "schedulable"
    assert sim_state(run_dir, "gpu-02")["scheduler"]["state"] == "schedulable"
    # the API was never asked to change gpu-01's schedulability (only its progress label);
    # gpu-02 was cordoned and uncordoned through it
    changes = api_changes(run_dir, "gpu-01")
    assert changes and not any("unschedulable" in c for c in changes), changes
    assert [c for c in api_changes(run_dir, "gpu-02") if "unschedulable" in c] == \
        ['PATCH nodes/gpu-02 {"spec": {"unschedulable": true}}', 'PATCH nodes/gpu-02 {"spec": {"unschedulable": null}}']
    assert sim_state(run_dir, "gpu-01")["scheduler"]["labels"]["k3rollout.io/upgrade-state"] == "upgrade-done"


def test_no_in_place_change_captures_evidence_only(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}})
    pb = write_playbook(tmp_path / "pb.yml", vars={"allow_in_place_change": False})
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 0
    r = result(run_dir)
    assert r["status"] == "no_change"
    assert {n["final"] for n in r["nodes"].values()} == {"skipped"}
    for h in ("gpu-01", "gpu-02"):
        cmds = commands(run_dir, h)
        assert cmds and not any(c.split()[0] in ("apt-get", "reboot", "kubectl") and "get" not in c for c in cmds)
        assert api_changes(run_dir, h) == []
        assert sim_state(run_dir, h)["loaded_driver"] == "575.57.08"


def test_rollback_command_restores_a_completed_batch(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0))
    assert code == 0
    assert main(["rollback", str(run_dir), "--batch", "2"]) == 0
    r = result(run_dir)
    assert r["nodes"]["gpu-02"]["final"] == "rolled_back" and r["nodes"]["gpu-02"]["driver_after"] == "575.57.08"
    assert r["nodes"]["gpu-01"]["final"] == "upgraded"
    assert r["batches"][1]["status"] == "rolled_back"
    assert sim_state(run_dir, "gpu-02")["loaded_driver"] == "575.57.08"
    assert sim_state(run_dir, "gpu-02")["scheduler"]["state"] == "schedulable"
    assert_reports_match_journal(run_dir)
    assert main(["rollback", str(run_dir), "--batch", "7"]) == 2


def test_a_rollback_whose_terminal_closed_still_exits_with_its_outcome(tmp_path, monkeypatch):
    # the operator's terminal went away during the rollback: its last lines cannot be
    # written (EIO), and the rollback's outcome is still its exit code, not an internal error
    import errno

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0))
    assert code == 0

    class ClosedTerminal:
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

        def flush(self) -> None:
            raise OSError(errno.EIO, "Input/output error")

        def isatty(self) -> bool:
            return False

        def fileno(self) -> int:
            raise ValueError("closed")

    monkeypatch.setattr("sys.stdout", ClosedTerminal())
    assert main(["rollback", str(run_dir), "--batch", "1"]) == 0
    monkeypatch.undo()
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "rolled_back"


def test_dropped_connection_during_install_is_settled_not_repeated(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["ssh_drops"]}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    installs = [c for c in commands(run_dir, "gpu-01") if c.startswith("apt-get install")]
    assert len(installs) == 1
    recs = journal(run_dir)
    assert any(r["type"] == "step_error" and r["error"] == "connection_lost" for r in recs)
    assert any(r["type"] == "step_settled" and r["took_effect"] for r in recs)


def test_slow_reboot_within_its_timeout_is_waited_for(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["slow_reboot"], "sim_slow_reboot_s": 1.0}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0, reboot_timeout=5))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    waits = [r["facts"]["reboot_wait_s"] for r in journal(run_dir)
             if r["type"] == "facts" and "reboot_wait_s" in r["facts"]]
    assert waits and waits[0] >= 0.9


def test_reboot_slower_than_its_timeout_fails_and_the_node_stays_cordoned(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["slow_reboot"], "sim_slow_reboot_s": 1.5}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0, reboot_timeout=1))
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert n["failed_stage"] == "driver_upgrade" and "did not come back within 1s" in n["reason"]
    # the rollback's own reboot is just as slow: it cannot prove the restore, so the
    # node is rollback_failed and stays out of service rather than being uncordoned blind
    assert n["final"] == "rollback_failed"
    restore = {x["action"]: x for x in n["rollback"]["results"]}
    assert restore["restore_driver"]["status"] == "failed"
    assert restore["uncordon_if_healthy"]["status"] == "skipped"
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] in ("cordoned", "drained")      # spec.unschedulable


def test_faults_fail_the_right_stage_with_the_right_triage(tmp_path):
    hosts = {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]},
             "gpu-03": {}, "gpu-04": {"sim_faults": ["nccl_broken"]}}
    pb = write_playbook(tmp_path / "pb.yml", serial=4, min_serving=0, max_fail_percentage=50)
    code, run_dir = run(tmp_path, write_inventory(tmp_path / "inv", hosts), pb)
    assert code == 0
    n = result(run_dir)["nodes"]
    assert (n["gpu-02"]["failed_stage"], n["gpu-02"]["triage"]) == ("cuda_check", "container_runtime")
    # the batch-wide all_reduce fails; pairs clear gpu-01 and gpu-03 and blame gpu-04
    assert (n["gpu-04"]["failed_stage"], n["gpu-04"]["triage"]) == ("multinode", "communication")
    assert n["gpu-01"]["final"] == n["gpu-03"]["final"] == "upgraded"
    assert n["gpu-02"]["final"] == n["gpu-04"]["final"] == "rolled_back"
    pairs = [r["key"] for r in journal(run_dir) if r["type"] == "step_started" and "all-reduce-pair" in r["key"]]
    assert pairs


def test_unofficial_image_without_recorded_source_stops_before_any_change(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, vars={"vllm_image": "registry.local/vllm:k3-cu129"})
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["final"], n["failed_stage"]) == ("failed", "baseline")
    assert "self_built_source" in n["reason"] and n["rollback"] is None
    assert not any(c.startswith("apt-get install") for c in commands(run_dir, "gpu-01"))
    assert api_changes(run_dir, "gpu-01") == []
    pb2 = write_playbook(tmp_path / "pb2.yml", min_serving=0, serial=2,
                         vars={"vllm_image": "registry.local/vllm:k3-cu129",
                               "self_built_source": "git+https://github.com/vllm-project/vllm@v0.23.1 (cu129 build)"})
    code, run_dir = run(tmp_path / "b", inv, pb2)
    # the self-built image passes the pre-check, then cannot be pulled: a clear cuda_check failure
    n = result(run_dir)["nodes"]["gpu-01"]
    assert n["failed_stage"] == "cuda_check" and "cannot be pulled" in n["reason"]


def test_sigterm_releases_the_lock_and_resume_finishes(tmp_path):
    import signal as sig
    import sys

    from support import ROOT

    inv = write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {"sim_latency_s": 0.01} for i in range(1, 4)})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    run_dir = tmp_path / "run"
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--run-dir",
                          str(run_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        j = run_dir / "journal.jsonl"
        if j.exists() and j.read_text().count("\n") > 40:
            break
        time.sleep(0.05)
    p.send_signal(sig.SIGTERM)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 1 and b"resume" in err
    assert not list((tmp_path / "locks").glob("*.lock"))          # released, not left stale
    assert (run_dir / "report.html").exists()
    r = subprocess.run([sys.executable, "-m", "k3rollout", "resume", str(run_dir)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}


def test_rhel_nodes_under_slurm_upgrade_and_roll_back_with_dnf(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])       # a real slurmctld answers for the sim hosts
    hosts = {"gpu-01": {}, "gpu-02": {"sim_faults": ["vllm_oom"]}}
    # the docker path (its checks on the node): this test is about dnf under Slurm's drain
    inv = write_inventory(tmp_path / "inv", hosts, {"ansible_os_family": "RedHat", "scheduler": "slurm",
                                                    "k3_container_launcher": "docker"})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0,
                                                      max_fail_percentage=100))
    assert code == 0
    r = result(run_dir)
    assert r["nodes"]["gpu-01"]["final"] == "upgraded" and r["nodes"]["gpu-02"]["final"] == "rolled_back"
    cmds = commands(run_dir, "gpu-02")
    dnf = [c for c in cmds if c.startswith("dnf install")]
    assert len(dnf) == 2 and "nvidia-driver-580.95.05-1.el9" in dnf[0] and "nvidia-driver-575.57.08-1.el9" in dnf[1]
    assert not any(c.startswith("scontrol") for c in cmds)          # never on the node being changed
    sched = [" ".join(e["argv"]) for e in journal(run_dir)
             if e["type"] == "step_started" and e["node"] == "gpu-02" and e.get("ran_on") == "controller"]
    assert any(c.startswith("scontrol update NodeName=gpu-02 State=DRAIN") for c in sched)
    assert any(c.startswith("scontrol update NodeName=gpu-02 State=RESUME") for c in sched)
    assert sim_state(run_dir, "gpu-02")["loaded_driver"] == "575.57.08"
    # resumed (right after RESUME slurmctld may still flag it +NOT_RESPONDING until its next ping)
    assert all(slurm.state(n).split("+")[0] == "IDLE" and "DRAIN" not in slurm.state(n) for n in hosts)
