"""The one exception tree of k3rollout and the exit code each branch maps to.

    K3RolloutError                 exit 70 unless a subclass says otherwise
    ├── InputError                 exit 2: a malformed playbook, inventory, window, run dir
    │   ├── ReplicaError           exit 2: a replica that cannot hold its model (plan/replicas.py)
    │   ├── InvalidYaml            exit 2: text that does not parse as YAML (model/yamlsrc.py)
    │   └── NotYamlInventory       exit 2 unless ansible-inventory reads it (model/inventory.py)
    ├── LockHeld                   exit 1: another run holds (or left) the cluster lock
    ├── RunNeverStarted            exit 1: resume of a run killed before its first record (runlog/rundir.py)
    ├── JournalWriteError          exit 70: a record could not be written or made durable (runlog/journal.py)
    ├── KubernetesError            exit 70: the API refused or could not be reached (scheduler/k8s_api.py)
    └── TransportError             a host could not be driven; carries host, command, tail
        ├── HostUnreachable        connect failed / host did not come back in time
        ├── ConnectionLost         the connection dropped while a command was running
        ├── CommandTimeout         a command ran past its timeout
        ├── HostKeyError           unknown or changed host key (transport/ssh.py)
        └── AuthError              the host refused the credentials (transport/ssh.py)

Only ``cli.main`` turns these into exit codes; nothing else catches-and-continues.

Control flow inside one layer uses exceptions that never reach ``cli.main``: ``StepFailed``
(a stage's command could not be run; the engine turns it into a failed stage),
``GateInterrupted`` (a run told to stop while a node waited for a person), ``IllegalTransition``
(a bug: a node state change the table forbids), and the parsers' ``ParseError``,
``AssertionSyntaxError`` and ``AliasBomb``, which the model turns into ``InputError``.

``HardStop`` is outside the tree: the process is to be taken as killed where it is raised.
"""

from __future__ import annotations

import sys


class K3RolloutError(Exception):
    exit_code = 70


class InputError(K3RolloutError):
    """Bad input: the message names the file and line (or the field) and what to do."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.message = message
        self.path = path
        self.line = line
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{message}")


class StepFailed(Exception):
    """A stage's command could not be run (host unreachable, connection lost and not
    settled): control flow inside the engine, which turns it into a failed stage; never
    reaches ``cli.main``. ``logs``: the text the triage classifier reads."""

    def __init__(self, message: str, logs: str = ""):
        super().__init__(message)
        self.logs = logs


class LockHeld(K3RolloutError):
    exit_code = 1


class TransportError(K3RolloutError):
    def __init__(self, message: str, *, host: str, command: str | None = None, output_tail: str = ""):
        self.host = host
        self.command = command
        self.output_tail = output_tail
        text = f"{host}: {message}"
        if command:
            text += f" (command: {command})"
        if output_tail:
            text += f"\n  output tail: {output_tail.strip()[-400:]}"
        super().__init__(text)


class HostUnreachable(TransportError):
    pass


class ConnectionLost(TransportError):
    pass


class CommandTimeout(TransportError):
    pass


class HardStop(BaseException):
    """The process is to be taken as killed here, as by SIGKILL. Nothing in k3rollout raises
    it: the crash tests' journal hook does (tests/support/crash.py), to stop a run in the test
    process at a chosen record instead of killing a process there. A ``BaseException``, so
    no ``except Exception`` takes it; and the cleanup a killed process never runs is skipped
    while it unwinds (``hard_stopping``): Session's closing of the transports and the
    simulated network, its release of the lock files and the Leases, result.json and the
    reports. The worker pool still waits for the units in flight (engine/pool.py), which in
    one process is how their threads end; they can take no further journal record, and so
    start no further step."""


def hard_stopping() -> bool:
    """Whether the exception unwinding now (read in a ``finally``) is a ``HardStop``."""
    return isinstance(sys.exc_info()[1], HardStop)
