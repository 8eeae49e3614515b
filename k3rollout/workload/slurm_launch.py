"""A multi-node replica as ONE Slurm job: the batch script and each node's ``vllm serve``.

The plan computes every node's command (plan/launch.py); on Slurm the job computes the parts
that depend on where each task landed, as Slurm sites write multi-node vLLM jobs
(docs/domain.md "Workloads on Slurm GPU clusters"):

- the head's address is the first host of ``SLURM_JOB_NODELIST``, expanded as
  ``scontrol show hostnames`` does, in the batch script (on the job's first node, outside any
  container: pyxis runs the task's command inside the image, where there is no ``scontrol``);
  where the head's ``k3_master_addr`` names another address (the interface the ranks should
  meet on, when the host name resolves to the management network), that address is used as
  it is on every other scheduler;
- the node's rank is ``SLURM_NODEID``; ranks above 0 add the worker-only flags
  (``--headless``, and ``--data-parallel-start-rank`` = rank x local DP size);
- ``srun --label --kill-on-bad-exit=1``: every output line names its task, and a task that
  dies ends the replica (a dead rank is a dead server) with srun's own line naming the node:
  ``srun: error: gpu-02: task 1: Exited with exit code 1``.

Pure: builds text and reads text; no host is contacted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

MASTER_VAR = "K3_MASTER_ADDR"
# the head: the first host of the job's node list (docs/domain.md "Workloads on Slurm GPU clusters")
HEAD_LINE = f'{MASTER_VAR}=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) && export {MASTER_VAR}'
RANK = '"$SLURM_NODEID"'
HEAD = f'"${MASTER_VAR}"'
ADDRESS_FLAGS = ("--master-addr", "--data-parallel-address")
WORKER_ONLY = ("--headless", "--data-parallel-start-rank")
# the first line every task prints (with --label: "1: k3rollout: gpu-02 is node 1 of gpu-[01-02], head gpu-01")
WHOAMI = f'echo "k3rollout: $SLURMD_NODENAME is node $SLURM_NODEID of $SLURM_JOB_NODELIST, head ${MASTER_VAR}"'
_SRUN_TASK = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<task>[\d,-]+): (?P<what>.*)$")
_SIGNALLED = ("0", "137", "143")          # after srun's SIGTERM (then SIGKILL): 128 + 15, 128 + 9
_TERMINATING = re.compile(r"^srun: .*(Terminating StepId=|Job step aborted)")
_WHO = re.compile(r"^(?P<task>\d+): k3rollout: (?P<node>\S+) is node \d+ of ")


def _templated(args: list[str], local: str | None) -> list[tuple[str, bool]]:
    """Each argument as a shell word, and whether only ranks above 0 pass it."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a == "--node-rank" and nxt is not None:
            out += [(a, False), (RANK, False)]
            i += 2
        elif a in ADDRESS_FLAGS and nxt is not None:
            out += [(a, False), (HEAD, False)]
            i += 2
        elif a == "--data-parallel-start-rank" and nxt is not None:
            out += [(a, True), (f'"$((SLURM_NODEID * {int(local or 1)}))"', True)]
            i += 2
        else:
            out.append((shlex.quote(a), a in WORKER_ONLY))
            i += 1
    return out


def rank_args(head_args: list[str], worker_args: list[str]) -> str:
    """The shell words of ``vllm serve``'s arguments after the model for any rank: the plan's
    worker command with the rank and head taken from the job, and the worker-only flags passed
    only where ``$W`` is set (ranks above 0). Refused (ValueError) when the plan's head command
    is not the worker's without those flags: then one script cannot serve every rank."""
    local = next((worker_args[i + 1] for i, a in enumerate(worker_args[:-1]) if a == "--data-parallel-size-local"),
                 None)
    worker = _templated(worker_args, local)
    head = _templated(head_args, local)
    if [w for w, only in worker if not only] != [w for w, _ in head]:
        raise ValueError("the replica's head and worker commands differ in more than the worker-only flags "
                         f"({' '.join(WORKER_ONLY)}): {head_args} vs {worker_args}")
    return " ".join(f"${{W:+{w}}}" if only else w for w, only in worker)


def task_script(prefix: list[str], model: str, head_args: list[str], worker_args: list[str], port: int) -> str:
    """What each task runs (``bash -c``): who it is, then ``exec`` the server. ``prefix`` is
    the launcher's command up to the program (``apptainer exec --nv IMAGE``; empty for pyxis,
    whose srun options enter the image)."""
    argv = " ".join(shlex.quote(a) for a in [*prefix, "vllm", "serve", model])
    return (f'{WHOAMI}; W=; [ "$SLURM_NODEID" = 0 ] || W=1; '
            f"exec {argv} {rank_args(head_args, worker_args)} --port {int(port)}")


def head_line(head_addr: str | None = None) -> str:
    """How the batch script sets the head's address: the one given (the head's
    ``k3_master_addr``), or the first host of the job's node list."""
    if head_addr:
        return f"{MASTER_VAR}={shlex.quote(head_addr)} && export {MASTER_VAR}"
    return HEAD_LINE


def batch_wrap(srun_opts: list[str], script: str, head_addr: str | None = None) -> str:
    """The batch script (``sbatch --wrap``, run by /bin/sh on the job's first node)."""
    return f"{head_line(head_addr)} && srun {shlex.join(['--label', '--kill-on-bad-exit=1', *srun_opts])} " \
           f"bash -c {shlex.quote(script)}"


# ---------------------------------------------------------------- reading the job's output


@dataclass(frozen=True)
class TaskEnd:
    """How srun says a node's task ended: ``exited`` with a code, or ``terminated`` (killed
    because another task of the job ended)."""
    state: str
    code: str = ""
    line: str = ""


def task_end(output: str, node: str) -> TaskEnd | None:
    """srun's line about ``node``'s task in the job's output; None when it has none. Once srun
    terminates the step (``_step_signal: Terminating StepId=...``), a task that ends of the
    signal is srun's doing: ``Terminated``, or ``Exited with exit code 143`` where it traps
    SIGTERM (measured on Debian's slurm 22.05 with ``--kill-on-bad-exit=1``). Any other code
    is the task's own end, even after that line: which task srun saw end first is a race
    (a head that sees its worker die exits too)."""
    terminating = False
    for ln in output.splitlines():
        if _TERMINATING.search(ln):
            terminating = True
            continue
        m = _SRUN_TASK.match(ln.strip())
        if not m or m.group("node") != node:
            continue
        code = re.match(r"Exited with exit code (\d+)", m.group("what"))
        if code and not (terminating and code.group(1) in _SIGNALLED):
            return TaskEnd("exited", code.group(1), ln.strip())
        return TaskEnd("terminated", code.group(1) if code else "", ln.strip())
    return None


def tasks(output: str) -> dict[str, str]:
    """node -> its task label, from each task's first line (WHOAMI)."""
    out: dict[str, str] = {}
    for ln in output.splitlines():
        m = _WHO.match(ln)
        if m:
            out.setdefault(m.group("node"), m.group("task"))
    return out


def node_output(output: str, node: str) -> str:
    """``node``'s own lines (its task's label, without it) and srun's lines about it."""
    label = tasks(output).get(node)
    keep = []
    for ln in output.splitlines():
        if label is not None and ln.startswith(f"{label}: "):
            keep.append(ln[len(label) + 2:])
        else:
            m = _SRUN_TASK.match(ln.strip())
            if m and m.group("node") == node:
                keep.append(ln)
    return "\n".join(keep) + ("\n" if keep else "")
