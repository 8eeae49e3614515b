"""The workload side of the simulated API server: the pods the kubelets run, the default
scheduler, the owners' controllers, and their events, logs and proxy targets.

``Workloads`` holds no objects of its own: it works on the API server's store (``Store``: the
object data, its lock and resourceVersion counter, the hosts, the node objects), which the
server hands it. Pods are created through the API or by an owner (sim/controllers.py says what
an owner wants), placed by ``_schedule``, admitted by the node's device manager and run by the
node's kubelet (sim/kubelet.py) in ``sync``, the loop every read of pods or owners runs first.
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import orjson

from k3sim import controllers as ctl
from k3sim import kubelet, netd
from k3sim import state as st
from k3sim.kubebase import UNSCHEDULABLE_TAINT, ApiError, audit, not_found, now_iso


class Store(Protocol):
    """What the workloads need of the API server's store (sim/kubeapi.py ``Cluster``)."""

    root: Path
    data: dict[str, Any]
    lock: AbstractContextManager[Any]     # re-entrant: a threading.RLock

    @property
    def lws_crd(self) -> bool: ...

    def rv(self) -> str: ...

    def save(self) -> None: ...

    def host_dir(self, name: str) -> Path | None: ...

    def host_dirs(self) -> dict[str, Path]: ...

    def node_object(self, s: dict[str, Any]) -> dict[str, Any]: ...

    def node_labels(self, s: dict[str, Any]) -> dict[str, str]: ...

    def pod(self, ns: str, name: str) -> dict[str, Any]: ...

    def deleted(self, pod: dict[str, Any]) -> None: ...


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


class Workloads:
    """Pods, the scheduler and owners over the API server's store."""

    def __init__(self, store: Store):
        self.store = store
        self._counted = (float("-inf"), 0)
        self._events: tuple[list[dict[str, Any]], dict[tuple[str, str, str], dict[str, Any]]] = ([], {})
        self._by_node: dict[str, list[dict[str, Any]]] | None = None     # during a sync: pods by node
        # during a sync: the nodes as the scheduler sees them, each host's state read once (the
        # scheduler's snapshot of the cluster; a pass places every pending pod from it)
        self._snapshot: dict[str, tuple[dict[str, Any], dict[str, str]]] | None = None
        self._names: list[str] | None = None
        self._free: dict[str, int] = {}          # during a sync: free GPUs by node, until a bind there
        self._looked: tuple[Any, ...] = ()       # the cluster's version when the controllers last looked

    def _live(self) -> list[dict[str, Any]]:
        return [self.store.data["pods"][k] for k in self.store.data["run"] if k in self.store.data["pods"]]

    def remove_pod(self, key: str) -> dict[str, Any]:
        """The pod goes: its kubelet stops its containers (they get their grace; the simulated
        processes stop at once) and removes them; the object is deleted once they have stopped."""
        pod = self.store.data["pods"].pop(key)
        self.store.deleted(pod)
        if pod["metadata"]["uid"] in self.store.data["admitted"]:
            self.store.data["admitted"].remove(pod["metadata"]["uid"])
        if key in self.store.data["run"]:
            self.store.data["run"].remove(key)
            d = self.store.host_dir(pod["spec"].get("nodeName") or "")
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
        with self.store.lock:
            key = f"{ns}/{name}"
            if key in self.store.data["pods"]:
                raise ApiError(409, "AlreadyExists", f'pods "{name}" already exists',
                               {"name": name, "group": "", "kind": "pods"})
            spec = _pod_spec_defaults(body["spec"])
            pod = {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"labels": {}, "annotations": {}, **meta, "name": name, "namespace": ns,
                                "uid": str(uuid.uuid4()), "resourceVersion": self.store.rv(),
                                "creationTimestamp": now_iso()},
                   "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
            self.store.data["pods"][key] = pod
            self.store.data["born"][pod["metadata"]["uid"]] = int(pod["metadata"]["resourceVersion"])
            self.store.data["run"].append(key)
            node = spec.get("nodeName")
            d = self.store.host_dir(node) if node else None
            if d is not None:
                audit(d, "POST", f"namespaces/{ns}/pods", {"metadata": {"name": name}})
            self.sync(node if d is not None else None)
            self.store.save()
            return pod

    def delete_pod(self, ns: str, name: str) -> dict[str, Any]:
        with self.store.lock:
            pod = self.store.pod(ns, name)
            d = self.store.host_dir(pod["spec"].get("nodeName") or "")
            if d is not None:
                audit(d, "DELETE", f"namespaces/{ns}/pods/{name}", None)
            self.remove_pod(f"{ns}/{name}")
            self.store.save()
        # the reply is the object as the graceful deletion marked it (metav1 deletionTimestamp)
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": now_iso(),
                                    "deletionGracePeriodSeconds": grace}}

    def _event(self, pod: dict[str, Any], kind: str, reason: str, message: str, component: str,
               host: str | None = None) -> None:
        """Record a core/v1 Event on a pod; a repeat of the same reason and message counts up
        (client-go's EventCorrelator aggregates them so)."""
        meta = pod["metadata"]
        now = now_iso()
        events = self.store.data.setdefault("events", [])
        if self._events[0] is not events or len(self._events[1]) != len(events):
            # (an index of the events kept, rebuilt when the list is another or was trimmed: a
            # scan of 2,000 events per event made every pod's start cost the cluster's size)
            self._events = (events, {(e["involvedObject"]["uid"], e["reason"], e["message"]): e for e in events})
        ev = self._events[1].get((meta["uid"], reason, message))
        if ev is not None:
            ev["count"] += 1
            ev["lastTimestamp"] = now
            ev["metadata"]["resourceVersion"] = self.store.rv()
            return
        events.append({"kind": "Event", "apiVersion": "v1",
                       "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"],
                                    "uid": str(uuid.uuid4()), "resourceVersion": self.store.rv(), "creationTimestamp": now},
                       "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                          "uid": meta["uid"], "apiVersion": "v1"},
                       "reason": reason, "message": message, "type": kind,
                       "source": {"component": component, **({"host": host} if host else {})},
                       "firstTimestamp": now, "lastTimestamp": now, "count": 1, "eventTime": None,
                       "reportingComponent": component, "reportingInstance": host or ""})
        e = events[-1]
        self._events[1][(e["involvedObject"]["uid"], e["reason"], e["message"])] = e
        if len(events) > 2000:
            for old in events[:-2000]:
                self._events[1].pop((old["involvedObject"]["uid"], old["reason"], old["message"]), None)
            del events[:-2000]

    def events(self, ns: str | None, field_selector: str) -> list[dict[str, Any]]:
        with self.store.lock:
            out = [e for e in self.store.data.get("events", []) if ns is None or e["metadata"]["namespace"] == ns]
        for term in filter(None, field_selector.split(",")):
            k, _, v = term.replace("==", "=").partition("=")
            path = k.split(".")
            out = [e for e in out if str(_dig(e, path) or "") == v]
        return out

    def _free_gpus(self, node: str, s: dict[str, Any], but: str = "") -> int:
        if not but and self._snapshot is not None and node in self._free:
            return self._free[node]
        if self._by_node is None:
            # the pods by node, once per sync (bind keeps it): a scan of every pod for each pod
            # placed or admitted made starting a thousand pods quadratic
            self._by_node = {}
            for p in self.store.data["pods"].values():
                self._by_node.setdefault(p["spec"].get("nodeName") or "", []).append(p)
        used = sum(kubelet.gpus_requested(c) for p in self._by_node.get(node, [])
                   if p["spec"].get("nodeName") == node and p["metadata"]["uid"] != but
                   and p["status"].get("phase") not in ("Succeeded", "Failed")
                   for c in p["spec"].get("containers") or [])
        free = kubelet.gpu_capacity(s, time.time()) - used
        if not but and self._snapshot is not None:
            self._free[node] = free
        return free

    def _schedule(self, pod: dict[str, Any]) -> None:
        """The default scheduler for one pending pod: a node that is up and Ready, that takes
        work (or whose taints the pod tolerates), whose labels match the pod's nodeSelector and
        that has the GPUs it asks for free; else the pod stays Pending with the scheduler's
        FitError (pkg/scheduler/framework/types.go: "0/N nodes are available: ...")."""
        need = sum(kubelet.gpus_requested(c) for c in pod["spec"]["containers"])
        selector = pod["spec"].get("nodeSelector") or {}
        reasons: dict[str, int] = {}
        # a pod pinned to one node by its hostname label is looked at on that node alone (every
        # other node fails its selector): the same answer as looking at every node, without
        # loading a thousand hosts' state per pending pod
        pinned = selector.get("kubernetes.io/hostname")
        if pinned and self.store.host_dir(pinned) is not None:
            names = [pinned]
        else:
            if self._names is None:
                self._names = list(self.store.host_dirs())
            names = self._names
        for name in names:
            s, labels = self._node_state(name)
            why = None
            if not st.is_up(s, time.time()):
                why = "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
            elif s["scheduler"]["state"] != "schedulable" and not _tolerates(pod, UNSCHEDULABLE_TAINT, "NoSchedule"):
                why = "node(s) were unschedulable"
            elif any(labels.get(k) != v for k, v in selector.items()) or not _affinity_matches(pod, labels):
                why = "node(s) didn't match Pod's node affinity/selector"
            elif need and self._free_gpus(name, s) < need:
                why = "Insufficient nvidia.com/gpu"
            if why is None:
                self.bind(pod, name)
                return
            reasons[why] = reasons.get(why, 0) + 1
        total = len(names)
        if len(names) == 1 and pinned == names[0]:
            total = self._node_count()
            if total > 1:
                mismatch = "node(s) didn't match Pod's node affinity/selector"
                reasons[mismatch] = reasons.get(mismatch, 0) + total - 1
        # FitError.Error sorts the "COUNT REASON" strings themselves (sort.Strings)
        detail = ", ".join(sorted(f"{n} {w}" for w, n in reasons.items()))
        msg = (f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are available: "
               f"{total} Preemption is not helpful for scheduling.")
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
        if (pod["status"].get("conditions") or [{}])[0] != cond:
            self._event(pod, "Warning", "FailedScheduling", msg, "default-scheduler")
            pod["status"] = {"phase": "Pending", "qosClass": pod["status"].get("qosClass", "BestEffort"),
                             "conditions": [cond]}
            pod["metadata"]["resourceVersion"] = self.store.rv()

    def _node_state(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        """A host's state and its Node's labels as this scheduling pass sees them (read once a
        pass; read-only)."""
        if self._snapshot is not None and name in self._snapshot:
            return self._snapshot[name]
        s = st.load(self.store.root / name)
        view = (s, self.store.node_labels(s))
        if self._snapshot is not None:
            self._snapshot[name] = view
        return view

    def _node_count(self) -> int:
        """How many nodes the cluster has, listed at most every 10 s (the hosts of a simulated
        cluster are made before its API server starts)."""
        now = time.monotonic()
        if now - self._counted[0] > 10.0:
            self._counted = (now, len(self.store.host_dirs()))
        return self._counted[1]

    def bind(self, pod: dict[str, Any], node: str) -> None:
        self._event(pod, "Normal", "Scheduled", f"Successfully assigned {pod['metadata']['namespace']}/"
                                                f"{pod['metadata']['name']} to {node}", "default-scheduler")
        pod["spec"]["nodeName"] = node
        if self._by_node is not None:
            self._by_node.setdefault(node, []).append(pod)
        self._free.pop(node, None)
        pod["metadata"]["resourceVersion"] = self.store.rv()
        pod["status"] = {"phase": "Pending", "qosClass": pod["status"].get("qosClass", "BestEffort"),
                         "conditions": [{"type": "PodScheduled", "status": "True"}]}

    def _admit(self, pod: dict[str, Any], s: dict[str, Any]) -> bool:
        """The kubelet's admission of a pod bound to it: the device manager must have the GPUs
        the pod asks for, else the pod fails (a pod pinned with nodeName bypassed the scheduler:
        pkg/kubelet/cm/devicemanager/manager.go "requested number of devices unavailable", wrapped
        by lifecycle's UnexpectedAdmissionError)."""
        if pod["metadata"]["uid"] in self.store.data["admitted"]:
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
                                        "which is unexpected", "startTime": now_iso()}
            return False
        self.store.data["admitted"].append(pod["metadata"]["uid"])
        if not pod["status"].get("podIP"):
            # the pod network: each pod its own address, reachable through the API server's proxy;
            # a hostNetwork pod has the node's (the kubelet reports the node's IPs as its podIPs:
            # pkg/kubelet/kubelet_pods.go generateAPIPodStatus)
            pod["status"]["podIP"] = s["address"] if pod["spec"].get("hostNetwork") and s.get("address") \
                else netd.allocate(self.store.root)
            pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
        return True

    def sync_node(self, node: str) -> None:
        """``sync`` of one node's kubelet, saved only when it changed something (a read of a
        pod, its log or its proxy: most find the cluster as it was)."""
        rv = self.store.data["rv"]
        self.sync(node)
        if self.store.data["rv"] != rv:
            self.store.save()

    def sync(self, only: str | None = None, kubelets: bool = True) -> bool:
        """Owners create the pods they lack, the scheduler places pending ones, and each node's
        kubelet runs what is bound to it (``only``: that node's kubelet alone; ``kubelets=False``:
        none). True when anything may have changed."""
        if not self.store.data["run"] and not self.store.data["workloads"]:
            return False
        # the owners' controllers act on a change of a pod or an owner, each of which is a new
        # resourceVersion: with none since their last look they have nothing to do
        looked = (self.store.data["rv"], self.store.lws_crd, len(self.store.data["run"]))
        if looked != self._looked:
            self._controllers()
            self._looked = (self.store.data["rv"], self.store.lws_crd, len(self.store.data["run"]))
        self._by_node, self._snapshot, self._names, self._free = None, {}, None, {}
        try:
            return self._place_and_run(only, kubelets)
        finally:
            self._by_node, self._snapshot, self._names, self._free = None, None, None, {}

    def _place_and_run(self, only: str | None, kubelets: bool) -> bool:
        for pod in self._live():
            if not pod["spec"].get("nodeName"):
                self._schedule(pod)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self._live() if kubelets else []:
            node = pod["spec"].get("nodeName")
            if node and (only is None or node == only):
                by_node.setdefault(node, []).append(pod)
        for node, pods in sorted(by_node.items()):
            d = self.store.host_dir(node)
            if d is None:
                continue
            with st.transaction(d) as s:
                before = {k: v.get("instance") for k, v in s["servers"].items()}
                now = time.time()
                for pod in pods:
                    posted = json.dumps(pod["status"], sort_keys=True)
                    if (not st.is_up(s, now) or self._admit(pod, s)) and pod["metadata"]["uid"] in self.store.data["admitted"]:
                        said: list[kubelet.Event] = []
                        kubelet.sync_pod(s, d, pod, now, said)
                        for kind, reason, message in said:
                            self._event(pod, kind, reason, message, "kubelet", node)
                    if json.dumps(pod["status"], sort_keys=True) != posted:
                        # a status the kubelet posts is a new version of the object (what a watch sees)
                        pod["metadata"]["resourceVersion"] = self.store.rv()
                moved = {k: v.get("instance") for k, v in s["servers"].items()} != before
            if moved:
                netd.sync(d)
        return True

    def _controllers(self) -> None:
        """Deployments (through their ReplicaSet), StatefulSets and LeaderWorkerSets create the
        pods they lack; a LeaderWorkerSet with RecreateGroupOnPodRestart whose group lost a pod,
        or one of whose containers restarted, deletes the rest of the group and creates it whole
        again."""
        # the live pods by (namespace, owner uid), once: a scan per owner made every request
        # quadratic in a cluster of many owners (one Deployment per node)
        owned: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in self._live():
            for r in p["metadata"].get("ownerReferences") or []:
                owned.setdefault((p["metadata"]["namespace"], str(r.get("uid"))), []).append(p)
        for obj in list(self.store.data["workloads"].values()):
            if obj["kind"] == "LeaderWorkerSet" and not self.store.lws_crd:
                continue
            uid = ctl.rs_uid(obj) if obj["kind"] == "Deployment" else obj["metadata"]["uid"]
            ns = obj["metadata"]["namespace"]
            mine = owned.get((ns, uid), [])
            if obj["kind"] == "Deployment":
                if len(mine) < int(obj["spec"].get("replicas", 1)):     # (its pods' bodies only when one lacks)
                    for _, _, body in ctl.wanted(obj)[len(mine):]:
                        self.create_owned(ns, body)
                continue
            want = ctl.wanted(obj)
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
                                self.remove_pod(f"{ns}/{m}")
                                have.discard(m)
            for pname, _, body in want:
                if pname not in have:
                    self.create_owned(ns, body)

    def create_owned(self, ns: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        name = meta.get("name") or meta["generateName"] + uuid.uuid4().hex[:5]
        spec = _pod_spec_defaults(body["spec"])
        key = f"{ns}/{name}"
        self.store.data["pods"][key] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {**{k: v for k, v in meta.items() if k != "generateName"}, "name": name,
                         "uid": str(uuid.uuid4()), "resourceVersion": self.store.rv(), "creationTimestamp": now_iso()},
            "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
        meta = self.store.data["pods"][key]["metadata"]
        self.store.data["born"][meta["uid"]] = int(meta["resourceVersion"])
        self.store.data["run"].append(key)

    def pod_log(self, ns: str, name: str, q: dict[str, str]) -> str:
        """``GET pods/NAME/log``: the kubelet's log of a container (``container``, ``previous``,
        ``tailLines``), or the 400 the API server answers (pkg/registry/core/pod/strategy.go
        LogLocation; pkg/kubelet/kubelet_pods.go validateContainerLogStatus)."""
        with self.store.lock:
            pod = self.store.pod(ns, name)
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
            d = self.store.host_dir(node)
            if key not in self.store.data["run"] or d is None:
                return ""
            self.sync_node(node)
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
        it). A pod without an address is refused there; one whose server does not listen is the
        proxy's 503 (the caller dials)."""
        with self.store.lock:
            pod = self.store.pod(ns, name)
            node = pod["spec"].get("nodeName")
            if node:
                self.sync_node(node)
            if not port:
                declared = [pt.get("containerPort") for c in pod["spec"]["containers"] for pt in c.get("ports") or []]
                port = str(declared[0]) if declared else "80"
            ip = pod["status"].get("podIP")
            if not ip:
                # no address yet (not scheduled or not admitted): IsProxyableIP refuses the empty
                # one (pkg/proxy/util ErrAddressNotAllowed), as a BadRequest
                raise ApiError(400, "BadRequest", "address not allowed")
        return ip, int(port)

    # ------------------------------------------------------------ owners

    def _up_to_date(self, objs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Bring what the owners ``objs`` show up to date: every owner's controller and the
        scheduler catch up, then only the kubelets of the nodes the owners' pods are bound to
        (one owner's read does not post every node's status); saved when anything changed.
        Returns the live pods by (namespace, owner uid), for their statuses."""
        rv = self.store.data["rv"]
        self.sync(kubelets=False)
        uids = {_owner_uid(o) for o in objs}
        nodes = {p["spec"].get("nodeName") for p in self._live()
                 if any(r.get("uid") in uids for r in p["metadata"].get("ownerReferences") or [])}
        for node in sorted(n for n in nodes if n):
            self.sync(node)
        if self.store.data["rv"] != rv:       # saved only when something changed
            self.store.save()
        owned: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in self._live():
            for r in p["metadata"].get("ownerReferences") or []:
                owned.setdefault((p["metadata"]["namespace"], str(r.get("uid"))), []).append(p)
        return owned

    def _owners(self, kind: str, ns: str | None, name: str | None = None) -> list[dict[str, Any]]:
        return [o for o in self.store.data["workloads"].values() if o["kind"] == kind
                and (ns is None or o["metadata"]["namespace"] == ns) and (name is None or o["metadata"]["name"] == name)]

    def workloads(self, kind: str, ns: str | None) -> list[dict[str, Any]]:
        with self.store.lock:
            objs = self._owners(kind, ns)
            owned = self._up_to_date(objs)
            out = [self._with_status(o, owned) for o in objs]
        return sorted(out, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def watched_workloads(self, kind: str, ns: str | None, name: str | None) -> list[dict[str, Any]]:
        """What a watch of owners looks at on each turn: the owners' controllers and the
        scheduler catch up, then only the kubelets of the nodes their pods are bound to (a
        watch of one owner by name does not post every node's status)."""
        with self.store.lock:
            objs = self._owners(kind, ns, name)
            owned = self._up_to_date(objs)
            return [orjson.loads(orjson.dumps(self._with_status(o, owned))) for o in objs]

    def workload(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        with self.store.lock:
            obj = self.store.data["workloads"].get(f"{kind}/{ns}/{name}")
            if obj is None:
                raise not_found(ctl.KINDS[kind][1], name, ctl.KINDS[kind][0].rsplit("/", 1)[0]
                                if "/" in ctl.KINDS[kind][0] else "")
            return self._with_status(obj, self._up_to_date([obj]))

    def _with_status(self, obj: dict[str, Any], owned: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
        return {**obj, "status": ctl.status(obj, owned.get((obj["metadata"]["namespace"], _owner_uid(obj)), []))}

    def replicasets(self, ns: str | None, name: str | None = None) -> list[dict[str, Any]]:
        """The Deployments' ReplicaSets (``name``: that one only, its Deployment alone brought
        up to date)."""
        with self.store.lock:
            deps = [d for d in self._owners("Deployment", ns) if name is None or ctl.replicaset_name(d) == name]
            owned = self._up_to_date(deps)
            deps = sorted((self._with_status(d, owned) for d in deps),
                          key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
        out = []
        for dep in deps:
            rs = ctl.replicaset_name(dep)
            # the Deployment controller's ReplicaSet: the template's labels and the deployment's
            # selector, each with the pod-template-hash added (pkg/controller/deployment/sync.go
            # getNewReplicaSet; apps/v1 requires spec.selector)
            pth = {"pod-template-hash": rs.rsplit("-", 1)[1]}
            labels = {**((dep["spec"]["template"].get("metadata") or {}).get("labels") or {}), **pth}
            selector = dict(dep["spec"].get("selector") or {})
            selector["matchLabels"] = {**(selector.get("matchLabels") or {}), **pth}
            template = {**dep["spec"]["template"],
                        "metadata": {**(dep["spec"]["template"].get("metadata") or {}), "labels": labels}}
            out.append({"kind": "ReplicaSet", "apiVersion": "apps/v1",
                        "metadata": {"name": rs, "namespace": dep["metadata"]["namespace"], "uid": ctl.rs_uid(dep),
                                     "creationTimestamp": dep["metadata"]["creationTimestamp"],
                                     "labels": labels,
                                     "ownerReferences": [ctl.owner_ref("apps/v1", "Deployment", dep["metadata"]["name"],
                                                                       dep["metadata"]["uid"])]},
                        "spec": {"replicas": dep["spec"].get("replicas", 1), "selector": selector,
                                 "template": template},
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
        with self.store.lock:
            key = f"{kind}/{ns}/{name}"
            if key in self.store.data["workloads"]:
                raise ApiError(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists',
                               {"name": name, "group": group, "kind": plural})
            obj = ctl.new_object(kind, ns, body)
            obj["metadata"] |= {"uid": str(uuid.uuid4()), "resourceVersion": self.store.rv(), "generation": 1,
                                "creationTimestamp": now_iso()}
            self.store.data["workloads"][key] = obj
            owned = self._up_to_date([obj])
            self.store.save()
            return self._with_status(obj, owned)

    def delete_workload(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        """Deleting an owner deletes its pods (the garbage collector's background propagation)."""
        plural, group = ctl.KINDS[kind][1], ctl.KINDS[kind][0].rsplit("/", 1)[0]
        with self.store.lock:
            obj = self.store.data["workloads"].pop(f"{kind}/{ns}/{name}", None)
            if obj is None:
                raise not_found(plural, name, group)
            uid = ctl.rs_uid(obj) if kind == "Deployment" else obj["metadata"]["uid"]
            for p in [p for p in self._live() if p["metadata"]["namespace"] == ns and ctl.owned_by(p, uid)]:
                self.remove_pod(f"{ns}/{p['metadata']['name']}")
            self.store.save()
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": group, "kind": plural, "uid": obj["metadata"]["uid"]}}


def _owner_uid(obj: dict[str, Any]) -> str:
    """The uid the owner's pods name in their ownerReferences (a Deployment's ReplicaSet's)."""
    return ctl.rs_uid(obj) if obj["kind"] == "Deployment" else str(obj["metadata"]["uid"])
