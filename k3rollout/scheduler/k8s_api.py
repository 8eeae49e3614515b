"""Kubernetes operations from the controller, through the official Python client.

Why the official client and not ``kubectl`` on the controller: every operation here
becomes journal evidence, and the client returns typed objects and API errors (status
code, reason, the PodDisruptionBudget that refused an eviction) instead of text to
parse; it speaks the Eviction API directly, so a refused eviction is retried on our own
clock and each attempt is recorded; and the cluster-wide lock is a Lease updated with
``resourceVersion`` preconditions, which kubectl has no verb for. The real ``kubectl``
stays the wire-compatibility check in the tests.

What a drain does (as ``kubectl drain --ignore-daemonsets`` and ``kubernetes.core.k8s_drain``
do): cordon (``spec.unschedulable``), then evict every pod on the node through
``policy/v1`` Evictions except DaemonSet-owned and mirror pods, retrying a 429
(PodDisruptionBudget) until the drain timeout, then wait until the evicted pods are gone (each
read, then watched: k8s_watch.py).
Nothing here ever runs on the node being changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from k3rollout.scheduler import k8s_calls, k8s_watch
from k3rollout.scheduler.k8s_errors import KubernetesError as KubernetesError  # the error of every request here
from k3rollout.scheduler.k8s_errors import api_error as api_error

# The official client is imported in the functions that call it ("lazy" below): it takes
# most of a second to import, and a run without a Kubernetes node never needs it.

UPGRADE_STATE_LABEL = "k3rollout.io/upgrade-state"
GPU_OPERATOR_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# The GPU Operator's driver upgrade controller (NVIDIA/k8s-operator-libs, pkg/upgrade/consts.go:
# UpgradeStateLabelKeyFmt "nvidia.com/%s-driver-upgrade-state" with "gpu") moves a node through
# these states, in this order; upgrade-failed ends it from any of them.
GPU_OPERATOR_UPGRADE_STATES = ("upgrade-required", "cordon-required", "wait-for-jobs-required",
                               "pod-deletion-required", "drain-required", "pod-restart-required",
                               "validation-required", "uncordon-required", "upgrade-done")
GPU_OPERATOR_DONE, GPU_OPERATOR_FAILED = "upgrade-done", "upgrade-failed"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCE = "nvidia.com/gpu"       # the NVIDIA device plugin's extended resource


def kubeconfig_for(host_vars: dict[str, Any], inventory_path: str, executor: Any = None) -> tuple[str | None, str | None]:
    """(kubeconfig path or None for the client's default, context or None) for a host."""
    cfg = host_vars.get("k3_kubeconfig")
    if cfg:
        p = Path(str(cfg)).expanduser()
        cfg = str(p if p.is_absolute() else Path(inventory_path).resolve().parent / p)
    else:
        cfg = getattr(executor, "kubeconfig", None)
        cfg = str(cfg) if cfg else None
    return cfg, host_vars.get("k3_kube_context") or None


@dataclass
class DrainResult:
    ok: bool
    evicted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)          # DaemonSet-owned and mirror pods
    blocked: dict[str, str] = field(default_factory=dict)     # pod -> last refusal (a PDB's message)
    attempts: int = 0
    waited_s: float = 0.0
    message: str = ""


@dataclass
class LeaseHolder:
    holder: str
    renewed: str | None
    duration_s: int
    expired: bool


_err = api_error      # the one translation of a client error (k8s_errors.py)


def _gpu_count(container: Any) -> int:
    """The ``nvidia.com/gpu`` a container asks for (its request, else its limit)."""
    res = container.resources
    for table in (getattr(res, "requests", None), getattr(res, "limits", None)):
        value = (table or {}).get(GPU_RESOURCE)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 1            # a quantity that is not a plain count still asks for GPUs
    return 0


def _micro(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease_spec(lease: Any) -> Any:
    """A Lease's spec; an empty one where the object has none (``spec`` is optional in the API:
    a Lease created bare, e.g. from a manifest with only its name, is held by nobody)."""
    from kubernetes import client  # with the client: imported when a cluster is used

    return lease.spec if lease.spec is not None else client.V1LeaseSpec()


class KubernetesApi:
    """One API connection for a run: ``KubernetesApi(kubeconfig=..., context=...)``."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, now: Callable[[], float] = time.monotonic):
        from kubernetes import client, config  # lazy

        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except Exception as exc:  # noqa: BLE001 - the config loader raises several unrelated types
            raise KubernetesError(f"cannot load kubeconfig {kubeconfig or '~/.kube/config'}: {exc}") from None
        cfg.retries = False
        self.server = cfg.host
        self._api = client.ApiClient(cfg)
        send = self._api.call_api

        def counted(method: str, url: str, *args: Any, **kw: Any) -> Any:
            k8s_calls.record(method, url)
            return send(method, url, *args, **kw)

        self._api.call_api = counted  # type: ignore[method-assign]  # every request, watches included (k8s_calls.py)
        self.core = client.CoreV1Api(self._api)
        self.coord = client.CoordinationV1Api(self._api)
        self.custom = client.CustomObjectsApi(self._api)
        self.apps = client.AppsV1Api(self._api)
        # API objects as the API server writes them (camelCase dicts), for the workload backend
        self.serialize: Callable[[Any], Any] = self._api.sanitize_for_serialization
        self._cfg = cfg
        self._client = client
        self.sleep = sleep
        self.now = now

    def close(self) -> None:
        self._api.close()

    def watch(self, list_method: str, *args: Any, api: str = "core", **kw: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        """The events of a watch over ``list_method`` of the ``api`` group (core:
        ``list_namespaced_pod``, ``list_node``; apps: ``list_namespaced_deployment``; custom:
        ``list_namespaced_custom_object``): ``kubernetes.watch.Watch().stream`` with its ``field_selector``,
        ``resource_version`` and ``timeout_seconds``; each event as (type, the object as the
        server wrote it). A refused watch and an ERROR event (410 Expired) raise ApiException;
        the iteration ends when the server ends the stream (``timeout_seconds``)."""
        from kubernetes import watch  # with the client: imported when a cluster is used

        w = watch.Watch()
        try:
            # deserialized, and the object taken as the server wrote it (``raw_object``): with
            # ``deserialize=False`` the client's stream (kubernetes 37.0) looks up ``raw_object``
            # in an ERROR event that has none, so a 410 Expired came out as a KeyError
            for ev in w.stream(getattr(getattr(self, api), list_method), *args, **kw):
                yield str(ev["type"]), ev["raw_object"]
        finally:
            w.stop()

    def proxy_settings(self) -> dict[str, Any]:
        """How an HTTP client reaches this API server with these credentials (the pod proxy
        of the workload backend): headers, TLS verification, client certificate."""
        cfg = self._cfg
        headers = {}
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if token:
            prefix = (cfg.api_key_prefix or {}).get("authorization", "")
            headers["Authorization"] = f"{prefix} {token}".strip() if not token.startswith("Bearer") else token
        cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file else None
        verify: Any = (cfg.ssl_ca_cert or True) if cfg.verify_ssl else False
        return {"headers": headers, "verify": verify, "cert": cert}

    # ------------------------------------------------------------ nodes

    def node(self, name: str) -> dict[str, Any]:
        """What the rollout needs of a node: schedulable or not, ready or not, labels."""
        try:
            n = self.core.read_node(name)
        except Exception as exc:  # noqa: BLE001 - translated once, here
            raise _err(exc, f"read node {name}") from None
        # a node object as the API may return it: spec, status and metadata each optional
        status, spec, meta = n.status, n.spec, n.metadata
        conditions = (status.conditions if status else None) or []
        ready = next((c.status for c in conditions if c.type == "Ready"), "Unknown")
        return {"name": name, "unschedulable": bool(spec.unschedulable) if spec else False, "ready": ready == "True",
                "labels": dict((meta.labels if meta else None) or {}),
                "annotations": dict((meta.annotations if meta else None) or {}),
                "kubelet": status.node_info.kubelet_version if status and status.node_info else None}

    def _patch(self, name: str, body: dict[str, Any], what: str) -> Any:
        """The node as the server has it after the patch (the PATCH's own reply)."""
        try:
            return self.core.patch_node(name, body)
        except Exception as exc:  # noqa: BLE001 - translated once, here
            raise _err(exc, f"{what} node {name}") from None

    def cordon(self, name: str) -> bool:
        """Mark the node unschedulable; returns whether it already was (so a node cordoned
        before the run is left cordoned after it)."""
        before = bool(self.node(name)["unschedulable"])
        if not before:
            self._patch(name, {"spec": {"unschedulable": True}}, "cordon")
        return before

    def uncordon(self, name: str) -> None:
        self._patch(name, {"spec": {"unschedulable": None}}, "uncordon")

    def label(self, name: str, labels: dict[str, str | None]) -> dict[str, str]:
        """Set (or, with None, remove) node labels; the node's labels after the change, as
        the server's reply to the patch gives them."""
        n = self._patch(name, {"metadata": {"labels": labels}}, "label")
        return dict(n.metadata.labels or {}) if n is not None and n.metadata is not None else {}

    def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        self._patch(name, {"metadata": {"annotations": annotations}}, "annotate")

    # ------------------------------------------------------------ drain

    def pods_on(self, name: str) -> list[Any]:
        try:
            return list(self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items)
        except Exception as exc:  # noqa: BLE001 - translated once, here
            raise _err(exc, f"list pods on {name}") from None

    def gpu_pods_on(self, name: str) -> list[str]:
        """``namespace/name`` of each pod bound to the node that has not ended (Pending or
        Running) and whose containers request ``nvidia.com/gpu`` (an extended resource: its
        request is its limit when only the limit is set)."""
        out = []
        for pod in self.pods_on(name):
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue
            spec = pod.spec
            if any(_gpu_count(c) > 0 for c in (spec.containers or []) + (spec.init_containers or [])):
                out.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
        return out

    @staticmethod
    def left_alone(pod: Any) -> bool:
        """Whether a drain leaves the pod where it is: a DaemonSet's, or a static (mirror) pod."""
        owners = pod.metadata.owner_references or []
        if any(o.kind == "DaemonSet" for o in owners):
            return True
        return MIRROR_ANNOTATION in (pod.metadata.annotations or {})

    def drain(self, name: str, timeout_s: float, retry_s: float = 5.0,
              on_attempt: Callable[[str, int, str], None] | None = None) -> DrainResult:
        """Cordon, evict, wait for the pods to be gone; never raises for a refusal: the
        result says what was evicted and what a budget blocked."""
        self.cordon(name)
        start = self.now()
        deadline = start + timeout_s
        res = DrainResult(ok=False)
        pending: dict[str, Any] = {}
        for pod in self.pods_on(name):
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            if self.left_alone(pod):
                res.skipped.append(key)
            elif pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue        # finished pods hold nothing; kubectl deletes them, we leave them
            else:
                pending[key] = pod
        evicting = dict(pending)
        while evicting:
            for key, pod in list(evicting.items()):
                res.attempts += 1
                outcome = self._evict(pod)
                if on_attempt:
                    on_attempt(key, res.attempts, outcome)
                if outcome in ("evicted", "gone"):
                    res.evicted.append(key)
                    res.blocked.pop(key, None)
                    del evicting[key]
                else:
                    res.blocked[key] = outcome
            if not evicting:
                break
            if self.now() + retry_s > deadline:
                res.waited_s = self.now() - start
                res.message = (f"drain of {name} timed out after {timeout_s:g}s: "
                               + "; ".join(f"{k}: {v}" for k, v in sorted(res.blocked.items())))
                return res
            self.sleep(retry_s)
        # evicted pods terminate (grace period); the node is drained when they are gone: each
        # pod is read, then watched from that read until its DELETED event (k8s_watch.py; a
        # pod of the same name with another uid, a StatefulSet's next one, is not it)
        alive = [k for k, p in pending.items()
                 if not self._gone(p, max(0.0, deadline - self.now()), min(1.0, retry_s))]
        if alive:
            res.waited_s = self.now() - start
            res.message = f"drain of {name} timed out waiting for {', '.join(alive)} to terminate"
            return res
        res.ok = True
        res.waited_s = self.now() - start
        return res

    def _evict(self, pod: Any) -> str:
        from kubernetes.client.exceptions import ApiException  # lazy

        body = self._client.V1Eviction(api_version="policy/v1", kind="Eviction",
                                       metadata=self._client.V1ObjectMeta(name=pod.metadata.name,
                                                                          namespace=pod.metadata.namespace))
        try:
            self.core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)
            return "evicted"
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 429:
                return str(_err(exc, "eviction refused")).split(": ", 2)[-1]
            raise _err(exc, f"evict {pod.metadata.namespace}/{pod.metadata.name}") from None

    def _gone(self, pod: Any, timeout_s: float, poll_s: float) -> bool:
        """Whether the evicted pod is gone (deleted, or replaced by another of its name) within
        ``timeout_s``: read, then watched (polled where the watch is refused)."""
        from kubernetes.client.exceptions import ApiException  # lazy

        ns, pname, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid

        def read() -> dict[str, Any] | None:
            try:
                got: dict[str, Any] = self.serialize(self.core.read_namespaced_pod(pname, ns))
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise _err(exc, f"read pod {ns}/{pname}") from None
            return got

        gone, _ = k8s_watch.wait_watched(self, read, k8s_watch.pod_watcher(self, ns, pname),
                                         lambda p: p is None or (p.get("metadata") or {}).get("uid") != uid,
                                         timeout_s, poll_s)
        return gone

    # ------------------------------------------------------------ GPU Operator

    def gpu_operator_manages_driver(self, name: str) -> bool:
        """True when the NVIDIA GPU Operator runs the driver as a container on this node
        (its driver DaemonSet's pod is there, or the node carries the operator's upgrade
        state label): a host package upgrade must not be attempted there."""
        labels = self.node(name)["labels"]
        if labels.get("nvidia.com/gpu.deploy.driver") == "false":
            return False
        if GPU_OPERATOR_STATE_LABEL in labels:
            return True
        return any((p.metadata.labels or {}).get("app") == "nvidia-driver-daemonset" for p in self.pods_on(name))

    def nvidia_drivers(self) -> list[dict[str, Any]]:
        """The GPU Operator's NVIDIADriver resources (cluster-scoped, ``nvidia.com/v1alpha1``):
        name, driver version and the ``nodeSelector`` that picks the nodes each one runs on
        (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-configuration.html)."""
        try:
            got: dict[str, Any] = self.custom.list_cluster_custom_object(  # type: ignore[assignment]
                "nvidia.com", "v1alpha1", "nvidiadrivers")   # the client types the list as `object`
        except Exception as exc:  # noqa: BLE001
            raise _err(exc, "list NVIDIADriver resources") from None
        return [{"name": (x.get("metadata") or {}).get("name"), "version": (x.get("spec") or {}).get("version"),
                 "nodeSelector": dict((x.get("spec") or {}).get("nodeSelector") or {})}
                for x in got.get("items", [])]

    def wait_for_label(self, name: str, key: str, until: tuple[str, ...], timeout_s: float, poll_s: float = 2.0,
                       since: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
        """Poll the node's label ``key`` until its value is one of ``until`` or ``timeout_s``
        passes; returns (the final value or None on a timeout, every change seen with its
        time). ``since``: a value that is stale (left from an earlier upgrade) until the
        label has shown something else."""
        start = self.now()
        seen: list[dict[str, Any]] = []
        fresh = since is None
        while True:
            value = self.node(name)["labels"].get(key)
            if not seen or seen[-1]["value"] != value:
                seen.append({"value": value, "after_s": round(self.now() - start, 3)})
            fresh = fresh or value != since
            if fresh and value in until:
                return value, seen
            if self.now() - start >= timeout_s:
                return None, seen
            self.sleep(poll_s)

    # ------------------------------------------------------------ credentials

    # what a rollout asks of the API: (what for, verb, group, resource, subresource, namespaced)
    NEEDED = (("read nodes", "get", "", "nodes", "", False),
              ("list pods", "list", "", "pods", "", False),
              ("cordon, uncordon and label nodes", "patch", "", "nodes", "", False),
              ("evict pods", "create", "", "pods", "eviction", True),
              ("read the cluster lock", "get", "coordination.k8s.io", "leases", "", True),
              ("take the cluster lock", "create", "coordination.k8s.io", "leases", "", True),
              ("renew the cluster lock", "update", "coordination.k8s.io", "leases", "", True),
              ("release the cluster lock", "delete", "coordination.k8s.io", "leases", "", True))

    # and, for nodes whose driver the GPU Operator runs (k3_driver_backend: gpu-operator)
    NEEDED_GPU_OPERATOR = (("read the GPU Operator's NVIDIADriver pools", "list", "nvidia.com", "nvidiadrivers", "",
                            False),)

    # and, for nodes whose workloads run as Pods (k3_workload_backend: kubernetes): the check
    # and test-server Pods in the workload namespace, the failed attempt's and the serving
    # pods' logs and endpoints in theirs, and the owners whose readyReplicas prove them back
    NEEDED_WORKLOAD = (("see that the workload namespace exists", "get", "", "namespaces", "", False),
                       ("run check and test-server pods", "create", "", "pods", "", "workload"),
                       ("delete them after", "delete", "", "pods", "", "workload"),
                       ("read pods' logs", "get", "", "pods", "log", ""),
                       ("send GET requests to servers through the API server's pod proxy", "get", "", "pods",
                        "proxy", ""),
                       ("send POST requests to servers through the API server's pod proxy", "create", "", "pods",
                        "proxy", ""),
                       ("read the owners of serving pods (ReplicaSets)", "get", "apps", "replicasets", "", ""),
                       ("read Deployments' readyReplicas", "get", "apps", "deployments", "", ""),
                       ("read StatefulSets' readyReplicas", "get", "apps", "statefulsets", "", ""),
                       ("read LeaderWorkerSets' readyReplicas", "get", "leaderworkerset.x-k8s.io",
                        "leaderworkersets", "", ""),
                       ("run multi-node test replicas as LeaderWorkerSets", "create", "leaderworkerset.x-k8s.io",
                        "leaderworkersets", "", "workload"),
                       ("delete them after", "delete", "leaderworkerset.x-k8s.io", "leaderworkersets", "",
                        "workload"))

    def check_access(self, lease_namespace: str, gpu_operator: bool = False,
                     workload_namespace: str | None = None) -> list[dict[str, Any]]:
        """Read-only: whether these credentials may do what a rollout does, asked of the
        API server's authorizer with SelfSubjectAccessReviews (``kubectl auth can-i``); it
        changes nothing in the cluster. ``workload_namespace``: the nodes' workloads run as
        Pods, test servers in that namespace."""
        c = self._client
        auth = c.AuthorizationV1Api(self._api)
        out = []
        needed: list[tuple[str, str, str, str, str, Any]] = list(self.NEEDED)
        needed += self.NEEDED_GPU_OPERATOR if gpu_operator else ()
        needed += self.NEEDED_WORKLOAD if workload_namespace else ()
        for what, verb, group, resource, sub, namespaced in needed:
            ns = workload_namespace if namespaced == "workload" else \
                lease_namespace if namespaced is True and group else None
            attrs = c.V1ResourceAttributes(verb=verb, group=group, resource=resource, subresource=sub or None,
                                           namespace=ns)
            try:
                r = auth.create_self_subject_access_review(c.V1SelfSubjectAccessReview(
                    spec=c.V1SelfSubjectAccessReviewSpec(resource_attributes=attrs)))
            except Exception as exc:  # noqa: BLE001
                raise _err(exc, f"ask whether these credentials may {verb} {resource}") from None
            out.append({"for": what, "verb": verb, "resource": resource + (f"/{sub}" if sub else ""),
                        "group": group, "namespace": ns, "allowed": bool(r.status.allowed),
                        "reason": r.status.reason or ""})
        return out

    # ------------------------------------------------------------ the cluster-wide lock

    def lease(self, namespace: str, name: str) -> LeaseHolder | None:
        from kubernetes.client.exceptions import ApiException  # lazy

        try:
            x = self.coord.read_namespaced_lease(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _err(exc, f"read lease {namespace}/{name}") from None
        spec = _lease_spec(x)
        renewed = spec.renew_time
        duration = int(spec.lease_duration_seconds or 0)
        if isinstance(renewed, str):
            renewed = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
        expired = renewed is None or renewed + timedelta(seconds=duration) < datetime.now(timezone.utc)
        return LeaseHolder(holder=spec.holder_identity or "", duration_s=duration, expired=expired,
                           renewed=_micro(renewed) if renewed else None)

    def acquire_lease(self, namespace: str, name: str, holder: str, duration_s: int) -> None:
        """Create the lease, or renew it if ``holder`` already holds it. A lease held by
        anyone else, expired or not, is never taken: the error names the holder and how to
        release it by hand after checking that run is really gone."""
        from kubernetes.client.exceptions import ApiException  # lazy

        c = self._client
        now = datetime.now(timezone.utc)
        spec = c.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=duration_s, acquire_time=_micro(now),
                             renew_time=_micro(now))
        try:
            self.coord.create_namespaced_lease(namespace, c.V1Lease(metadata=c.V1ObjectMeta(name=name), spec=spec))
            return
        except ApiException as exc:
            if exc.status != 409:
                raise _err(exc, f"create lease {namespace}/{name}") from None
        cur = self.coord.read_namespaced_lease(name, namespace)
        if not _lease_spec(cur).holder_identity:
            # a Lease that names no holder is held by nobody (client-go's leader election takes
            # it too); the replace carries the resourceVersion read, so of two runs taking it
            # at once one gets 409 Conflict
            cur.spec = spec
            try:
                self.coord.replace_namespaced_lease(name, namespace, cur)
                return
            except ApiException as exc:
                raise _err(exc, f"take the unheld lease {namespace}/{name}") from None
        if _lease_spec(cur).holder_identity != holder:
            held = self.lease(namespace, name)
            state = "expired" if held and held.expired else "live"
            raise KubernetesError(
                f"the cluster lock (Lease {namespace}/{name}) is held by {_lease_spec(cur).holder_identity!r} ({state}, "
                f"renewed {held.renewed if held else '?'}); if that run is gone, release it with "
                f"`kubectl -n {namespace} delete lease {name}`", status=409, reason="Conflict")
        self.renew_lease(namespace, name, holder)

    def renew_lease(self, namespace: str, name: str, holder: str) -> None:
        from kubernetes.client.exceptions import ApiException  # lazy

        cur = self.coord.read_namespaced_lease(name, namespace)
        spec = _lease_spec(cur)
        if spec.holder_identity != holder:
            raise KubernetesError(f"lost the cluster lock {namespace}/{name} to {spec.holder_identity!r}",
                                  status=409, reason="Conflict")
        spec.renew_time = _micro(datetime.now(timezone.utc))
        try:
            self.coord.replace_namespaced_lease(name, namespace, cur)
        except ApiException as exc:
            raise _err(exc, f"renew lease {namespace}/{name}") from None

    def release_lease(self, namespace: str, name: str, holder: str) -> None:
        from kubernetes.client.exceptions import ApiException  # lazy

        try:
            cur = self.coord.read_namespaced_lease(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise _err(exc, f"read lease {namespace}/{name}") from None
        if _lease_spec(cur).holder_identity == holder:
            self.coord.delete_namespaced_lease(name, namespace)
