"""The Kubernetes API calls of the ``kubernetes`` workload backend, as plain dicts.

One method per API request, through the official client held by ``KubernetesApi``
(k3rollout/scheduler/k8s_api.py: its kubeconfig, and its one translation of client errors
into ``KubernetesError``; its one wait, ``wait_watched``, in k8s_watch.py). Objects come back as the API server writes them (camelCase
dicts, ``sanitize_for_serialization``), so the backend parses one shape and a test's fake
client answers with plain dicts. Every path is in the method's docstring: the list the
integrator checks against the simulated API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from k3rollout.scheduler import k8s_watch
from k3rollout.scheduler.k8s_api import KubernetesError, api_error
from k3rollout.scheduler.k8s_watch import MAX_WATCH_S, WATCH_REFUSED, Watcher, wait_watched

GPU = "nvidia.com/gpu"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
OWNERS: dict[str, str | tuple[str, str, str]] = {  # kind -> (apps/v1 read method, or the custom resource's (group, version, plural))
    "ReplicaSet": "read_namespaced_replica_set", "Deployment": "read_namespaced_deployment",
    "StatefulSet": "read_namespaced_stateful_set", "LeaderWorkerSet": (LWS_GROUP, LWS_VERSION, LWS_PLURAL)}


class PodApi:
    """``kube`` is a ``KubernetesApi`` (core, apps, custom, serialize, sleep, now)."""

    def __init__(self, kube: Any):
        self.kube = kube
        self.server: str = kube.server
        self.sleep: Callable[[float], None] = getattr(kube, "sleep", time.sleep)
        self.now: Callable[[], float] = getattr(kube, "now", time.monotonic)

    def _do(self, what: str, fn: Callable[[], Any], *, missing_ok: bool = False) -> Any:
        try:
            got = fn()
        except Exception as exc:  # noqa: BLE001 - translated once, by the scheduler's api_error
            err = api_error(exc, what)
            if missing_ok and err.status == 404:
                return None
            raise err from None
        return got if isinstance(got, (str, bytes)) else self.kube.serialize(got)

    # ---- nodes and pods
    def node(self, name: str) -> dict[str, Any]:
        """GET /api/v1/nodes/NAME"""
        got: dict[str, Any] = self._do(f"read node {name}", lambda: self.kube.core.read_node(name))
        return got

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """GET /api/v1/pods?fieldSelector=spec.nodeName=NODE"""
        got = self._do(f"list pods on {node}", lambda: self.kube.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}"))
        return list(got.get("items") or [])

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """GET /api/v1/namespaces/NS/pods?labelSelector=SELECTOR"""
        got = self._do(f"list pods {selector} in {namespace}", lambda: self.kube.core.list_namespaced_pod(
            namespace, label_selector=selector))
        return list(got.get("items") or [])

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET /api/v1/namespaces/NS/pods/NAME (None: 404)"""
        got: dict[str, Any] | None = self._do(f"read pod {namespace}/{name}",
                                              lambda: self.kube.core.read_namespaced_pod(name, namespace),
                                              missing_ok=True)
        return got

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST /api/v1/namespaces/NS/pods"""
        name = body["metadata"]["name"]
        got: dict[str, Any] = self._do(f"create pod {namespace}/{name}",
                                       lambda: self.kube.core.create_namespaced_pod(namespace, body))
        return got

    def delete_pod(self, namespace: str, name: str) -> bool:
        """DELETE /api/v1/namespaces/NS/pods/NAME (gracePeriodSeconds 30; False: already gone)"""
        got = self._do(f"delete pod {namespace}/{name}", lambda: self.kube.core.delete_namespaced_pod(
            name, namespace, grace_period_seconds=30), missing_ok=True)
        return got is not None

    def log(self, namespace: str, name: str, *, previous: bool = False, container: str | None = None) -> str:
        """GET /api/v1/namespaces/NS/pods/NAME/log[?previous=true][&container=C]"""
        kw: dict[str, Any] = {"previous": True} if previous else {}
        if container:
            kw["container"] = container
        got = self._do(f"read the log of pod {namespace}/{name}" + (" (previous)" if previous else ""),
                       lambda: self.kube.core.read_namespaced_pod_log(name, namespace, **kw))
        return got.decode(errors="replace") if isinstance(got, bytes) else str(got or "")

    def namespace(self, name: str) -> dict[str, Any] | None:
        """GET /api/v1/namespaces/NAME (None: 404)"""
        got: dict[str, Any] | None = self._do(f"read namespace {name}", lambda: self.kube.core.read_namespace(name),
                                              missing_ok=True)
        return got

    def watch(self, what: str, list_method: str, *args: Any, field_selector: str, resource_version: str | None,
              timeout_s: float, api: str = "core") -> Iterator[tuple[str, dict[str, Any]]]:
        """WATCH (GET ...?watch=true&fieldSelector=...&resourceVersion=...): the events from
        ``resource_version`` on (None: the current state first, as ADDED events), until the
        server ends the stream after ``timeout_s`` (k3rollout/scheduler/k8s_watch.py ``events``)."""
        return k8s_watch.events(self.kube, what, list_method, *args, field_selector=field_selector,
                                resource_version=resource_version, timeout_s=timeout_s, api=api)

    def pod_watch(self, namespace: str, name: str) -> Watcher:
        """A Watcher of one pod (``metadata.name`` field selector), from a resourceVersion."""
        return k8s_watch.pod_watcher(self.kube, namespace, name)

    def node_watch(self, name: str) -> Watcher:
        """A Watcher of one node, always from its current state (an ADDED event first): a
        node's status changes (Ready, the device plugin's allocatable) need no history."""
        return lambda rv, left: self.watch(f"watch node {name}", "list_node", field_selector=f"metadata.name={name}",
                                           resource_version=None, timeout_s=left)

    def owner_watch(self, namespace: str, kind: str, name: str) -> Watcher:
        """A Watcher of one owner (``metadata.name`` field selector), always from its current
        state (an ADDED event first), as a node's: its ``readyReplicas`` needs no history.
        WATCH /apis/apps/v1/namespaces/NS/{deployments,statefulsets}?fieldSelector=metadata.name=NAME
        or the LeaderWorkerSet's custom resource list."""
        how = OWNERS[kind]
        what = f"watch {kind} {namespace}/{name}"
        fs = f"metadata.name={name}"
        if isinstance(how, str):
            method = how.replace("read_", "list_", 1)
            return lambda rv, left: self.watch(what, method, namespace, field_selector=fs, resource_version=None,
                                               timeout_s=left, api="apps")
        g, v, plural = how
        return lambda rv, left: self.watch(what, "list_namespaced_custom_object", g, v, namespace, plural,
                                           field_selector=fs, resource_version=None, timeout_s=left, api="custom")

    # ---- owners
    def owner(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """GET /apis/apps/v1/namespaces/NS/{replicasets,deployments,statefulsets}/NAME or
        /apis/leaderworkerset.x-k8s.io/v1/namespaces/NS/leaderworkersets/NAME (None: 404)"""
        how = OWNERS[kind]
        got: dict[str, Any] | None
        if isinstance(how, str):
            method = how
            got = self._do(f"read {kind} {namespace}/{name}", lambda: getattr(self.kube.apps, method)(name, namespace),
                           missing_ok=True)
        else:
            g, v, p = how
            got = self._do(f"read {kind} {namespace}/{name}", lambda: self.kube.custom.get_namespaced_custom_object(
                g, v, namespace, p, name), missing_ok=True)
        return got


# ---- parsers of what the calls return (pure)

def gpu_request(pod: dict[str, Any]) -> int:
    """The ``nvidia.com/gpu`` a pod's containers ask for (request, else limit)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU))
        if value is not None:
            try:
                total += int(str(value))
            except ValueError:
                total += 1
    return total


def allocatable_gpus(node: dict[str, Any]) -> int:
    try:
        return int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0)))
    except ValueError:
        return 0


def ready_replicas(owner: dict[str, Any]) -> int:
    return int((owner.get("status") or {}).get("readyReplicas") or 0)


def node_ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def digest_of(image_id: str | None) -> str | None:
    """``docker.io/vllm/vllm-openai@sha256:...`` (a containerStatus' imageID) -> ``sha256:...``."""
    if not image_id or "@" not in image_id:
        return image_id.split("://")[-1] if image_id and image_id.startswith("sha256:") else None
    return image_id.rsplit("@", 1)[1]


def phase(pod: dict[str, Any] | None) -> str:
    return str(((pod or {}).get("status") or {}).get("phase") or "Unknown")


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        t = (s.get("state") or {}).get("terminated")
        if t:
            return dict(t)
    return {}


__all__ = ["GPU", "MAX_WATCH_S", "WATCH_REFUSED", "KubernetesError", "PodApi", "Watcher", "allocatable_gpus",
           "digest_of", "gpu_request", "node_ready", "phase", "ready_replicas", "restarts", "terminated",
           "wait_watched"]
