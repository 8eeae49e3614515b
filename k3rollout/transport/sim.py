"""The in-process transport to simulated hosts: argv straight into the sim dispatcher.

It behaves like the SSH transport at the edges that matter to the engine: a host that is
down raises ``HostUnreachable``, a dropped session raises ``ConnectionLost`` (after the
command may have run on the host), and waiting for a reboot polls until the host answers.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from k3rollout.errors import ConnectionLost, HostUnreachable
from k3rollout.sim import netd
from k3rollout.sim import state as st
from k3rollout.sim.dispatch import dispatch, init_cluster
from k3rollout.transport.base import CommandResult


class SimExecutor:
    kind = "k3sim"

    def __init__(self, root: Path, hosts: dict[str, dict[str, Any]], poll_s: float = 0.02):
        self.root = Path(root)
        self.dirs = init_cluster(self.root, hosts)
        self.poll_s = poll_s
        self._addresses: dict[str, str] = {}
        netd.ensure(self.root)      # the simulated network: real sockets for the hosts' vLLM servers

    def state_dir(self, host: str) -> Path:
        return self.dirs[host]

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
        started = time.monotonic()
        res = dispatch(self.dirs[host], list(argv), stdin)
        took = time.monotonic() - started
        if res.unreachable:
            raise HostUnreachable("host does not answer", host=host, command=shlex.join(argv),
                                  output_tail=res.stderr)
        if res.dropped:
            raise ConnectionLost("connection lost while the command ran; its outcome on the host is unknown",
                                 host=host, command=shlex.join(argv), output_tail=res.stdout[-300:] + res.stderr)
        return CommandResult(host, tuple(argv), res.rc, res.stdout, res.stderr, took)

    def wait_for_host(self, host: str, timeout: float) -> float:
        started = time.monotonic()
        while True:
            res = dispatch(self.dirs[host], ["true"])
            if not res.unreachable:
                return time.monotonic() - started
            if time.monotonic() - started >= timeout:
                raise HostUnreachable(f"did not come back within {timeout:.0f}s after reboot", host=host,
                                      output_tail=res.stderr)
            time.sleep(self.poll_s)

    def api_host(self, host: str) -> str:
        """The address the host's HTTP services answer on (its simulated IP, fixed when the
        host was created)."""
        addr = self._addresses.get(host)
        if addr is None:
            addr = self._addresses[host] = str(st.load(self.dirs[host])["address"])
        return addr

    def close(self) -> None:
        netd.shutdown(self.root)
