"""Workload runtimes behind one protocol: ``workload_for(vars)`` picks the implementation for
the host's ``k3_workload_backend`` (``docker``, ``kubernetes``, ``slurm``); ``default_backend``
(model/backends.py) is the one place its default is decided."""

from __future__ import annotations

from typing import Any

from k3rollout.model.backends import WORKLOAD_VAR, default_workload_backend, workload_backend_name
from k3rollout.workload.base import Endpoint, Pulled, Restored, Run, ServerState, Workload
from k3rollout.workload.docker import Docker
from k3rollout.workload.kubernetes import DEFAULT_NAMESPACE, NAMESPACE_VAR, Kubernetes
from k3rollout.workload.kubernetes import namespace as workload_namespace
from k3rollout.workload.slurm import SlurmJobs

BACKEND_VAR = WORKLOAD_VAR
BACKENDS: dict[str, Workload] = {w.kind: w for w in (Docker(), Kubernetes(), SlurmJobs())}
# the default's rule is data (model/backends.py), read by the inventory's checks and the plan too
default_backend = default_workload_backend
backend_name = workload_backend_name


def workload_for(host_vars: dict[str, Any]) -> Workload:
    name = backend_name(host_vars)
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"{BACKEND_VAR}: {name!r} is not one of {', '.join(sorted(BACKENDS))}") from None


__all__ = ["BACKENDS", "BACKEND_VAR", "DEFAULT_NAMESPACE", "NAMESPACE_VAR",
           "Endpoint", "Pulled", "Restored", "Run", "ServerState", "Workload",
           "backend_name", "default_backend", "workload_for", "workload_namespace"]
