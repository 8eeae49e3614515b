"""A real Slurm cluster on loopback for tests: Debian's munged, slurmctld and one
``slurmd -N <node>`` per node, each on its own port.

Everything lives under one temporary directory: a generated ``slurm.conf`` (ClusterName,
the nodes on 127.0.0.1 with their own ``Port=``), a copy of it per slurmd beside that node's
``mpi.conf`` (its PMIx directory), a munge key and socket, state, spool, pid and log files.
The daemons run in the foreground as children of the test process and are stopped by pid:
only the processes started here are ever signalled. Client commands (``scontrol``,
``sbatch``, ``squeue``) find the cluster through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "scancel")
PACKAGES = "munge slurmctld slurmd slurm-client"
# Debian's mpi/pmix plugin dlopens the unversioned libpmix.so, which only libpmix-dev ships
# (docs/domain.md "Workloads on Slurm GPU clusters", PMIx on Debian)
PMIX_LIBS = "/usr/lib/*/pmix2/lib/libpmix.so"


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                       if os.access(p, os.X_OK)), None)


def missing() -> list[str]:
    """The Slurm/munge binaries this machine lacks (``apt-get install munge slurmctld slurmd slurm-client``)."""
    return [b for b in BINARIES if _which(b) is None]


def usable() -> str:
    """Why a cluster cannot be started here ('' when it can): the binaries, and root (slurmd
    and munged check file ownership; the test jobs run as the submitting user)."""
    if missing():
        return f"missing {', '.join(missing())} (apt-get install {PACKAGES})"
    if os.geteuid() != 0:
        return "slurmd must run as root"
    return ""


def pmix_missing() -> str:
    """Why ``srun --mpi=pmix`` cannot start tasks here ('' when it can)."""
    import glob

    return "" if glob.glob(PMIX_LIBS) else "no libpmix.so for slurm's mpi/pmix plugin (apt-get install libpmix-dev)"


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class SlurmCluster:
    root: Path
    nodes: list[str]
    cluster_name: str = "k3test"
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------ set-up

    def write(self) -> None:
        r = self.root
        r.mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o700)
        for d in ("munge", "ctld", "spool", "log", "run"):
            (r / d).mkdir(exist_ok=True)
            os.chmod(r / d, 0o700)
        for n in self.nodes:
            (r / "spool" / n).mkdir(exist_ok=True)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        lines = [
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={node_ports[0]}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={r / 'ctld'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "MpiDefault=none", "SwitchType=switch/none",
            "SchedulerType=sched/builtin", "SelectType=select/linear",
            "SlurmdParameters=config_overrides", "ReturnToService=2",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "MinJobAge=2",
            # SIGTERM to SIGKILL: time for a task to write what it has (Slurm's default is 30 s)
            "KillWait=5",
            "MessageTimeout=5", "SlurmctldDebug=info", "SlurmdDebug=info",
        ]
        for name, port in zip(self.nodes, node_ports, strict=True):
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 "
                         "RealMemory=100 State=UNKNOWN")
        lines.append(f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        # each slurmd reads the same slurm.conf from a directory of its own, beside its own
        # mpi.conf: two slurmstepd on one host would make the same PMIx client directory
        # (/tmp/spmix_appdir_<uid>_<job>.<step>) and the second task's launch fails
        for n in self.nodes:
            d = r / "conf" / n
            d.mkdir(parents=True, exist_ok=True)
            (d / "slurm.conf").write_text(self.conf.read_text())
            (r / "pmix" / n).mkdir(parents=True, exist_ok=True)
            (d / "mpi.conf").write_text(f"PMIxCliTmpDirBase={r / 'pmix' / n}\n")

    def _start(self, key: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{key}.out", "ab")
        self.procs[key] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, cwd=self.root, start_new_session=True)
        log.close()

    def start(self, timeout: float = 30.0) -> SlurmCluster:
        self.write()
        m = self.root / "munge"
        self._start("munged", [_which("munged") or "munged", "--foreground", "--force",
                               f"--socket={m / 'munge.socket'}", f"--key-file={m / 'munge.key'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}", f"--pid-file={m / 'munged.pid'}",
                               f"--seed-file={m / 'munged.seed'}"])
        self._wait(lambda: (m / "munge.socket").exists(), timeout, "munged did not create its socket")
        self._start("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.scontrol("ping").returncode == 0 and "UP" in self.scontrol("ping").stdout,
                   timeout, "slurmctld did not answer `scontrol ping`")
        for n in self.nodes:
            self._start(f"slurmd-{n}", [_which("slurmd") or "slurmd", "-D", "-N", n, "-f",
                                        str(self.root / "conf" / n / "slurm.conf")])
        self._wait(lambda: all(self.state(n) == "IDLE" for n in self.nodes), timeout,
                   "the slurmd nodes did not register IDLE")
        return self

    def _wait(self, cond, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for key, p in self.procs.items():
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{key} exited with {p.returncode}: {self.logs()}")
            try:
                if cond():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.1)
        logs = self.logs()
        self.stop()
        raise RuntimeError(f"{what} within {timeout}s: {logs}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}")
        return "\n".join(out)

    def stop(self) -> None:
        """Stop exactly the daemons started here (by pid), slurmd before slurmctld before munged."""
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            # end the test jobs first, so that no job step outlives its slurmd
            self.run("scancel", "--user=root")
            end = time.monotonic() + 10
            while time.monotonic() < end and self.run("squeue", "-h", "-o", "%i").stdout.strip():
                time.sleep(0.1)
        order = [k for k in self.procs if k.startswith("slurmd-")] + ["slurmctld", "munged"]
        for key in order:
            p = self.procs.get(key)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    # ------------------------------------------------------------------ client side

    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], capture_output=True, text=True,
                              env=self.env, timeout=30, check=check)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("scontrol", *args)

    def state(self, node: str) -> str:
        """The node's State= as ``scontrol show node`` prints it (e.g. ``ALLOCATED+DRAIN``)."""
        m = re.search(r"\bState=(\S+)", self.scontrol("show", "node", node).stdout)
        return m.group(1) if m else ""

    def hold(self, node: str, seconds: float) -> str:
        """Submit a real job that holds ``node`` for ``seconds``; returns its id once it runs."""
        res = self.run("sbatch", "--parsable", "-w", node, "-N", "1", "-o", "/dev/null", "-J", f"hold-{node}",
                       "--wrap", f"sleep {seconds}", check=True)
        job = res.stdout.strip().split(";")[0]
        self._wait(lambda: self.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", 30,
                   f"job {job} did not start on {node}")
        return job

    def cancel(self, job: str) -> None:
        self.run("scancel", job, check=True)
