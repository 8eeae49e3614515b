"""Slurm with a real controller: Debian's slurmctld, one ``slurmd -N`` per node and munge on
loopback (tests/slurm_cluster.py) answer for the simulated GPU hosts. Jobs submitted with
``sbatch`` hold nodes, so the rollout meets DRAINING (ALLOCATED+DRAIN) and must wait for
DRAINED before it touches the driver. ``scontrol`` runs on the controller, never on the node."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from conftest import commands, journal, result, sim_state, write_inventory, write_playbook

from k3rollout.checks import parsers
from k3rollout.cli import main


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
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, {"scheduler": "slurm"})
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
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, {"scheduler": "slurm"})
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
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}}, {"scheduler": "slurm"})
    code, run_dir = run(tmp_path, inv, playbook(tmp_path))
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    assert not [r for r in scheduler_steps(run_dir, "gpu-01") if r["argv"][1] == "update"]
    show = slurm.scontrol("show", "node", "gpu-01").stdout
    assert "State=IDLE+DRAIN" in show and "Reason=hw check RMA-4411" in show


def test_quarantine_drains_with_a_reason(tmp_path, slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}},
                          {"scheduler": "slurm"})
    code, run_dir = run(tmp_path, inv, playbook(tmp_path, on_node_failure="quarantine", failure_budget=1))
    assert code == 0
    res = result(run_dir)
    assert res["nodes"]["gpu-01"]["final"] == "upgraded" and res["nodes"]["gpu-02"]["final"] == "rolled_back"
    show = slurm.scontrol("show", "node", "gpu-02").stdout
    assert "State=IDLE+DRAIN" in show and f"Reason=k3rollout quarantine {journal(run_dir)[0]['run_id']}" in show
    assert "DRAIN" not in slurm.state("gpu-01")
