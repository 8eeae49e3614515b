"""The executor protocol every transport implements, and the result it returns.

A command is always an argv list, never a shell string: host names, vars and facts are
passed as separate arguments, so shell metacharacters in them are inert. Transports
translate their own errors once, here at the edge, into ``HostUnreachable``,
``ConnectionLost`` or ``CommandTimeout`` carrying host, command and output tail.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    host: str
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def tail(self, n: int = 600) -> str:
        text = (self.stdout + self.stderr).strip()
        return text[-n:]


class Executor(Protocol):
    kind: str

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None,
            timeout: float = 600.0) -> CommandResult: ...

    def wait_for_host(self, host: str, timeout: float) -> float:
        """Block until ``host`` answers again; return seconds waited or raise HostUnreachable."""
        ...

    def api_host(self, host: str) -> str:
        """The address the host's HTTP services (the vLLM port) answer on, unless the
        inventory names one with ``api_host``."""
        ...

    def close(self) -> None: ...
