"""The real k3rollout CLI with a fault injected at one journal record (the crash tests' harness).

    python tests/support/faultinject.py MODE N k3rollout-arguments...

MODE is one of:
    KILL    SIGKILL right after record N is written (and committed, when it is a durable one)
    TEAR    write the first half of record N, then SIGKILL (a torn last line)
    BEFORE  SIGKILL just before record N is written (N=1: after the lock, before any record)
    SHORT   record N's write stops half way with ENOSPC, as on a full disk

With ``K3_FAULT_AT=TYPE:STEP`` in the environment, N counts the records of that type and
step instead (``step_started:reservation-create`` 1: the first one): a kill point named by
what it is, for runs whose record numbers vary (a real slurmctld answers polls at its pace).

The journal takes these as its ``write`` and ``after_append`` parameters; nothing in the
engine knows about them.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys

SEQ = re.compile(rb'^\{"seq":(\d+),')


def _seq(data: bytes) -> int:
    m = SEQ.match(bytes(data[:32]))
    return int(m.group(1)) if m else 0


def main() -> int:
    mode, n, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    from k3rollout import cli
    from k3rollout.engine import session
    from k3rollout.runlog import journal

    full = [False]
    at = os.environ.get("K3_FAULT_AT", "")
    seen = {"write": 0, "append": 0}

    def named(rec: dict, hook: str) -> bool:
        rtype, _, step = at.partition(":")
        if rec.get("type") != rtype or rec.get("step") != step:
            return False
        seen[hook] += 1
        return seen[hook] == n

    def hit(data: bytes) -> bool:
        if not at:
            return _seq(data) == n
        import json

        return any(named(json.loads(ln), "write") for ln in bytes(data).splitlines() if ln.startswith(b"{"))

    def write(fd: int, data: bytes) -> int:
        if full[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if hit(data):
            if mode == "BEFORE":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "TEAR":
                os.write(fd, data[: max(1, len(data) // 2)])
                os.fsync(fd)
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "SHORT":
                full[0] = True                  # the disk is full from here on
                return os.write(fd, data[: len(data) // 2])
        return os.write(fd, data)

    def after_append(rec: dict) -> None:
        if mode == "KILL" and (named(rec, "append") if at else rec["seq"] == n):
            os.kill(os.getpid(), signal.SIGKILL)

    class FaultyJournal(journal.Journal):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, write=write, after_append=after_append, **kwargs)

    # a subclass, not a partial: the session also calls Journal.read (rollback and resume)
    session.Journal = FaultyJournal  # type: ignore[misc]
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
