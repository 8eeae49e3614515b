"""The simulated GPU node: one model of a host that every path of k3rollout drives.

A simulated host is a *state directory* (``state.json`` plus a command log) and a
dispatcher that answers the commands a real node answers (``nvidia-smi``, ``apt-get``,
``docker``, ``kubectl``, ``scontrol``, ``curl``, ``mpirun``, ``reboot`` ...), with the
real output formats, exit codes and log lines, including those of injected faults. The
in-process sim transport calls the dispatcher directly; behind a real sshd the same
dispatcher runs as plain executables (``k3rollout-sim``, see ``__main__``).
"""

from k3rollout.sim.dispatch import Result, dispatch
from k3rollout.sim.state import init_host

__all__ = ["Result", "dispatch", "init_host"]
