"""Real sshd test hosts on loopback, each serving one simulated GPU node.

Each host is an ``sshd -D`` on 127.0.0.1:<free port> with its own host key, a shared
authorised client key, and ``SetEnv`` putting the simulator's commands first on PATH over
the host's own state directory. A supervisor thread makes reboots real at the network
level: while the simulated host is down its sshd and every session of it are killed
(connections drop, new ones are refused); when it is up again sshd is restarted with the
same key. Only processes this module started (by pid) are ever signalled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from k3sim import netd, thin
from k3sim.dispatch import HANDLERS
from k3sim.state import init_host, locked
from support import with_default_gpu

ROOT = Path(__file__).resolve().parents[2]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_available() -> bool:
    return Path(SSHD).is_file() and shutil.which("ssh-keygen") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().split()[1]


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(d.name))
    return out


SHUTDOWN_S = 0.3


def _kill_tree(pid: int) -> None:
    for child in _children(pid):
        _kill_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class SSHDHost:
    name: str
    port: int
    dir: Path
    state: Path
    config: Path
    host_pub: str
    proc: subprocess.Popen | None = None
    log: Path = field(init=False)
    # sessions left running after the listener stopped (a host shutting down; see stop_listening)
    sessions: list[int] = field(default_factory=list)
    # the source ports of the readiness probes ``start`` made: connections sshd accepted and
    # logged, which are not the tool's
    probes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log = self.dir / "sshd.log"

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd for {self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as probe:
                    self.probes.append(probe.getsockname()[1])
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"sshd for {self.name} did not listen on {self.port}")

    def stop_listening(self) -> None:
        """What a host's shutdown does first: systemd stops sshd, so a new connection is
        refused, while the sessions in progress (the one that ran ``shutdown -r``) go on
        until the host goes down (``stop``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.sessions = _children(self.proc.pid)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_tree(self.proc.pid)
            self.proc.wait(timeout=5)
        self.proc = None
        for pid in self.sessions:
            _kill_tree(pid)
        self.sessions = []

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class SSHDCluster:
    """``bastion=True`` adds a jump host: an sshd that runs no commands (``ForceCommand
    /bin/false``), accepts only its own client key, and logs every forwarded connection
    (LogLevel DEBUG1); the target sshds then log every connection they accept (VERBOSE), so a
    test can prove that each connection a target accepted was one the bastion forwarded
    (``forwarded``, ``accepted``)."""

    def __init__(self, base: Path, hosts: dict[str, dict], bastion: bool = False):
        self.base = base
        self.hosts: dict[str, SSHDHost] = {}
        keys = base / "keys"
        keys.mkdir(parents=True)
        self.client_key = keys / "id_ed25519"
        client_pub = _keygen(self.client_key)
        self.authorized = keys / "authorized_keys"
        self.authorized.write_text(f"ssh-ed25519 {client_pub} k3rollout-tests\n")
        self.bastion: SSHDHost | None = None
        if bastion:
            self.bastion_key = keys / "bastion_ed25519"
            (keys / "bastion_authorized_keys").write_text(f"ssh-ed25519 {_keygen(self.bastion_key)} bastion\n")
            d = base / "bastion"
            d.mkdir()
            bpub = _keygen(d / "ssh_host_ed25519_key")
            bport = _free_port()
            cfg = d / "sshd_config"
            cfg.write_text("\n".join([
                f"Port {bport}", "ListenAddress 127.0.0.1", f"HostKey {d / 'ssh_host_ed25519_key'}",
                f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {keys / 'bastion_authorized_keys'}",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no", "MaxStartups 200:30:400",
                "AllowTcpForwarding yes", "PermitTTY no", "ForceCommand /bin/false", "LogLevel DEBUG1", ""]))
            self.bastion = SSHDHost("bastion", bport, d, d, cfg, bpub)
        self.bin = base / "bin"
        self.bin.mkdir()
        # each command a small process that hands it to the simulated cluster's daemon
        # (sim/thin.py: the standard library only, under python -I -S), which runs it as it
        # runs the k3sim transport's; the whole simulator runs it where no daemon answers
        for cmd in [*HANDLERS, "sudo"]:
            thin.write_program(str(self.bin / cmd), sys.executable)
        self.home = base / "home"
        self.home.mkdir()
        self.known_hosts = base / "known_hosts"
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        lines = []
        for name, hv in hosts.items():
            d = base / "hosts" / name
            d.mkdir(parents=True)
            # state dirs are siblings, as the simulator finds NCCL peers by name next to its own
            # on the tests' default GPUs unless the host names its own (support.DEFAULT_GPU)
            state = init_host(base / "states" / name, name, with_default_gpu(hv))
            host_pub = _keygen(d / "ssh_host_ed25519_key")
            port = _free_port()
            cfg = d / "sshd_config"
            cfg.write_text("\n".join([
                f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'ssh_host_ed25519_key'}",
                f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {self.authorized}", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
                "StrictModes no", "UsePAM no", "MaxStartups 200:30:400",
                "LogLevel VERBOSE" if bastion else "LogLevel ERROR",
                # an empty HOME: the login user's shell startup files must not run on every command
                f"SetEnv K3SIM_STATE={state} PATH={self.bin}:/usr/bin:/bin PYTHONPATH={ROOT} HOME={self.home}",
                ""]))
            self.hosts[name] = SSHDHost(name, port, d, state, cfg, host_pub)
            lines.append(f"[127.0.0.1]:{port} ssh-ed25519 {host_pub}")
        if self.bastion is not None:
            lines.append(f"[127.0.0.1]:{self.bastion.port} ssh-ed25519 {self.bastion.host_pub}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        self._stop = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)

    def __enter__(self) -> SSHDCluster:
        netd.ensure(self.base / "states")      # the hosts' network is up before any host is
        if self.bastion is not None:
            self.bastion.start()
        for h in self.hosts.values():
            h.start()
        self._supervisor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._supervisor.join(timeout=5)
        for h in self.hosts.values():
            h.stop()
        if self.bastion is not None:
            self.bastion.stop()
        netd.shutdown(self.base / "states")

    def _supervise(self) -> None:
        # a real `shutdown -r` returns its exit status before systemd stops sshd: a reboot
        # whose down time is long enough takes the host down SHUTDOWN_S after it is seen,
        # so the command's own session gets its answer first (Ansible's reboot module reads it)
        seen: dict[str, tuple[float, float]] = {}
        while not self._stop.is_set():
            for h in self.hosts.values():
                want = self._want(h, seen, self._read(h))
                if want in ("closing", "down"):
                    # decided again and carried out under the host's state lock: no command
                    # of this host runs between the decision and the kill. Decided outside
                    # it, a kill that came late on a loaded machine could land after the
                    # reboot ended and a connection had read the new boot id: Ansible's
                    # reboot module took the host as back and its next task met sshd down.
                    with locked(h.state):
                        want = self._want(h, seen, self._read(h))
                        if want == "closing" and h.running:
                            h.stop_listening()
                        elif want == "down" and (h.running or h.sessions):
                            h.stop()
                elif want == "up" and not h.running and not self._stop.is_set():
                    h.start()
            self._stop.wait(0.03)

    @staticmethod
    def _read(h: SSHDHost) -> dict | None:
        try:
            return json.loads((h.state / "state.json").read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _want(h: SSHDHost, seen: dict[str, tuple[float, float]], st: dict | None) -> str:
        """What the host's sshd should be now: "up", "closing" (shutting down: no new
        connection, the reboot's own session finishes) or "down"."""
        if st is None:
            return "unknown"
        if st["dead"]:
            return "down"
        now = time.time()                   # after the read: a stale clock would kill a host that is back
        until = float(st["down_until"])
        if seen.get(h.name, (None,))[0] != until:
            seen[h.name] = (until, now)
        first = seen[h.name][1]
        if now >= until:
            return "up"
        return "closing" if until - first > 4 * SHUTDOWN_S and now - first < SHUTDOWN_S else "down"

    def inventory(self, path: Path, extra_vars: dict | None = None, host_vars: dict | None = None) -> Path:
        import yaml

        hosts = {}
        for name, h in self.hosts.items():
            # the node's vLLM port is reached at its own simulated address, as a real node's IP
            api = json.loads((h.state / "state.json").read_text())["address"]
            hosts[name] = {"ansible_host": "127.0.0.1", "ansible_port": h.port, "api_host": api,
                           **(host_vars or {}).get(name, {})}
        inv = {"all": {"vars": {"ansible_connection": "ssh", "ansible_user": "root",
                                # the reboot module must find the simulator's shutdown, never the
                                # test machine's own
                                "k3_reboot_search_paths": [str(self.bin)],
                                "ansible_python_interpreter": "/usr/bin/python3",
                                "ansible_ssh_private_key_file": str(self.client_key),
                                "k3_known_hosts_file": str(self.known_hosts), "scheduler": "kubernetes",
                                # the cluster's Kubernetes API, which the hosts' network daemon serves
                                "k3_kubeconfig": str(self.base / "states" / "kubeconfig"),
                                **(extra_vars or {})},
                       "children": {"gpu_nodes": {"hosts": hosts}}}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(inv, sort_keys=False))
        return path

    # ------------------------------------------------------------ proof that the bastion was used

    def forwarded(self, host: str) -> int:
        """Connections the bastion forwarded to ``host``'s sshd (its DEBUG1 log)."""
        assert self.bastion is not None
        port = self.hosts[host].port
        return len(re.findall(rf"server_request_direct_tcpip: originator \S+ port \d+, target \S+ port {port}\b",
                              self.bastion.log.read_text()))

    def accepted(self, host: str) -> int:
        """Connections ``host``'s sshd accepted (its VERBOSE log), however they came, less the
        readiness probes ``SSHDHost.start`` made, known by their source ports (the line sshd
        logs when a probe closes can come after a test reads the log, on a loaded machine)."""
        h = self.hosts[host]
        ports = Counter(int(p) for p in re.findall(r"^Connection from \S+ port (\d+) on ", h.log.read_text(), re.M))
        return (ports - Counter(h.probes)).total()      # one probe per port it used: a port reused later counts

    def ssh_config(self, path: Path, jump: str = "bastion", extra: dict[str, list[str]] | None = None) -> Path:
        """An ~/.ssh/config naming every host by alias only: HostName, Port, User,
        IdentityFile and ProxyJump through the bastion (which has a key of its own)."""
        assert self.bastion is not None
        blocks = [f"Host bastion\n  HostName 127.0.0.1\n  Port {self.bastion.port}\n  User root\n"
                  f"  IdentityFile {self.bastion_key}\n  IdentitiesOnly yes\n"
                  + "".join(f"  {x}\n" for x in (extra or {}).get("bastion", []))]
        for name, h in self.hosts.items():
            blocks.append(f"Host {name}\n  HostName 127.0.0.1\n  Port {h.port}\n  User root\n"
                          f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
                          + (f"  ProxyJump {jump}\n" if jump and not any(x.startswith("Proxy") for x in
                                                                           (extra or {}).get(name, [])) else "")
                          + "".join(f"  {x}\n" for x in (extra or {}).get(name, [])))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(blocks))
        return path
