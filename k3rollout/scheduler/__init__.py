"""Workload schedulers behind one protocol: ``scheduler_for(vars)`` picks the implementation
for the host's ``scheduler:`` value (kubernetes, slurm, none)."""

from __future__ import annotations

from typing import Any

from k3rollout.scheduler.base import OUT_OF_SERVICE, Scheduler
from k3rollout.scheduler.kubernetes import Kubernetes
from k3rollout.scheduler.none import NoScheduler
from k3rollout.scheduler.slurm import Slurm

DEFAULT = "kubernetes"
SCHEDULERS: dict[str, Scheduler] = {s.kind: s for s in (Kubernetes(), Slurm(), NoScheduler())}


def scheduler_for(host_vars: dict[str, Any]) -> Scheduler:
    return SCHEDULERS[host_vars.get("scheduler", DEFAULT)]


def with_scheduler_hosts(hosts: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inventory hosts ``names`` plus every ``k3_scheduler_host`` they name: the run's
    transport must reach the hosts its scheduler operations run on."""
    picked = {h: hosts[h] for h in names}
    for h in names:
        extra = hosts[h].vars.get("k3_scheduler_host")
        if extra in hosts and extra not in picked:
            picked[extra] = hosts[extra]
    return picked


__all__ = ["DEFAULT", "OUT_OF_SERVICE", "SCHEDULERS", "Scheduler", "scheduler_for", "with_scheduler_hosts"]
