"""The slurm workload backend on the simulated cluster alone (no slurmctld): the simulated
controller answers srun, sbatch, squeue, scancel, sinfo and the reservation commands as
Debian's 22.05 does (k3sim/slurmjobs.py), and a node whose launcher is pyxis,
enroot or apptainer runs no Docker daemon. The same flow against a real controller is
tests/e2e/test_workload_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import DEFAULT_GPU, commands, journal, result, sim_state, write_inventory, write_playbook

from k3rollout.cli import main
from k3sim.dispatch import dispatch


@pytest.fixture(autouse=True)
def _no_real_slurm(monkeypatch):
    # a SLURM_CONF would send the controller's commands to a real slurmctld
    monkeypatch.delenv("SLURM_CONF", raising=False)


def reservations(run_dir: Path) -> dict:
    f = run_dir / "sim-hosts" / "_slurmctld.json"
    return json.loads(f.read_text()) if f.exists() else {}


def test_a_pyxis_cluster_validates_every_node_through_jobs_and_runs_no_docker(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}},
                          {"scheduler": "slurm", "k3_container_launcher": "pyxis", "sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100)
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    assert code == 0
    res = result(run_dir)["nodes"]
    assert res["gpu-01"]["final"] == "upgraded"
    assert res["gpu-02"]["final"] == "rolled_back" and res["gpu-02"]["failed_stage"] == "cuda_check"
    recs = journal(run_dir)
    jobs = [r for r in recs if r["type"] == "step_started" and r["argv"][0] in ("srun", "sbatch")]
    assert {r["ran_on"] for r in jobs} == {"controller"}
    assert any(r["argv"][0] == "sbatch" and "--job-name=k3rollout-smoke@gpu-01" in r["argv"] for r in jobs)
    assert all("--container-image=" + r["argv"][-1] for r in jobs if r["argv"][0] == "srun")
    assert all("--gres=gpu:8" in r["argv"] for r in jobs)
    # no docker command reached a node: the launcher's containers are the jobs'
    for node in ("gpu-01", "gpu-02"):
        assert not [c for c in commands(run_dir, node) if c.startswith("docker")]
        assert sim_state(run_dir, node)["scheduler"]["state"] == "schedulable"
    # CUDA init failed inside the job, with the driver's own error, and was triaged so
    cuda = next(r for r in recs if r["type"] == "stage_done" and r["node"] == "gpu-02" and r["stage"] == "cuda_check")
    assert not cuda["passed"] and cuda["reason"].startswith("CUDA init failed")
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]
    # the smoke and feature servers passed against jobs the gates reached
    smoke = next(r for r in recs if r["type"] == "facts" and r["node"] == "gpu-01" and r["stage"] == "vllm_smoke")
    assert smoke["facts"]["smoke_request_ok"]


def test_docker_answers_only_on_a_slurm_node_whose_launcher_is_docker(tmp_path):
    from k3sim.state import init_host

    pyxis = init_host(tmp_path / "a", "a", {"scheduler": "slurm", "k3_container_launcher": "pyxis"})
    plain = init_host(tmp_path / "b", "b", {"scheduler": "slurm", "k3_container_launcher": "docker"})
    k8s = init_host(tmp_path / "c", "c", {"scheduler": "kubernetes"})
    k8s_docker = init_host(tmp_path / "d", "d", {"scheduler": "kubernetes", "sim_container_runtime": "docker"})
    miss = dispatch(pyxis, ["docker", "info", "--format", "{{.ServerVersion}}"])
    assert miss.rc == 127 and "docker: command not found" in miss.stderr
    assert dispatch(pyxis, ["enroot", "version"]).stdout == "3.5.0\n"
    assert dispatch(pyxis, ["apptainer", "--version"]).rc == 127
    assert dispatch(plain, ["docker", "info", "--format", "{{.ServerVersion}}"]).rc == 0
    # a Kubernetes node runs containerd by default, without a docker CLI, unless it says Docker
    assert dispatch(k8s, ["docker", "info", "--format", "{{.ServerVersion}}"]).rc == 127
    assert dispatch(k8s_docker, ["docker", "info", "--format", "{{.ServerVersion}}"]).rc == 0


def test_preflight_refuses_a_node_whose_launcher_is_not_installed(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_launcher_missing": True}, "gpu-02": {}},
                          {"scheduler": "slurm", "k3_container_launcher": "apptainer"})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    code = main(["preflight", str(pb), "-i", str(inv), "--output", str(tmp_path / "pre"), "--json"])
    out = capsys.readouterr().out
    assert code == 1
    report = json.loads(out)
    why = {n: [c for c in r["checks"] if c["check"] == "workload"][0] for n, r in report["nodes"].items()}
    assert not why["gpu-01"]["ok"]
    assert why["gpu-01"]["detail"].startswith("k3_container_launcher is apptainer, but apptainer is not installed")
    assert why["gpu-02"]["ok"] and why["gpu-02"]["detail"] == "apptainer: apptainer version 1.3.4"


def test_nccl_over_the_batch_is_one_srun_mpi_job_in_a_reservation_over_both_nodes(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}},
                          {"scheduler": "slurm", "k3_container_launcher": "enroot", "sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, max_fail_percentage=100)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    recs = journal(run_dir)
    run_id = recs[0]["run_id"]
    group = f"k3rollout-check.group-gpu-01.{run_id}"
    nccl = [r for r in recs if r["type"] == "step_started" and r["stage"] == "multinode" and r["argv"][0] == "srun"]
    assert len(nccl) == 1
    argv = nccl[0]["argv"]
    assert argv[:6] == ["srun", "--mpi=pmix", f"--reservation={group}", "-w", "gpu-01,gpu-02", "-N"]
    assert "--ntasks-per-node=8" in argv and argv[argv.index("-g") + 1] == "1" and nccl[0]["ran_on"] == "controller"
    create = next(r for r in recs if r["type"] == "step_started" and r.get("step") == "group-reservation-create")
    assert "Nodes=gpu-01,gpu-02" in create["argv"] and "Flags=MAINT,IGNORE_JOBS" in create["argv"]
    facts = next(r for r in recs if r["type"] == "facts" and r["stage"] == "multinode")["facts"]
    assert facts["nccl_ok"] and facts["nccl_nodes"] == ["gpu-01", "gpu-02"]
    # no mpirun over the nodes' own transport, and no reservation left
    assert not [r for r in recs if r["type"] == "step_started" and r["argv"][0] == "mpirun"]
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]


def test_jobs_are_sent_from_the_scheduler_host_the_inventory_names(tmp_path):
    inv = tmp_path / "inv" / "hosts.yml"
    inv.parent.mkdir()
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "k3sim", "scheduler": "slurm", "sim_reboot_s": 0.01},
        "children": {"gpu_nodes": {"vars": {"k3_scheduler_host": "slurm-ctl", "k3_container_launcher": "pyxis",
                                            **DEFAULT_GPU},
                                   "hosts": {"gpu-01": None}},
                     "slurm_controller": {"hosts": {"slurm-ctl": None}}}}}))
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100,
                        hosts="gpu_nodes")
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    jobs = [r for r in journal(run_dir) if r["type"] == "step_started" and r["argv"][0] in ("srun", "sbatch")]
    assert jobs and {r["ran_on"] for r in jobs} == {"slurm-ctl"}
    assert [c for c in commands(run_dir, "slurm-ctl") if c.startswith("srun --reservation=k3rollout-check.gpu-01.")]
    assert not [c for c in commands(run_dir, "gpu-01") if c.startswith(("srun", "sbatch", "docker"))]


def observed_beside_a_gpu_job(tmp_path: Path, group: dict, **pb) -> tuple[Path, int, dict]:
    """A 2-node Slurm rollout; after the window a user's training job holds gpu-02's GPUs;
    then one observe pass: (run dir, journal records before it, its observation's nodes)."""
    import time

    from k3sim import state as st

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}},
                          {"scheduler": "slurm", "sim_reboot_s": 0.01, **group})
    playbook = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, max_fail_percentage=100, **pb)
    run_dir = tmp_path / "run"
    assert main(["run", str(playbook), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    with st.transaction(run_dir / "sim-hosts" / "gpu-02") as s:
        s["scheduler"]["jobs"] = [{"id": 4242, "cpus": 224, "end": time.time() + 3600}]
    seen = len(journal(run_dir))
    assert main(["observe", str(run_dir), "--once"]) == 0
    return run_dir, seen, [r for r in journal(run_dir) if r["type"] == "observation"][-1]["nodes"]


def test_observe_starts_no_gpu_job_beside_running_gpu_jobs_and_counts_it_as_skipped(tmp_path):
    run_dir, seen, o = observed_beside_a_gpu_job(tmp_path, {"k3_container_launcher": "pyxis"})
    assert o["gpu-01"]["cuda_init_ok"] is True
    assert o["gpu-02"]["cuda_init_ok"] is None
    assert o["gpu-02"]["cuda_init_skipped"] == "not started: GPU jobs run on the node (4242)"
    assert not [f for f in o["gpu-02"].get("failures", []) if f["check"] == "cuda_init"]
    sent = [r for r in journal(run_dir)[seen:] if r["type"] == "step_started"]
    assert [r["argv"][0] for r in sent if r["node"] == "gpu-01" and r["step"] == "cuda-init"] == ["srun"]
    assert not [r for r in sent if r["node"] == "gpu-02" and r["argv"][0] in ("srun", "sbatch")]
    assert "--reservation" not in " ".join(a for r in sent for a in r["argv"])       # observe opens none
    assert not reservations(run_dir)


def test_observes_nccl_gate_is_an_srun_mpi_job_without_a_reservation_and_never_beside_gpu_jobs(tmp_path):
    # pyxis: the default launcher
    run_dir, seen, o = observed_beside_a_gpu_job(tmp_path, {}, observe={"nccl": True})
    assert o["gpu-01"]["nccl"]["ok"] is True
    assert o["gpu-02"]["nccl"]["skipped"].startswith("not idle: Slurm shows it")
    sent = [r for r in journal(run_dir)[seen:] if r["type"] == "step_started"]
    (nccl,) = [r for r in sent if r["argv"][0] == "srun" and "--mpi=pmix" in r["argv"]]
    assert nccl["node"] == "gpu-01" and nccl["ran_on"] == "controller"
    assert nccl["argv"][:4] == ["srun", "--mpi=pmix", "-w", "gpu-01"]
    assert not [r for r in sent if r["argv"][:2] == ["scontrol", "create"]] and not reservations(run_dir)


# ---------------------------------------------------------------- a multi-node replica: one job

H200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141, "sim_peer_mapping_override": True,
        "rack": "a"}


def replica_run(tmp_path: Path, hosts: dict[str, dict], launcher: str = "pyxis", **pb) -> tuple[Path, list[dict]]:
    inv = write_inventory(tmp_path / "inv", hosts, {"scheduler": "slurm", "k3_container_launcher": launcher,
                                                     "sim_reboot_s": 0.01})
    book = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0,
                          **pb)
    run_dir = tmp_path / "run"
    assert main(["run", str(book), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    return run_dir, journal(run_dir)


def test_a_multi_node_replica_is_one_job_whose_tasks_take_their_rank_and_head_from_slurm(tmp_path):
    run_dir, recs = replica_run(tmp_path, {"gpu-01": dict(H200), "gpu-02": dict(H200)})
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    run_id = recs[0]["run_id"]
    group = f"k3rollout-check.group-gpu-01.{run_id}"
    subs = [r for r in recs if r["type"] == "step_started" and r["argv"][0] == "sbatch" and r["stage"] == "vllm_smoke"]
    # one job over both nodes, in one reservation over both, named after the head; no job per node
    assert len(subs) == 1
    argv = subs[0]["argv"]
    assert subs[0]["node"] == "gpu-01" and subs[0]["ran_on"] == "controller"
    assert argv[:7] == ["sbatch", "--parsable", f"--reservation={group}", "-w", "gpu-01,gpu-02", "-N", "2"]
    assert "--ntasks-per-node=1" in argv and "--job-name=k3rollout-smoke@gpu-01" in argv
    assert "--export=ALL,VLLM_ENGINE_READY_TIMEOUT_S=3600" in argv
    wrap = next(a for a in argv if a.startswith("--wrap="))
    assert wrap.startswith('--wrap=K3_MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
    assert '--node-rank "$SLURM_NODEID" --master-addr "$K3_MASTER_ADDR" ${W:+--headless}' in wrap
    assert "--container-image=" in wrap and "--node-rank 0" not in wrap
    # each node's container ran the plan's command for its rank, derived inside the job
    runs = {n: [c for c in commands(run_dir, n) if c.startswith("k3sim-launch run -d") and "k3rollout" not in c
                and "--tensor-parallel-size 16" in c] for n in ("gpu-01", "gpu-02")}
    assert len(runs["gpu-01"]) == 2 and len(runs["gpu-02"]) == 2             # the smoke and the features jobs
    facts = {e["node"]: e["facts"] for e in recs if e["type"] == "facts" and e["stage"] == "vllm_smoke"}
    for node, rank in (("gpu-01", 0), ("gpu-02", 1)):
        planned = " ".join(facts[node]["smoke_args"])
        assert runs[node][0].endswith(f" {planned} --port 8000"), (runs[node][0], planned)
        assert f"--nnodes 2 --node-rank {rank} --master-addr gpu-01" in planned
    assert "--headless" not in runs["gpu-01"][0] and runs["gpu-02"][0].endswith("--headless --port 8000")
    assert "-e VLLM_ENGINE_READY_TIMEOUT_S=3600" in runs["gpu-02"][0]
    # the job's first host is the head: read back from Slurm, and the gates went to the head
    hostnames = next(r for r in recs if r["type"] == "step_started" and r.get("step") == "k3rollout-smoke-hostnames")
    assert hostnames["argv"] == ["scontrol", "show", "hostnames", "gpu-[01-02]"]
    smoke = next(r for r in recs if r["type"] == "facts" and r["node"] == "gpu-01" and r["stage"] == "vllm_smoke")
    assert smoke["facts"]["smoke_request_ok"] and smoke["facts"]["replica_head"] == "gpu-01"
    http = [r for r in recs if r["type"] == "step_started" and r.get("kind") == "http" and r["stage"] == "vllm_smoke"]
    assert http and {r["node"] for r in http} == {"gpu-01"}
    # nothing left: no job, no reservation, no docker anywhere
    assert not [r for r in recs if r["type"] == "step_started" and r["argv"][0] == "docker"]
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]
    jobs = json.loads((run_dir / "sim-hosts" / "_slurmjobs.json").read_text())["jobs"]
    assert not [j for j in jobs.values() if j["state"] in ("PENDING", "CONFIGURING", "RUNNING")]


def test_a_replica_job_whose_worker_task_dies_names_that_node_from_sruns_own_line(tmp_path):
    hosts = {"gpu-01": dict(H200), "gpu-02": {**H200, "sim_gpu_mem_gib": 80}}
    # the inventory says 141 GiB: the plan fits, gpu-02's load does not
    hosts["gpu-02"].update(k3_gpu_model="NVIDIA H200", k3_gpu_count=8, k3_gpu_mem_gib=141)
    hosts["gpu-01"].update(k3_gpu_model="NVIDIA H200", k3_gpu_count=8, k3_gpu_mem_gib=141)
    run_dir, recs = replica_run(tmp_path, hosts, profile_overrides={
        "engine_ready_timeout_s": 30, "launch": {"base": {"env": {"VLLM_ENGINE_READY_TIMEOUT_S": "2"}}}})
    r = result(run_dir)
    assert {(n["failed_stage"], n["final"]) for n in r["nodes"].values()} == {("vllm_smoke", "rolled_back")}
    why = r["nodes"]["gpu-01"]["reason"]
    assert why.startswith("replica rack-a/1 did not come up: vLLM exited before becoming healthy"), why
    assert "caused by worker gpu-02 (rank 1) exited with code 1: torch.OutOfMemoryError: CUDA out of memory." in why
    facts = next(e for e in recs if e["type"] == "facts" and e["node"] == "gpu-01" and e["stage"] == "vllm_smoke")
    assert facts["facts"]["replica_culprit"] == "gpu-02"
    # the job's output, read for gpu-02, is its evidence: its task's lines and srun's line about it
    logs = "".join(p.read_text() for p in (run_dir / "evidence" / "gpu-02").rglob("k3rollout-smoke-failure-logs*"))
    assert "srun: error: gpu-02: task 1: Exited with exit code 1" in logs and "1: ERROR [core.py:1584] torch.OutOfMemoryError" in logs
    assert "1: k3rollout: gpu-02 is node 1 of gpu-[01-02], head gpu-01" in logs
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]


def test_a_replica_job_meets_at_the_heads_k3_master_addr_as_the_batch_script_exports_it(tmp_path):
    # the batch script's head line runs as written: the inventory's address, not the host name
    head = {**H200, "sim_address": "127.0.10.2", "k3_master_addr": "127.0.10.2"}
    run_dir, recs = replica_run(tmp_path, {"gpu-01": head, "gpu-02": dict(H200)})
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    wrap = next(a for r in recs if r["type"] == "step_started" and r["argv"][0] == "sbatch"
                for a in r["argv"] if a.startswith("--wrap="))
    assert wrap.startswith("--wrap=K3_MASTER_ADDR=127.0.10.2 && export K3_MASTER_ADDR && srun ")
    worker = [c for c in commands(run_dir, "gpu-02") if c.startswith("k3sim-launch run -d") and "--headless" in c]
    assert worker and all("--master-addr 127.0.10.2 " in c for c in worker), worker


def test_a_replica_whose_planned_head_is_not_slurms_first_host_is_refused_with_both_orders(tmp_path):
    # the inventory lists gpu-02 first, so the plan makes it the head; Slurm numbers a job's
    # nodes in its own order, gpu-01 first: the job is cancelled, no task is blamed
    run_dir, recs = replica_run(tmp_path, {"gpu-02": dict(H200), "gpu-01": dict(H200)})
    r = result(run_dir)
    assert {(n["failed_stage"], n["final"]) for n in r["nodes"].values()} == {("vllm_smoke", "rolled_back")}
    why = r["nodes"]["gpu-02"]["reason"]
    assert "Slurm numbers the replica's nodes gpu-01, gpu-02 (SLURM_NODEID 0 is gpu-01), but the plan's head " \
           "is gpu-02" in why and "list gpu-01 first among the replica's hosts in the inventory" in why, why
    assert "caused by" not in why
    facts = next(e for e in recs if e["type"] == "facts" and e["node"] == "gpu-02" and e["stage"] == "vllm_smoke")
    assert "replica_culprit" not in facts["facts"]
    # the refused job itself was cancelled at once
    assert [r for r in recs if r["type"] == "step_started" and r.get("step") == "k3rollout-smoke-cancel"
            and r["argv"][0] == "scancel"]
    jobs = json.loads((run_dir / "sim-hosts" / "_slurmjobs.json").read_text())["jobs"]
    assert not [j for j in jobs.values() if j["state"] in ("PENDING", "CONFIGURING", "RUNNING")]
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]


def test_an_enroot_replica_names_each_launch_variable_for_the_container(tmp_path):
    # enroot start gives the container the image's environment, not the job's: the launch's
    # variables reach vLLM only where --env names them
    run_dir, recs = replica_run(tmp_path, {"gpu-01": dict(H200), "gpu-02": dict(H200)}, launcher="enroot")
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    wrap = next(a for r in recs if r["type"] == "step_started" and r["argv"][0] == "sbatch"
                for a in r["argv"] if a.startswith("--wrap="))
    assert "enroot start --rw --env VLLM_ENGINE_READY_TIMEOUT_S " in wrap, wrap
    worker = [c for c in commands(run_dir, "gpu-02") if c.startswith("k3sim-launch run -d") and "--headless" in c]
    assert worker and all("-e VLLM_ENGINE_READY_TIMEOUT_S=3600 " in c for c in worker), worker


def test_the_simulated_enroot_hands_the_container_only_the_variables_it_names():
    from k3sim.slurmjobs import container_env

    job = ["VLLM_ENGINE_READY_TIMEOUT_S=3600", "NCCL_DEBUG=INFO"]
    assert container_env(["enroot", "start", "--rw", "img", "vllm"], job) == []
    assert container_env(["enroot", "start", "--env", "NCCL_DEBUG", "-e", "X=1", "img"], job) == ["NCCL_DEBUG=INFO", "X=1"]
    assert container_env(["apptainer", "exec", "--nv", "img"], job) == job


# (mode, record type, step): a kill just before an outcome is recorded (the command ran, the
# journal does not know) or right after a start is recorded (not yet sent)
REPLICA_KILLS = [
    ("BEFORE", "step_done", "group-reservation-create"),
    ("KILL", "step_started", "group-reservation-create"),
    ("BEFORE", "step_done", "k3rollout-smoke-run"),             # the replica's one job submitted
    ("BEFORE", "step_done", "group-reservation-delete"),
]


@pytest.mark.parametrize("mode,rtype,step", REPLICA_KILLS, ids=[f"{m}-{t}-{s}" for m, t, s in REPLICA_KILLS])
def test_a_kill_around_the_replicas_job_resumes_with_one_reservation_and_no_job_left(tmp_path, mode, rtype, step):
    from support import cli

    inv = write_inventory(tmp_path / "inv", {"gpu-01": dict(H200), "gpu-02": dict(H200)},
                          {"scheduler": "slurm", "sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0)
    data = yaml.safe_load(pb.read_text())
    data[0]["stages"] = [s for s in data[0]["stages"] if s["stage"] != "features"]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "run"
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={**locks, "K3_FAULT_AT": f"{rtype}:{step}"}, fault=(mode, 1))
    assert p.returncode == -9, p.stderr[-2000:]
    r = cli("resume", str(run_dir), env=locks)
    assert r.returncode == 0, r.stderr[-2000:]
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    recs = journal(run_dir)
    # the group reservation's create ran once (a kill after its start sends it again, once)
    creates = [x for x in recs if x["type"] == "step_started" and x.get("step") == "group-reservation-create"
               and x["stage"] == "vllm_smoke"]
    assert len(creates) == (2 if mode == "KILL" else 1)
    smoke = [x for x in recs if x["type"] == "facts" and x["node"] == "gpu-01" and x["stage"] == "vllm_smoke"]
    assert smoke and smoke[-1]["facts"]["smoke_request_ok"]
    # nothing left: no job running, no reservation
    jobs = json.loads((run_dir / "sim-hosts" / "_slurmjobs.json").read_text())["jobs"]
    assert not [j for j in jobs.values() if j["state"] in ("PENDING", "CONFIGURING", "RUNNING")]
    assert not [n for n in reservations(run_dir) if n.startswith("k3rollout-check.")]
    for node in ("gpu-01", "gpu-02"):
        assert sim_state(run_dir, node)["scheduler"]["state"] == "schedulable"
        assert not [c for c in sim_state(run_dir, node)["docker"]["containers"] if c.startswith("slurm-job-")]
