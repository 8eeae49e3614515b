"""Transports that other packages register: the ``k3rollout.transports`` entry point group.

A package adds a transport for one ``ansible_connection`` value as pyinfra's connectors are
added: an entry point named after the connection, whose object is a ``TransportPlugin``.
The simulated cluster (the ``k3sim`` package, ``ansible_connection: k3sim``) is one, so
nothing in k3rollout imports it or knows its host variables; SSH and paramiko are built in
(transport/factory.py). A plugin is looked up by connection name only when an inventory
names that connection, and loaded once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

GROUP = "k3rollout.transports"


class TransportPlugin(Protocol):
    """What a registered transport offers k3rollout."""

    # the folder of the run directory its hosts' state lives in (RunDir.transport_state)
    state_dir: str

    def executor(self, root: Path, hosts: dict[str, dict[str, Any]], observation_pass: int | None = None) -> Any:
        """The run's executor (``transport.base.Executor``) for ``hosts`` (name -> host vars);
        ``root``: the folder it may keep their state in. ``observation_pass``: the
        ``k3rollout observe`` pass it serves, if any."""
        ...

    def check_host_vars(self, host_vars: Mapping[str, Any]) -> tuple[str, str] | None:
        """The first of the transport's own host variables (its own namespace of names)
        that is invalid, as (variable, why it is refused); None when all are valid. Inventory
        loading asks every registered transport about every host (a simulated node may sit
        behind a real sshd) and reports a refusal with the file and line that set it."""
        ...

    def out_of_service(self, host_vars: Mapping[str, Any]) -> bool:
        """Whether the host, as the transport builds it from its vars, serves nothing before
        the run: what a preflight would read from its scheduler (the plan counts it out)."""
        ...

    def hardware_class(self, host_vars: Mapping[str, Any]) -> str:
        """The host's hardware class (its GPU model) as the transport builds it, for a host
        whose inventory names none (``hardware_class``, ``gpu_model``)."""
        ...


def registered() -> list[str]:
    """The connection names registered transports serve, sorted."""
    return list(_registered())


@functools.cache
def _registered() -> tuple[str, ...]:
    # read once, as each transport is loaded once (transport_plugin): inventory loading asks
    # for every host's connection, and each reading of the entry points scans every installed
    # package's metadata
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


@functools.cache
def transport_plugins() -> tuple[TransportPlugin, ...]:
    """Every registered transport, in connection name order (loaded once)."""
    return tuple(p for p in (transport_plugin(name) for name in registered()) if p is not None)


@functools.cache
def transport_plugin(connection: str) -> TransportPlugin | None:
    """The registered transport for ``connection``, or None when no installed package
    registers one."""
    found = entry_points(group=GROUP, name=connection)
    for ep in found:
        plugin: TransportPlugin = ep.load()
        return plugin
    return None
