"""A simulated host's command as a small process, for commands behind a real sshd.

The command goes to the simulated cluster's network daemon (sim/netd_daemon.py), which runs
it with the same ``dispatch`` as the k3sim transport's commands, and its output and exit
status come back. A process that imported the simulator itself spent 0.13 s before its first
line of work, and an SSH rollout runs about a hundred such commands a node; this one needs
the standard library only, so it runs under ``python -I -S`` (tests/support/sshd_hosts.py
writes each command's program). Where no daemon answers, the whole simulator runs the command
in this process instead (``k3sim.__main__``), as before.

What the two share with the rest of the simulator is here, standard library only: the
daemon's socket names, which file commands name the simulated host's own files, and how a
dropped connection kills the sshd session.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import signal
import socket
import sys
from typing import NoReturn

# the directories of the simulated host that hold plain files (world-writable, sticky; a
# reboot empties /run/lock and /var/lock, a tmpfs, and keeps /var/tmp)
FS_ROOTS = ("/var/tmp", "/run/lock", "/var/lock")
FS_COMMANDS = ("mkdir", "tee", "rm")
# the module configuration directory: its files are the host's ``modprobe_d`` (tee writes them)
MODPROBE_D = "/etc/modprobe.d"


def in_sim_fs(args: list[str]) -> bool:
    """Whether a file command names the simulated host's files (else, behind a real sshd,
    the machine's own program runs: Ansible's temporary directories are real)."""
    roots = (*FS_ROOTS, MODPROBE_D)
    return any(a.rstrip("/") in roots or a.startswith(tuple(r + "/" for r in roots)) for a in args)


def run_machine_program(args: list[str]) -> NoReturn:
    """A file command on the machine's own files (an Ansible module's temporary directory):
    the machine's own program, in place of this process."""
    real = next((p for p in (f"/usr/bin/{args[0]}", f"/bin/{args[0]}") if os.access(p, os.X_OK)), args[0])
    os.execv(real, [real, *args[1:]])


@functools.lru_cache(maxsize=256)
def control_name(root: str) -> bytes:
    """The daemon's control socket for a sim root (an abstract-namespace socket: no path
    length limit, no stale file after a crash)."""
    return b"\0k3sim-netd-" + hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:32].encode()


def command_name(root: str) -> bytes:
    """Where the daemon takes the hosts' commands (one JSON line each; see transport.py)."""
    return control_name(root) + b"-run"


def session_pid() -> int:
    """The sshd session process above us (the parent, when no shell or module sits between)."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            break
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm.startswith("sshd"):
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return os.getppid()


def finish(stdout: str, stderr: str, rc: int, lost: bool) -> int:
    """Write a command's output; a dropped connection or a host that is down is, behind
    sshd, a killed session. Returns the exit status."""
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if lost and os.environ.get("SSH_CONNECTION"):
        os.kill(session_pid(), signal.SIGKILL)
    return 255 if lost else rc


def _whole_simulator(python: str, argv: list[str]) -> NoReturn:
    os.execv(python, [python, "-c", "import sys; from k3sim.__main__ import main; sys.exit(main(sys.argv[1:]))",
                      *argv])


def main(python: str, argv: list[str] | None = None) -> int:
    """Run ``argv`` (its first item names the command) on the host in ``$K3SIM_STATE``
    through the daemon; ``python`` runs the whole simulator where the daemon cannot."""
    argv = list(sys.argv if argv is None else argv)
    args = [os.path.basename(argv[0]), *argv[1:]]
    state = os.environ.get("K3SIM_STATE")
    if not state:
        _whole_simulator(python, argv)          # its message
    if args[0] in FS_COMMANDS and not in_sim_fs(args[1:]):
        run_machine_program(args)
    assert state is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(command_name(os.path.dirname(os.path.abspath(state))))
    except OSError:
        sock.close()
        _whole_simulator(python, argv)          # no daemon: it starts one
    stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    req = {"host": os.path.basename(os.path.abspath(state)), "argv": args,
           "stdin": None if stdin is None else base64.b64encode(stdin).decode()}
    answer = b""
    with sock:
        sock.sendall(json.dumps(req).encode() + b"\n")
        while not answer.endswith(b"\n"):
            got = sock.recv(1 << 16)
            if not got:
                return finish("", "k3rollout-sim: the simulated cluster went away while the command ran\n", 255, True)
            answer += got
    out = json.loads(answer)
    if "error" in out:
        sys.stderr.write(f"k3rollout-sim: simulator failure running {args!r}:\n{out['error']}\n")
        return 1
    return finish(out["stdout"], out["stderr"], int(out["rc"]), bool(out["dropped"] or out["unreachable"]))


def write_program(path: str, python: str) -> None:
    """Write an executable at ``path`` (named after its command: ``.../bin/nvidia-smi``)
    that runs this module's ``main`` under ``python -I -S``."""
    with open(path, "w") as f:
        f.write(f"#!{python} -IS\nimport importlib.util, sys\n"
                f"spec = importlib.util.spec_from_file_location('k3rollout_sim_thin', {os.path.abspath(__file__)!r})\n"
                "thin = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(thin)\n"
                f"sys.exit(thin.main({python!r}))\n")
    os.chmod(path, 0o755)
