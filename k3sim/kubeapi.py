"""A simulated Kubernetes API server on a real loopback socket, over the sim hosts' state.

No real API server can be installed on the machines this project is built and tested on,
so this one stands in for it, for the parts a driver rollout and its workload checks touch:
discovery (sim/kubediscovery.py), nodes (get, list, patch: cordon, labels, annotations; the
device plugin's ``nvidia.com/gpu``), pods (create, get, list, delete; their log and their
proxy), watches of pods, nodes and owners (sim/kubewatch.py), the policy/v1 Eviction subresource with PodDisruptionBudget refusals, the
scheduler and its events, owners (Deployments and their ReplicaSets, StatefulSets,
LeaderWorkerSets: sim/controllers.py), DaemonSets, and coordination.k8s.io/v1 Leases. The pods
a kubelet runs are run by the node's simulated kubelet (sim/kubelet.py) in the node's one
container model. Paths, verbs, status codes and object
shapes follow the real API (``metav1.Status`` bodies with ``reason`` and ``code``;
409 Conflict on a stale ``resourceVersion``; 429 TooManyRequests with a
``DisruptionBudget`` cause when an eviction would break a budget, as
``pkg/registry/core/pod/storage/eviction.go`` answers), so the real ``kubectl`` and the
official Python client can drive it.

A node is the sim host itself: ``spec.unschedulable`` is the host's scheduler state, labels
and annotations live in the host's state, and ``Ready`` follows whether the host is up.
Pods, owners, events, budgets and leases are cluster objects, kept in ``kubeapi.db`` under
the sim root (sim/kubestore.py), with the cluster's settings (``lws_crd``: the LeaderWorkerSet CRD is installed;
``deny``: rights refused to every user, from the hosts' ``sim_k8s_deny``). Namespaces: the
cluster's own (``default``, ``kube-system``, ``kube-public``, ``kube-node-lease``), those of the
GPU Operator, the serving owners and k3rollout's workload namespace (``k3rollout``), any
created with ``POST /api/v1/namespaces``, and any a pod or owner is in; a create in any other
is refused as the NamespaceLifecycle admission refuses it (404 ``namespaces "X" not found``,
k8s.io/apiserver plugin/namespace/lifecycle). On a Docker host (``container_runtime: docker``) the
serving pod only stands for the host's serving container; on a containerd node every workload
pod is run by its kubelet.
The host fault ``pdb_blocks_eviction`` makes the budget of the node's serving pod refuse its
eviction (for ever, or for ``pdb_release_s`` seconds after the first refusal).

The NVIDIA GPU Operator, on nodes whose driver it runs (``sim_gpu_operator``): cluster-scoped
``nvidia.com/v1alpha1`` NVIDIADriver resources, one per driver pool, each selecting its nodes
by ``spec.nodeSelector`` (the label ``driver.config``). A node moved into a pool whose
driver version differs from the one its driver pod loaded goes through the operator's
upgrade states, published as the node label ``nvidia.com/gpu-driver-upgrade-state``
(``sim_gpu_operator_state_s`` seconds each), in the order of NVIDIA/k8s-operator-libs
``pkg/upgrade/consts.go``: upgrade-required, cordon-required (it cordons the node, or, when
it is unschedulable already, records that in the annotation
``nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable`` and leaves it so),
wait-for-jobs-required, pod-deletion-required, drain-required, pod-restart-required (the
driver pod is replaced; the new one loads the pool's driver into the host's kernel),
validation-required, uncordon-required (uncordons only a node it cordoned itself),
upgrade-done. Each label change is the operator's request to the API server, so it is in
the node's audit log. The host fault ``gpu_operator_upgrade_fails`` makes the new driver
pod crash-loop: the old module is unloaded, none is loaded, and the state ends
``upgrade-failed`` (moved back to a pool of the node's original driver, it loads again).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from k3sim import controllers as ctl
from k3sim import kubediscovery, kubelet, kubeseed, kubestore, kubetables, kubewatch, kubeworkloads
from k3sim import state as st
from k3sim.kubebase import UNSCHEDULABLE_TAINT, ApiError, audit, not_found, now_iso
from k3sim.kubebase import audited as audited  # tests read a node's audit log from here

GPU_OPERATOR_STATE = "nvidia.com/gpu-driver-upgrade-state"
GPU_OPERATOR_INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
# the upgrade controller's states in the order a node passes them (k8s-operator-libs
# pkg/upgrade/consts.go); the maintenance-operator states are not modelled
GPU_OPERATOR_PROGRESSION = ("upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
                            "drain-required", "pod-restart-required", "validation-required", "uncordon-required",
                            "upgrade-done")
# the simulated cluster's driver pools: NVIDIADriver name -> driver version
NVIDIA_DRIVERS = {"r575": "575.57.08", "r580": "580.95.05"}
# the namespaces the simulated cluster starts with: Kubernetes' own, the GPU Operator's, the
# serving owners' and k3rollout's (an administrator creates it with the Role that lets the
# controller run pods there; docs/domain.md "Workloads on Kubernetes GPU nodes")
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "gpu-operator", "inference", "k3rollout")
# how long the simulated watch cache keeps a deletion: an API server keeps its watch history
# for minutes (etcd compacts every 5 minutes by default, kube-apiserver --etcd-compaction-interval)
HISTORY_S = 300.0
# bearer tokens the simulated server knows: an administrator (cluster-admin) and a viewer
# (the built-in ``view`` ClusterRole: get, list, watch), for the credentials check
TOKENS = {"sim-admin-token": ("kubernetes-admin", "cluster-admin"), "sim-viewer-token": ("k3rollout-viewer", "view")}


def _dial_error(exc: OSError, ip: str, port: int) -> str:
    """The proxy's error as Go's net package words it (the apiserver's upgradeaware proxy quotes
    it after "error trying to reach service: "): what actually failed, not always a refusal."""
    if isinstance(exc, ConnectionRefusedError):
        return f"dial tcp {ip}:{port}: connect: connection refused"
    if isinstance(exc, TimeoutError):
        return f"dial tcp {ip}:{port}: i/o timeout"
    if isinstance(exc, http.client.RemoteDisconnected):        # (a ConnectionResetError too)
        return "EOF"
    if isinstance(exc, ConnectionResetError):
        return f"read tcp {ip}:{port}: read: connection reset by peer"
    return f"dial tcp {ip}:{port}: {exc.strerror or exc}"


class Cluster:
    """The API server's objects: nodes from the sim hosts' state, the rest in kubeapi.db."""

    def __init__(self, sim_root: Path, pdb_release_s: float | None = None, lws_crd: bool | None = None,
                 deny: list[str] | None = None):
        self.root = Path(sim_root)
        self.pdb_release_s = pdb_release_s
        self.lock = threading.RLock()
        self.store = kubestore.Store(self.root)
        self.data = self.store.load() or {"rv": 1}
        for empty in ("pods", "leases", "blocked"):      # (an empty collection has no rows)
            self.data.setdefault(empty, {})
        # pods the kubelets run (created through the API or by a controller), owners, and the
        # cluster-level settings: whether the LeaderWorkerSet CRD is installed, rights refused
        self.data.setdefault("run", [])
        self.data.setdefault("workloads", {})
        self.data.setdefault("admitted", [])     # uids of pods a kubelet admitted
        self.data.setdefault("namespaces", {n: _namespace(n, "2026-05-04T10:11:12Z") for n in NAMESPACES})
        self.data.setdefault("born", {})         # uid -> the resourceVersion it was created at (watches)
        settings = self.data.setdefault("settings", {"lws_crd": True, "deny": []})
        if lws_crd is not None:
            settings["lws_crd"] = lws_crd
        if deny is not None:
            settings["deny"] = list(deny)
        # the watch cache's history of deletions (resourceVersion, when, the pod as it went), so a
        # watch from a resourceVersion gets the DELETED events since it; a watch from before
        # ``history_from`` is answered 410 Expired, as an API server whose history was compacted
        self.tombstones: list[tuple[int, float, dict[str, Any]]] = []
        # host -> its state file and pod count when a look found nothing for the controllers to do
        self.settled: dict[str, tuple[int, int, int, int]] = {}
        self.history_from = int(self.data["rv"])
        self.work = kubeworkloads.Workloads(self)
        with self.lock:
            self._reconcile()         # the pods the nodes run when the server comes up
            self.history_from = int(self.data["rv"])     # the history starts with this server

    def deleted(self, pod: dict[str, Any]) -> None:
        """A pod went (the caller holds the lock): its DELETED event, at a resourceVersion of its
        own, stays in the watch history for HISTORY_S."""
        now = time.monotonic()
        self.data["born"].pop(pod["metadata"]["uid"], None)
        self.settled.pop(pod["spec"].get("nodeName") or "", None)
        gone = orjson.loads(orjson.dumps(pod))
        gone["metadata"]["resourceVersion"] = self.rv()
        self.tombstones.append((int(gone["metadata"]["resourceVersion"]), now, gone))
        while self.tombstones and now - self.tombstones[0][1] > HISTORY_S:
            self.history_from = self.tombstones.pop(0)[0]

    @property
    def lws_crd(self) -> bool:
        return bool(self.data["settings"].get("lws_crd", True))

    def set_lws_crd(self, present: bool) -> None:
        with self.lock:
            self.data["settings"]["lws_crd"] = present
            self.save()

    def denied(self, verb: str, resource: str) -> bool:
        """A right refused to every user (``deny``: entries ``"VERB RESOURCE[/SUBRESOURCE]"``, e.g.
        ``"create pods/proxy"``), as an RBAC role without that rule refuses it."""
        return f"{verb} {resource}" in self.data["settings"].get("deny", [])

    def set_denied(self, rights: list[str]) -> None:
        with self.lock:
            self.data["settings"]["deny"] = list(rights)
            self.save()

    # ------------------------------------------------------------ namespaces

    def namespaces(self) -> list[dict[str, Any]]:
        """The namespaces created, and those a pod, an owner or a lease is in (the seeds put
        objects straight into a namespace, as a cluster built by an installer has them)."""
        with self.lock:
            names = {*self.data["namespaces"], *(p["metadata"]["namespace"] for p in self.data["pods"].values()),
                     *(w["metadata"]["namespace"] for w in self.data["workloads"].values()),
                     *(k.split("/", 1)[0] for k in self.data["leases"])}
            return [self.data["namespaces"].get(n) or _namespace(n, "2026-05-04T10:11:12Z") for n in sorted(names)]

    def namespace(self, name: str) -> dict[str, Any]:
        found = [x for x in self.namespaces() if x["metadata"]["name"] == name]
        if not found:
            raise not_found("namespaces", name)
        return found[0]

    def admit_create(self, ns: str) -> None:
        """The NamespaceLifecycle admission of a create in ``ns``: refused unless it exists,
        with the NotFound of the namespace lookup (k8s.io/apiserver
        pkg/admission/plugin/namespace/lifecycle/admission.go returns that error as is)."""
        self.namespace(ns)

    def create_namespace(self, body: Any) -> dict[str, Any]:
        name = (body or {}).get("metadata", {}).get("name") if isinstance(body, dict) else None
        if not name:
            raise ApiError(422, "Invalid", 'Namespace "" is invalid: metadata.name: Required value: name or '
                                           "generateName is required")
        with self.lock:
            if any(x["metadata"]["name"] == name for x in self.namespaces()):
                raise ApiError(409, "AlreadyExists", f'namespaces "{name}" already exists',
                               {"name": name, "kind": "namespaces"})
            obj = _namespace(name, now_iso())
            obj["metadata"]["resourceVersion"] = self.rv()
            self.data["namespaces"][name] = obj
            self.save()
        return obj

    # ------------------------------------------------------------ persistence

    def save(self) -> None:
        # every change is on disk before its reply (a server restarted after a controller's
        # crash reads it back): what changed since the last save (sim/kubestore.py)
        with self.lock:
            self.store.save(self.data)

    def close(self) -> None:
        with self.lock:
            self.store.close()

    def rv(self) -> str:
        self.data["rv"] += 1
        return str(self.data["rv"])

    # ------------------------------------------------------------ nodes

    def host_dirs(self) -> dict[str, Path]:
        """Every host's folder by name, in name order (the names as strings: the order of their
        paths, without building and comparing a path per entry on every scheduling pass)."""
        try:
            names = sorted(e.name for e in os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        root = str(self.root)
        return {n: self.root / n for n in names if os.path.isfile(f"{root}/{n}/state.json")}

    def host_dir(self, name: str) -> Path | None:
        """One host's folder, as ``host_dirs`` lists it, without listing every host (a request
        names one node; listing a thousand folders per request made the server quadratic)."""
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            return None
        d = self.root / name
        return d if (d / "state.json").is_file() else None

    def _host(self, name: str) -> Path:
        d = self.host_dir(name)
        if d is None:
            raise not_found("nodes", name)
        return d

    def node(self, name: str) -> dict[str, Any]:
        d = self._host(name)
        self._operator_tick(d)
        return self.node_object(st.load(d))

    @staticmethod
    def node_labels(s: dict[str, Any]) -> dict[str, str]:
        """The Node's labels: the kubelet's own, the device plugin's (GPU Feature Discovery's
        product and count) and those set through the API."""
        return {"kubernetes.io/hostname": s["name"], "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": s["gpu"]["model"].replace(" ", "-"),
                "nvidia.com/gpu.count": str(s["gpu"]["count"]), **s["scheduler"].get("labels", {})}

    def node_object(self, s: dict[str, Any]) -> dict[str, Any]:
        sched = s["scheduler"]
        up = st.is_up(s, time.time())
        unsched = sched["state"] != "schedulable"
        labels = self.node_labels(s)
        spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24"}
        if unsched:
            spec["unschedulable"] = True
            spec["taints"] = [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                               "timeAdded": sched.get("since", "2026-12-02T02:00:00Z")}]
        if not up:
            # the node lifecycle controller's taints on a node whose kubelet stopped posting
            # (pkg/controller/nodelifecycle: TaintNodesByCondition and taint-based eviction)
            spec["taints"] = spec.get("taints", []) + [{"key": "node.kubernetes.io/unreachable", "effect": e,
                                                        "timeAdded": now_iso()} for e in ("NoSchedule", "NoExecute")]
        gpus = str(kubelet.gpu_capacity(s, time.time()))
        return {
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": s["name"], "uid": sched.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_DNS, s["name"])),
                         "resourceVersion": str(sched.get("rv", 1)), "creationTimestamp": "2026-05-04T10:11:12Z",
                         "labels": labels, "annotations": dict(sched.get("annotations", {}))},
            "spec": spec,
            "status": {
                "capacity": {"cpu": "224", "memory": "2113436428Ki", "nvidia.com/gpu": gpus, "pods": "110"},
                "allocatable": {"cpu": "222", "memory": "2103360524Ki", "nvidia.com/gpu": gpus, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if up else "Unknown",
                                "reason": "KubeletReady" if up else "NodeStatusUnknown",
                                "message": "kubelet is posting ready status" if up else
                                "Kubelet stopped posting node status.",
                                "lastHeartbeatTime": now_iso(), "lastTransitionTime": "2026-12-01T00:00:00Z"}],
                "addresses": [{"type": "InternalIP", "address": s.get("address") or "127.0.0.1"},
                              {"type": "Hostname", "address": s["name"]}],
                "nodeInfo": {"kernelVersion": s["kernel"], "kubeletVersion": kubediscovery.K8S_VERSION["gitVersion"],
                             "kubeProxyVersion": kubediscovery.K8S_VERSION["gitVersion"], "operatingSystem": "linux",
                             "architecture": "amd64", "containerRuntimeVersion": kubelet.runtime_version(s),
                             "osImage": "Ubuntu 24.04.1 LTS" if s["os_family"] == "Debian"
                             else "Red Hat Enterprise Linux 9.5 (Plow)",
                             "machineID": s["name"], "systemUUID": s["name"], "bootID": s["boot_id"]}},
        }

    def patch_node(self, name: str, patch: Any, ctype: str) -> dict[str, Any]:
        d = self._host(name)
        audit(d, "PATCH", f"nodes/{name}", patch)
        with st.transaction(d) as s:
            sched = s["scheduler"]
            before_labels = dict(sched.get("labels", {}))
            want = _node_fields(sched)
            if "json-patch" in ctype:
                _apply_json_patch(want, patch)
            elif isinstance(patch, dict):
                _merge(want, patch)
            else:
                raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
            rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            if rv is not None and str(rv) != str(sched.get("rv", 1)):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                                                "been modified; please apply your changes to the latest version "
                                                "and try again", {"name": name, "kind": "nodes"})
            unsched = bool((want.get("spec") or {}).get("unschedulable"))
            if unsched and sched["state"] == "schedulable":
                sched["state"], sched["since"] = "cordoned", now_iso()
            elif not unsched and sched["state"] != "schedulable":
                sched["state"] = "schedulable"
            meta = want.get("metadata") or {}
            sched["labels"] = {k: str(v) for k, v in (meta.get("labels") or {}).items() if v is not None
                               and k not in ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")}
            sched["annotations"] = {k: str(v) for k, v in (meta.get("annotations") or {}).items() if v is not None}
            sched["rv"] = int(sched.get("rv", 1)) + 1
            if s.get("gpu_operator"):
                self._operator_pool_changed(d, s, before_labels)
        return self.node(name)

    # ------------------------------------------------------------ the GPU Operator

    def nvidia_drivers(self) -> list[dict[str, Any]]:
        return [{"kind": "NVIDIADriver", "apiVersion": "nvidia.com/v1alpha1",
                 "metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"nvidiadriver/{name}")),
                              "resourceVersion": "11", "generation": 1, "creationTimestamp": "2026-05-04T10:11:12Z"},
                 "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": version,
                          "nodeSelector": {st.GPU_OPERATOR_POOL_LABEL: name}},
                 "status": {"state": "ready"}}
                for name, version in NVIDIA_DRIVERS.items()]

    def _pool_version(self, labels: dict[str, str]) -> str | None:
        for nd in self.nvidia_drivers():
            if all(labels.get(k) == v for k, v in nd["spec"]["nodeSelector"].items()):
                return nd["spec"]["version"]
        return None

    def _operator_pool_changed(self, d: Path, s: dict[str, Any], before: dict[str, str]) -> None:
        """A node's labels changed: when it now belongs to a pool whose driver is not the one
        loaded, the upgrade controller marks it upgrade-required (inside the caller's
        transaction on the host's state)."""
        sched = s["scheduler"]
        labels = sched["labels"]
        if labels.get(st.GPU_OPERATOR_POOL_LABEL) == before.get(st.GPU_OPERATOR_POOL_LABEL):
            return
        version = self._pool_version(labels)
        op = sched.get("operator")
        if version is not None and version == s["loaded_driver"] and op and not op.get("done"):
            # back in a pool of the driver it runs, before its pod was replaced: in sync
            op["done"] = True
            labels[GPU_OPERATOR_STATE] = "upgrade-done"
            audit(d, "PATCH", f"nodes/{s['name']}", {"metadata": {"labels": {GPU_OPERATOR_STATE: "upgrade-done"}}})
        if version is None or version == s["loaded_driver"]:
            return
        sched["operator"] = {"version": version, "started": time.time(), "at": 0}
        labels[GPU_OPERATOR_STATE] = GPU_OPERATOR_PROGRESSION[0]
        audit(d, "PATCH", f"nodes/{s['name']}", {"metadata": {"labels": {GPU_OPERATOR_STATE: labels[GPU_OPERATOR_STATE]}}})

    def _operator_tick(self, d: Path) -> None:
        """The upgrade controller's reconcile loop, caught up to now: one state per
        ``gpu_operator_state_s`` since the node joined its new pool."""
        s = st.load(d)
        op = s["scheduler"].get("operator")
        if not op or op.get("done"):
            return
        with self.lock:
            self._operator_catch_up(d)
            self.save()

    def _operator_catch_up(self, d: Path) -> None:
        with st.transaction(d) as s:
            sched = s["scheduler"]
            op = sched.get("operator")
            if not op or op.get("done"):
                return
            due = min(int((time.time() - op["started"]) / max(s.get("gpu_operator_state_s", 0.05), 1e-3)),
                      len(GPU_OPERATOR_PROGRESSION) - 1)
            while op["at"] < due and not op.get("done"):
                leaving = GPU_OPERATOR_PROGRESSION[op["at"]]
                nxt = self._operator_leave(d, s, leaving, op)
                op["at"] += 1
                if nxt is None:
                    nxt = GPU_OPERATOR_PROGRESSION[op["at"]]
                sched["labels"][GPU_OPERATOR_STATE] = nxt
                audit(d, "PATCH", f"nodes/{s['name']}", {"metadata": {"labels": {GPU_OPERATOR_STATE: nxt}}})
                if nxt in ("upgrade-done", "upgrade-failed"):
                    op["done"] = True
            sched["rv"] = int(sched.get("rv", 1)) + 1

    def _operator_leave(self, d: Path, s: dict[str, Any], state: str, op: dict[str, Any]) -> str | None:
        """What the controller does to finish ``state``; returns ``upgrade-failed`` when it fails."""
        sched = s["scheduler"]
        name = s["name"]
        if state == "cordon-required":
            if sched["state"] != "schedulable":
                sched.setdefault("annotations", {})[GPU_OPERATOR_INITIAL_UNSCHEDULABLE] = "true"
                audit(d, "PATCH", f"nodes/{name}",
                      {"metadata": {"annotations": {GPU_OPERATOR_INITIAL_UNSCHEDULABLE: "true"}}})
            else:
                sched["state"], sched["since"] = "cordoned", now_iso()
                audit(d, "PATCH", f"nodes/{name}", {"spec": {"unschedulable": True}})
        elif state == "pod-restart-required":
            pods = self.data["pods"]
            for key in [k for k, p in pods.items() if p["spec"].get("nodeName") == name
                        and p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"]:
                audit(d, "DELETE", f"namespaces/{key.split('/')[0]}/pods/{key.split('/')[1]}", None)
                del pods[key]
            s["loaded_driver"] = None          # the old driver container unloads its module
            # the fault breaks the new driver; the node's original one loads again
            fails = "gpu_operator_upgrade_fails" in s.get("faults", []) and op["version"] != s["original_driver"]
            self._new_pod(name, "gpu-operator", f"nvidia-driver-daemonset-{op['version']}", "DaemonSet",
                          "nvidia-driver-daemonset", app="nvidia-driver-daemonset", crashing=fails)
            if fails:
                return "upgrade-failed"
            s["loaded_driver"] = s["module_version"] = op["version"]
        elif state == "uncordon-required":
            if sched.get("annotations", {}).pop(GPU_OPERATOR_INITIAL_UNSCHEDULABLE, None) is not None:
                audit(d, "PATCH", f"nodes/{name}",
                      {"metadata": {"annotations": {GPU_OPERATOR_INITIAL_UNSCHEDULABLE: None}}})
            elif sched["state"] != "schedulable":
                sched["state"] = "schedulable"
                audit(d, "PATCH", f"nodes/{name}", {"spec": {"unschedulable": None}})
        return None

    # ------------------------------------------------------------ pods

    def _reconcile(self, only: str | None = None, kubelets: bool = True) -> None:
        """What the cluster's controllers do: every node runs its DaemonSet pods; on a Docker
        host (``container_runtime: docker``) that takes work and runs a serving container, its
        serving pod stands for that container (a ReplicaSet replaces an evicted one once the node
        is schedulable again). On a containerd node, workload pods are real: owners create them,
        the scheduler places them and the node's kubelet runs them (``Workloads.sync``;
        ``kubelets=False``: no kubelet posts its pods' status)."""
        pods = self.data["pods"]
        changed = False
        rv = self.data["rv"]
        dirs = self.host_dirs() if only is None else {only: self.root / only}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods.values():
            by_node.setdefault(p["spec"].get("nodeName") or "", []).append(p)
        for name, d in dirs.items():
            try:
                f = (d / "state.json").stat()
            except OSError:
                continue
            # a host whose state and pods are as the last look left them needs nothing (a look
            # at every host's state on every list made each request cost the cluster's size)
            seen = (f.st_ino, f.st_mtime_ns, f.st_size, len(by_node.get(name, ())))
            if self.settled.get(name) == seen:
                continue
            s = st.load(d)
            mine = by_node.get(name, [])
            before = len(pods)
            if not any(p["metadata"]["name"].startswith("nvidia-dcgm-exporter") for p in mine):
                self._new_pod(name, "gpu-operator", "nvidia-dcgm-exporter", "DaemonSet", "nvidia-dcgm-exporter")
                changed = True
            containerd = kubelet.runtime(s) == "containerd"
            if containerd and not any(p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset")
                                      for p in mine):
                # the device plugin that advertises nvidia.com/gpu (gpu-operator's DaemonSet)
                self._new_pod(name, "gpu-operator", "nvidia-device-plugin-daemonset", "DaemonSet",
                              "nvidia-device-plugin-daemonset", app="nvidia-device-plugin-daemonset")
                changed = True
            # the host fault gpu_operator_driver: the GPU Operator runs this node's driver as a
            # container (its driver DaemonSet's pod, labelled app=nvidia-driver-daemonset)
            if ("gpu_operator_driver" in s.get("faults", []) or s.get("gpu_operator")) and not any(
                    p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset" for p in mine):
                self._new_pod(name, "gpu-operator", f"nvidia-driver-daemonset-{s['loaded_driver'] or '580.95.05'}",
                              "DaemonSet", "nvidia-driver-daemonset", app="nvidia-driver-daemonset")
                changed = True
            serving = any(c["status"] == "running" for c in s["docker"]["containers"].values())
            if not containerd and serving and s["scheduler"]["state"] == "schedulable" and \
                    not any(p["metadata"]["namespace"] == "inference" for p in mine):
                # the serving pod holds the node's GPUs (the device plugin's nvidia.com/gpu)
                self._new_pod(name, "inference", "k2-serving-7d9f8b6c5", "ReplicaSet", "k2-serving-7d9f8b6c5",
                              gpus=s["gpu"]["count"])
                changed = True
            if len(pods) == before:
                self.settled[name] = seen
        if only is None and not self.data.get("seeded"):
            self.data["seeded"] = True
            kubeseed.seed(self)
            changed = True
        self.work.sync(only, kubelets=kubelets)
        if changed or self.data["rv"] != rv:
            self.save()

    def _new_pod(self, node: str, ns: str, prefix: str, owner_kind: str, owner: str, app: str | None = None,
                 crashing: bool = False, gpus: int = 0) -> None:
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        container: dict[str, Any] = {"name": prefix.split("-")[0], "image": "registry/x:1"}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
        self.data["pods"][f"{ns}/{name}"] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "resourceVersion": self.rv(),
                         "creationTimestamp": now_iso(), "labels": {"app": app or prefix.split("-")[0]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner,
                                              "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, owner)),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node, "containers": [container],
                     "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        meta = self.data["pods"][f"{ns}/{name}"]["metadata"]
        self.data["born"][meta["uid"]] = int(meta["resourceVersion"])
        if crashing:
            self.data["pods"][f"{ns}/{name}"]["status"] = {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": prefix.split("-")[0], "ready": False, "restartCount": 3,
                                       "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}

    def pods(self, namespace: str | None, field_selector: str, label_selector: str) -> list[dict[str, Any]]:
        # the pods of one node (a drain's list) need only that node's controllers to catch up
        one = [t.split("=")[-1] for t in field_selector.split(",") if t.startswith("spec.nodeName=")
               and "!" not in t and "/" not in t]
        match = kubewatch.pod_matcher(namespace, field_selector, label_selector)
        with self.lock:
            if len(one) == 1 and one[0]:
                self._reconcile(one[0])
            else:
                # the pods of an owner (a label selector): the kubelets of the nodes they are on
                # post their status, not every node's
                self._reconcile(None, kubelets=False)
                by_labels = kubewatch.pod_matcher(namespace, "", label_selector)
                rv = self.data["rv"]
                for node in sorted({p["spec"].get("nodeName") or "" for p in self.data["pods"].values()
                                    if by_labels(p)} - {""}):
                    self.work.sync(node)
                if self.data["rv"] != rv:
                    self.save()
            out = list(self.data["pods"].values())
        return sorted((p for p in out if match(p)), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))

    def watched_pods(self, namespace: str | None, field_selector: str, label_selector: str) -> list[dict[str, Any]]:
        """What a pod watch looks at on each turn (copies: the objects change under the
        kubelets). A watch of one pod by name brings only that pod's node up to date (its
        kubelet's status), as a GET of the pod does; it saves only what changed."""
        one = dict(t.replace("==", "=").split("=", 1) for t in field_selector.split(",")
                   if t.startswith("metadata.name=") or t.startswith("metadata.name=="))
        if namespace and one:
            with self.lock:
                p = self.data["pods"].get(f"{namespace}/{one['metadata.name']}")
                if p is not None and p["spec"].get("nodeName"):
                    self.work.sync_node(p["spec"]["nodeName"])
                elif p is not None and self.work.sync():
                    self.save()
                p = self.data["pods"].get(f"{namespace}/{one['metadata.name']}")
                match = kubewatch.pod_matcher(namespace, field_selector, label_selector)
                return [orjson.loads(orjson.dumps(p))] if p is not None and match(p) else []
        with self.lock:
            return [orjson.loads(orjson.dumps(p)) for p in self.pods(namespace, field_selector, label_selector)]

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            p = self.data["pods"].get(f"{ns}/{name}")
        if p is None:
            raise not_found("pods", name)
        return p

    def evict(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            pod = self.pod(ns, name)
            node = pod["spec"].get("nodeName") or ""
            d = self.host_dir(node)
            hv = st.load(d) if d else {"faults": []}
            if ns == "inference" and "pdb_blocks_eviction" in hv.get("faults", []):
                first = self.data["blocked"].setdefault(f"{ns}/{name}", time.time())
                if self.pdb_release_s is None or time.time() - first < self.pdb_release_s:
                    self.save()
                    raise ApiError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   {"causes": [{"reason": "DisruptionBudget",
                                                "message": "The disruption budget k2-serving-pdb needs 1 healthy "
                                                           "pods and has 1 currently"}]})
            if d is not None:
                audit(d, "POST", f"namespaces/{ns}/pods/{name}/eviction", None)
            self.work.remove_pod(f"{ns}/{name}")
            self.save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def daemonset(self, ns: str, name: str) -> dict[str, Any]:
        """The DaemonSets whose pods the nodes run (the dcgm exporter everywhere; the device plugin
        on containerd nodes; the GPU Operator's driver where it runs the driver): what ``kubectl
        drain`` looks up before it ignores their pods."""
        with self.lock:
            n = sum(1 for p in self.data["pods"].values() if p["metadata"]["namespace"] == ns and any(
                r.get("kind") == "DaemonSet" and r.get("name") == name for r in p["metadata"].get("ownerReferences")
                or []))
        if not n:
            raise not_found("daemonsets", name, "apps")
        return {"kind": "DaemonSet", "apiVersion": "apps/v1",
                "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                             "resourceVersion": "7", "creationTimestamp": "2026-05-04T10:11:12Z"},
                "spec": {"selector": {"matchLabels": {"app": "nvidia"}}},
                "status": {"currentNumberScheduled": n, "desiredNumberScheduled": n, "numberReady": n,
                           "numberMisscheduled": 0}}

    # ------------------------------------------------------------ leases

    def lease(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            x = self.data["leases"].get(f"{ns}/{name}")
        if x is None:
            raise not_found("leases", name, "coordination.k8s.io")
        return x

    def create_lease(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "Lease.coordination.k8s.io \"\" is invalid: metadata.name: Required value")
        with self.lock:
            if f"{ns}/{name}" in self.data["leases"]:
                raise ApiError(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists',
                               {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
            obj = {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                   "metadata": {**(body.get("metadata") or {}), "namespace": ns, "uid": str(uuid.uuid4()),
                                "resourceVersion": self.rv(), "creationTimestamp": now_iso()},
                   "spec": dict(body.get("spec") or {})}
            self.data["leases"][f"{ns}/{name}"] = obj
            self.save()
        return obj

    def replace_lease(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            cur = self.lease(ns, name)
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv is not None and str(rv) != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io '
                                                f'"{name}": the object has been modified; please apply your changes '
                                                "to the latest version and try again",
                               {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
            obj = {**cur, "spec": dict(body.get("spec") or {}),
                   "metadata": {**cur["metadata"], **{k: v for k, v in (body.get("metadata") or {}).items()
                                                      if k in ("labels", "annotations")},
                                "resourceVersion": self.rv()}}
            self.data["leases"][f"{ns}/{name}"] = obj
            self.save()
        return obj

    def delete_lease(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            self.lease(ns, name)
            del self.data["leases"][f"{ns}/{name}"]
            self.save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "coordination.k8s.io", "kind": "leases"}}


def _namespace(name: str, created: str) -> dict[str, Any]:
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"namespace/{name}")),
                         "resourceVersion": "1", "creationTimestamp": created,
                         "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def _node_fields(sched: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": dict(sched.get("labels", {})), "annotations": dict(sched.get("annotations", {}))},
            "spec": {"unschedulable": sched["state"] != "schedulable"}}


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386); for the fields patched here a strategic merge patch is
    the same (maps merge, null deletes, scalars replace)."""
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = v


def _apply_json_patch(target: dict[str, Any], ops: Any) -> None:
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
    for op in ops:
        parts = [unquote(p).replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        if not parts:
            raise ApiError(422, "Invalid", "json patch: empty path")
        obj = target
        for p in parts[:-1]:
            obj = obj.setdefault(p, {})
        if op.get("op") in ("add", "replace"):
            obj[parts[-1]] = op.get("value")
        elif op.get("op") == "remove":
            if parts[-1] not in obj:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                               f"remove operation does not apply: doc is missing path: {op['path']}")
            del obj[parts[-1]]
        else:
            raise ApiError(422, "Invalid", f"json patch: unsupported op {op.get('op')!r}")


def _list(kind: str, api_version: str, items: list[dict[str, Any]], rv: int) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}, "items": items}


PROXY = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/:]+)(?::(?P<port>\d+))?/proxy(?P<path>/.*)?$")
WATCH_PODS = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/pods/?$")
WATCH_NODES = re.compile(r"^/api/v1/nodes/?$")
LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log/?$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net/http (the real kube-apiserver) sets on every connection: without
    # it the body, written after the headers, waits for the client's delayed ACK (40 ms a call)
    disable_nagle_algorithm = True
    cluster: Cluster
    requests: list[tuple[str, str]]

    def log_message(self, *args: Any) -> None:      # the request log is kept in .requests
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format - accepted media "
                                              "types include: application/json, application/yaml") from None

    def _handle(self, method: str) -> None:
        u = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        self.requests.append((method, self.path))
        try:
            m = PROXY.match(u.path)
            if m:
                self._proxy(method, m, u.query)
                return
            if method == "GET" and q.get("watch") in ("true", "1") and self._watch(u.path, q):
                return
            m = LOG.match(u.path)
            if m and method == "GET":
                self._authorize("get", "pods/log", "", m["ns"], m["name"])
                self._send_text(200, self.cluster.work.pod_log(m["ns"], m["name"], q))
                return
            body = self._body() if method in ("POST", "PUT", "PATCH") else None
            if method == "DELETE":
                self._body()     # DeleteOptions: read, or the next request on the connection starts in it
            code, out = self._route(method, u.path.rstrip("/") or "/", q, body)
            if method == "GET" and "as=Table" in self.headers.get("Accept", "") and out.get("kind") in kubetables.TABLE_KINDS:
                out = kubetables.as_table(out)
        except ApiError as exc:
            code, out = exc.code, exc.body
        self._send(code, out)

    def _watch(self, path: str, q: dict[str, str]) -> bool:
        """A watch of pods, nodes or owners (Deployments, StatefulSets, LeaderWorkerSets),
        authorized like any verb (a refused ``watch`` is 403); False: not one served here."""
        c = self.cluster
        m = WATCH_PODS.match(path)
        if m:
            self._authorize("watch", "pods", "", m["ns"], None)
            self._serve_watch(kubewatch.pod_events(c, m["ns"], q))
            return True
        if WATCH_NODES.match(path):
            self._authorize("watch", "nodes", "", None, None)
            self._serve_watch(kubewatch.node_events(c, q))
            return True
        owners = kubediscovery.workload_path(path.rstrip("/").split("/"), c.lws_crd)
        if owners is None or owners[0] == "ReplicaSet" or owners[2] is not None:
            return False
        api_version, plural, _ = ctl.KINDS[owners[0]]
        self._authorize("watch", plural, api_version.rsplit("/", 1)[0] if "/" in api_version else "", owners[1],
                        None)
        self._serve_watch(kubewatch.owner_events(c, owners[0], owners[1], q))
        return True

    def _serve_watch(self, events: Iterator[tuple[str, dict[str, Any]]]) -> None:
        """Write a watch's events (sim/kubewatch.py) as the API server's watch handler does:
        chunked, one JSON object per line, until they end or the client goes."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for kind, obj in events:
                line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return                   # the client went away

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorize(self, verb: str, resource: str, group: str, ns: str | None, name: str | None) -> None:
        """A right refused by the cluster's ``deny`` setting answers 403 Forbidden, in the
        authorizer's words (k8s.io/apiserver endpoints/handlers/responsewriters: forbidden)."""
        if not self.cluster.denied(verb, resource):
            return
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        user = TOKENS.get(token, ("system:anonymous", ""))[0]
        base = resource.split("/")[0]
        what = f'{base}.{group} "{name}"' if name and group else (f'{base} "{name}"' if name else
                                                                   f"{base}.{group}" if group else base)
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        raise ApiError(403, "Forbidden", f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
                                         f'in API group "{group}"{where}',
                       {"name": name or "", "group": group, "kind": base})

    def _proxy(self, method: str, m: re.Match[str], query: str) -> None:
        """``pods/NAME[:PORT]/proxy/PATH``: the request goes to the pod's address as it came,
        and the answer comes back as it is written (an SSE stream chunk by chunk, unbuffered).
        A pod that does not answer is the proxy's 503 ServiceUnavailable (apimachinery's
        upgradeaware proxy: "error trying to reach service: dial tcp ...: connect: connection
        refused")."""
        verb = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "get")
        self._authorize(verb, "pods/proxy", "", m["ns"], m["name"])
        ip, port = self.cluster.work.proxy_target(m["ns"], m["name"], m["port"] or "")
        n = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(n) if n else None
        path = (m["path"] or "/") + (f"?{query}" if query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization", "connection",
                                                                              "content-length")}
        conn = http.client.HTTPConnection(ip, port, timeout=600)
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
        except OSError as exc:
            conn.close()
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {_dial_error(exc, ip, port)}") \
                from None
        try:
            self.send_response(resp.status)
            length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                    self.send_header(k, v)
            if length is not None:
                self.send_header("Content-Length", length)
                self.end_headers()
                self.wfile.write(resp.read())
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            conn.close()

    def _route(self, method: str, path: str, q: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
        c = self.cluster
        if method == "GET":
            d = kubediscovery.discovery(self.server.server_address[1], path, c.lws_crd)
            if d is not None:
                return 200, d
        p = path.split("/")
        if path == "/api/v1/nodes" and method == "GET":
            match = kubewatch.node_matcher(q.get("fieldSelector", ""), q.get("labelSelector", ""))
            nodes = [n for n in (c.node(n) for n in c.host_dirs()) if match(n)]
            return 200, _list("NodeList", "v1", nodes, c.data["rv"])
        if len(p) == 5 and path.startswith("/api/v1/nodes/"):
            if method == "GET":
                return 200, c.node(p[4])
            if method == "PATCH":
                self._authorize("patch", "nodes", "", None, p[4])
                return 200, c.patch_node(p[4], body, self.headers.get("Content-Type", ""))
        if path == "/api/v1/pods" and method == "GET":
            items = c.pods(None, q.get("fieldSelector", ""), q.get("labelSelector", ""))
            return 200, _list("PodList", "v1", items, c.data["rv"])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "GET":
            items = c.pods(p[4], q.get("fieldSelector", ""), q.get("labelSelector", ""))
            return 200, _list("PodList", "v1", items, c.data["rv"])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "POST":
            self._authorize("create", "pods", "", p[4], None)
            c.admit_create(p[4])
            return 201, c.work.create_pod(p[4], body)
        if path == "/api/v1/namespaces" and method == "GET":
            return 200, _list("NamespaceList", "v1", c.namespaces(), c.data["rv"])
        if path == "/api/v1/namespaces" and method == "POST":
            self._authorize("create", "namespaces", "", None, None)
            return 201, c.create_namespace(body)
        if len(p) == 5 and p[:4] == ["", "api", "v1", "namespaces"] and method == "GET":
            self._authorize("get", "namespaces", "", None, p[4])
            return 200, c.namespace(p[4])
        if len(p) == 7 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "GET":
            with c.lock:
                node = c.pod(p[4], p[6])["spec"].get("nodeName")
                if node:
                    c.work.sync_node(node)
                else:
                    c.work.sync()
                    c.save()
            return 200, c.pod(p[4], p[6])
        if len(p) == 7 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "DELETE":
            self._authorize("delete", "pods", "", p[4], p[6])
            return 200, c.work.delete_pod(p[4], p[6])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "events" and method == "GET":
            return 200, _list("EventList", "v1", c.work.events(p[4], q.get("fieldSelector", "")), c.data["rv"])
        if path == "/api/v1/events" and method == "GET":
            return 200, _list("EventList", "v1", c.work.events(None, q.get("fieldSelector", "")), c.data["rv"])
        wl = kubediscovery.workload_path(p, c.lws_crd)
        if wl is not None:
            return self._workload_route(method, wl, body)
        if len(p) == 8 and p[5] == "pods" and p[7] == "eviction" and method == "POST":
            # kind and apiVersion may be left out (the endpoint knows its type), not be wrong
            if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
                raise ApiError(400, "BadRequest", "the body of the request was not an Eviction")
            self._authorize("create", "pods/eviction", "", p[4], p[6])
            return 201, c.evict(p[4], p[6])
        if path == "/apis/nvidia.com/v1alpha1/nvidiadrivers" and method == "GET":
            return 200, _list("NVIDIADriverList", "nvidia.com/v1alpha1", c.nvidia_drivers(), c.data["rv"])
        if len(p) == 6 and path.startswith("/apis/nvidia.com/v1alpha1/nvidiadrivers/") and method == "GET":
            found = [x for x in c.nvidia_drivers() if x["metadata"]["name"] == p[5]]
            if not found:
                raise not_found("nvidiadrivers", p[5], "nvidia.com")
            return 200, found[0]
        if len(p) == 8 and p[:3] == ["", "apis", "apps"] and p[6] == "daemonsets" and method == "GET":
            return 200, c.daemonset(p[5], p[7])
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            return 201, self._access_review(body or {})
        lease_base = ["", "apis", "coordination.k8s.io", "v1", "namespaces"]
        if p[:5] == lease_base and len(p) >= 7 and p[6] == "leases":
            ns = p[5]
            if len(p) == 7 and method == "POST":
                return 201, c.create_lease(ns, body or {})
            if len(p) == 7 and method == "GET":
                with c.lock:
                    items = [x for k, x in c.data["leases"].items() if k.startswith(ns + "/")]
                return 200, _list("LeaseList", "coordination.k8s.io/v1", items, c.data["rv"])
            if len(p) == 8:
                if method == "GET":
                    return 200, c.lease(ns, p[7])
                if method == "PUT":
                    return 200, c.replace_lease(ns, p[7], body or {})
                if method == "DELETE":
                    return 200, c.delete_lease(ns, p[7])
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})

    def _workload_route(self, method: str, wl: tuple[str, str | None, str | None], body: Any) \
            -> tuple[int, dict[str, Any]]:
        c = self.cluster
        kind, ns, name = wl
        if kind == "ReplicaSet":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                        "resource")
            self._authorize("get" if name else "list", "replicasets", "apps", ns, name)
            items = c.work.replicasets(ns, name)
            if name is None:
                return 200, _list("ReplicaSetList", "apps/v1", items, c.data["rv"])
            found = [x for x in items if x["metadata"]["name"] == name]
            if not found:
                raise not_found("replicasets", name, "apps")
            return 200, found[0]
        api_version, plural, _ = ctl.KINDS[kind]
        group = api_version.rsplit("/", 1)[0]
        if method == "GET" and name is None:
            self._authorize("list", plural, group, ns, None)
            return 200, _list(f"{kind}List", api_version, c.work.workloads(kind, ns), c.data["rv"])
        if method == "GET" and ns and name:
            self._authorize("get", plural, group, ns, name)
            return 200, c.work.workload(kind, ns, name)
        if method == "POST" and ns and name is None:
            self._authorize("create", plural, group, ns, None)
            c.admit_create(ns)
            return 201, c.work.create_workload(kind, ns, body)
        if method == "DELETE" and ns and name:
            self._authorize("delete", plural, group, ns, name)
            return 200, c.work.delete_workload(kind, ns, name)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        """``kubectl auth can-i`` / SelfSubjectAccessReview, answered as RBAC answers it for
        the request's bearer token (an unknown one is 401, as the authenticator refuses it)."""
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token not in TOKENS:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        user, role = TOKENS[token]
        attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
        # the view ClusterRole reads objects and pods' logs and status, not pods/proxy, exec or
        # eviction (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go)
        allowed = role == "cluster-admin" or (attrs.get("verb") in ("get", "list", "watch")
                                               and attrs.get("subresource") in (None, "", "log", "status"))
        resource = str(attrs.get("resource", "")) + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        if self.cluster.denied(str(attrs.get("verb", "")), resource):
            allowed = False
        reason = (f'RBAC: allowed by ClusterRoleBinding "{role}" of ClusterRole "{role}" to User "{user}"'
                  if allowed else "")
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": body.get("spec") or {},
                "status": {"allowed": allowed, **({"reason": reason} if reason else {})}}

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class _HTTPServer(ThreadingHTTPServer):
    # a real API server takes many clients' connections at once: socketserver's default backlog
    # of 5 is not one (a 1,000-node run's 50 node threads connect together)
    request_queue_size = 128


class KubeApiServer:
    """``with KubeApiServer(sim_root) as api: api.url`` (an http:// URL on 127.0.0.1)."""

    def __init__(self, sim_root: Path, pdb_release_s: float | None = None, address: tuple[str, int] = ("127.0.0.1", 0),
                 lws_crd: bool | None = None, deny: list[str] | None = None):
        self.cluster = Cluster(sim_root, pdb_release_s, lws_crd=lws_crd, deny=deny)
        self.requests: list[tuple[str, str]] = []
        handler = type("BoundHandler", (Handler,), {"cluster": self.cluster, "requests": self.requests})
        try:
            self.httpd = _HTTPServer(address, handler)
        except OSError:         # the address is taken: any free port on it
            self.httpd = _HTTPServer((address[0], 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.httpd.server_address[0]}:{self.httpd.server_address[1]}"

    def kubeconfig(self, path: Path, user: str = "k3rollout", token: str = "sim-admin-token") -> Path:
        """A kubeconfig for the controller, pointing at this server (``token``: see TOKENS)."""
        import yaml

        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sim",
               "clusters": [{"name": "sim", "cluster": {"server": self.url}}],
               "users": [{"name": user, "user": {"token": token}}],
               "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": user}}]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return path

    def __enter__(self) -> KubeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.cluster.close()
