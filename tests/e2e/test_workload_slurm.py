"""The ``slurm`` workload backend against a real controller (tests/support/slurm_cluster.py):
after the upgrade the node is put in a maintenance reservation and resumed, the checks run
as real jobs under slurmd (``srun --reservation=R -w NODE``) through a stand-in container
launcher (tests/support/launcher_standin.py), and the reservation is deleted with the node
drained again before the uncordon resumes it (or before the rollback restores it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from support import cli, journal, result, write_inventory, write_playbook
from support import launcher_standin as standin

from k3rollout.cli import main

CHECK_STAGES = ("baseline", "cordon", "driver_upgrade", "cuda_check", "uncordon")


def playbook(tmp_path: Path, stages: tuple[str, ...] = CHECK_STAGES, **kw) -> Path:
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100, **kw)
    data = yaml.safe_load(pb.read_text())
    data[0]["stages"] = [s for s in data[0]["stages"] if s["stage"] in stages]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    return pb


def setup(tmp_path: Path, monkeypatch, hosts: dict[str, dict], **group) -> tuple[Path, Path, Path]:
    run_dir = tmp_path / "run"
    log = tmp_path / "launcher.jsonl"
    bin_dir = tmp_path / "bin"
    standin.install(bin_dir)
    for k, v in standin.environ(bin_dir, run_dir / "sim-hosts", log).items():
        monkeypatch.setenv(k, v)
    inv = write_inventory(tmp_path / "inv", hosts, {
        "scheduler": "slurm", "k3_container_launcher": "apptainer", "sim_reboot_s": 0.01,
        # the loopback slurmd cannot create job steps with GPU GRES (step creation answers
        # "Invalid generic resource (gres) specification"): the jobs ask for no GRES here
        "k3_slurm_gpu_request": "none", "k3_slurm_output_dir": str(tmp_path),
        # the product's default wait for a job's node: a node just resumed into its reservation
        # can take a scheduling pass or two of a loaded slurmctld before srun gets it
        "k3_slurm_start_timeout": 120,
        **group})
    return inv, run_dir, log


def serving(slurm, node: str) -> bool:
    """IDLE, neither drained nor in a maintenance reservation (a node just resumed can show
    ``+NOT_RESPONDING`` until its slurmd next answers)."""
    state = slurm.state(node)
    return state.split("+")[0] == "IDLE" and not {"DRAIN", "MAINTENANCE", "RESERVED"} & set(state.split("+"))


def reservations(slurm) -> list[str]:
    return re.findall(r"^ReservationName=(\S+)", slurm.scontrol("-o", "show", "reservation").stdout, re.M)


def controller_steps(run_dir: Path, node: str) -> list[dict]:
    return [r for r in journal(run_dir) if r["type"] == "step_started" and r["node"] == node
            and r.get("ran_on") == "controller"]


def index(steps: list[dict], pred) -> int:
    return next(i for i, r in enumerate(steps) if pred(r))


def launched(log: Path) -> list[dict]:
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_checks_run_as_jobs_in_a_maintenance_reservation_then_the_node_resumes(tmp_path, monkeypatch,
                                                                                slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {}})
    code = main(["run", str(playbook(tmp_path)), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    run_id = journal(run_dir)[0]["run_id"]
    resv = f"k3rollout-check.gpu-01.{run_id}"
    steps = controller_steps(run_dir, "gpu-01")
    argv = [r["argv"] for r in steps]
    drain = index(steps, lambda r: r["argv"][:4] == ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN"])
    create = index(steps, lambda r: r["argv"][:3] == ["scontrol", "create", "reservation"])
    resume_in = index(steps, lambda r: r["step"] == "reservation-resume")
    first_job = index(steps, lambda r: r["argv"][0] == "srun")
    redrain = index(steps, lambda r: r["step"] == "reservation-drain")
    delete = index(steps, lambda r: r["argv"][:3] == ["scontrol", "delete", "reservation"])
    uncordon = index(steps, lambda r: r["stage"] == "uncordon" and r["argv"][-1] == "State=RESUME"
                     and r["step"] == "uncordon")
    # DRAIN first; the reservation before the node is resumed into it; the jobs inside it;
    # drained again before the reservation goes; resumed for service last
    assert drain < create < resume_in < first_job < redrain < delete < uncordon
    assert argv[create] == ["scontrol", "create", "reservation", f"ReservationName={resv}", "Nodes=gpu-01",
                            "Users=root", "StartTime=now", "Duration=720", "Flags=MAINT,IGNORE_JOBS"]
    assert [r["once"] for r in (steps[create], steps[resume_in], steps[redrain], steps[delete])] == [True] * 4
    # one reservation for the whole run, though two jobs needed it
    assert sum(1 for a in argv if a[:3] == ["scontrol", "create", "reservation"]) == 1
    jobs = [a for a in argv if a[0] == "srun"]
    assert len(jobs) == 2 and all(f"--reservation={resv}" in a and a[a.index("-w") + 1] == "gpu-01" for a in jobs)
    assert jobs[0][-6:-3] == ["apptainer", "exec", "--nv"] and jobs[0][-3].startswith("docker://")
    assert jobs[0][-2:] == ["nvidia-smi", "-L"]
    # the jobs really ran under slurmd, in the reservation, on the node: the launcher saw them
    ran = launched(log)
    assert [r["cmd"][0] for r in ran] == ["nvidia-smi", "python3"]
    assert all(r["job"] and r["node"] == "gpu-01" and r["gpu"] for r in ran)
    assert all(r["reservation"] in ("", resv) for r in ran)
    cuda = next(r for r in journal(run_dir) if r["type"] == "facts" and r["stage"] == "cuda_check")["facts"]
    assert cuda["cuda_init_ok"] and cuda["container_gpu_count"] == 8 and cuda["cuda_device_count"] == 8
    # nothing ran on the node itself: no srun, scontrol or launcher over its transport
    node_cmds = [r["argv"][0] for r in journal(run_dir) if r["type"] == "step_started" and r["node"] == "gpu-01"
                 and not r.get("ran_on")]
    assert not {"srun", "sbatch", "scontrol", "apptainer"} & set(node_cmds)
    # the reservation is gone and the node serves again
    assert resv not in reservations(slurm)
    assert serving(slurm, "gpu-01")
    # baseline recorded the node's jobs, partition and state
    base = next(r for r in journal(run_dir) if r["type"] == "facts" and r["stage"] == "baseline")
    assert base["facts"]["slurm_partitions"] == [{"partition": "gpu*", "availability": "up", "node_state": "idle"}]
    assert base["facts"]["slurm_jobs"] == [] and base["facts"]["container_launcher"] == "apptainer"


def test_a_failed_check_drains_the_node_again_and_deletes_the_reservation_before_the_rollback(
        tmp_path, monkeypatch, slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {"sim_faults": ["cuda_init_fails"]}})
    code = main(["run", str(playbook(tmp_path)), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    node = result(run_dir)["nodes"]["gpu-01"]
    assert node["failed_stage"] == "cuda_check" and node["final"] == "rolled_back"
    steps = controller_steps(run_dir, "gpu-01")
    recs = journal(run_dir)
    redrain = next(r for r in steps if r["stage"] == "rollback" and r["step"] == "reservation-drain")
    delete = next(r for r in steps if r["stage"] == "rollback" and r["step"] == "reservation-delete")
    first_restore = next(r for r in recs if r["type"] == "step_started" and r["stage"] == "rollback"
                         and r["step"].startswith("restore-step"))
    assert recs.index(redrain) < recs.index(delete) < recs.index(first_restore)
    assert redrain["argv"][:4] == ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN"]
    # the CUDA init really ran in a job, and failed there
    assert [r["cmd"][0] for r in launched(log)] == ["nvidia-smi", "python3"]
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    # restored and healthy on its old driver: resumed, as it was before the run
    assert serving(slurm, "gpu-01")


def test_a_check_job_that_never_starts_fails_the_stage_with_slurms_reason(tmp_path, monkeypatch, slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {}}, k3_slurm_partition="nope")
    code = main(["run", str(playbook(tmp_path)), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    node = result(run_dir)["nodes"]["gpu-01"]
    assert node["failed_stage"] == "cuda_check" and node["final"] == "rolled_back"
    stage = next(r for r in journal(run_dir) if r["type"] == "stage_done" and r["stage"] == "cuda_check")
    assert "Unable to allocate resources: Invalid partition name specified" in stage["reason"], stage["reason"]
    assert launched(log) == []                      # no job ever ran
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01")


def test_the_smoke_server_is_a_batch_job_in_the_reservation_that_the_gates_reach(tmp_path, monkeypatch,
                                                                                 slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {}})
    code = main(["run", str(playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"))), "-i", str(inv), "--yes",
                 "--run-dir", str(run_dir)])
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    run_id = journal(run_dir)[0]["run_id"]
    resv = f"k3rollout-check.gpu-01.{run_id}"
    recs = journal(run_dir)
    submit = next(r for r in recs if r["type"] == "step_started" and r["argv"][0] == "sbatch")
    assert submit["ran_on"] == "controller" and f"--reservation={resv}" in submit["argv"]
    assert "--job-name=k3rollout-smoke@gpu-01" in submit["argv"]
    done = next(r for r in recs if r["type"] == "step_done" and r.get("key") == submit["key"])
    job = (run_dir / "evidence" / done["evidence"]).read_text().split("--- stdout ---", 1)[1].split()[0]
    assert job.isdigit()
    # the server ran inside that job, and the gates reached it at the node's address
    server = [r for r in launched(log) if r["cmd"][:2] == ["vllm", "serve"]]
    assert len(server) == 1 and server[0]["job"] == job
    smoke = next(r for r in recs if r["type"] == "facts" and r["stage"] == "vllm_smoke")["facts"]
    assert smoke["smoke_healthy"] and smoke["smoke_request_ok"] and smoke["error_reporting_ok"]
    health = next(r for r in recs if r["type"] == "step_started" and r.get("kind") == "http")
    assert health["argv"][1].startswith("http://") and "controller" not in health["argv"][1]
    # its output file is evidence, and it was cancelled when the stage ended
    out = tmp_path / f"k3rollout-smoke.gpu-01.{run_id}.out"
    assert out.exists()
    logs = next(r for r in recs if r["type"] == "step_started" and r["step"] == "k3rollout-smoke-logs")
    assert logs["argv"] == ["cat", str(out)] and logs["ran_on"] == "controller"
    assert not slurm.run("squeue", "-h", "-o", "%i").stdout.strip()
    assert resv not in reservations(slurm) and serving(slurm, "gpu-01")


# ---------------------------------------------------------------- kills around the reservation and the jobs

# (mode, record type, step, occurrence): a kill just before an outcome is recorded (the
# command ran, the journal does not know) or right after a start is recorded (not yet sent)
KILL_POINTS = [
    ("BEFORE", "step_done", "reservation-create", 1),
    ("KILL", "step_started", "reservation-resume", 1),
    ("BEFORE", "step_done", "reservation-resume", 1),
    ("BEFORE", "step_done", "k3rollout-smoke-run", 1),        # the server's job submitted and running
    ("KILL", "step_started", "reservation-drain", 1),
    ("BEFORE", "step_done", "reservation-delete", 1),
]


@pytest.mark.parametrize("mode,rtype,step,nth", KILL_POINTS, ids=[f"{m}-{t}-{s}" for m, t, s, _ in KILL_POINTS])
def test_a_kill_around_the_reservation_or_a_job_resumes_without_a_second_reservation_or_a_left_job(
        tmp_path, monkeypatch, slurm_cluster, mode, rtype, step, nth):
    slurm = slurm_cluster(["gpu-01"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {}})
    pb = playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"))
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks"), "K3_FAULT_AT": f"{rtype}:{step}"}
    # the simulated node has no apptainer of its own (the jobs find the stand-in): no preflight
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--no-preflight", "--run-dir", str(run_dir), env=locks,
            fault=(mode, nth))
    assert p.returncode == -9, p.stderr[-2000:]
    r = cli("resume", str(run_dir), env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    recs = journal(run_dir)
    # one reservation was made, and the run's create was never sent twice
    creates = [x for x in recs if x["type"] == "step_started" and x.get("step") == "reservation-create"]
    assert len(creates) == 1
    assert not [x for x in recs if x["type"] == "step_done" and x.get("step") == "reservation-create"
                and x["rc"] != 0]
    # an interrupted once step was settled by its probe: done when the command had run
    # (never sent again), sent once more when only its start was on record
    settled = [x for x in recs if x["type"] == "step_settled" and x.get("step") == step]
    if step.startswith("reservation-"):
        assert [x["took_effect"] for x in settled] == [mode == "BEFORE"]
        started = [x for x in recs if x["type"] == "step_started" and x.get("step") == step]
        assert len(started) == (1 if mode == "BEFORE" else 2)
    else:
        # the server's job outlived the kill; the resumed stage cancelled it before its own
        cancels = [i for i, x in enumerate(recs) if x["type"] == "step_started" and x.get("step") == "k3rollout-smoke-cleanup"]
        submits = [i for i, x in enumerate(recs) if x["type"] == "step_started" and x.get("step") == step]
        assert len(submits) == 2 and cancels[-1] < submits[-1]
    # nothing left behind: no job on the node, no reservation, the node serving again
    assert not slurm.run("squeue", "-h", "-o", "%i %j").stdout.strip()
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01")
    # the smoke stage passed against one server: the one left by the kill was cancelled first
    smoke = [x for x in recs if x["type"] == "facts" and x["stage"] == "vllm_smoke"]
    assert smoke and smoke[-1]["facts"]["smoke_request_ok"]


def test_a_node_drained_before_the_run_is_drained_again_with_its_reason_after_its_checks(tmp_path, monkeypatch,
                                                                                         slurm_cluster):
    slurm = slurm_cluster(["gpu-01"])
    assert slurm.scontrol("update", "NodeName=gpu-01", "State=DRAIN", "Reason=hw check RMA-4411").returncode == 0
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {}})
    code = main(["run", str(playbook(tmp_path)), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    # its checks ran (the node was resumed into the reservation for them) ...
    assert [r["cmd"][0] for r in launched(log)] == ["nvidia-smi", "python3"]
    steps = controller_steps(run_dir, "gpu-01")
    redrain = next(r for r in steps if r["step"] == "reservation-drain")
    assert redrain["argv"][-1] == "Reason=hw check RMA-4411"
    # ... and it is left as its owner left it: drained, with their reason, never resumed for service
    assert not [r for r in steps if r["stage"] == "uncordon" and r["step"] == "uncordon"]
    show = slurm.scontrol("show", "node", "gpu-01").stdout
    assert "State=IDLE+DRAIN " in show and "Reason=hw check RMA-4411" in show
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]


# ---------------------------------------------------------------- a multi-node replica: one job over its nodes

H200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141, "sim_peer_mapping_override": True,
        "rack": "a"}


def test_a_multi_node_replica_is_one_job_whose_tasks_take_rank_and_head_from_slurmd(tmp_path, monkeypatch,
                                                                                  slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": dict(H200), "gpu-02": dict(H200)})
    pb = playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"), profile="kimi-k3")
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    recs = journal(run_dir)
    run_id = recs[0]["run_id"]
    (submit,) = [r for r in recs if r["type"] == "step_started" and r["argv"][0] == "sbatch"]
    assert submit["node"] == "gpu-01" and submit["ran_on"] == "controller"
    assert f"--reservation=k3rollout-check.group-gpu-01.{run_id}" in submit["argv"]
    assert submit["argv"][3:7] == ["-w", "gpu-01,gpu-02", "-N", "2"]
    done = next(r for r in recs if r["type"] == "step_done" and r.get("key") == submit["key"])
    job = (run_dir / "evidence" / done["evidence"]).read_text().split("--- stdout ---", 1)[1].split()[0]
    # slurmd ran one task per node of that one job; each got its rank from SLURM_NODEID and the
    # head from the job's host list, and the launcher ran the plan's command for that node
    servers = [r for r in launched(log) if r["cmd"][:2] == ["vllm", "serve"]]
    assert sorted((r["node"], r["nodeid"], r["job"]) for r in servers) == [("gpu-01", "0", job), ("gpu-02", "1", job)]
    facts = {e["node"]: e["facts"] for e in recs if e["type"] == "facts" and e["stage"] == "vllm_smoke"}
    for r in servers:
        assert r["cmd"][3:] == [*facts[r["node"]]["smoke_args"], "--port", "8000"]
        assert "--master-addr" in r["cmd"] and r["cmd"][r["cmd"].index("--master-addr") + 1] == "gpu-01"
    assert "--headless" in facts["gpu-02"]["smoke_args"] and "--headless" not in facts["gpu-01"]["smoke_args"]
    # the gates reached the head's server at gpu-01's address, and the replica answered
    assert facts["gpu-01"]["smoke_request_ok"] and facts["gpu-01"]["smoke_healthy"]
    http = [r for r in recs if r["type"] == "step_started" and r.get("kind") == "http"]
    assert http and {r["node"] for r in http} == {"gpu-01"}
    # the job's output names each task (srun --label) and is evidence
    out = (tmp_path / f"k3rollout-smoke.gpu-01.{run_id}.out").read_text()
    assert "0: k3rollout: gpu-01 is node 0 of gpu-[01-02], head gpu-01" in out
    assert "1: k3rollout: gpu-02 is node 1 of gpu-[01-02], head gpu-01" in out
    # nothing left behind: no job, no reservation, both nodes serving
    assert not slurm.run("squeue", "-h", "-o", "%i").stdout.strip()
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01") and serving(slurm, "gpu-02")


def test_a_replica_job_meets_at_the_heads_k3_master_addr_where_the_inventory_sets_one(tmp_path, monkeypatch,
                                                                                      slurm_cluster):
    # the head's host name resolves to the management network; the ranks are to meet on the
    # address the inventory names, as they would on any other scheduler
    slurm_cluster(["gpu-01", "gpu-02"])
    head = {**H200, "sim_address": "127.0.10.1", "k3_master_addr": "127.0.10.1"}
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": head, "gpu-02": dict(H200)})
    pb = playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"), profile="kimi-k3")
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    servers = [r for r in launched(log) if r["cmd"][:2] == ["vllm", "serve"]]
    assert len(servers) == 2
    for r in servers:
        assert r["cmd"][r["cmd"].index("--master-addr") + 1] == "127.0.10.1", r["cmd"]
    run_id = journal(run_dir)[0]["run_id"]
    out = (tmp_path / f"k3rollout-smoke.gpu-01.{run_id}.out").read_text()
    assert "1: k3rollout: gpu-02 is node 1 of gpu-[01-02], head 127.0.10.1" in out


def test_a_replica_whose_planned_head_is_not_slurms_first_host_is_refused(tmp_path, monkeypatch, slurm_cluster):
    # the inventory lists gpu-02 first (the plan's head); slurmctld numbers the job's nodes in
    # its own node order, gpu-01 first, whatever order -w gives
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-02": dict(H200), "gpu-01": dict(H200)})
    pb = playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"), profile="kimi-k3")
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {(n["failed_stage"], n["final"]) for n in r["nodes"].values()} == {("vllm_smoke", "rolled_back")}
    why = r["nodes"]["gpu-02"]["reason"]
    assert "Slurm numbers the replica's nodes gpu-01, gpu-02 (SLURM_NODEID 0 is gpu-01), but the plan's head " \
           "is gpu-02" in why and "caused by" not in why, why
    # the job was cancelled as soon as its host list was read back
    recs = journal(run_dir)
    assert [r for r in recs if r["type"] == "step_started" and r.get("step") == "k3rollout-smoke-cancel"]
    assert not slurm.run("squeue", "-h", "-o", "%i").stdout.strip()
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01") and serving(slurm, "gpu-02")


def test_a_replica_job_whose_worker_dies_fails_the_replica_naming_that_node(tmp_path, monkeypatch, slurm_cluster):
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    k3 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141}
    # the inventory says 141 GiB; gpu-02 really has 80 GiB GPUs: the plan fits, its load does not
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": {**H200, **k3},
                                                      "gpu-02": {**H200, **k3, "sim_gpu_mem_gib": 80}})
    pb = playbook(tmp_path, (*CHECK_STAGES, "vllm_smoke"), profile="kimi-k3", profile_overrides={
        "engine_ready_timeout_s": 30, "launch": {"base": {"env": {"VLLM_ENGINE_READY_TIMEOUT_S": "2"}}}})
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    r = result(run_dir)
    assert {(n["failed_stage"], n["final"]) for n in r["nodes"].values()} == {("vllm_smoke", "rolled_back")}
    why = r["nodes"]["gpu-01"]["reason"]
    # srun names the task it saw end first (the worker, or the head that saw it die) and
    # terminates the rest: the worker's own lines name it either way
    assert "caused by worker gpu-02 (rank 1) " in why and "torch.OutOfMemoryError: CUDA out of memory." in why, why
    run_id = journal(run_dir)[0]["run_id"]
    out = (tmp_path / f"k3rollout-smoke.gpu-01.{run_id}.out").read_text()
    assert re.search(r"^srun: error: gpu-02: task 1: (Exited with exit code 1|Terminated)$", out, re.M), out[-3000:]
    assert re.search(r"^1: .*torch\.OutOfMemoryError: CUDA out of memory", out, re.M)
    assert not slurm.run("squeue", "-h", "-o", "%i").stdout.strip()
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01") and serving(slurm, "gpu-02")


# ---------------------------------------------------------------- NCCL over the batch: srun --mpi=pmix


def test_nccl_over_the_batch_is_one_srun_mpi_pmix_job_whose_tasks_pmix_really_wires(tmp_path, monkeypatch,
                                                                                   slurm_cluster):
    """Real: slurmctld, two slurmd, srun's mpi/pmix plugin with Debian's libpmix (each task gets
    its PMIx rank and the job step's namespace). Stood in: all_reduce_perf (no GPU here), whose
    rank 0 runs the simulated nodes' NCCL over the job's hosts (tests/support/launcher_standin.py)."""
    import os

    from support.slurm_cluster import pmix_missing

    why = pmix_missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    slurm = slurm_cluster(["gpu-01", "gpu-02"])
    # one GPU a node: one MPI task a node fits the loopback slurmd's one CPU
    one_gpu = {"k3_gpu_count": 1}
    inv, run_dir, log = setup(tmp_path, monkeypatch, {"gpu-01": dict(one_gpu), "gpu-02": dict(one_gpu)})
    pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, max_fail_percentage=100)
    data = yaml.safe_load(pb.read_text())
    data[0]["stages"] = [s for s in data[0]["stages"] if s["stage"] in (*CHECK_STAGES, "multinode")]
    data[0].setdefault("vars", {})["expected_gpu_count"] = 1
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    recs = journal(run_dir)
    run_id = recs[0]["run_id"]
    (nccl,) = [r for r in recs if r["type"] == "step_started" and r["stage"] == "multinode" and r["argv"][0] == "srun"]
    assert nccl["argv"][:6] == ["srun", "--mpi=pmix", f"--reservation=k3rollout-check.group-gpu-01.{run_id}",
                                "-w", "gpu-01,gpu-02", "-N"]
    assert nccl["ran_on"] == "controller" and "--ntasks-per-node=1" in nccl["argv"]
    # slurmd started one task per node, and PMIx wired each into the job step
    tasks = [r for r in launched(log) if r["cmd"][0] == "all_reduce_perf"]
    assert sorted((t["node"], t["pmix_rank"]) for t in tasks) == [("gpu-01", "0"), ("gpu-02", "1")]
    assert len({t["pmix_namespace"] for t in tasks}) == 1 and tasks[0]["pmix_namespace"].startswith("slurm.pmix.")
    assert {t["reservation"] for t in tasks} == {f"k3rollout-check.group-gpu-01.{run_id}"}
    facts = next(r for r in recs if r["type"] == "facts" and r["stage"] == "multinode")["facts"]
    assert facts["nccl_ok"] and facts["nccl_nodes"] == ["gpu-01", "gpu-02"] and facts["nccl_transport"] == "IB"
    assert not [n for n in reservations(slurm) if n.startswith("k3rollout-check.")]
    assert serving(slurm, "gpu-01") and serving(slurm, "gpu-02")
