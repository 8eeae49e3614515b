"""Slurm with a real controller: Debian's slurmctld, one ``slurmd -N`` per node and munge on
loopback (tests/support/slurm_cluster.py) answer for the simulated GPU hosts. Jobs submitted with
``sbatch`` hold nodes, so the rollout meets DRAINING (ALLOCATED+DRAIN) and must wait for
DRAINED before it touches the driver. ``scontrol`` runs on the controller, never on the node."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest
from support import (
    cli,
    commands,
    journal,
    journal_so_far,
    race_for_lock,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.checks import parsers
from k3rollout.cli import main

# these tests are about the scheduler (drain, lock, quarantine); their checks take the docker
# path, run on the simulated node. The slurm workload (checks as jobs, pyxis by default) against
# this controller is tests/e2e/test_workload_slurm.py.
SLURM = {"scheduler": "slurm", "k3_container_launcher": "docker"}


def run(tmp_path: Path, inv: Path, pb: Path) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    return main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]), run_dir


def playbook(tmp_path: Path, **kw) -> Path:
    return write_playbook(tmp_path / "pb.yml", **{"serial": 1, "min_serving": 0, "max_fail_percentage": 100, **kw})


def scheduler_steps(run_dir: Path, node: str) -> list[dict]:
    return [r for r in journal(run_dir) if r["type"] == "step_started" and r["node"] == node
            and r["argv"][0] == "scontrol"]


def ts(rec: dict) -> float:
    return datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp()


def test_cordon_waits_until_the_running_job_ends_before_the_driver_is_touched(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    marker = tmp_path / "job-ended"
    # a real job holds gpu-01 until 2 s after the drain is asked for (at most 60 s), and
    # notes when it ends: the node is DRAINING for those 2 s however long the stages before
    # cordon take on a loaded machine
    wait_drain = ("for i in $(seq 300); do scontrol show node gpu-01 | grep -q 'State=[A-Z]*+DRAIN' && break; "
                  "sleep 0.2; done")
    res = slurm.run("sbatch", "--parsable", "-w", "gpu-01", "-N", "1", "-o", "/dev/null",
                    "--wrap", f"{wait_drain}; sleep 2; date +%s.%N > {marker}", check=True)
    job = res.stdout.strip().split(";")[0]
    slurm._wait(lambda: slurm.state("gpu-01") == "ALLOCATED", 30, f"job {job} did not start")
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, SLURM)
    code, run_dir = run(tmp_path, inv, playbook(tmp_path))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    # while the job ran the node was DRAINING, and the stage went on only once it was DRAINED
    ev = sorted((run_dir / "evidence" / "gpu-01").glob("*cordon/scheduler-state*.txt"),
                key=lambda p: int(p.name.split(".")[1]) if p.name.count(".") == 2 else 1)
    seen = [parsers.scontrol_node_state(p.read_text().split("--- stdout ---", 1)[1]) for p in ev]
    assert "draining" in seen and seen[-1] == "cordoned"
    assert any("State=ALLOCATED+DRAIN" in p.read_text() for p in ev)
    recs = journal(run_dir)
    first_upgrade = next(r for r in recs if r["type"] == "step_started" and r["node"] == "gpu-01"
                         and r["stage"] == "driver_upgrade")
    assert ts(first_upgrade) >= float(marker.read_text()) - 0.01       # not a command under the running job
    # scheduler operations ran on the controller, never on the node
    steps = scheduler_steps(run_dir, "gpu-01")
    assert steps and {r.get("ran_on") for r in steps} == {"controller"}
    assert not [c for c in commands(run_dir, "gpu-01") if c.startswith("scontrol")]
    assert any(r["argv"][:4] == ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN"] for r in steps)
    assert any(r["argv"][:4] == ["scontrol", "update", "NodeName=gpu-01", "State=RESUME"] for r in steps)
    assert "DRAIN" not in slurm.state("gpu-01")


def test_a_node_still_running_a_job_at_drain_timeout_is_not_upgraded_and_is_resumed(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    job = slurm.hold("gpu-01", 300)
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, SLURM)
    started = time.monotonic()
    code, run_dir = run(tmp_path, inv, playbook(tmp_path, stage_with={"cordon": {"drain_timeout": "2s"}}))
    assert time.monotonic() - started < 60
    assert code == 0, "the run completes: the node failed its cordon and was restored"
    node = result(run_dir)["nodes"]["gpu-01"]
    assert node["failed_stage"] == "cordon" and node["final"] == "rolled_back"
    stage = next(r for r in journal(run_dir) if r["type"] == "stage_done" and r["stage"] == "cordon")
    assert not stage["passed"] and "still DRAINING" in stage["reason"] and "drain_timeout (2s)" in stage["reason"]
    # nothing was done to the node under the running job
    cmds = commands(run_dir, "gpu-01")
    assert not [c for c in cmds if c.startswith(("apt-get install", "dnf install", "reboot", "shutdown"))]
    assert sim_state(run_dir, "gpu-01")["loaded_driver"] == "575.57.08"
    # restored: it was schedulable before the run, so it is resumed; the job runs on
    assert slurm.state("gpu-01").split("+")[0] == "ALLOCATED" and "DRAIN" not in slurm.state("gpu-01")
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING"


def test_a_node_drained_before_the_run_keeps_its_reason_and_stays_drained(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    assert slurm.scontrol("update", "NodeName=gpu-01", "State=DRAIN", "Reason=hw check RMA-4411").returncode == 0
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, SLURM)
    code, run_dir = run(tmp_path, inv, playbook(tmp_path))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    assert not [r for r in scheduler_steps(run_dir, "gpu-01") if r["argv"][1] == "update"]
    show = slurm.scontrol("show", "node", "gpu-01").stdout
    assert "State=IDLE+DRAIN" in show and "Reason=hw check RMA-4411" in show


def test_quarantine_drains_with_a_reason(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}},
                          SLURM)
    code, run_dir = run(tmp_path, inv, playbook(tmp_path, on_node_failure="quarantine", failure_budget=1))
    assert code == 0
    res = result(run_dir)
    assert res["nodes"]["gpu-01"]["final"] == "upgraded" and res["nodes"]["gpu-02"]["final"] == "rolled_back"
    show = slurm.scontrol("show", "node", "gpu-02").stdout
    assert "State=IDLE+DRAIN" in show and f"Reason=k3rollout quarantine {journal(run_dir)[0]['run_id']}" in show
    assert "DRAIN" not in slurm.state("gpu-01")


# ---------------------------------------------------------------- the cluster's own lock


def _start_paused(tmp_path: Path, inv: Path, pb: Path, run_dir: Path, lock_dir: Path):
    """Run ``pb`` in a subprocess until it waits at its cordon pause, holding its locks."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "K3ROLLOUT_APPROVAL_POLL_S": "0.05", "K3ROLLOUT_LOCK_DIR": str(lock_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--plain",
                             "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    deadline = time.monotonic() + 60
    while not ((run_dir / "journal.jsonl").exists() and
               any(r["type"] == "pause_started" for r in journal_so_far(run_dir))):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
        time.sleep(0.05)
    return proc


def reservations(slurm) -> list[str]:
    import re

    return re.findall(r"^ReservationName=(\S+)", slurm.scontrol("-o", "show", "reservation").stdout, re.M)


def test_two_inventory_files_from_two_controllers_on_one_slurm_cluster_only_one_run_proceeds(tmp_path,
                                                                                              slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, stage_set={"baseline": {"pause": {}}})
    inv_a = write_inventory(tmp_path / "a", {"gpu-01": {}}, {**SLURM, "sim_reboot_s": 0.01})
    run_a = tmp_path / "run-a"
    proc = _start_paused(tmp_path, inv_a, pb, run_a, tmp_path / "controller-a-locks")
    try:
        # the lock is a reservation slurmctld keeps, named by the cluster's ClusterName, and
        # a second one names its holder
        held = reservations(slurm)
        assert "k3rollout-lock.k3test" in held
        holder = [n for n in held if n.startswith("k3rollout-holder.k3test;")]
        assert len(holder) == 1 and f"pid={proc.pid};" in holder[0]
        show = slurm.scontrol("show", "reservation", "k3rollout-lock.k3test").stdout
        assert "State=INACTIVE" in show and "Flags=OVERLAP" in show     # it holds back no job
        assert journal(run_a)[0]["cluster_lock"] == ["Slurm reservation k3rollout-lock.k3test (scontrol on "
                                                     "controller)"]
        # run B: another inventory file, other nodes, another cluster id, another controller's
        # lock files: only the cluster's own lock stops it
        inv_b = write_inventory(tmp_path / "b", {"gpu-02": {}}, {**SLURM, "k3_cluster_id": "other"})
        b = cli("run", str(pb), "-i", str(inv_b), "--yes", "--run-dir", str(tmp_path / "run-b"),
                env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "controller-b-locks")})
        assert b.returncode == 1, b.stderr
        assert "another k3rollout run holds the cluster lock Slurm reservation k3rollout-lock.k3test" in b.stderr
        assert f"pid {proc.pid} " in b.stderr and str(run_a.resolve()) in b.stderr
        assert not (tmp_path / "run-b" / "journal.jsonl").exists()
        assert "DRAIN" not in slurm.state("gpu-02")
        assert reservations(slurm) == held                  # B's refusal left A's lock as it was
        assert cli("approve", str(run_a)).returncode == 0
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert reservations(slurm) == []                       # released on completion
    assert result(run_a)["nodes"]["gpu-01"]["final"] == "upgraded"


def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_stale_slurm_lock_is_reported_never_taken_and_unlock_takes_it_over(tmp_path, slurm_cluster):
    from k3rollout.errors import LockHeld
    from k3rollout.scheduler.cluster_lock import SlurmLock, me

    slurm = slurm_cluster(["gpu-01"])
    # a run on this controller that died holding the lock
    dead = {**me(str(tmp_path / "dead-run"), "2026-12-03T01:00:00Z", "20261203T010000-dead00"), "pid": _dead_pid()}
    SlurmLock(None, "controller", "gpu-01", None, dead).acquire()
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, {**SLURM, "sim_reboot_s": 0.01})
    pb = playbook(tmp_path)
    b = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run-b"))
    assert b.returncode == 1
    assert "stale cluster lock Slurm reservation k3rollout-lock.k3test" in b.stderr
    assert f"its holder is dead (pid {dead['pid']} " in b.stderr and "run 20261203T010000-dead00" in b.stderr
    assert f"k3rollout resume {tmp_path / 'dead-run'}" in b.stderr and "k3rollout unlock PLAYBOOK -i" in b.stderr
    assert "k3rollout-lock.k3test" in reservations(slurm)                  # not stolen
    # the dead run itself (a resume: same user, controller and run directory) takes its own
    # lock again, and names itself; that resume dies too
    again = SlurmLock(None, "controller", "gpu-01", None,
                      {**me(str(tmp_path / "dead-run"), "2026-12-03T02:00:00Z", "20261203T010000-dead00"),
                       "pid": _dead_pid()})
    again.acquire()
    assert again.holder()["pid"] == again.info["pid"] != dead["pid"] and len(reservations(slurm)) == 2
    # a live holder is never unlocked
    live = SlurmLock(None, "controller", "gpu-01", None,
                     me(str(tmp_path / "dead-run"), "2026-12-03T03:00:00Z", "20261203T010000-dead00"))
    live.acquire()
    with pytest.raises(LockHeld, match="another k3rollout run holds"):
        live.unlock()
    live.info["pid"] = again.info["pid"]
    live._write_holder()
    # the operator has checked the nodes and takes the lock over
    u = cli("unlock", str(pb), "-i", str(inv), "--run-dir", str(tmp_path / "unlock"))
    assert u.returncode == 0, u.stderr
    assert "released Slurm reservation k3rollout-lock.k3test" in u.stdout and f"pid {again.info['pid']}" in u.stdout
    assert reservations(slurm) == []
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 0 and result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    assert reservations(slurm) == []


def test_two_runs_racing_for_the_slurm_lock_exactly_one_wins(tmp_path, slurm_cluster):
    from k3rollout.scheduler.cluster_lock import SlurmLock, me

    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    won, refused = race_for_lock(*(lambda i=i: SlurmLock(None, "controller", f"gpu-0{i}", None,
                                                          me(str(tmp_path / f"run-{i}"), "t0", f"id-{i}"))
                                   for i in (1, 2)))
    assert "k3rollout-lock.k3test" in refused and won.info["run_dir"] in refused or "names no holder" in refused
    won.release()
    assert reservations(slurm) == []


def _scontrol_as(tmp_path: Path, user: str) -> dict[str, str]:
    """An environment whose controller-side ``scontrol``, ``sacctmgr`` and ``id`` run as
    ``user`` (an operator without root on the controller), through wrappers first on PATH."""
    import os
    import shutil

    d = tmp_path / f"as-{user}"
    d.mkdir()
    for prog in ("scontrol", "sacctmgr", "id"):
        real = shutil.which(prog) or f"/usr/bin/{prog}"
        (d / prog).write_text(f'#!/bin/sh\nexec setpriv --reuid={user} --regid=nogroup --clear-groups {real} "$@"\n')
        (d / prog).chmod(0o755)
    return {"PATH": f"{d}:{os.environ['PATH']}"}


def test_check_access_and_preflight_name_a_user_who_may_not_create_the_lock_reservation(tmp_path, slurm_cluster):
    import os
    import subprocess

    slurm = slurm_cluster(["gpu-01"])
    # the cluster's files readable by another user (slurm.conf, the munge socket), the key not
    os.chmod(slurm.root, 0o711)
    os.chmod(slurm.root / "munge", 0o711)
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, SLURM)
    pb = playbook(tmp_path)
    # root (the test cluster's SlurmUser too) may create the reservation the lock is
    p = cli("plan", str(pb), "-i", str(inv), "--check-access")
    assert p.returncode == 0, p.stderr
    assert "Slurm reservations (1 nodes): ok" in p.stdout
    assert ("yes create reservation (the cluster lock): scontrol on the controller runs as root (root): it may create "
            "the reservation k3rollout-lock.k3test (the cluster lock)") in p.stdout
    # an operator whose scontrol runs as nobody: slurmctld refuses its reservation ...
    nobody = _scontrol_as(tmp_path, "nobody")
    env = {**os.environ, **nobody}
    made = subprocess.run(["scontrol", "create", "reservation", "ReservationName=probe", "Nodes=gpu-01",
                           "StartTime=now+3650days", "Duration=1", "Users=root", "Flags=OVERLAP"],
                          capture_output=True, text=True, env=env)
    assert made.returncode == 1 and "Invalid user id" in made.stderr
    assert subprocess.run(["id", "-un"], capture_output=True, text=True, env=env).stdout == "nobody\n"
    # ... and the read-only check says so before the run, naming who, what and how
    why = ("scontrol on the controller runs as nobody, who may not create Slurm reservations (slurmctld allows root, "
           "its SlurmUser root and users with AdminLevel Operator or Administrator; nobody has no AdminLevel: "
           "accounting is not in slurmdbd). The run's cluster lock is the reservation k3rollout-lock.k3test: run "
           "k3rollout as root, or grant it: sacctmgr modify user nobody set AdminLevel=Operator")
    p = cli("plan", str(pb), "-i", str(inv), "--check-access", env=nobody)
    assert p.returncode == 2, p.stderr
    assert "Slurm reservations (1 nodes): MISSING RIGHTS" in p.stdout and "NO  create reservation" in p.stdout
    assert f"error: {why}" in p.stderr
    # the preflight (and so `run`) fails on the controller with the same words, before any change
    r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run"), env=nobody)
    assert r.returncode == 1, r.stderr
    assert "controller: FAIL" in r.stderr and why in r.stderr
    pre = json.loads(next((tmp_path / "run").glob("**/preflight.json")).read_text())
    assert pre["controller"]["ok"] is False
    assert pre["controller"]["slurm_access"][0] | {"detail": why} == {
        "where": "controller", "ok": False, "user": "nobody", "slurm_user": "root", "detail": why, "nodes": ["gpu-01"]}
    assert reservations(slurm) == [] and "DRAIN" not in slurm.state("gpu-01")
