"""Workload runtimes behind one protocol: ``workload_for(vars)`` picks the implementation for
the host's ``k3_workload_backend`` (``docker``, ``kubernetes``, ``slurm``); ``default_backend`` is the
one place its default is decided."""

from __future__ import annotations

from typing import Any

from k3rollout.workload.base import Endpoint, Pulled, Restored, Run, ServerState, Workload
from k3rollout.workload.docker import Docker
from k3rollout.workload.kubernetes import DEFAULT_NAMESPACE, NAMESPACE_VAR, Kubernetes
from k3rollout.workload.kubernetes import namespace as workload_namespace
from k3rollout.workload.slurm import SlurmJobs, launcher

BACKEND_VAR = "k3_workload_backend"
# scheduler.DEFAULT: a host without ``scheduler:`` is a Kubernetes node (the scheduler package
# is not imported here: its stage-facing parts would make workload reach back into stages)
SCHEDULER_DEFAULT = "kubernetes"
BACKENDS: dict[str, Workload] = {w.kind: w for w in (Docker(), Kubernetes(), SlurmJobs())}


def default_backend(host_vars: dict[str, Any]) -> str:
    """``kubernetes`` under ``scheduler: kubernetes`` (the scheduler's own default): GPU nodes
    there run containerd or CRI-O and have no docker CLI, and their serving workloads are Pods
    that owners bring back (docs/domain.md "Workloads on Kubernetes GPU nodes"). A plain Docker
    host says ``k3_workload_backend: docker``.

    Under ``scheduler: slurm`` the node's ``k3_container_launcher`` decides, pyxis when unset:
    ``slurm`` (checks run as jobs in a maintenance reservation, docs/domain.md "Workloads on
    Slurm GPU clusters") unless it is ``docker``; ``scheduler: none`` is a Docker host. This
    is the one place the default is made."""
    scheduler = host_vars.get("scheduler", SCHEDULER_DEFAULT)
    if scheduler == "kubernetes":
        return Kubernetes.kind
    if scheduler == "slurm" and launcher(host_vars) != "docker":
        return SlurmJobs.kind
    return Docker.kind


def backend_name(host_vars: dict[str, Any]) -> str:
    return str(host_vars.get(BACKEND_VAR) or default_backend(host_vars))


def workload_for(host_vars: dict[str, Any]) -> Workload:
    name = backend_name(host_vars)
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"{BACKEND_VAR}: {name!r} is not one of {', '.join(sorted(BACKENDS))}") from None


__all__ = ["BACKENDS", "BACKEND_VAR", "DEFAULT_NAMESPACE", "NAMESPACE_VAR",
           "Endpoint", "Pulled", "Restored", "Run", "ServerState", "Workload",
           "backend_name", "default_backend", "workload_for", "workload_namespace"]
