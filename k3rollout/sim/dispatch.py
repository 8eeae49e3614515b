"""The one entry point of the simulated node: ``dispatch(state_dir, argv) -> Result``.

Both the in-process sim transport and the ``k3rollout-sim`` executables (behind a real
sshd) go through here, so every path sees the same host. The dispatcher also models the
two transport-level faults: a host that is down (rebooting, or never came back) and
``ssh_drops``, where the first package install runs to completion on the host but the
connection dies before the client sees its exit status.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from k3rollout.sim import docker as dk
from k3rollout.sim import gpu, nccl, sched
from k3rollout.sim import state as st


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
        elif path == "/proc/sys/kernel/random/boot_id":
            out.append(state["boot_id"] + "\n")
        elif path == "/etc/os-release":
            out.append('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n' if state["os_family"] == "Debian"
                       else 'PRETTY_NAME="Rocky Linux 9.5 (Blue Onyx)"\nID="rocky"\nVERSION_ID="9.5"\n')
        else:
            return 1, "", f"cat: {path}: No such file or directory\n"
    return 0, "".join(out), ""


def _drops_here(state: dict, argv: list[str]) -> bool:
    """ssh_drops: the first driver package install loses its connection once."""
    if "ssh_drops" not in state["faults"] or state["dropped"]:
        return False
    return argv[:2] in (["apt-get", "install"], ["dnf", "install"]) and any("nvidia" in a for a in argv)


def dispatch(state_dir: Path, argv: list[str], stdin: bytes | None = None) -> Result:
    if not argv:
        return Result(0, "", "")
    name = os.path.basename(argv[0])
    args = list(argv[1:])
    if name == "sudo":
        return dispatch(state_dir, [a for a in args if a not in ("-n", "-H", "-E")], stdin)
    with st.transaction(state_dir) as state:
        if not st.is_up(state, time.time()):
            return Result(255, "", f"ssh: connect to host {state['name']} port 22: "
                                   f"{'No route to host' if state['dead'] else 'Connection refused'}\n",
                          unreachable=True)
        st.log_command(state_dir, [name, *args])
        if state["latency_s"]:
            time.sleep(state["latency_s"])
        drop = _drops_here(state, [name, *args])
        if name == "nvidia-smi":
            rc, out, err = gpu.nvidia_smi(state, args)
        elif name == "cat":
            rc, out, err = _cat(state, args)
        elif name == "uname":
            rc, out, err = 0, (state["kernel"] if "-r" in args else "Linux") + "\n", ""
        elif name == "hostname":
            rc, out, err = 0, state["name"] + "\n", ""
        elif name == "date":
            rc, out, err = gpu.date(args)
        elif name in ("apt-get", "apt"):
            rc, out, err = gpu.apt_get(state, args)
        elif name == "dnf":
            rc, out, err = gpu.dnf(state, args)
        elif name == "dpkg-query":
            rc, out, err = gpu.dpkg_query(state, args)
        elif name == "rpm":
            rc, out, err = gpu.rpm(state, args)
        elif name == "modinfo":
            rc, out, err = gpu.modinfo(state, args)
        elif name == "dkms":
            rc, out, err = gpu.dkms(state, args)
        elif name == "reboot" or (name == "shutdown" and "-r" in args):
            rc, out, err = gpu.reboot(state)
        elif name == "systemctl":
            rc, out, err = gpu.systemctl(state, args)
        elif name == "docker":
            rc, out, err = dk.docker(state, args)
        elif name == "curl":
            rc, out, err = dk.curl(state, args, stdin)
        elif name == "kubectl":
            rc, out, err = sched.kubectl(state, args)
        elif name == "scontrol":
            rc, out, err = sched.scontrol(state, args)
        elif name == "mpirun":
            rc, out, err = nccl.mpirun(state_dir, state, args)
        elif name == "all_reduce_perf":
            rc, out, err = nccl.all_reduce_perf(state_dir, state, args, None)
        elif name == "true":
            rc, out, err = 0, "", ""
        else:
            rc, out, err = 127, "", f"bash: line 1: {name}: command not found\n"
        if drop:
            state["dropped"].append(" ".join([name, *args]))
            return Result(-1, out, err + "Connection reset by peer\n", dropped=True)
        return Result(rc, out, err)


def init_cluster(root: Path, hosts: dict[str, dict]) -> dict[str, Path]:
    """One state directory per host under ``root``; existing hosts are left as they are."""
    return {name: st.init_host(root / name, name, hv) for name, hv in hosts.items()}
