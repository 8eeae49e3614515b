"""The Kubernetes API calls of the ``kubernetes`` workload backend, as plain dicts.

One method per API request, through the official client held by ``KubernetesApi``
(k3rollout/scheduler/k8s_api.py: its kubeconfig, and its one translation of client errors
into ``KubernetesError``). Objects come back as the API server writes them (camelCase
dicts, ``sanitize_for_serialization``), so the backend parses one shape and a test's fake
client answers with plain dicts. Every path is in the method's docstring: the list the
integrator checks against the simulated API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from k3rollout.scheduler.k8s_api import KubernetesError, api_error

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


def wait_for(pods: PodApi, check: Callable[[], tuple[bool, Any]], timeout_s: float, poll_s: float) -> tuple[bool, Any]:
    """Poll ``check`` until it holds or ``timeout_s`` passed: (held, its last answer)."""
    start = pods.now()
    while True:
        done, last = check()
        if done or pods.now() - start >= timeout_s:
            return done, last
        pods.sleep(poll_s)


__all__ = ["GPU", "KubernetesError", "PodApi", "allocatable_gpus", "digest_of", "gpu_request", "node_ready", "phase",
           "restarts", "terminated", "wait_for"]
