"""Pick the transport for a run from the inventory's ``ansible_connection``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k3rollout.errors import InputError

SSH_KINDS = ("ssh", "paramiko")


def make_executor(hosts: dict[str, Any], run_dir: Path) -> Any:
    kinds = {h.vars.get("ansible_connection", "k3sim") for h in hosts.values()}
    if len(kinds) > 1:
        raise InputError(f"the play mixes connections {sorted(kinds)}; one run uses one transport")
    kind = kinds.pop()
    if kind == "k3sim":
        from k3rollout.transport.sim import SimExecutor

        return SimExecutor(run_dir / "sim-hosts", {n: h.vars for n, h in hosts.items()})
    if kind in SSH_KINDS:
        from k3rollout.transport.ssh import SSHExecutor

        return SSHExecutor({n: h.vars for n, h in hosts.items()})
    raise InputError(f"ansible_connection {kind!r} is not supported (use ssh, paramiko or k3sim)")
