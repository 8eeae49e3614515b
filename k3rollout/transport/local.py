"""Commands run on the controller itself (the machine running k3rollout): a subprocess,
argv only, never a shell. Used for operations that belong to the cluster rather than to
one node (the Slurm scheduler's ``scontrol``), so they never run on the node being changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from k3rollout.errors import CommandTimeout
from k3rollout.transport.base import CommandResult

HOST = "controller"
# where the packages put administrative tools when PATH lacks them (a cron or systemd PATH)
FALLBACK_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")


def resolve(program: str) -> str | None:
    if os.path.isabs(program):
        return program if os.access(program, os.X_OK) else None
    found = shutil.which(program)
    if found:
        return found
    return next((p for d in FALLBACK_DIRS if os.access(p := os.path.join(d, program), os.X_OK)), None)


def run(argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
    started = time.monotonic()
    exe = resolve(argv[0])
    if exe is None:
        return CommandResult(HOST, tuple(argv), 127, "", f"{argv[0]}: command not found on the controller "
                             f"(PATH={os.environ.get('PATH', '')})\n", 0.0)
    try:
        proc = subprocess.run([exe, *argv[1:]], input=stdin if stdin is not None else b"", capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = ((exc.stdout or b"") + (exc.stderr or b"")).decode("utf-8", "replace")
        raise CommandTimeout(f"no answer within {timeout:g}s", host=HOST, command=" ".join(argv),
                             output_tail=tail) from None
    return CommandResult(HOST, tuple(argv), proc.returncode, proc.stdout.decode("utf-8", "replace"),
                         proc.stderr.decode("utf-8", "replace"), time.monotonic() - started)
