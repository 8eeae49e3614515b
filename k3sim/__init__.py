"""The simulated GPU node: one model of a host that every path of k3rollout drives.

A simulated host is a *state directory* (``state.json`` plus a command log) and a
dispatcher that answers the commands a real node answers (``nvidia-smi``, ``apt-get``,
``docker``, ``kubectl``, ``scontrol``, ``curl``, ``mpirun``, ``reboot`` ...), with the
real output formats, exit codes and log lines, including those of injected faults. The
in-process sim transport calls the dispatcher directly; behind a real sshd the same
dispatcher runs as plain executables (``k3rollout-sim``, see ``__main__``).

k3rollout never imports this package: it is registered as the transport of the ``k3sim``
connection (``k3sim.plugin``, the ``k3rollout.transports`` entry point in pyproject.toml),
which a run loads by that name. Each module imports what it uses from the module that
defines it; this file re-exports nothing, so importing one module loads only what it needs.
"""
