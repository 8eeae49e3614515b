"""Driver backends behind one protocol (``DriverBackend``, stages/driver/base.py):
``driver_backend_for(vars)`` picks the implementation for the host's ``k3_driver_backend``
(``host``, the default, or ``gpu-operator``); a recorded rollback step names its own
(``driver_backend_named``). A new backend is its module here and its line in ``BACKENDS``."""

from __future__ import annotations

from typing import Any

from k3rollout.stages.driver.base import BACKEND_VAR, DEFAULT, DriverBackend, RestoreParams
from k3rollout.stages.driver.gpu_operator import GpuOperator
from k3rollout.stages.driver.host import HostPackages

BACKENDS: dict[str, DriverBackend] = {b.kind: b for b in (HostPackages(), GpuOperator())}


def backend_name(host_vars: dict[str, Any]) -> str:
    return str(host_vars.get(BACKEND_VAR) or DEFAULT)


def driver_backend_named(name: str | None) -> DriverBackend:
    """The backend ``name`` (None: the default, as a recorded host step names none)."""
    try:
        return BACKENDS[name or DEFAULT]
    except KeyError:
        raise ValueError(f"{BACKEND_VAR}: {name!r} is not one of {', '.join(sorted(BACKENDS))}") from None


def driver_backend_for(host_vars: dict[str, Any]) -> DriverBackend:
    return driver_backend_named(backend_name(host_vars))


__all__ = ["BACKENDS", "BACKEND_VAR", "DEFAULT", "DriverBackend", "RestoreParams", "backend_name",
           "driver_backend_for", "driver_backend_named"]
