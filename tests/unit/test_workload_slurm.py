"""The slurm workload backend's commands, one at a time, through a scripted node context:
each launcher's template, the GPU request, where the commands run, observe's refusal to
start a GPU job beside running GPU jobs, and the preflight's refusal of a node without its
launcher. The flow against a real slurmctld is tests/e2e/test_workload_slurm.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from k3rollout.transport.base import CommandResult
from k3rollout.workload import backend_name, workload_for
from k3rollout.workload.slurm import SlurmJobs, container, not_started, squeue_rows

# `squeue -h -w gpu-01 -o %i|%j|%u|%T|%r|%b|%P|%N` against Debian's slurmctld 22.05 with a
# job holding the node's GPUs (sbatch --gres=gpu:8) on the loopback test cluster
SQUEUE_GPU_JOB = "3|x@gpu-01|root|RUNNING|None|gres:gpu:8|gpu|gpu-01\n"
SQUEUE_CPU_JOB = "7|prep|alice|RUNNING|None|N/A|gpu|gpu-01\n"


@dataclass
class Sched:
    state: str = "cordoned"

    def where(self, ctx: Any) -> str:
        return "controller"

    def read_state(self, ctx: Any) -> str:
        return self.state


@dataclass
class Runner:
    sched: Sched = field(default_factory=Sched)

    def scheduler(self, ctx: Any) -> Sched:
        return self.sched

    def prior_meta(self, ctx: Any, name: str) -> None:
        return None


@dataclass
class Ctx:
    """A node context that answers only the scripted commands, in order."""
    script: list[tuple[list[str], CommandResult]]
    stage: str = "cuda_check"
    node: str = "gpu-01"
    run_id: str = "20261205T0030-abc123"
    vars: dict[str, Any] = field(default_factory=lambda: {"scheduler": "slurm", "k3_container_launcher": "pyxis"})
    facts: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=lambda: {"gpu_count": 8, "scheduler_state": "schedulable"})
    params: Any = None
    runner: Runner = field(default_factory=Runner)
    sent: list[tuple[list[str], str | None]] = field(default_factory=list)

    def step(self, name: str, argv: list[str], **kw: Any) -> CommandResult:
        assert self.script, f"unscripted command: {argv}"
        want, res = self.script.pop(0)
        assert argv == want, f"sent {argv}, expected {want}"
        self.sent.append((argv, kw.get("on")))
        return res

    def evidence(self, name: str, content: str) -> dict:
        return {}


def ok(stdout: str = "", rc: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult("controller", (), rc, stdout, stderr, 0.0)


def test_each_launcher_has_its_template():
    assert container({"k3_container_launcher": "pyxis"}, "img:1", ["nvidia-smi", "-L"]) == \
        (["--container-image=img:1"], ["nvidia-smi", "-L"])
    assert container({}, "img:1", ["true"])[0] == ["--container-image=img:1"]           # pyxis is the default
    assert container({"k3_container_launcher": "enroot"}, "k3", ["true"]) == \
        ([], ["enroot", "start", "--rw", "k3", "true"])
    assert container({"k3_container_launcher": "apptainer"}, "vllm/vllm-openai:kimi-k3", ["true"]) == \
        ([], ["apptainer", "exec", "--nv", "docker://vllm/vllm-openai:kimi-k3", "true"])
    assert container({"k3_container_launcher": "apptainer"}, "/shared/k3.sif", ["true"])[1][3] == "/shared/k3.sif"
    with pytest.raises(ValueError, match="k3_container_launcher"):
        container({"k3_container_launcher": "docker"}, "img", ["true"])


def test_the_backend_is_slurm_only_where_a_slurm_launcher_is_named():
    assert backend_name({"scheduler": "slurm", "k3_container_launcher": "pyxis"}) == "slurm"
    assert backend_name({"scheduler": "slurm", "k3_container_launcher": "docker"}) == "docker"
    assert backend_name({"scheduler": "slurm"}) == "slurm"               # pyxis, the default launcher
    assert backend_name({"scheduler": "kubernetes", "k3_container_launcher": "pyxis"}) == "kubernetes"
    assert isinstance(workload_for({"scheduler": "slurm", "k3_workload_backend": "slurm"}), SlurmJobs)


def test_a_check_opens_the_reservation_once_and_runs_as_srun_with_the_nodes_gpus():
    resv = "k3rollout-check.gpu-01.20261205T0030-abc123"
    srun = ["srun", f"--reservation={resv}", "-w", "gpu-01", "-N", "1", "--immediate=120",
            "--job-name=k3rollout-cuda-init@gpu-01", "--gres=gpu:8", "--container-image=img", "python3", "-c", "x"]
    ctx = Ctx([
        (["scontrol", "show", "reservation", resv], ok(rc=1, stdout=f"Reservation {resv} not found\n")),
        (["id", "-un"], ok("ops\n")),
        (["scontrol", "create", "reservation", f"ReservationName={resv}", "Nodes=gpu-01", "Users=ops",
          "StartTime=now", "Duration=720", "Flags=MAINT,IGNORE_JOBS"], ok(f"Reservation created: {resv}\n")),
        (["scontrol", "update", "NodeName=gpu-01", "State=RESUME"], ok()),
        (srun, ok("cuda_available=True device_count=8\n")),
    ])
    res = SlurmJobs().run_check(ctx, "cuda-init", "img", "python3", ["-c", "x"])
    assert res.ok and not ctx.script
    assert {on for _, on in ctx.sent} == {"controller"}            # never over the node's own transport
    # a second check finds the reservation and the node resumed: neither is made again
    ctx.runner.sched.state = "schedulable"
    ctx.script = [(["scontrol", "show", "reservation", resv], ok(f"ReservationName={resv} StartTime=now\n")),
                  ([*srun[:6], "--immediate=120", "--job-name=k3rollout-smi@gpu-01", "--gpus-per-node=8",
                    "--container-image=img", "nvidia-smi", "-L"], ok("GPU 0: NVIDIA H200\n"))]
    ctx.vars["k3_slurm_gpu_request"] = "gpus-per-node"
    assert SlurmJobs().run_check(ctx, "smi", "img", "nvidia-smi", ["-L"]).ok and not ctx.script


def test_observe_never_starts_a_gpu_job_beside_running_gpu_jobs():
    look = ["squeue", "-h", "-w", "gpu-01", "-t", "RUNNING,COMPLETING", "-o", "%i|%j|%u|%T|%r|%b|%P|%N"]
    ctx = Ctx([(look, ok(SQUEUE_CPU_JOB + SQUEUE_GPU_JOB))], stage="observe")
    res = SlurmJobs().run_check(ctx, "cuda-init", "img", "python3", ["-c", "x"])
    assert not res.ok and "GPU jobs run on the node (3)" in res.stderr
    assert not ctx.script and [a[0] for a, _ in ctx.sent] == ["squeue"]         # no srun, no reservation
    # a node running only CPU jobs: the check runs, without a reservation, and only if
    # its GPUs are free at once (--immediate)
    ctx = Ctx([(look, ok(SQUEUE_CPU_JOB)),
               (["srun", "-w", "gpu-01", "-N", "1", "--immediate=120", "--job-name=k3rollout-cuda-init@gpu-01",
                 "--gres=gpu:8", "--container-image=img", "python3", "-c", "x"], ok("device_count=8\n"))],
              stage="observe")
    assert SlurmJobs().run_check(ctx, "cuda-init", "img", "python3", ["-c", "x"]).ok and not ctx.script


def test_a_job_that_never_started_is_named_with_slurms_words():
    res = ok(rc=1, stderr="srun: Required node not available (down, drained or reserved)\nsrun: job 2 queued and "
                          "waiting for resources\nsrun: error: Unable to allocate resources: Requested nodes are busy\n")
    assert not_started(res) == ("srun: Required node not available (down, drained or reserved); "
                                "srun: error: Unable to allocate resources: Requested nodes are busy")
    # a check that ran and failed is not "never started"
    assert not_started(ok(rc=1, stderr="RuntimeError: CUDA error: system not yet initialized\n")) == ""


def test_preflight_refuses_a_node_without_its_launcher_naming_the_variable():
    def missing(name: str, argv: list[str]) -> CommandResult:
        assert argv == ["apptainer", "--version"]
        return ok(rc=127, stderr="bash: line 1: apptainer: command not found\n")

    good, why, _ = SlurmJobs().preflight(missing, {"k3_container_launcher": "apptainer"})
    assert not good and why.startswith("k3_container_launcher is apptainer, but apptainer is not installed")
    good, why, _ = SlurmJobs().preflight(lambda n, a: ok("enroot v3.5.0\n") if a == ["enroot", "version"]
                                         else ok(rc=9), {})
    assert good and why == "pyxis: enroot v3.5.0"


def test_baseline_reads_the_nodes_jobs_users_partition_and_reason():
    ctx = Ctx([
        (["squeue", "-h", "-w", "gpu-01", "-o", "%i|%j|%u|%T|%r|%b|%P|%N"], ok(SQUEUE_CPU_JOB + SQUEUE_GPU_JOB)),
        (["sinfo", "-h", "-n", "gpu-01", "-o", "%P|%a|%T"], ok("gpu*|up|mixed\n")),
        (["scontrol", "show", "node", "gpu-01"], ok("NodeName=gpu-01\n   State=MIXED\n   Reason=hw check RMA-4411 "
                                                     "[root@2026-12-05T00:33:28]\n")),
    ], stage="baseline")
    f = SlurmJobs().runtime_facts(ctx)
    assert f["slurm_job_users"] == ["alice", "root"]
    assert [j["job"] for j in f["slurm_jobs"]] == ["7", "3"] and f["slurm_jobs"][1]["gres"] == "gres:gpu:8"
    assert f["slurm_partitions"] == [{"partition": "gpu*", "availability": "up", "node_state": "mixed"}]
    assert f["slurm_reason"] == "hw check RMA-4411"
    assert squeue_rows("garbage\n") == []


def test_a_job_that_waited_and_then_ran_is_not_called_never_started():
    res = ok(rc=127, stderr="srun: Required node not available (down, drained or reserved)\nsrun: job 1 queued and "
                            "waiting for resources\nsrun: job 1 has been allocated resources\nbash: line 1: x: command "
                            "not found\nsrun: error: gpu-01: task 0: Exited with exit code 127\n")
    assert not_started(res) == ""


# ---------------------------------------------------------------- a replica as one job


def _plan(layout: dict[str, Any], nodes: list[str]) -> list[dict[str, Any]]:
    from types import SimpleNamespace

    from k3rollout.model.profile import load_profile
    from k3rollout.plan.launch import replica_launch
    from k3rollout.resources import shipped

    inv = SimpleNamespace(hosts={n: SimpleNamespace(vars={}) for n in nodes})
    rep = {"layout": layout, "nodes": nodes, "gpu": "NVIDIA H200", "gpus": 8 * len(nodes),
           "all2all_backend": "deepep_v2" if layout["ep"] > 1 else None}
    return replica_launch(load_profile(shipped("playbooks", "profiles", "kimi-k3.yml")), rep, inv)


@pytest.mark.parametrize("layout", [
    {"tp": 8, "pp": 4, "dp": 1, "ep": 1},              # --nnodes/--node-rank/--master-addr, --headless above 0
    {"tp": 8, "pp": 1, "dp": 4, "ep": 32},             # --data-parallel-*, --data-parallel-start-rank above 0
], ids=["tp-pp", "dp-ep"])
def test_each_task_of_a_replica_job_runs_the_plans_command_for_its_slurm_rank(tmp_path, layout):
    """The task script in a real bash, once per SLURM_NODEID, with the head the batch script
    took from SLURM_JOB_NODELIST: each rank runs exactly the plan's command for that node."""
    import json
    import os
    import subprocess

    from k3rollout.workload import slurm_launch

    nodes = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    plan = _plan(layout, nodes)
    script = slurm_launch.task_script(["apptainer", "exec", "--nv", "docker://img:1"], "m/K3", plan[0]["args"],
                                      plan[1]["args"], 8000)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "apptainer").write_text("#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (bindir / "apptainer").chmod(0o755)
    for entry in plan:
        env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURMD_NODENAME": entry["node"],
               "SLURM_NODEID": str(entry["rank"]), "SLURM_JOB_NODELIST": "gpu-[01-04]", "K3_MASTER_ADDR": "gpu-01"}
        out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        who, argv = out.splitlines()
        assert who == f"k3rollout: {entry['node']} is node {entry['rank']} of gpu-[01-04], head gpu-01"
        assert json.loads(argv) == ["exec", "--nv", "docker://img:1", "vllm", "serve", "m/K3", *entry["args"],
                                    "--port", "8000"]


def test_the_batch_script_takes_the_head_from_the_first_host_as_scontrol_expands_it():
    wrap = slurm_launch_wrap()
    assert wrap.startswith('K3_MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) && '
                           "export K3_MASTER_ADDR && srun --label --kill-on-bad-exit=1 --container-image=img:1 bash -c ")
    from k3rollout.checks.hostlist import compress, expand

    assert expand("gpu-[01-02,05],login1,n[8-10]") == ["gpu-01", "gpu-02", "gpu-05", "login1", "n8", "n9", "n10"]
    assert compress(["gpu-01", "gpu-02", "gpu-05"]) == "gpu-[01-02,05]"


def slurm_launch_wrap() -> str:
    from k3rollout.workload import slurm_launch

    return slurm_launch.batch_wrap(["--container-image=img:1"], "true")


def test_a_replica_job_takes_the_heads_k3_master_addr_quoted_where_given():
    from k3rollout.workload import slurm_launch

    wrap = slurm_launch.batch_wrap([], "true", "10.0.0.1; reboot")
    assert wrap.startswith("K3_MASTER_ADDR='10.0.0.1; reboot' && export K3_MASTER_ADDR && srun --label ")
    assert "scontrol" not in wrap and slurm_launch.batch_wrap([], "true", "").startswith(slurm_launch.HEAD_LINE)


# the output of `srun --label --kill-on-bad-exit=1` over two slurmd (Debian's 22.05, loopback):
# task 1 exits 3; srun terminates the step; task 0 traps SIGTERM and exits 143 (or is killed)
REPLICA_OUTPUT = """0: k3rollout: gpu-01 is node 0 of gpu-[01-02], head gpu-01
1: k3rollout: gpu-02 is node 1 of gpu-[01-02], head gpu-01
1: bye
srun: error: gpu-02: task 1: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=1.0
0: slurmstepd-gpu-01: error: *** STEP 1.0 ON gpu-01 CANCELLED AT 2026-12-05T04:26:07 ***
srun: error: gpu-01: task 0: Exited with exit code 143
"""


def test_srun_names_the_task_that_ended_a_replica_job_and_the_ones_it_terminated():
    from k3rollout.workload.slurm_launch import node_output, task_end

    assert task_end(REPLICA_OUTPUT, "gpu-02").state == "exited" and task_end(REPLICA_OUTPUT, "gpu-02").code == "3"
    assert task_end(REPLICA_OUTPUT, "gpu-01").state == "terminated"
    assert task_end(REPLICA_OUTPUT.replace("Exited with exit code 143", "Terminated"), "gpu-01").state == "terminated"
    assert task_end(REPLICA_OUTPUT, "gpu-03") is None
    # a head that saw its worker die exits on its own, first: srun names it first, the worker
    # after the step's termination, with its own code (not the signal's): both ended by themselves
    raced = ("srun: error: gpu-01: task 0: Exited with exit code 1\n"
             "srun: launch/slurm: _step_signal: Terminating StepId=5.0\n"
             "srun: error: gpu-02: task 1: Exited with exit code 1\n")
    assert (task_end(raced, "gpu-02").state, task_end(raced, "gpu-02").code) == ("exited", "1")
    assert node_output(REPLICA_OUTPUT, "gpu-02") == ("k3rollout: gpu-02 is node 1 of gpu-[01-02], head gpu-01\nbye\n"
                                                     "srun: error: gpu-02: task 1: Exited with exit code 3\n")


def test_a_replica_whose_head_and_worker_commands_differ_beyond_the_worker_flags_is_refused():
    from k3rollout.workload.slurm_launch import rank_args

    with pytest.raises(ValueError, match="differ in more than the worker-only flags"):
        rank_args(["--tensor-parallel-size", "8"], ["--tensor-parallel-size", "16", "--headless"])
