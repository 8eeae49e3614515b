"""Run a simulated-node command as a plain executable.

``k3rollout-sim nvidia-smi --query-gpu=...`` or, via a symlink named after the command
(``nvidia-smi -> k3rollout-sim``), plain ``nvidia-smi ...``. The host is the state
directory in ``$K3SIM_STATE``. This is how the sim answers behind a real sshd: a dropped
connection is a killed session (SIGKILL to the parent shell), as on a real network.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from k3rollout.sim.dispatch import FS_COMMANDS, dispatch, in_sim_fs


def _session_pid() -> int:
    """The sshd session process above us (the parent, when no shell or module sits between)."""
    pid = os.getppid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm.startswith("sshd"):
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return os.getppid()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0])
    # invoked as k3rollout-sim / python -m: the command is the first argument;
    # invoked through a symlink named after the command: the command is argv[0]
    args = argv[1:] if prog in ("k3rollout-sim", "__main__.py") else [prog, *argv[1:]]
    state = os.environ.get("K3SIM_STATE")
    if not state or not Path(state, "state.json").is_file():
        sys.stderr.write("k3rollout-sim: K3SIM_STATE must name a simulated host's state directory\n")
        return 2
    if args and args[0] in FS_COMMANDS and not in_sim_fs(args[1:]):
        # the machine's own files (an Ansible module's temporary directory): its own program
        real = next((p for p in (f"/usr/bin/{args[0]}", f"/bin/{args[0]}") if os.access(p, os.X_OK)), args[0])
        os.execv(real, [real, *args[1:]])
    stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    res = dispatch(Path(state), args, stdin)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if (res.dropped or res.unreachable) and os.environ.get("SSH_CONNECTION"):
        # behind sshd: a dropped connection (or a host that is down) is a killed session
        os.kill(_session_pid(), signal.SIGKILL)
    if res.dropped or res.unreachable:
        return 255
    return 255 if res.unreachable else res.rc


if __name__ == "__main__":
    sys.exit(main())
