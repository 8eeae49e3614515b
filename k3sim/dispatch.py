"""The one entry point of the simulated node: ``dispatch(state_dir, argv) -> Result``.

Both the in-process sim transport and the ``k3rollout-sim`` executables (behind a real
sshd) go through here, so every path sees the same host. The dispatcher also models the
transport-level faults: a host that is down (rebooting, or never came back);
``ssh_drops``, where the first package install runs to completion on the host but the
connection dies before the client sees its exit status; and ``ssh_drops_read``, where the
same happens to the first GPU query after a reboot (sshd restarted under it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from k3rollout.errors import InputError
from k3sim import cache, crictl, gpu, kubelet, nccl, netd, repos, sched, slurmjobs
from k3sim import docker as dk
from k3sim import state as st

# the simulated host's own files (what a file command may name): shared with the small
# command process behind sshd (sim/thin.py), which needs the standard library only
from k3sim.thin import FS_ROOTS, MODPROBE_D


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str
    unreachable: bool = False
    dropped: bool = False


def _cat(state: dict, args: list[str]) -> tuple[int, str, str]:
    out = []
    for path in args:
        if path == "/proc/driver/nvidia/version":
            rc, o, e = gpu.proc_version(state)
            if rc:
                return rc, "", e
            out.append(o)
        elif path == "/proc/driver/nvidia/params":
            rc, o, e = repos.proc_params(state)
            if rc:
                return rc, "", e
            out.append(o)
        elif path in state.get("modprobe_d", {}):
            out.append(state["modprobe_d"][path])
        elif path == "/proc/sys/kernel/random/boot_id":
            out.append(state["boot_id"] + "\n")
        elif path == "/etc/os-release":
            osv = state.get("os_version", "22.04")
            out.append((f'PRETTY_NAME="Ubuntu {osv} LTS"\nID=ubuntu\nVERSION_ID="{osv}"\n'
                        f'VERSION_CODENAME={repos.codename(state)}\n') if state["os_family"] == "Debian"
                       else 'PRETTY_NAME="Rocky Linux 9.5 (Blue Onyx)"\nID="rocky"\nVERSION_ID="9.5"\n')
        elif isinstance(state.get("files", {}).get(path), str):
            out.append(state["files"][path])
        elif path in state.get("files", {}):
            return 1, "", f"cat: {path}: Is a directory\n"
        else:
            return 1, "", f"cat: {path}: No such file or directory\n"
    return 0, "".join(out), ""


def _parent_ok(state: dict, path: str) -> bool:
    parent = path.rsplit("/", 1)[0]
    return parent in FS_ROOTS or state.get("files", {}).get(parent, "") is None


def _mkdir(state: dict, args: list[str]) -> tuple[int, str, str]:
    """``mkdir DIR``: atomic on the host, it fails when DIR exists (the basis of a lock)."""
    files = state.setdefault("files", {})
    paths = [a for a in args if not a.startswith("-")]
    if not paths:
        return 1, "", "mkdir: missing operand\n"
    for p in paths:
        p = p.rstrip("/")
        if p in files or p in FS_ROOTS:
            return 1, "", f"mkdir: cannot create directory '{p}': File exists\n"
        if not _parent_ok(state, p):
            return 1, "", f"mkdir: cannot create directory '{p}': No such file or directory\n"
        files[p] = None
    return 0, "", ""


def _tee(state: dict, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
    files = state.setdefault("files", {})
    text = (stdin or b"").decode()
    for p in (a for a in args if not a.startswith("-")):
        if p.startswith(MODPROBE_D + "/") and "/" not in p[len(MODPROBE_D) + 1:]:
            conf = state.setdefault("modprobe_d", {})
            conf[p] = (conf.get(p) or "") + text if "-a" in args else text
            continue
        if files.get(p, "") is None:
            return 1, text, f"tee: {p}: Is a directory\n"
        if not _parent_ok(state, p):
            return 1, text, f"tee: {p}: No such file or directory\n"
        files[p] = (files.get(p) or "") + text if "-a" in args else text
    return 0, text, ""


def _rm(state: dict, args: list[str]) -> tuple[int, str, str]:
    files = state.setdefault("files", {})
    force = any(a.startswith("-") and "f" in a for a in args)
    recursive = any(a.startswith("-") and ("r" in a or "R" in a) for a in args)
    for p in (a.rstrip("/") for a in args if not a.startswith("-")):
        if p not in files:
            if not force:
                return 1, "", f"rm: cannot remove '{p}': No such file or directory\n"
            continue
        inside = [f for f in files if f.startswith(p + "/")]
        if files[p] is None and not recursive:
            return 1, "", f"rm: cannot remove '{p}': Is a directory\n"
        for f in [*inside, p]:
            files.pop(f, None)
    return 0, "", ""


def _sudo(state_dir: Path, args: list[str], stdin: bytes | None) -> Result:
    """sudo [-n] [-S] [-p PROMPT] [-u USER] [--] CMD...: with -S the password is stdin's first line."""
    i = 0
    read_password = False
    as_user = "root"
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--":
            i += 1
            break
        if args[i] == "-S":
            read_password = True
        if args[i] == "-p":
            i += 1
        if args[i] == "-u" and i + 1 < len(args):
            i += 1
            as_user = args[i]
        i += 1
    if read_password:
        password, _, rest = (stdin or b"").partition(b"\n")
        expected = st.load(state_dir).get("sudo_password")
        if expected is not None and password.decode() != expected:
            return Result(1, "", "sudo: 1 incorrect password attempt\n")
        stdin = rest
    if args[i:i + 1] == ["id"]:
        return Result(*id_command(args[i + 1:], as_user))
    return dispatch(state_dir, args[i:], stdin)


def id_command(args: list[str], user: str | None = None) -> tuple[int, str, str]:
    """``id -un`` (``id -nu``): the session's user name (``user`` under sudo)."""
    if sorted(args) in (["-un"], ["-nu"], ["-n", "-u"]):
        return 0, (user or st.session_user()) + "\n", ""
    return 1, "", "id: k3rollout sim answers `id -un` only\n"


def _drops_here(state: dict, argv: list[str]) -> bool:
    """ssh_drops: the first driver package install loses its connection once.
    ssh_drops_read: sshd is restarted while the first GPU query after a reboot runs (a
    read-only command): that connection dies once, the next one is served."""
    if state["dropped"]:
        return False
    if "ssh_drops_read" in state["faults"] and state["boots"] >= 1 and argv[0] == "nvidia-smi" \
            and any(a.startswith("--query-gpu") for a in argv):
        return True
    if "ssh_drops" not in state["faults"]:
        return False
    return argv[:2] in (["apt-get", "install"], ["dnf", "install"]) and any("nvidia" in a for a in argv) \
        and "--download-only" not in argv


def dispatch(state_dir: Path, argv: list[str], stdin: bytes | None = None) -> Result:
    if not argv:
        return Result(0, "", "")
    name = os.path.basename(argv[0])
    args = list(argv[1:])
    if name == "sudo":
        return _sudo(state_dir, args, stdin)
    with st.transaction(state_dir) as state:
        before = _listening(state)
        res = _run(state_dir, state, name, args, stdin)
        changed = _listening(state) != before
    if changed:
        # after the state is committed: the network daemon rereads it and (un)binds sockets
        netd.sync(state_dir)
    return res


def _listening(state: dict) -> tuple:
    return (state["down_until"], state["dead"], tuple(sorted((p, s.get("instance"), s.get("status"))
                                                             for p, s in state["servers"].items())))


def _run(state_dir: Path, state: dict, name: str, args: list[str], stdin: bytes | None) -> Result:
    if not st.is_up(state, time.time()):
        return Result(255, "", f"ssh: connect to host {state['name']} port 22: "
                               f"{'No route to host' if state['dead'] else 'Connection refused'}\n",
                      unreachable=True)
    st.log_command(state_dir, [name, *args])
    for fault in st.activate_late_faults(state, st.sim_now()):
        if fault == "serving_crash":
            # the serving process is killed once; Docker's restart policy answers it
            for cname in sorted({srv["container"] for srv in state["servers"].values()}):
                if cname in state["docker"]["containers"]:
                    dk.crash(state, cname, state_dir)
    if state["latency_s"]:
        time.sleep(state["latency_s"])
    drop = _drops_here(state, [name, *args])
    handler = HANDLERS.get(name)
    if handler is None:
        rc, out, err = _not_found(name)
    else:
        rc, out, err = handler(state_dir, state, args, stdin)
    if drop:
        state["dropped"].append(" ".join([name, *args]))
        return Result(-1, out, err + "Connection reset by peer\n", dropped=True)
    return Result(rc, out, err)


def _not_found(name: str) -> tuple[int, str, str]:
    """bash's answer to a command it cannot find (``bash -c``: "bash: line 1: NAME: command not found", 127)."""
    return 127, "", f"bash: line 1: {name}: command not found\n"


def _reboot(state_dir: Path, state: dict, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
    if args and "-r" not in args and args != ["now"]:
        return 1, "", "shutdown: only reboots are simulated\n"
    return gpu.reboot(state, dk.on_boot)


# command name -> handler(state_dir, state, args, stdin)
HANDLERS = {
    "nvidia-smi": lambda d, s, a, i: gpu.nvidia_smi(s, a),
    "cat": lambda d, s, a, i: _cat(s, a),
    "uname": lambda d, s, a, i: (0, (s["kernel"] if "-r" in a else "Linux") + "\n", ""),
    "hostname": lambda d, s, a, i: (0, s["name"] + "\n", ""),
    "date": lambda d, s, a, i: gpu.date(a),
    "apt-get": lambda d, s, a, i: gpu.apt_get(s, a),
    "apt": lambda d, s, a, i: gpu.apt_get(s, a),
    "dnf": lambda d, s, a, i: gpu.dnf(s, a),
    "dpkg-query": lambda d, s, a, i: gpu.dpkg_query(s, a),
    "rpm": lambda d, s, a, i: gpu.rpm(s, a),
    "modinfo": lambda d, s, a, i: gpu.modinfo(s, a),
    "dkms": lambda d, s, a, i: gpu.dkms(s, a),
    "reboot": _reboot,
    "shutdown": _reboot,
    "systemctl": lambda d, s, a, i: gpu.systemctl(s, a, dk.on_boot),
    # a containerd node has no docker CLI and a Docker host no crictl: the shell's answer; a
    # Slurm node runs no Docker daemon unless its launcher is docker
    "docker": lambda d, s, a, i: dk.docker(s, a, d) if kubelet.runtime(s) == "docker" and not slurmjobs.docker_missing(s)
    else _not_found("docker"),
    "crictl": lambda d, s, a, i: crictl.crictl(s, a) if kubelet.runtime(s) == "containerd" else _not_found("crictl"),
    # a Slurm job's container, started by the site's launcher in the node's container model
    slurmjobs.LAUNCH: lambda d, s, a, i: dk.docker(s, a, d),
    "enroot": lambda d, s, a, i: slurmjobs.launcher_probe(s, "enroot") or _not_found("enroot"),
    "apptainer": lambda d, s, a, i: slurmjobs.launcher_probe(s, "apptainer") or _not_found("apptainer"),
    "curl": lambda d, s, a, i: dk.curl(d, s, a, i),
    "kubectl": lambda d, s, a, i: sched.kubectl(s, a),
    "scontrol": lambda d, s, a, i: sched.scontrol(s, a, d),
    "mpirun": lambda d, s, a, i: nccl.mpirun(d, s, a),
    "all_reduce_perf": lambda d, s, a, i: nccl.all_reduce_perf(d, s, a, None),
    "true": lambda d, s, a, i: (0, "", ""),
    "apt-cache": lambda d, s, a, i: repos.apt_cache(s, a),
    "apt-mark": lambda d, s, a, i: repos.apt_mark(s, a),
    "mokutil": lambda d, s, a, i: repos.mokutil(s, a),
    "modprobe": lambda d, s, a, i: repos.modprobe(s, a),
    "journalctl": lambda d, s, a, i: repos.journalctl(s, a),
    "ls": lambda d, s, a, i: repos.ls(s, a),
    "df": lambda d, s, a, i: repos.df_cmd(s, a),
    "find": lambda d, s, a, i: cache.find(s, a),
    "sha256sum": lambda d, s, a, i: cache.sha256sum(s, a),
    "mkdir": lambda d, s, a, i: _mkdir(s, a),
    "tee": lambda d, s, a, i: _tee(s, a, i),
    "rm": lambda d, s, a, i: _rm(s, a),
    "id": lambda d, s, a, i: id_command(a),
    "grep": lambda d, s, a, i: repos.grep_modprobe(s, a) or (2, "", "grep: k3rollout sim greps /etc/modprobe.d only\n"),
}


def _slurm_job_command(name: str):
    """srun, sbatch, squeue, scancel, sinfo on a simulated login or slurmctld host (named by
    ``k3_scheduler_host``): answered for the whole cluster, as on the controller."""
    def run(d: Path, s: dict, a: list[str], i: bytes | None) -> tuple[int, str, str]:
        if s["scheduler"]["kind"] != "slurm":
            return 127, "", f"bash: line 1: {name}: command not found\n"

        def on_node(host: str, argv: list[str]) -> tuple[int, str, str]:
            res = dispatch(d.parent / host, argv)
            return res.rc, res.stdout, res.stderr

        return slurmjobs.COMMANDS[name](d.parent, a, on_node)
    return run


HANDLERS.update({n: _slurm_job_command(n) for n in slurmjobs.COMMANDS if n not in HANDLERS})


def init_cluster(root: Path, hosts: dict[str, dict]) -> dict[str, Path]:
    """One state directory per host under ``root``; existing hosts are left as they are."""
    out = {}
    for name, hv in hosts.items():
        try:
            out[name] = st.init_host(root / name, name, hv)
        except ValueError as exc:
            # a simulated host's vars are input like any other: exit 2 naming the host
            raise InputError(f"host {name}: {exc}") from None
    return out
