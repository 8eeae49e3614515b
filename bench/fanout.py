"""SSH fan-out, side by side on this machine: k3rollout's paramiko executor, a bare
paramiko thread pool (the practical floor), and ansible-playbook (forks = N, pipelining
on, gather_facts off), over N real sshd hosts on loopback with host-key checking on in
every tool.

Each host runs the same read-only commands, the shape of a baseline capture (five small
commands in a row). They are the system's own binaries (/bin/cat, /usr/bin/uname ...),
not the simulator's, so the numbers measure the transport, not the simulator's Python
start-up. Every tool starts cold: new connections, and for Ansible a fresh ControlPath
directory.

    python bench/fanout.py [--hosts 10 50 100] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

COMMANDS = [["/bin/cat", "/proc/sys/kernel/random/boot_id"], ["/usr/bin/uname", "-r"], ["/bin/hostname"],
            ["/bin/cat", "/proc/loadavg"], ["/bin/date", "+%s"]]


def k3rollout_executor(cluster, names: list[str]) -> float:
    from k3rollout.transport.ssh import SSHExecutor

    inv = yaml.safe_load(cluster.inventory(Path(tempfile.mkdtemp()) / "h.yml").read_text())
    common = inv["all"]["vars"]
    hosts = {n: {**common, **hv} for n, hv in inv["all"]["children"]["gpu_nodes"]["hosts"].items()}
    ex = SSHExecutor(hosts)     # the default per-endpoint handshake cap
    t = time.perf_counter()

    def one(h: str) -> None:
        for argv in COMMANDS:
            r = ex.run(h, argv)
            assert r.ok, (h, argv, r.stderr)

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(one, names))
    took = time.perf_counter() - t
    ex.close()
    return took


def bare_paramiko(cluster, names: list[str]) -> float:
    import paramiko

    t = time.perf_counter()

    def one(h: str) -> None:
        c = paramiko.SSHClient()
        c.load_host_keys(str(cluster.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect("127.0.0.1", port=cluster.hosts[h].port, username="root", key_filename=str(cluster.client_key),
                  look_for_keys=False, allow_agent=False)
        for argv in COMMANDS:
            _, out, _ = c.exec_command(shlex.join(argv))
            out.read()
            assert out.channel.recv_exit_status() == 0
        c.close()

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(one, names))
    return time.perf_counter() - t


def ansible_playbook(cluster, names: list[str], work: Path) -> float:
    hosts = {n: {"ansible_host": "127.0.0.1", "ansible_port": cluster.hosts[n].port} for n in names}
    inv = {"all": {"vars": {"ansible_user": "root", "ansible_connection": "ssh",
                            "ansible_ssh_private_key_file": str(cluster.client_key),
                            "ansible_python_interpreter": "/usr/bin/python3",
                            "ansible_ssh_common_args": f"-o UserKnownHostsFile={cluster.known_hosts} "
                                                       "-o StrictHostKeyChecking=yes"},
                   "hosts": hosts}}
    (work / "inv.yml").write_text(yaml.safe_dump(inv))
    play = [{"hosts": "all", "gather_facts": False,
             "tasks": [{"ansible.builtin.command": {"argv": argv}, "changed_when": False} for argv in COMMANDS]}]
    (work / "play.yml").write_text(yaml.safe_dump(play))
    control = Path(tempfile.mkdtemp(prefix="k3cp-"))
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_FORKS": str(len(names)), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
           "ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_NOCOLOR": "1"}
    t = time.perf_counter()
    p = subprocess.run(["ansible-playbook", "-i", str(work / "inv.yml"), str(work / "play.yml")], env=env,
                       capture_output=True, text=True)
    took = time.perf_counter() - t
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert f"ok={len(COMMANDS)}" in p.stdout
    subprocess.run(["pkill", "-f", str(control)], capture_output=True)
    return took


def main() -> int:
    from support.sshd_hosts import SSHDCluster, sshd_available

    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool and size; the best is reported")
    args = ap.parse_args()
    if not sshd_available():
        print("sshd not found: install openssh-server (scripts/test.sh does)")
        return 2
    rows = []
    for n in args.hosts:
        base = Path(tempfile.mkdtemp(prefix=f"k3fan{n}-"))
        names = [f"h{i:03d}" for i in range(n)]
        with SSHDCluster(base, {h: {} for h in names}) as cluster:
            res = {"k3rollout": [], "paramiko": [], "ansible": []}
            for _ in range(args.repeat):
                res["paramiko"].append(bare_paramiko(cluster, names))
                res["k3rollout"].append(k3rollout_executor(cluster, names))
                res["ansible"].append(ansible_playbook(cluster, names, base))
            best = {k: min(v) for k, v in res.items()}
            rows.append((n, best))
            print(f"N={n:>3}: k3rollout {best['k3rollout']:.2f} s, bare paramiko {best['paramiko']:.2f} s, "
                  f"ansible-playbook {best['ansible']:.2f} s | ansible/k3rollout "
                  f"{best['ansible'] / best['k3rollout']:.1f}x, k3rollout/paramiko "
                  f"{best['k3rollout'] / best['paramiko']:.2f}x", flush=True)
    import paramiko

    ver = subprocess.run(["ansible-playbook", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"commands per host: {len(COMMANDS)}; paramiko {paramiko.__version__}; {ver}; "
          f"python {sys.version.split()[0]}; cpus {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
