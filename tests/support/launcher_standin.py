"""A stand-in for a Slurm site's container launcher (``apptainer exec --nv IMAGE CMD...``),
put on PATH for the jobs a real slurmd runs: pyxis, enroot and apptainer cannot be installed
here, and the test hosts' GPUs are simulated.

The job really runs under slurmd (``srun``/``sbatch`` from the controller); the stand-in hands
the container's command to the simulated node the job landed on (``$SLURMD_NODENAME`` under
``$K3SIM_ROOT``), in the node's container model (``k3sim-launch``, the program the simulated
launchers run containers with): a check runs to completion, a
``vllm serve`` runs as the node's server until the job is cancelled. Each call appends one
line to ``$K3_LAUNCHER_LOG``: the job id, node, reservation, ``SLURM_NODEID`` and the command,
so a test can prove what ran inside which job and task.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SCRIPT = r'''#!@PYTHON@
import json, os, signal, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("apptainer version 1.3.4-standin")
    sys.exit(0)
assert args[0] == "exec", args
rest = [a for a in args[1:] if a != "--nv"]
image, cmd = rest[0].removeprefix("docker://"), rest[1:]
node = os.environ["SLURMD_NODENAME"]
state = os.path.join(os.environ["K3SIM_ROOT"], node)
with open(os.environ["K3_LAUNCHER_LOG"], "a") as log:
    log.write(json.dumps({"job": os.environ.get("SLURM_JOB_ID"), "node": node,
                          "reservation": os.environ.get("SLURM_JOB_RESERVATION", ""),
                          "nodeid": os.environ.get("SLURM_NODEID"),
                          "gpu": "--nv" in args, "cmd": cmd}) + "\n")
env = {**os.environ, "K3SIM_STATE": state}


def sim(*argv):
    return subprocess.run([sys.executable, "-m", "k3sim", *argv], env=env, capture_output=True, text=True)


if sim("k3sim-launch", "image", "inspect", image).returncode != 0:
    sim("k3sim-launch", "pull", image)                     # the launcher imports the image at job start
if cmd[:2] != ["vllm", "serve"]:
    r = sim("k3sim-launch", "run", "--rm", "--gpus", "all", "--entrypoint", cmd[0], image, *cmd[1:])
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    sys.exit(r.returncode)
name = "k3rollout-job-" + os.environ.get("SLURM_JOB_ID", "0")
port = cmd[cmd.index("--port") + 1]
# apptainer hands the host's environment to the container: the launch's own variables
env_args = [x for k, v in os.environ.items() if k.startswith(("VLLM_", "NCCL_", "GLOO_")) for x in ("-e", f"{k}={v}")]
sim("k3sim-launch", "rm", "-f", name)
r = sim("k3sim-launch", "run", "-d", "--name", name, "--gpus", "all", *env_args, "-p", f"{port}:{port}", image,
        *cmd[2:])
print(r.stdout, r.stderr, flush=True)
if r.returncode:
    sys.exit(r.returncode)


shown = {"out": 0, "err": 0}


def show():
    """The server's new output since the last look: a real process's output streams into the
    job's output as it is written, so a task killed later has said what it said."""
    logs = sim("k3sim-launch", "logs", name)
    sys.stdout.write(logs.stdout[shown["out"]:])
    sys.stderr.write(logs.stderr[shown["err"]:])      # vLLM logs to stderr; the job's output takes both
    sys.stdout.flush()
    sys.stderr.flush()
    shown.update(out=len(logs.stdout), err=len(logs.stderr))


def stop(signum, _frame):
    # a server that had ended by itself ends its task with its own code; else it goes with the
    # task, which dies of the signal, as a process without a handler does
    show()
    st = sim("k3sim-launch", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
    show()
    sim("k3sim-launch", "rm", "-f", name)
    if st and st[0] != "running" and len(st) > 1 and st[1].isdigit() and int(st[1]):
        sys.exit(int(st[1]))
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
while True:
    st = sim("k3sim-launch", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
    show()
    if not st or st[0] != "running":
        sys.exit(int(st[1]) if len(st) > 1 and st[1].isdigit() and int(st[1]) else 1)
    time.sleep(0.5)
'''


# nccl-tests' all_reduce_perf as one task of ``srun --mpi=pmix``: every task proves PMIx wired
# it into the job (PMIX_RANK, PMIX_NAMESPACE, logged); rank 0 runs the simulated nodes' NCCL over
# the job's hosts (the node model's mpirun) and prints nccl-tests' output, as rank 0 does
NCCL_SCRIPT = r'''#!@PYTHON@
import json, os, subprocess, sys
node = os.environ["SLURMD_NODENAME"]
rank = os.environ.get("PMIX_RANK")
with open(os.environ["K3_LAUNCHER_LOG"], "a") as log:
    log.write(json.dumps({"job": os.environ.get("SLURM_JOB_ID"), "node": node, "nodeid": os.environ.get("SLURM_NODEID"),
                          "reservation": os.environ.get("SLURM_JOB_RESERVATION", ""), "pmix_rank": rank,
                          "pmix_namespace": os.environ.get("PMIX_NAMESPACE"),
                          "cmd": ["all_reduce_perf", *sys.argv[1:]]}) + "\n")
if rank is None:
    sys.exit("all_reduce_perf: no PMIx rank in the environment: not started by srun --mpi=pmix")
if rank != "0":
    sys.exit(0)
hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                       text=True, check=True).stdout.split()
per = int(os.environ.get("SLURM_NTASKS_PER_NODE") or 1)
env = {**os.environ, "K3SIM_STATE": os.path.join(os.environ["K3SIM_ROOT"], node)}
r = subprocess.run([sys.executable, "-m", "k3sim", "mpirun", "-np", str(per * len(hosts)), "-H",
                    ",".join(f"{h}:{per}" for h in hosts), "-x", "NCCL_DEBUG=" + os.environ.get("NCCL_DEBUG", ""),
                    "all_reduce_perf", *sys.argv[1:]], env=env, capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
sys.exit(r.returncode)
'''


def install(bin_dir: Path) -> Path:
    """Write ``apptainer`` and ``all_reduce_perf`` into ``bin_dir`` (run by this test's Python,
    so they import the checkout's simulator); put ``bin_dir`` first on PATH for the jobs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("all_reduce_perf", NCCL_SCRIPT), ("apptainer", SCRIPT)):
        exe = bin_dir / name
        exe.write_text(text.replace("@PYTHON@", sys.executable))
        exe.chmod(0o755)
    return exe


def environ(bin_dir: Path, sim_root: Path, log: Path) -> dict[str, str]:
    """What the test process exports, so that srun passes it to the jobs (``--export=ALL``)."""
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "K3SIM_ROOT": str(sim_root),
            "K3_LAUNCHER_LOG": str(log)}
