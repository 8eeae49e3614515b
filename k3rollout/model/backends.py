"""Which backends a host's variables select, by name: the driver backend
(``k3_driver_backend``: host packages or the GPU Operator, k3rollout/stages/driver/) and the
workload backend (``k3_workload_backend``: Docker, Pods through the API, Slurm jobs,
k3rollout/workload/). Pure data, so the inventory's checks, the plan's preview of a node's
rollback and the stages that run it read the same rule."""

from __future__ import annotations

from typing import Any

DRIVER_VAR = "k3_driver_backend"
DRIVER_HOST = "host"
DRIVER_GPU_OPERATOR = "gpu-operator"
DRIVER_BACKENDS = (DRIVER_HOST, DRIVER_GPU_OPERATOR)

WORKLOAD_VAR = "k3_workload_backend"
WORKLOAD_DOCKER = "docker"
WORKLOAD_KUBERNETES = "kubernetes"
WORKLOAD_SLURM = "slurm"
WORKLOAD_BACKENDS = (WORKLOAD_DOCKER, WORKLOAD_KUBERNETES, WORKLOAD_SLURM)

LAUNCHER_VAR = "k3_container_launcher"
DEFAULT_LAUNCHER = "pyxis"
# the scheduler package's default: a host without ``scheduler:`` is a Kubernetes node
SCHEDULER_DEFAULT = "kubernetes"


def driver_backend_name(host_vars: dict[str, Any]) -> str:
    """The host's driver backend: ``k3_driver_backend``, host packages when unset."""
    return str(host_vars.get(DRIVER_VAR) or DRIVER_HOST)


def launcher(host_vars: dict[str, Any]) -> str:
    """A Slurm node's container launcher (``k3_container_launcher``), pyxis when unset."""
    return str(host_vars.get(LAUNCHER_VAR) or DEFAULT_LAUNCHER)


def default_workload_backend(host_vars: dict[str, Any]) -> str:
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
        return WORKLOAD_KUBERNETES
    if scheduler == "slurm" and launcher(host_vars) != "docker":
        return WORKLOAD_SLURM
    return WORKLOAD_DOCKER


def workload_backend_name(host_vars: dict[str, Any]) -> str:
    """The host's workload backend: ``k3_workload_backend``, else the default above."""
    return str(host_vars.get(WORKLOAD_VAR) or default_workload_backend(host_vars))


def backend_keys(host_vars: dict[str, Any]) -> frozenset[str]:
    """``driver:NAME`` and ``workload:NAME`` for the host: what a rollback action's text
    may depend on (``Undo.plan_text_for``, model/stagekinds.py)."""
    return frozenset({f"driver:{driver_backend_name(host_vars)}", f"workload:{workload_backend_name(host_vars)}"})
