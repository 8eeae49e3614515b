"""Where each node's scheduler operations run (for ``plan``), and a read-only check that the
controller's Kubernetes credentials can do what a rollout does (for a preflight). Here, not
in scheduler/, because the check asks for the workload backends' rights too (workload/
imports scheduler/k8s_api.py, so scheduler/ may not import workload/)."""

from __future__ import annotations

from typing import Any

from k3rollout.errors import InputError
from k3rollout.model.inventory import of_registered_transport
from k3rollout.scheduler import scheduler_for
from k3rollout.scheduler.k8s_api import KubernetesApi, KubernetesError, kubeconfig_for
from k3rollout.scheduler.k8s_lock import lease_targets
from k3rollout.stages.driver import driver_backend_for
from k3rollout.workload import backend_name, workload_namespace


def describe_where(host_vars: dict[str, Any], inventory_path: str) -> str:
    """One line: where this host's scheduler operations will run. Never the node itself."""
    kind = scheduler_for(host_vars).kind
    if kind == "none":
        return "no scheduler: nothing to cordon"
    if kind == "slurm":
        where = host_vars.get("k3_scheduler_host") or "controller"
        return f"scontrol on {'the controller' if where == 'controller' else where}"
    cfg, context = kubeconfig_for(host_vars, inventory_path)
    if cfg is None and of_registered_transport(host_vars):
        # the transport's cluster serves its own API (the simulator's: a kubeconfig under the run directory)
        return "Kubernetes API of the transport's own cluster (kubeconfig under the run directory), from the controller"
    try:
        api = KubernetesApi(cfg, context)
    except KubernetesError as exc:
        return f"Kubernetes API, from the controller: NOT USABLE ({exc})"
    server = api.server
    api.close()
    return (f"Kubernetes API {server} (kubeconfig {cfg or '$KUBECONFIG or ~/.kube/config'}"
            + (f", context {context}" if context else "") + "), from the controller")


def check_access(hosts: dict[str, Any], inventory_path: str, executor: Any = None) -> list[dict[str, Any]]:
    """For each Kubernetes cluster the hosts belong to: may these credentials read nodes and
    pods, patch nodes, create evictions and read/write the lock's Lease (and, where a node's
    workloads run as Pods, run and delete pods there, read pods' logs, reach them through
    the pod proxy, read their owners)? Read-only
    (SelfSubjectAccessReviews). Raises InputError if the API cannot be asked."""
    out = []
    for (cfg, context, ns, _name), nodes in lease_targets(hosts, inventory_path, executor).items():
        try:
            api = KubernetesApi(cfg, context)
            try:
                pods = sorted({workload_namespace(hosts[n].vars) for n in nodes
                               if n in hosts and backend_name(hosts[n].vars) == "kubernetes"})
                answers = api.check_access(ns, gpu_operator=any(
                    driver_backend_for(hosts[n].vars).uses_kubernetes_api for n in nodes if n in hosts),
                    workload_namespace=pods[0] if pods else None)
            finally:
                api.close()
        except KubernetesError as exc:
            raise InputError(f"cannot check the Kubernetes credentials for {', '.join(nodes[:3])}: {exc}") from None
        out.append({"server": api.server, "kubeconfig": cfg, "context": context, "nodes": nodes, "checks": answers,
                    "ok": all(a["allowed"] for a in answers)})
    return out
