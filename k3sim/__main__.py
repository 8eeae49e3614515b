"""Run a simulated-node command as a plain executable.

``k3rollout-sim nvidia-smi --query-gpu=...`` or, via a symlink named after the command
(``nvidia-smi -> k3rollout-sim``), plain ``nvidia-smi ...``. The host is the state
directory in ``$K3SIM_STATE``. This is how the sim answers behind a real sshd: a dropped
connection is a killed session (SIGKILL to the parent shell), as on a real network.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from k3sim.dispatch import dispatch
from k3sim.thin import FS_COMMANDS, finish, in_sim_fs, run_machine_program


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
        run_machine_program(args)
    stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    res = dispatch(Path(state), args, stdin)
    # behind sshd: a dropped connection (or a host that is down) is a killed session
    return finish(res.stdout, res.stderr, res.rc, res.dropped or res.unreachable)


if __name__ == "__main__":
    sys.exit(main())
