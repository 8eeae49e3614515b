"""A simulated Kubernetes API server on a real loopback socket, over the sim hosts' state.

No real API server can be installed on the machines this project is built and tested on,
so this one stands in for it, for the parts a driver rollout and its workload checks touch:
discovery (sim/kubediscovery.py), nodes (get, list, patch: cordon, labels, annotations; the
device plugin's ``nvidia.com/gpu``), pods (create, get, list with a watch, delete; their log
and their proxy), the policy/v1 Eviction subresource with PodDisruptionBudget refusals, the
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
Pods, owners, events, budgets and leases are cluster objects, kept in ``kubeapi.json`` under
the sim root, with the cluster's settings (``lws_crd``: the LeaderWorkerSet CRD is installed;
``deny``: rights refused to every user). On a Docker host (``container_runtime: docker``) the
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

import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from k3rollout.sim import controllers as ctl
from k3rollout.sim import kubediscovery, kubelet, kubeseed, kubetables, netd
from k3rollout.sim import state as st

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
GPU_OPERATOR_STATE = "nvidia.com/gpu-driver-upgrade-state"
GPU_OPERATOR_INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
# the upgrade controller's states in the order a node passes them (k8s-operator-libs
# pkg/upgrade/consts.go); the maintenance-operator states are not modelled
GPU_OPERATOR_PROGRESSION = ("upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
                            "drain-required", "pod-restart-required", "validation-required", "uncordon-required",
                            "upgrade-done")
# the simulated cluster's driver pools: NVIDIADriver name -> driver version
NVIDIA_DRIVERS = {"r575": "575.57.08", "r580": "580.95.05"}
# bearer tokens the simulated server knows: an administrator (cluster-admin) and a viewer
# (the built-in ``view`` ClusterRole: get, list, watch), for the credentials check
TOKENS = {"sim-admin-token": ("kubernetes-admin", "cluster-admin"), "sim-viewer-token": ("k3rollout-viewer", "view")}


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    return s


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.body = status(code, reason, message, details)
        self.code = code


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    what = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{what} "{name}" not found',
                    {"name": name, "group": group, "kind": resource})


def _invalid(kind: str, name: str, field: str, why: str) -> ApiError:
    """422 Invalid with its cause, as field validation answers (``Kind "name" is invalid: ...``)."""
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {why}',
                    {"name": name, "kind": kind, "causes": [{"reason": "FieldValueRequired", "message": why,
                                                             "field": field}]})


def _pod_spec_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields the API server defaults on a pod (pkg/apis/core/v1/defaults.go)."""
    out = {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
           "schedulerName": "default-scheduler", **spec}
    out["containers"] = [{**c, "ports": [{"protocol": "TCP", **pt} for pt in c.get("ports") or []]}
                         if c.get("ports") else c for c in spec.get("containers") or []]
    return out


def _affinity_matches(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution node affinity: any term whose every
    matchExpression holds (In, NotIn, Exists, DoesNotExist; k8s.io/component-helpers
    scheduling/corev1/nodeaffinity)."""
    req = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = req.get("nodeSelectorTerms") or []
    if not terms:
        return True

    def holds(e: dict[str, Any]) -> bool:
        op, key, values = e.get("operator"), e.get("key"), e.get("values") or []
        return {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}.get(str(op), False)

    return any(all(holds(e) for e in t.get("matchExpressions") or []) for t in terms)


def _dig(obj: Any, path: list[str]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _tolerates(pod: dict[str, Any], key: str, effect: str) -> bool:
    """Whether the pod's tolerations cover a taint (an empty key with Exists covers every taint)."""
    for t in pod["spec"].get("tolerations") or []:
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", key):
            return True
        if t.get("key") == key:
            return True
    return False


class Cluster:
    """The API server's objects: nodes from the sim hosts' state, the rest in kubeapi.json."""

    def __init__(self, sim_root: Path, pdb_release_s: float | None = None, lws_crd: bool | None = None,
                 deny: list[str] | None = None):
        self.root = Path(sim_root)
        self.pdb_release_s = pdb_release_s
        self.path = self.root / "kubeapi.json"
        self.lock = threading.RLock()
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {"rv": 1, "pods": {},
                                                                                  "leases": {}, "blocked": {}}
        # pods the kubelets run (created through the API or by a controller), owners, and the
        # cluster-level settings: whether the LeaderWorkerSet CRD is installed, rights refused
        self.data.setdefault("run", [])
        self.data.setdefault("workloads", {})
        self.data.setdefault("admitted", [])     # uids of pods a kubelet admitted
        settings = self.data.setdefault("settings", {"lws_crd": True, "deny": []})
        if lws_crd is not None:
            settings["lws_crd"] = lws_crd
        if deny is not None:
            settings["deny"] = list(deny)
        with self.lock:
            self._reconcile()         # the pods the nodes run when the server comes up

    @property
    def lws_crd(self) -> bool:
        return bool(self.data["settings"].get("lws_crd", True))

    def set_lws_crd(self, present: bool) -> None:
        with self.lock:
            self.data["settings"]["lws_crd"] = present
            self._save()

    def denied(self, verb: str, resource: str) -> bool:
        """A right refused to every user (``deny``: entries ``"VERB RESOURCE[/SUBRESOURCE]"``, e.g.
        ``"create pods/proxy"``), as an RBAC role without that rule refuses it."""
        return f"{verb} {resource}" in self.data["settings"].get("deny", [])

    def set_denied(self, rights: list[str]) -> None:
        with self.lock:
            self.data["settings"]["deny"] = list(rights)
            self._save()

    # ------------------------------------------------------------ persistence

    def _save(self) -> None:
        # every change is on disk before its reply (a server restarted after a controller's
        # crash reads it back); orjson, because the standard library's encoder took a third
        # of the sim daemon's CPU at 1,000 nodes (the whole object set, on every eviction)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self.data, option=orjson.OPT_SORT_KEYS))
        tmp.replace(self.path)

    def _rv(self) -> str:
        self.data["rv"] += 1
        return str(self.data["rv"])

    # ------------------------------------------------------------ nodes

    def host_dirs(self) -> dict[str, Path]:
        out = {}
        for p in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if (p / "state.json").is_file():
                out[p.name] = p
        return out

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
        return self._node_object(st.load(d))

    def _node_object(self, s: dict[str, Any]) -> dict[str, Any]:
        sched = s["scheduler"]
        up = st.is_up(s, time.time())
        unsched = sched["state"] != "schedulable"
        labels = {"kubernetes.io/hostname": s["name"], "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "nvidia.com/gpu.product": s["gpu"]["model"].replace(" ", "-"),
                  "nvidia.com/gpu.count": str(s["gpu"]["count"]), **sched.get("labels", {})}
        spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24"}
        if unsched:
            spec["unschedulable"] = True
            spec["taints"] = [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                               "timeAdded": sched.get("since", "2026-12-02T02:00:00Z")}]
        if not up:
            # the node lifecycle controller's taints on a node whose kubelet stopped posting
            # (pkg/controller/nodelifecycle: TaintNodesByCondition and taint-based eviction)
            spec["taints"] = spec.get("taints", []) + [{"key": "node.kubernetes.io/unreachable", "effect": e,
                                                        "timeAdded": _now_iso()} for e in ("NoSchedule", "NoExecute")]
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
                                "lastHeartbeatTime": _now_iso(), "lastTransitionTime": "2026-12-01T00:00:00Z"}],
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
                sched["state"], sched["since"] = "cordoned", _now_iso()
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
            self._save()

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
                sched["state"], sched["since"] = "cordoned", _now_iso()
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

    def _reconcile(self, only: str | None = None) -> None:
        """What the cluster's controllers do: every node runs its DaemonSet pods; on a Docker
        host (``container_runtime: docker``) that takes work and runs a serving container, its
        serving pod stands for that container (a ReplicaSet replaces an evicted one once the node
        is schedulable again). On a containerd node, workload pods are real: owners create them,
        the scheduler places them and the node's kubelet runs them (``_sync_workloads``)."""
        pods = self.data["pods"]
        changed = False
        dirs = self.host_dirs() if only is None else {only: self.root / only}
        for name, d in dirs.items():
            if not (d / "state.json").is_file():
                continue
            s = st.load(d)
            mine = [p for p in pods.values() if p["spec"].get("nodeName") == name]
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
        if only is None and not self.data.get("seeded"):
            self.data["seeded"] = True
            kubeseed.seed(self)
            changed = True
        if self._sync_workloads(only) or changed:
            self._save()

    def _new_pod(self, node: str, ns: str, prefix: str, owner_kind: str, owner: str, app: str | None = None,
                 crashing: bool = False, gpus: int = 0) -> None:
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        container: dict[str, Any] = {"name": prefix.split("-")[0], "image": "registry/x:1"}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
        self.data["pods"][f"{ns}/{name}"] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "resourceVersion": self._rv(),
                         "creationTimestamp": _now_iso(), "labels": {"app": app or prefix.split("-")[0]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner,
                                              "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, owner)),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node, "containers": [container],
                     "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        if crashing:
            self.data["pods"][f"{ns}/{name}"]["status"] = {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": prefix.split("-")[0], "ready": False, "restartCount": 3,
                                       "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}

    def pods(self, namespace: str | None, field_selector: str, label_selector: str) -> list[dict[str, Any]]:
        # the pods of one node (a drain's list) need only that node's controllers to catch up
        one = [t.split("=")[-1] for t in field_selector.split(",") if t.startswith("spec.nodeName=")
               and "!" not in t and "/" not in t]
        with self.lock:
            self._reconcile(one[0] if len(one) == 1 and one[0] else None)
            out = list(self.data["pods"].values())
        if namespace:
            out = [p for p in out if p["metadata"]["namespace"] == namespace]
        for term in filter(None, field_selector.split(",")):
            k, _, v = term.replace("==", "=").partition("=")
            neg = k.endswith("!")
            k = k.rstrip("!")
            get = {"spec.nodeName": lambda p: p["spec"].get("nodeName"), "metadata.name": lambda p: p["metadata"]["name"],
                   "metadata.namespace": lambda p: p["metadata"]["namespace"],
                   "status.phase": lambda p: p["status"]["phase"]}.get(k)
            if get is None:
                raise ApiError(400, "BadRequest", f'"{k}" is not a known field selector: only "metadata.name", '
                                                  '"metadata.namespace", "spec.nodeName", "status.phase"')
            out = [p for p in out if (str(get(p) or "") == v) != neg]
        for term in filter(None, label_selector.split(",")):
            k, _, v = term.replace("==", "=").partition("=")
            out = [p for p in out if p["metadata"]["labels"].get(k) == v]
        return sorted(out, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))

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
                    self._save()
                    raise ApiError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   {"causes": [{"reason": "DisruptionBudget",
                                                "message": "The disruption budget k2-serving-pdb needs 1 healthy "
                                                           "pods and has 1 currently"}]})
            if d is not None:
                audit(d, "POST", f"namespaces/{ns}/pods/{name}/eviction", None)
            self._remove_pod(f"{ns}/{name}")
            self._save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ------------------------------------------------------------ pods the kubelets run

    def _live(self) -> list[dict[str, Any]]:
        return [self.data["pods"][k] for k in self.data["run"] if k in self.data["pods"]]

    def _remove_pod(self, key: str) -> dict[str, Any]:
        """The pod goes: its kubelet stops its containers (they get their grace; the simulated
        processes stop at once) and removes them; the object is deleted once they have stopped."""
        pod = self.data["pods"].pop(key)
        if pod["metadata"]["uid"] in self.data["admitted"]:
            self.data["admitted"].remove(pod["metadata"]["uid"])
        if key in self.data["run"]:
            self.data["run"].remove(key)
            d = self.host_dir(pod["spec"].get("nodeName") or "")
            for c in pod["spec"]["containers"] if d is not None else []:
                self._event(pod, "Normal", "Killing", f"Stopping container {c['name']}", "kubelet", d.name)
            if d is not None:
                with st.transaction(d) as s:
                    before = dict(s["servers"])
                    kubelet.kill_pod(s, pod["metadata"]["uid"], time.time(), remove=True)
                    moved = s["servers"] != before
                if moved:
                    netd.sync(d)
        return pod

    def create_pod(self, ns: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("kind", "Pod") != "Pod":
            raise ApiError(400, "BadRequest", "the body of the request was not a Pod")
        meta = body.get("metadata") or {}
        name = meta.get("name") or (meta.get("generateName") and meta["generateName"] + uuid.uuid4().hex[:5])
        if not name:
            raise _invalid("Pod", "", "metadata.name", "Required value: name or generateName is required")
        containers = (body.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers:
            raise _invalid("Pod", name, "spec.containers", "Required value")
        for i, c in enumerate(containers):
            for field in ("name", "image"):
                if not isinstance(c, dict) or not c.get(field):
                    raise _invalid("Pod", name, f"spec.containers[{i}].{field}", "Required value")
        with self.lock:
            key = f"{ns}/{name}"
            if key in self.data["pods"]:
                raise ApiError(409, "AlreadyExists", f'pods "{name}" already exists',
                               {"name": name, "group": "", "kind": "pods"})
            spec = _pod_spec_defaults(body["spec"])
            pod = {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"labels": {}, "annotations": {}, **meta, "name": name, "namespace": ns,
                                "uid": str(uuid.uuid4()), "resourceVersion": self._rv(),
                                "creationTimestamp": _now_iso()},
                   "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
            self.data["pods"][key] = pod
            self.data["run"].append(key)
            node = spec.get("nodeName")
            d = self.host_dir(node) if node else None
            if d is not None:
                audit(d, "POST", f"namespaces/{ns}/pods", {"metadata": {"name": name}})
            self._sync_workloads(node if d is not None else None)
            self._save()
            return pod

    def delete_pod(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            pod = self.pod(ns, name)
            d = self.host_dir(pod["spec"].get("nodeName") or "")
            if d is not None:
                audit(d, "DELETE", f"namespaces/{ns}/pods/{name}", None)
            self._remove_pod(f"{ns}/{name}")
            self._save()
        # the reply is the object as the graceful deletion marked it (metav1 deletionTimestamp)
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": _now_iso(),
                                    "deletionGracePeriodSeconds": grace}}

    def _event(self, pod: dict[str, Any], kind: str, reason: str, message: str, component: str,
               host: str | None = None) -> None:
        """Record a core/v1 Event on a pod; a repeat of the same reason and message counts up
        (client-go's EventCorrelator aggregates them so)."""
        meta = pod["metadata"]
        now = _now_iso()
        events = self.data.setdefault("events", [])
        for ev in events:
            if ev["involvedObject"]["uid"] == meta["uid"] and ev["reason"] == reason and ev["message"] == message:
                ev["count"] += 1
                ev["lastTimestamp"] = now
                ev["metadata"]["resourceVersion"] = self._rv()
                return
        events.append({"kind": "Event", "apiVersion": "v1",
                       "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"],
                                    "uid": str(uuid.uuid4()), "resourceVersion": self._rv(), "creationTimestamp": now},
                       "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                          "uid": meta["uid"], "apiVersion": "v1"},
                       "reason": reason, "message": message, "type": kind,
                       "source": {"component": component, **({"host": host} if host else {})},
                       "firstTimestamp": now, "lastTimestamp": now, "count": 1, "eventTime": None,
                       "reportingComponent": component, "reportingInstance": host or ""})
        del events[:-2000]

    def events(self, ns: str | None, field_selector: str) -> list[dict[str, Any]]:
        with self.lock:
            out = [e for e in self.data.get("events", []) if ns is None or e["metadata"]["namespace"] == ns]
        for term in filter(None, field_selector.split(",")):
            k, _, v = term.replace("==", "=").partition("=")
            path = k.split(".")
            out = [e for e in out if str(_dig(e, path) or "") == v]
        return out

    def _free_gpus(self, node: str, s: dict[str, Any], but: str = "") -> int:
        used = sum(kubelet.gpus_requested(c) for p in self.data["pods"].values()
                   if p["spec"].get("nodeName") == node and p["metadata"]["uid"] != but
                   and p["status"].get("phase") not in ("Succeeded", "Failed")
                   for c in p["spec"].get("containers") or [])
        return kubelet.gpu_capacity(s, time.time()) - used

    def _schedule(self, pod: dict[str, Any]) -> None:
        """The default scheduler for one pending pod: a node that is up and Ready, that takes
        work (or whose taints the pod tolerates), whose labels match the pod's nodeSelector and
        that has the GPUs it asks for free; else the pod stays Pending with the scheduler's
        FitError (pkg/scheduler/framework/types.go: "0/N nodes are available: ...")."""
        need = sum(kubelet.gpus_requested(c) for c in pod["spec"]["containers"])
        selector = pod["spec"].get("nodeSelector") or {}
        reasons: dict[str, int] = {}
        names = sorted(self.host_dirs())
        for name in names:
            d = self.root / name
            s = st.load(d)
            node = self._node_object(s)
            why = None
            if not st.is_up(s, time.time()):
                why = "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
            elif node["spec"].get("unschedulable") and not _tolerates(pod, UNSCHEDULABLE_TAINT, "NoSchedule"):
                why = "node(s) were unschedulable"
            elif any(node["metadata"]["labels"].get(k) != v for k, v in selector.items()) or \
                    not _affinity_matches(pod, node["metadata"]["labels"]):
                why = "node(s) didn't match Pod's node affinity/selector"
            elif need and self._free_gpus(name, s) < need:
                why = "Insufficient nvidia.com/gpu"
            if why is None:
                self._bind(pod, name)
                return
            reasons[why] = reasons.get(why, 0) + 1
        # FitError.Error sorts the "COUNT REASON" strings themselves (sort.Strings)
        detail = ", ".join(sorted(f"{n} {w}" for w, n in reasons.items()))
        msg = (f"0/{len(names)} nodes are available: {detail}. preemption: 0/{len(names)} nodes are available: "
               f"{len(names)} Preemption is not helpful for scheduling.")
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
        if (pod["status"].get("conditions") or [{}])[0] != cond:
            self._event(pod, "Warning", "FailedScheduling", msg, "default-scheduler")
            pod["status"] = {"phase": "Pending", "qosClass": pod["status"].get("qosClass", "BestEffort"),
                             "conditions": [cond]}
            pod["metadata"]["resourceVersion"] = self._rv()

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        self._event(pod, "Normal", "Scheduled", f"Successfully assigned {pod['metadata']['namespace']}/"
                                                f"{pod['metadata']['name']} to {node}", "default-scheduler")
        pod["spec"]["nodeName"] = node
        pod["metadata"]["resourceVersion"] = self._rv()
        pod["status"] = {"phase": "Pending", "qosClass": pod["status"].get("qosClass", "BestEffort"),
                         "conditions": [{"type": "PodScheduled", "status": "True"}]}

    def _admit(self, pod: dict[str, Any], s: dict[str, Any]) -> bool:
        """The kubelet's admission of a pod bound to it: the device manager must have the GPUs
        the pod asks for, else the pod fails (a pod pinned with nodeName bypassed the scheduler:
        pkg/kubelet/cm/devicemanager/manager.go "requested number of devices unavailable", wrapped
        by lifecycle's UnexpectedAdmissionError)."""
        if pod["metadata"]["uid"] in self.data["admitted"]:
            return True
        need = sum(kubelet.gpus_requested(c) for c in pod["spec"]["containers"])
        free = self._free_gpus(s["name"], s, but=pod["metadata"]["uid"])
        if need and free < need:
            self._event(pod, "Warning", "UnexpectedAdmissionError",
                        f"Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                        f"Requested: {need}, Available: {max(free, 0)}, which is unexpected", "kubelet", s["name"])
            pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                             "message": f"Pod was rejected: Allocate failed due to requested number of devices "
                                        f"unavailable for nvidia.com/gpu. Requested: {need}, Available: {max(free, 0)}, "
                                        "which is unexpected", "startTime": _now_iso()}
            return False
        self.data["admitted"].append(pod["metadata"]["uid"])
        if not pod["status"].get("podIP"):
            # the pod network: each pod its own address, reachable through the API server's proxy
            pod["status"]["podIP"] = netd.allocate(self.root)
            pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
        return True

    def _sync_workloads(self, only: str | None = None) -> bool:
        """Owners create the pods they lack, the scheduler places pending ones, and each node's
        kubelet runs what is bound to it (``only``: that node's kubelet alone). True when
        anything may have changed."""
        if not self.data["run"] and not self.data["workloads"]:
            return False
        self._controllers()
        for pod in self._live():
            if not pod["spec"].get("nodeName"):
                self._schedule(pod)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self._live():
            node = pod["spec"].get("nodeName")
            if node and (only is None or node == only):
                by_node.setdefault(node, []).append(pod)
        for node, pods in sorted(by_node.items()):
            d = self.host_dir(node)
            if d is None:
                continue
            with st.transaction(d) as s:
                before = {k: v.get("instance") for k, v in s["servers"].items()}
                now = time.time()
                for pod in pods:
                    posted = json.dumps(pod["status"], sort_keys=True)
                    if (not st.is_up(s, now) or self._admit(pod, s)) and pod["metadata"]["uid"] in self.data["admitted"]:
                        said: list[kubelet.Event] = []
                        kubelet.sync_pod(s, d, pod, now, said)
                        for kind, reason, message in said:
                            self._event(pod, kind, reason, message, "kubelet", node)
                    if json.dumps(pod["status"], sort_keys=True) != posted:
                        # a status the kubelet posts is a new version of the object (what a watch sees)
                        pod["metadata"]["resourceVersion"] = self._rv()
                moved = {k: v.get("instance") for k, v in s["servers"].items()} != before
            if moved:
                netd.sync(d)
        return True

    def _controllers(self) -> None:
        """Deployments (through their ReplicaSet), StatefulSets and LeaderWorkerSets create the
        pods they lack; a LeaderWorkerSet with RecreateGroupOnPodRestart whose group lost a pod,
        or one of whose containers restarted, deletes the rest of the group and creates it whole
        again."""
        for obj in list(self.data["workloads"].values()):
            if obj["kind"] == "LeaderWorkerSet" and not self.lws_crd:
                continue
            uid = ctl.rs_uid(obj) if obj["kind"] == "Deployment" else obj["metadata"]["uid"]
            ns = obj["metadata"]["namespace"]
            mine = [p for p in self._live() if p["metadata"]["namespace"] == ns and ctl.owned_by(p, uid)]
            want = ctl.wanted(obj)
            if obj["kind"] == "Deployment":
                for _, _, body in want[len(mine):]:
                    self._create_owned(ns, body)
                continue
            have = {p["metadata"]["name"] for p in mine}
            if obj["kind"] == "LeaderWorkerSet" and \
                    obj["spec"]["leaderWorkerTemplate"].get("restartPolicy") == ctl.RECREATE_GROUP:
                groups: dict[int, list[str]] = {}
                for pname, g, _ in want:
                    groups.setdefault(g, []).append(pname or "")
                restarted = {p["metadata"]["name"] for p in mine
                             if any(cs.get("restartCount", 0) > 0 for cs in p["status"].get("containerStatuses") or [])}
                for members in groups.values():
                    # "the leader pod will be deleted if the worker pod is deleted or any containers
                    # were restarted" (kubernetes-sigs/lws pkg/controllers/pod_controller.go
                    # handleRestartPolicy, podutils.ContainerRestarted)
                    if 0 < sum(m in have for m in members) < len(members) or restarted & set(members):
                        for m in members:
                            if m in have:
                                self._remove_pod(f"{ns}/{m}")
                                have.discard(m)
            for pname, _, body in want:
                if pname not in have:
                    self._create_owned(ns, body)

    def _create_owned(self, ns: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        name = meta.get("name") or meta["generateName"] + uuid.uuid4().hex[:5]
        spec = _pod_spec_defaults(body["spec"])
        key = f"{ns}/{name}"
        self.data["pods"][key] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {**{k: v for k, v in meta.items() if k != "generateName"}, "name": name,
                         "uid": str(uuid.uuid4()), "resourceVersion": self._rv(), "creationTimestamp": _now_iso()},
            "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
        self.data["run"].append(key)

    def pod_log(self, ns: str, name: str, q: dict[str, str]) -> str:
        """``GET pods/NAME/log``: the kubelet's log of a container (``container``, ``previous``,
        ``tailLines``), or the 400 the API server answers (pkg/registry/core/pod/strategy.go
        LogLocation; pkg/kubelet/kubelet_pods.go validateContainerLogStatus)."""
        with self.lock:
            pod = self.pod(ns, name)
            names = [c["name"] for c in pod["spec"]["containers"]]
            cname = q.get("container") or ""
            if not cname:
                if len(names) > 1:
                    raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}, choose "
                                                      f"one of: [{' '.join(names)}]")
                cname = names[0]
            if cname not in names:
                raise ApiError(400, "BadRequest", f"container {cname} is not valid for pod {name}")
            node = pod["spec"].get("nodeName")
            if not node:
                raise ApiError(400, "BadRequest", f"pod {name} does not have a host assigned")
            key = f"{ns}/{name}"
            d = self.host_dir(node)
            if key not in self.data["run"] or d is None:
                return ""
            self._sync_workloads(node)
            self._save()
            lines = kubelet.log_lines(st.load(d), pod, cname, q.get("previous") == "true")
        if isinstance(lines, str):
            raise ApiError(400, "BadRequest", lines)
        if q.get("tailLines"):
            try:
                n = int(q["tailLines"])
            except ValueError:
                raise ApiError(400, "BadRequest", f'strconv.ParseInt: parsing "{q["tailLines"]}": invalid syntax') \
                    from None
            lines = lines[-n:] if n > 0 else []
        return "".join(ln + "\n" for ln in lines)

    def proxy_target(self, ns: str, name: str, port: str) -> tuple[str, int]:
        """Where ``pods/NAME[:PORT]/proxy`` goes: the pod's address and port (without a port, the
        first declared containerPort, as pkg/registry/core/pod/strategy.go ResourceLocation picks
        it). A pod that is not running has no address to dial."""
        with self.lock:
            pod = self.pod(ns, name)
            node = pod["spec"].get("nodeName")
            if node:
                self._sync_workloads(node)
                self._save()
            if not port:
                declared = [pt.get("containerPort") for c in pod["spec"]["containers"] for pt in c.get("ports") or []]
                port = str(declared[0]) if declared else "80"
            ip = pod["status"].get("podIP")
            if not ip:
                raise ApiError(503, "ServiceUnavailable", f"pod {name} does not have a host assigned"
                               if not node else f"error trying to reach service: pod {name} has no IP")
        return ip, int(port)

    # ------------------------------------------------------------ owners

    def workloads(self, kind: str, ns: str | None) -> list[dict[str, Any]]:
        with self.lock:
            self._sync_workloads()
            self._save()
            out = [self._with_status(o) for o in self.data["workloads"].values()
                   if o["kind"] == kind and (ns is None or o["metadata"]["namespace"] == ns)]
        return sorted(out, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def workload(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            self._sync_workloads()
            self._save()
            obj = self.data["workloads"].get(f"{kind}/{ns}/{name}")
            if obj is None:
                raise not_found(ctl.KINDS[kind][1], name, ctl.KINDS[kind][0].rsplit("/", 1)[0]
                                if "/" in ctl.KINDS[kind][0] else "")
            return self._with_status(obj)

    def _with_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        uid = ctl.rs_uid(obj) if obj["kind"] == "Deployment" else obj["metadata"]["uid"]
        pods = [p for p in self._live() if p["metadata"]["namespace"] == obj["metadata"]["namespace"]
                and ctl.owned_by(p, uid)]
        return {**obj, "status": ctl.status(obj, pods)}

    def replicasets(self, ns: str | None) -> list[dict[str, Any]]:
        out = []
        for dep in self.workloads("Deployment", ns):
            rs = ctl.replicaset_name(dep)
            out.append({"kind": "ReplicaSet", "apiVersion": "apps/v1",
                        "metadata": {"name": rs, "namespace": dep["metadata"]["namespace"], "uid": ctl.rs_uid(dep),
                                     "creationTimestamp": dep["metadata"]["creationTimestamp"],
                                     "labels": {"pod-template-hash": rs.rsplit("-", 1)[1]},
                                     "ownerReferences": [ctl.owner_ref("apps/v1", "Deployment", dep["metadata"]["name"],
                                                                       dep["metadata"]["uid"])]},
                        "spec": {"replicas": dep["spec"].get("replicas", 1), "template": dep["spec"]["template"]},
                        "status": {k: v for k, v in dep["status"].items() if k in
                                   ("replicas", "readyReplicas", "availableReplicas")}})
        return out

    def create_workload(self, kind: str, ns: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("kind", kind) != kind:
            raise ApiError(400, "BadRequest", f"the body of the request was not a {kind}")
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise _invalid(kind, "", "metadata.name", "Required value: name or generateName is required")
        bad = ctl.invalid(kind, body)
        if bad:
            field, _, why = bad.partition(": ")
            raise _invalid(kind, name, field, why)
        plural, group = ctl.KINDS[kind][1], ctl.KINDS[kind][0].rsplit("/", 1)[0]
        with self.lock:
            key = f"{kind}/{ns}/{name}"
            if key in self.data["workloads"]:
                raise ApiError(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists',
                               {"name": name, "group": group, "kind": plural})
            obj = ctl.new_object(kind, ns, body)
            obj["metadata"] |= {"uid": str(uuid.uuid4()), "resourceVersion": self._rv(), "generation": 1,
                                "creationTimestamp": _now_iso()}
            self.data["workloads"][key] = obj
            self._sync_workloads()
            self._save()
            return self._with_status(obj)

    def delete_workload(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        """Deleting an owner deletes its pods (the garbage collector's background propagation)."""
        plural, group = ctl.KINDS[kind][1], ctl.KINDS[kind][0].rsplit("/", 1)[0]
        with self.lock:
            obj = self.data["workloads"].pop(f"{kind}/{ns}/{name}", None)
            if obj is None:
                raise not_found(plural, name, group)
            uid = ctl.rs_uid(obj) if kind == "Deployment" else obj["metadata"]["uid"]
            for p in [p for p in self._live() if p["metadata"]["namespace"] == ns and ctl.owned_by(p, uid)]:
                self._remove_pod(f"{ns}/{p['metadata']['name']}")
            self._save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": group, "kind": plural, "uid": obj["metadata"]["uid"]}}

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
                                "resourceVersion": self._rv(), "creationTimestamp": _now_iso()},
                   "spec": dict(body.get("spec") or {})}
            self.data["leases"][f"{ns}/{name}"] = obj
            self._save()
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
                                "resourceVersion": self._rv()}}
            self.data["leases"][f"{ns}/{name}"] = obj
            self._save()
        return obj

    def delete_lease(self, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            self.lease(ns, name)
            del self.data["leases"][f"{ns}/{name}"]
            self._save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "coordination.k8s.io", "kind": "leases"}}


def audit(host_dir: Path, verb: str, path: str, body: Any) -> None:
    """The API server's audit log for one node (``kube-audit.log`` in its host dir): every
    change requested of the node or of a pod on it, so tests can prove each ran once."""
    line = f"{time.time():.6f} {verb} {path}" + (f" {json.dumps(body, sort_keys=True)}" if body is not None else "")
    with open(host_dir / "kube-audit.log", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def audited(host_dir: Path) -> list[str]:
    """The changes the API server was asked for on this node, in order (without timestamps)."""
    try:
        lines = (Path(host_dir) / "kube-audit.log").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [ln.split(" ", 1)[1] for ln in lines if " " in ln]


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
            if method == "GET" and q.get("watch") in ("true", "1") and WATCH_PODS.match(u.path):
                self._watch_pods(WATCH_PODS.match(u.path)["ns"], q)
                return
            m = LOG.match(u.path)
            if m and method == "GET":
                self._authorize("get", "pods/log", "", m["ns"], m["name"])
                self._send_text(200, self.cluster.pod_log(m["ns"], m["name"], q))
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

    def _watch_pods(self, ns: str | None, q: dict[str, str]) -> None:
        """``GET .../pods?watch=true``: a stream of watch events, one JSON object per line
        (``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": Pod}``), as the API server's watch
        handler writes them (k8s.io/apiserver endpoints/handlers/watch.go). Without a
        ``resourceVersion`` (or with "0") it starts with an ADDED event for every pod that
        matches; with one, only later changes come. It ends after ``timeoutSeconds`` or when the
        client goes; the pods are looked at again every 0.2 s (the kubelets posting status)."""
        c = self.cluster
        fs, ls = q.get("fieldSelector", ""), q.get("labelSelector", "")
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        def look() -> dict[str, dict[str, Any]]:
            with c.lock:        # copies: the objects change under the kubelets
                return {p["metadata"]["uid"]: json.loads(json.dumps(p)) for p in c.pods(ns, fs, ls)}

        seen = look()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(kind: str, obj: dict[str, Any]) -> None:
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        try:
            if q.get("resourceVersion") in (None, "", "0"):
                for pod in seen.values():
                    emit("ADDED", pod)
            while time.monotonic() < deadline:
                time.sleep(0.2)
                now = look()
                for uid, pod in now.items():
                    if uid not in seen:
                        emit("ADDED", pod)
                    elif pod["metadata"]["resourceVersion"] != seen[uid]["metadata"]["resourceVersion"]:
                        emit("MODIFIED", pod)
                for uid, pod in seen.items():
                    if uid not in now:
                        emit("DELETED", pod)
                seen = now
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
        import http.client

        verb = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "get")
        self._authorize(verb, "pods/proxy", "", m["ns"], m["name"])
        ip, port = self.cluster.proxy_target(m["ns"], m["name"], m["port"] or "")
        n = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(n) if n else None
        path = (m["path"] or "/") + (f"?{query}" if query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization", "connection",
                                                                              "content-length")}
        conn = http.client.HTTPConnection(ip, port, timeout=600)
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
        except OSError:
            conn.close()
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: dial tcp {ip}:{port}: "
                                                      "connect: connection refused") from None
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
            nodes = [c.node(n) for n in c.host_dirs()]
            return 200, _list("NodeList", "v1", nodes, c.data["rv"])
        if len(p) == 5 and path.startswith("/api/v1/nodes/"):
            if method == "GET":
                return 200, c.node(p[4])
            if method == "PATCH":
                return 200, c.patch_node(p[4], body, self.headers.get("Content-Type", ""))
        if path == "/api/v1/pods" and method == "GET":
            items = c.pods(None, q.get("fieldSelector", ""), q.get("labelSelector", ""))
            return 200, _list("PodList", "v1", items, c.data["rv"])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "GET":
            items = c.pods(p[4], q.get("fieldSelector", ""), q.get("labelSelector", ""))
            return 200, _list("PodList", "v1", items, c.data["rv"])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "POST":
            self._authorize("create", "pods", "", p[4], None)
            return 201, c.create_pod(p[4], body)
        if len(p) == 7 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "GET":
            with c.lock:
                c._sync_workloads(c.pod(p[4], p[6])["spec"].get("nodeName") or None)
                c._save()
            return 200, c.pod(p[4], p[6])
        if len(p) == 7 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "pods" and method == "DELETE":
            self._authorize("delete", "pods", "", p[4], p[6])
            return 200, c.delete_pod(p[4], p[6])
        if len(p) == 6 and p[:4] == ["", "api", "v1", "namespaces"] and p[5] == "events" and method == "GET":
            return 200, _list("EventList", "v1", c.events(p[4], q.get("fieldSelector", "")), c.data["rv"])
        if path == "/api/v1/events" and method == "GET":
            return 200, _list("EventList", "v1", c.events(None, q.get("fieldSelector", "")), c.data["rv"])
        wl = kubediscovery.workload_path(p, c.lws_crd)
        if wl is not None:
            return self._workload_route(method, wl, body)
        if len(p) == 8 and p[5] == "pods" and p[7] == "eviction" and method == "POST":
            # kind and apiVersion may be left out (the endpoint knows its type), not be wrong
            if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
                raise ApiError(400, "BadRequest", "the body of the request was not an Eviction")
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
            items = c.replicasets(ns)
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
            return 200, _list(f"{kind}List", api_version, c.workloads(kind, ns), c.data["rv"])
        if method == "GET" and ns and name:
            self._authorize("get", plural, group, ns, name)
            return 200, c.workload(kind, ns, name)
        if method == "POST" and ns and name is None:
            self._authorize("create", plural, group, ns, None)
            return 201, c.create_workload(kind, ns, body)
        if method == "DELETE" and ns and name:
            self._authorize("delete", plural, group, ns, name)
            return 200, c.delete_workload(kind, ns, name)
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
