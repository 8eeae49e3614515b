"""The simulated cluster's Slurm jobs: ``srun``, ``sbatch``, ``squeue``, ``scancel`` and
``sinfo`` on the controller, answered as Debian's slurm 22.05 answers them (formats and
messages captured from the real slurmctld/slurmd on loopback, tests/support/slurm_cluster.py).

A job runs on its simulated node through the node's container launcher: pyxis
(``--container-image=``), ``enroot start`` or ``apptainer exec``, each started in the node's
own container model (the ``k3sim-launch`` program of sim/dispatch.py). A check runs to its
end (``srun``); a server is a batch job whose container runs until it is cancelled. The jobs
live beside the hosts (``root/_slurmjobs.json``), changed under one lock. A node held out of
service (DRAIN) or in a maintenance reservation the job does not name refuses the job, as
slurmctld does: "Required node not available (down, drained or reserved)".
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from k3rollout.checks import hostlist
from k3sim import state as st_mod

Out = tuple[int, str, str]
# a command on a simulated node: (host, argv) -> (rc, stdout, stderr)
NodeCmd = Callable[[str, list[str]], Out]

PARTITION = "gpu"
LAUNCH = "k3sim-launch"         # the node's container runtime, as the launcher reaches it
# squeue -o field -> (header, job key)
FIELDS = {"i": ("JOBID", "id"), "j": ("NAME", "name"), "u": ("USER", "user"), "T": ("STATE", "state"),
          "r": ("REASON", "reason"), "b": ("TRES_PER_NODE", "gres"), "P": ("PARTITION", "partition"),
          "N": ("NODELIST", "node")}
VALUE_OPTS = {"-w", "--nodelist", "-N", "--nodes", "-J", "--job-name", "-p", "--partition", "-o", "--output",
              "-t", "--states", "-n", "--name", "-j", "--jobs", "-u", "--user", "-R", "--reservation"}


def launcher_probe(state: dict[str, Any], name: str) -> Out | None:
    """``enroot version`` / ``apptainer --version`` on a node whose launcher is that one
    (pyxis runs enroot underneath); None: not installed there."""
    kind = state.get("container_launcher")
    if state.get("launcher_missing"):
        return None
    if name == "enroot" and kind in ("pyxis", "enroot"):
        return 0, "3.5.0\n", ""
    if name == "apptainer" and kind == "apptainer":
        return 0, "apptainer version 1.3.4\n", ""
    return None


def docker_missing(state: dict[str, Any]) -> bool:
    """THE SWITCH: a Slurm node runs no Docker daemon unless its launcher is docker (the
    ``k3_container_launcher`` host var; sim/state.py records it as ``container_launcher``)."""
    return state["scheduler"]["kind"] == "slurm" and state.get("container_launcher", "docker") != "docker"


# ---------------------------------------------------------------- the controller's job table


@contextmanager
def _table(root: Path) -> Iterator[dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "_slurmjobs.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        f = root / "_slurmjobs.json"
        table = json.loads(f.read_text()) if f.exists() else {"next": 2, "jobs": {}}
        yield table
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        os.replace(tmp, f)
    finally:
        os.close(fd)


def _reservations(root: Path) -> dict[str, dict[str, str]]:
    f = root / "_slurmctld.json"
    return json.loads(f.read_text()) if f.exists() else {}


def _opts(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options (``--k=v``, ``-k v``, ``--k v``) up to the command; the command."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if "=" in a:
            k, _, v = a.partition("=")
            opts[k] = v
        elif a in VALUE_OPTS and i + 1 < len(args):
            opts[a] = args[i + 1]
            i += 1
        else:
            opts[a] = ""
        i += 1
    return opts, args[i:]


def _get(opts: dict[str, str], *keys: str) -> str:
    return next((opts[k] for k in keys if k in opts), "")


def _node_state(root: Path, node: str) -> dict[str, Any] | None:
    sd = root / node
    if not node or "/" in node or not (sd / "state.json").exists():
        return None
    s = st_mod.load(sd)
    return s if s["scheduler"]["kind"] == "slurm" else None


def _maint(root: Path, node: str) -> list[str]:
    """The active maintenance reservations holding ``node`` (MAINT ones may overlap: a job in
    any of them runs there, as slurm 22.05 does)."""
    return [n for n, r in _reservations(root).items() if r.get("State") == "ACTIVE" and "MAINT" in r["Flags"]
            and node in r["Nodes"].split(",")]


def _refuse(root: Path, opts: dict[str, str], prog: str) -> tuple[Out | None, str]:
    """(the refusal, or None; the node)."""
    node = _get(opts, "-w", "--nodelist")
    part = _get(opts, "-p", "--partition")
    resv = _get(opts, "--reservation")
    if part and part != PARTITION:
        return (1, "", f"{prog}: error: invalid partition specified: {part}\n{prog}: error: "
                + ("Unable to allocate resources" if prog == "srun" else "Batch job submission failed")
                + ": Invalid partition name specified\n"), node
    if resv and resv not in _reservations(root):
        return (1, "", f"{prog}: error: " + ("Unable to allocate resources" if prog == "srun" else
                                             "Batch job submission failed") + ": Requested reservation is invalid\n"), node
    if any(_node_state(root, n) is None for n in node.split(",")):
        return (1, "", f"{prog}: error: " + ("Unable to allocate resources" if prog == "srun" else
                                             "Batch job submission failed") + ": Invalid node name specified\n"), node
    return None, node


def _busy_any(root: Path, nodes: list[str], resv: str) -> str:
    return next((w for n in nodes if (w := _busy(root, n, resv))), "")


def _busy(root: Path, node: str, resv: str) -> str:
    """Slurm's reason the node takes no job in ``resv`` now ('' when it does)."""
    s = _node_state(root, node)
    assert s is not None
    if s["scheduler"]["state"] != "schedulable":
        return "ReqNodeNotAvail"
    held = _maint(root, node)
    if held and resv not in held:
        return "ReqNodeNotAvail, Reserved for maintenance"
    if [j for j in s["scheduler"].get("jobs", []) if j["end"] > time.time()]:
        return "Resources"
    return ""


def _container(opts: dict[str, str], cmd: list[str]) -> tuple[str | None, list[str]]:
    """(the image the launcher runs, the command inside it); image None: a bare command."""
    image = _get(opts, "--container-image") or None
    if image is not None:
        return image, cmd
    if cmd[:2] == ["enroot", "start"]:
        rest = _enroot_options(cmd[2:])[1]
        return rest[0], rest[1:]
    if cmd[:2] == ["apptainer", "exec"]:
        rest = [a for a in cmd[2:] if a != "--nv"]
        return rest[0].removeprefix("docker://"), rest[1:]
    return None, cmd


def _enroot_options(words: list[str]) -> tuple[list[str], list[str]]:
    """``enroot start``'s ``--env``/``-e`` names (``NAME`` or ``NAME=VALUE``), and the words
    from the image on (enroot's doc/cmd/start.md)."""
    env: list[str] = []
    i = 0
    while i < len(words) and words[i].startswith("-"):
        if words[i] in ("--env", "-e") and i + 1 < len(words):
            env.append(words[i + 1])
            i += 2
            continue
        if words[i].startswith("--env="):
            env.append(words[i].removeprefix("--env="))
        i += 1
    return env, words[i:]


def container_env(cmd: list[str], job_env: list[str]) -> list[str]:
    """The ``NAME=VALUE`` pairs a task's container gets of the job's environment: all of them
    under pyxis and apptainer; under ``enroot start`` only what ``--env`` names, as its
    runtime builds the container's environment from the image's and the hooks' (enroot
    doc/cmd/start.md, conf/hooks)."""
    if cmd[:2] != ["enroot", "start"]:
        return job_env
    named = _enroot_options(cmd[2:])[0]
    values = dict(kv.split("=", 1) for kv in job_env)
    return [n if "=" in n else f"{n}={values[n]}" for n in named if "=" in n or n in values]


def _exists(node_cmd: NodeCmd, node: str, image: str) -> None:
    if node_cmd(node, [LAUNCH, "image", "inspect", image])[0] != 0:
        node_cmd(node, [LAUNCH, "pull", image])            # the launcher imports the image at job start


# ---------------------------------------------------------------- srun / sbatch


def srun(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    opts, cmd = _opts(args)
    refused, node = _refuse(root, opts, "srun")
    if refused:
        return refused
    with _table(root) as t:
        job, t["next"] = t["next"], t["next"] + 1
    nodes = node.split(",")
    why = next((w for n in nodes if (w := _busy(root, n, _get(opts, "--reservation")))), "")
    if why:
        return 1, "", (f"srun: Required node not available (down, drained or reserved)\nsrun: job {job} queued and "
                       "waiting for resources\nsrun: error: Unable to allocate resources: Requested nodes are busy\n")
    image, inner = _container(opts, cmd)
    if "--mpi" in opts and image is None and inner and inner[0].endswith("all_reduce_perf"):
        # one MPI job over the nodes: the node model's NCCL run, as mpirun would start it
        tasks = int(_get(opts, "--ntasks-per-node") or 1)
        env = [x for kv in _get(opts, "--export").split(",") if "=" in kv for x in ("-x", kv)]
        rc, out, err = node_cmd(nodes[0], ["mpirun", "-np", str(tasks * len(nodes)), "-H",
                                           ",".join(f"{n}:{tasks}" for n in nodes), *env, *inner])
    elif image is None:
        rc, out, err = node_cmd(node, inner)
    else:
        _exists(node_cmd, node, image)
        rc, out, err = node_cmd(node, [LAUNCH, "run", "--rm", "--gpus", "all", "--entrypoint", inner[0], image,
                                       *inner[1:]])
    if rc:
        err += f"srun: error: {node}: task 0: Exited with exit code {rc}\n"
    return rc, out, err


def sbatch(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    opts, _ = _opts(args)
    refused, node = _refuse(root, opts, "sbatch")
    if refused:
        return refused
    words = shlex.split(_get(opts, "--wrap"))
    # "srun [options] command", or a replica's "K3_MASTER_ADDR=$(...) && export ... && srun ..."
    at = max((i for i, w in enumerate(words) if w == "srun" and (i == 0 or words[i - 1] == "&&")), default=0)
    inner_opts, cmd = _opts(words[at + 1:])
    nodes = node.split(",")
    gres = _get(opts, "--gres")
    env = [kv for kv in _get(opts, "--export").split(",") if "=" in kv]
    with _table(root) as t:
        job, t["next"] = t["next"], t["next"] + 1
    if len(nodes) > 1:
        head_script = _get(opts, "--wrap").split(" && srun ", 1)[0] if at else ""
        tasks = _replica_tasks(root, job, {**opts, **inner_opts}, cmd, nodes, head_script, env)
    else:
        image, inner = _container({**opts, **inner_opts}, cmd)
        tasks = [{"node": node, "label": None, "container": f"slurm-job-{job}", "image": image, "cmd": inner,
                  "whoami": "", "env": container_env(cmd, env)}]
    reservation = _get(opts, "--reservation")
    with _table(root) as t:
        rec = {"id": str(job), "name": _get(opts, "-J", "--job-name") or "wrap", "user": st_mod.session_user(),
               "node": node, "reservation": reservation, "partition": PARTITION,
               "gres": f"gres:{gres.removeprefix('gpu:')}" if gres else "N/A", "output": _get(opts, "-o", "--output"),
               "state": "PENDING", "reason": _busy_any(root, nodes, reservation) or "None", "tasks": tasks,
               "env": env, "log": ""}
        if rec["reason"] == "None":
            rec["state"] = "CONFIGURING"        # claimed under the lock: started once, here
        t["jobs"][str(job)] = rec
    if rec["state"] == "CONFIGURING":
        _start(root, rec, node_cmd)
    return 0, f"{job}\n" if "--parsable" in opts else f"Submitted batch job {job}\n", ""


def _replica_tasks(root: Path, job: int, opts: dict[str, str], cmd: list[str], nodes: list[str],
                   head_script: str = "", job_env: list[str] | None = None) -> list[dict]:
    """One task per node of a replica's job (``srun --ntasks-per-node=1 bash -c SCRIPT``): the
    script runs in a real bash, with the environment slurmstepd gives each task and the head
    address the batch script's lines before ``srun`` export (run in bash too, with
    ``scontrol show hostnames`` answering the job's hosts in Slurm's order); its ``exec`` hands
    back the command it would run, so the node's container runs exactly that."""
    order = [n for n in _cluster_nodes(root) if n in nodes]     # Slurm's order: the cluster's, not the request's
    if cmd[:2] != ["bash", "-c"] or len(cmd) < 3:
        raise ValueError(f"sbatch: a job over several nodes runs bash -c SCRIPT here, not {cmd}")
    batch_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_JOB_ID": str(job),
                 "SLURM_JOB_NODELIST": hostlist.compress(order)}
    head = order[0]
    if head_script:
        hosts = " ".join(shlex.quote(n) for n in order)
        r = subprocess.run(["bash", "-c", f'scontrol() {{ printf "%s\\n" {hosts}; }}; {head_script} && '
                            'printf %s "$K3_MASTER_ADDR"'], env=batch_env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or not r.stdout:
            raise ValueError(f"sbatch: the batch script's head line failed: {head_script!r}: {r.stderr.strip()}")
        head = r.stdout
    tasks = []
    for i, n in enumerate(order):
        env = {**batch_env, "K3_MASTER_ADDR": head, "SLURMD_NODENAME": n, "SLURM_NODEID": str(i)}
        r = subprocess.run(["bash", "-c", 'exec() { printf "\\036"; printf "%s\\0" "$@"; }; ' + cmd[2]], env=env,
                           capture_output=True, text=True, timeout=30)
        whoami, _, argv = r.stdout.partition("\036")
        words = [a for a in argv.split("\0") if a] if argv else []
        image, inner = _container(opts, words)
        tasks.append({"node": n, "label": str(i), "container": f"slurm-job-{job}", "image": image, "cmd": inner,
                      "whoami": whoami, "env": container_env(words, job_env or [])})
    return tasks


def _cluster_nodes(root: Path) -> list[str]:
    return [d.name for d in sorted(root.iterdir()) if (d / "state.json").exists()] if root.exists() else []


def _start(root: Path, rec: dict[str, Any], node_cmd: NodeCmd) -> None:
    err = ""
    rc = 0
    for task in rec["tasks"]:
        node, inner = task["node"], task["cmd"]
        if task["image"] and inner[:2] == ["vllm", "serve"]:
            _exists(node_cmd, node, task["image"])
            port = inner[inner.index("--port") + 1] if "--port" in inner else "8000"
            env = [x for kv in task.get("env", rec.get("env", [])) for x in ("-e", kv)]
            rc, _, e = node_cmd(node, [LAUNCH, "run", "-d", "--name", task["container"], "--gpus", "all", *env,
                                       "-p", f"{port}:{port}", task["image"], *inner[2:]])
        else:
            rc, e = 1, f"slurmstepd: error: execve(): {inner[0] if inner else ''}: No such file or directory\n"
        if rc:
            err = e + (f"srun: error: {node}: task {task['label']}: Exited with exit code {rc}\n"
                       if task["label"] is not None else "")
            break
    with _table(root) as t:
        j = t["jobs"][rec["id"]]
        j["state"], j["reason"] = ("RUNNING", "None") if rc == 0 else ("FAILED", "NonZeroExitCode")
        j["log"] = err if rc else ""
    if rc and len(rec["tasks"]) > 1:
        _end(root, rec["id"], node_cmd, "FAILED")


def _tasks_ended(j: dict[str, Any], node_cmd: NodeCmd) -> dict[str, str]:
    """The tasks of a running job whose container no longer runs: node -> exit code."""
    out = {}
    for task in j["tasks"]:
        rc, text, _ = node_cmd(task["node"], [LAUNCH, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}",
                                              task["container"]])
        st = text.split()
        if rc != 0 or not st or st[0] != "running":
            out[task["node"]] = st[1] if len(st) > 1 else "1"
    return out


def _refresh(root: Path, node_cmd: NodeCmd) -> dict[str, dict[str, Any]]:
    """The table, with each running job's containers asked whether they still run (a job
    whose server exited ends: it leaves squeue, its output kept for ``cat``; in a job over
    several nodes a task that ends ends the others, as ``srun --kill-on-bad-exit`` does)."""
    with _table(root) as t:
        jobs = dict(t["jobs"])
    for jid, j in jobs.items():
        if j["state"] == "PENDING" and not _busy_any(root, j["node"].split(","), j["reservation"]):
            with _table(root) as t:
                mine = t["jobs"][jid]["state"] == "PENDING"
                if mine:
                    t["jobs"][jid]["state"] = "CONFIGURING"
            if mine:
                _start(root, j, node_cmd)
        elif j["state"] == "RUNNING":
            ended = _tasks_ended(j, node_cmd)
            if ended:
                _end(root, jid, node_cmd, "COMPLETED" if set(ended.values()) == {"0"} else "FAILED", ended=ended)
    with _table(root) as t:
        return {k: v for k, v in t["jobs"].items() if v["state"] in ("PENDING", "CONFIGURING", "RUNNING")}


def _labelled(task: dict[str, Any], text: str) -> str:
    if task["label"] is None:
        return text
    return "".join(f"{task['label']}: {ln}\n" for ln in (task.get("whoami", "") + text).splitlines())


def _end(root: Path, jid: str, node_cmd: NodeCmd, state: str, ended: dict[str, str] | None = None) -> None:
    """End job ``jid``: its containers' logs into its output, the containers removed. ``ended``:
    the tasks that ended by themselves, node -> exit code (srun names each; it terminated the
    others)."""
    with _table(root) as t:
        j = t["jobs"][jid]
    log = ""
    for task in j["tasks"]:
        logs = node_cmd(task["node"], [LAUNCH, "logs", task["container"]])
        node_cmd(task["node"], [LAUNCH, "rm", "-f", task["container"]])
        log += _labelled(task, logs[1] + logs[2])
    if ended and len(j["tasks"]) > 1:
        log += "".join(f"srun: error: {t['node']}: task {t['label']}: Exited with exit code {ended[t['node']]}\n"
                       for t in j["tasks"] if t["node"] in ended)
        log += f"srun: launch/slurm: _step_signal: Terminating StepId={jid}.0\n"
        log += "".join(f"srun: error: {t['node']}: task {t['label']}: Terminated\n" for t in j["tasks"]
                       if t["node"] not in ended)
    with _table(root) as t:
        j = t["jobs"][jid]
        j["state"] = state
        j["log"] += log


# ---------------------------------------------------------------- squeue / scancel / sinfo / cat


def _node_jobs(root: Path, node: str) -> list[dict[str, Any]]:
    """The node's own users' jobs (sim_slurm_job_s): the GPUs and CPUs a training job holds."""
    s = _node_state(root, node)
    if s is None:
        return []
    return [{"id": str(j["id"]), "name": f"train-{j['id']}", "user": "alice", "state": "RUNNING", "reason": "None",
             "gres": f"gres:gpu:{s['gpu']['count']}", "partition": PARTITION, "node": node, "reservation": ""}
            for j in s["scheduler"].get("jobs", []) if j["end"] > time.time()]


def squeue(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    opts, _ = _opts(args)
    jobs = list(_refresh(root, node_cmd).values())
    nodes = [d.name for d in sorted(root.iterdir()) if (d / "state.json").exists()] if root.exists() else []
    for n in nodes:
        jobs += _node_jobs(root, n)
    want_node = _get(opts, "-w", "--nodelist")
    want_id = _get(opts, "-j", "--jobs")
    if want_id and want_id not in {j["id"] for j in jobs}:
        with _table(root) as t:
            known = want_id in t["jobs"]
        if not known:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
    states = set(filter(None, _get(opts, "-t", "--states").upper().split(",")))
    picked = [j for j in jobs
              if (not want_node or (want_node in j["node"].split(",") and j["state"] != "PENDING"))
              and (not want_id or j["id"] == want_id)
              and (not _get(opts, "-n", "--name") or j["name"] == _get(opts, "-n", "--name"))
              and (not _get(opts, "-R", "--reservation") or j["reservation"] == _get(opts, "-R", "--reservation"))
              and (not states or j["state"] in states)]
    fmt = _get(opts, "-o", "--format") or "%i|%j|%u|%T|%r|%b|%P|%N"

    def row(get: Callable[[str], str]) -> str:
        out, i = "", 0
        while i < len(fmt):
            if fmt[i] == "%" and i + 1 < len(fmt):
                out += get(fmt[i + 1])
                i += 2
            else:
                out += fmt[i]
                i += 1
        return out + "\n"

    lines = [] if "-h" in opts or "--noheader" in opts else [row(lambda c: FIELDS.get(c, ("", ""))[0])]
    for j in sorted(picked, key=lambda j: int(j["id"])):
        lines.append(row(lambda c, j=j: hostlist.compress(j["node"].split(",")) if c == "N" else
                         str(j.get(FIELDS.get(c, ("", ""))[1], "")) if c in FIELDS else ""))
    return 0, "".join(lines), ""


def scancel(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    opts, ids = _opts(args)
    with _table(root) as t:
        live = {k: v for k, v in t["jobs"].items() if v["state"] in ("PENDING", "CONFIGURING", "RUNNING")}
        unknown = [i for i in ids if i not in t["jobs"]]
    if unknown:
        return 1, "", "".join(f"scancel: error: Kill job error on job id {i}: Invalid job id specified\n"
                              for i in unknown)
    name, resv, node = _get(opts, "-n", "--name"), _get(opts, "--reservation"), _get(opts, "-w", "--nodelist")
    for jid, j in live.items():
        if (ids and jid not in ids) or (name and j["name"] != name) or (resv and j["reservation"] != resv) \
                or (node and node not in j["node"].split(",")):
            continue
        if not (ids or name or resv or node):
            continue
        _end(root, jid, node_cmd, "CANCELLED")
    return 0, "", ""


def sinfo(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    opts, _ = _opts(args)
    node = _get(opts, "-n", "--nodes")
    s = _node_state(root, node)
    if s is None:
        return 0, "", ""
    busy = bool(_node_jobs(root, node)) or any(node in j["node"].split(",") for j in _refresh(root, node_cmd).values())
    if s["scheduler"]["state"] != "schedulable":
        state = "draining" if busy else "drained"
    elif _maint(root, node):
        state = "maint"
    else:
        state = "allocated" if busy else "idle"
    fmt = _get(opts, "-o", "--format") or "%P|%a|%T"
    out = fmt.replace("%P", f"{PARTITION}*").replace("%a", "up").replace("%T", state).replace("%N", node)
    return 0, out + "\n", ""


def cat(root: Path, args: list[str], node_cmd: NodeCmd) -> Out:
    """``cat`` of a batch job's output file (on the shared file system the controller sees)."""
    path = args[-1] if args else ""
    _refresh(root, node_cmd)
    with _table(root) as t:
        jobs = [j for j in t["jobs"].values() if j["output"] and j["output"].replace("%j", j["id"]) == path]
    if not jobs:
        return 1, "", f"cat: {path}: No such file or directory\n"
    out = ""
    for j in jobs:
        if j["state"] == "RUNNING":
            for task in j["tasks"]:
                _, o, e = node_cmd(task["node"], [LAUNCH, "logs", task["container"]])
                out += _labelled(task, o + e)
        else:
            out += j["log"]
    return 0, out, ""


COMMANDS: dict[str, Callable[[Path, list[str], NodeCmd], Out]] = {
    "srun": srun, "sbatch": sbatch, "squeue": squeue, "scancel": scancel, "sinfo": sinfo, "cat": cat}
