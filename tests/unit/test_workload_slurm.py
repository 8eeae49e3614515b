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
    assert backend_name({"scheduler": "slurm"}) == "docker"              # today's path, unchanged
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

    good, why = SlurmJobs().preflight(missing, {"k3_container_launcher": "apptainer"})
    assert not good and why.startswith("k3_container_launcher is apptainer, but apptainer is not installed")
    good, why = SlurmJobs().preflight(lambda n, a: ok("enroot v3.5.0\n") if a == ["enroot", "version"] else ok(rc=9),
                                      {})
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
