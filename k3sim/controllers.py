"""The workload controllers of the simulated cluster: what pods a Deployment (through its
ReplicaSet), a StatefulSet and a LeaderWorkerSet want, and the status each reports from its pods.

Pure functions over API objects (dicts): ``wanted(obj)`` names the pods an owner should have
and builds each from its template; ``status(obj, pods)`` is the owner's status from the pods it
owns. The API server (sim/kubeapi.py) creates what is missing, schedules it and has the kubelet
run it; nothing here stores, schedules or runs anything.

LeaderWorkerSet (kubernetes-sigs/lws): group ``g`` of ``size`` is the leader pod ``NAME-g`` and
the workers ``NAME-g-i`` (i = 1 .. size-1), labelled ``leaderworkerset.sigs.k8s.io/name``,
``/group-index``, ``/worker-index``, ``/group-key``, with hostname and subdomain set so the leader
is ``NAME-g.NAME.NAMESPACE``; every container gets ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and
``LWS_WORKER_INDEX`` first in its env (pkg/webhooks/pod_webhook.go; the constants in
api/leaderworkerset/v1/leaderworkerset_types.go). The default restart policy
``RecreateGroupOnPodRestart`` recreates a whole group when one of its pods goes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
RECREATE_GROUP = "RecreateGroupOnPodRestart"
# kind -> (apiVersion, plural, short name for discovery)
KINDS = {"Deployment": ("apps/v1", "deployments", "deploy"), "StatefulSet": ("apps/v1", "statefulsets", "sts"),
         "LeaderWorkerSet": (f"{LWS_GROUP}/v1", "leaderworkersets", "lws")}
PLURAL_KIND = {v[1]: k for k, v in KINDS.items()}


def template_hash(template: dict[str, Any]) -> str:
    """The pod-template-hash a Deployment names its ReplicaSet by (10 characters of a hash)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join("bcdfghjklmnpqrstvwxz2456789"[int(digest[i:i + 2], 16) % 27] for i in range(0, 20, 2))


def owner_ref(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


# (uid, resourceVersion) of a Deployment -> its ReplicaSet's name: an object changed through the
# API has a new resourceVersion, and hashing every Deployment's template on every look at the
# cluster made each request cost as much as the cluster's size
_RS_NAMES: dict[tuple[Any, Any], str] = {}


def replicaset_name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    key = (meta.get("uid"), meta.get("resourceVersion"))
    name = _RS_NAMES.get(key) if key[0] and key[1] else None
    if name is None or not name.startswith(f"{meta['name']}-"):
        name = f"{meta['name']}-{template_hash(obj['spec']['template'])}"
        if key[0] and key[1]:
            if len(_RS_NAMES) > 100_000:
                _RS_NAMES.clear()
            _RS_NAMES[key] = name
    return name


def _pod(template: dict[str, Any], name: str | None, ns: str, owner: dict[str, Any],
         labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         env: list[dict[str, str]] | None = None, hostname: str | None = None,
         subdomain: str | None = None) -> dict[str, Any]:
    t = copy.deepcopy(template)
    meta = t.get("metadata") or {}
    spec = t.get("spec") or {}
    if env:
        for c in spec.get("containers") or []:
            c["env"] = [*env, *(c.get("env") or [])]
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**({"name": name} if name else {"generateName": owner["name"] + "-"}), "namespace": ns,
                         "labels": {**(meta.get("labels") or {}), **(labels or {})},
                         "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                         "ownerReferences": [owner]},
            "spec": spec}


def wanted(obj: dict[str, Any]) -> list[tuple[str | None, int, dict[str, Any]]]:
    """The pods the owner wants, as ``(name or None for a generated one, group, pod body)``;
    a Deployment's are owned by its ReplicaSet and named by the API server."""
    kind, meta, spec = obj["kind"], obj["metadata"], obj["spec"]
    ns, name = meta["namespace"], meta["name"]
    replicas = int(spec.get("replicas", 1))
    if kind == "Deployment":
        rs = replicaset_name(obj)
        h = rs.rsplit("-", 1)[1]
        owner = owner_ref("apps/v1", "ReplicaSet", rs, rs_uid(obj))
        return [(None, i, _pod(spec["template"], None, ns, owner, {"pod-template-hash": h}))
                for i in range(replicas)]
    if kind == "StatefulSet":
        owner = owner_ref("apps/v1", "StatefulSet", name, meta["uid"])
        return [(f"{name}-{i}", i, _pod(spec["template"], f"{name}-{i}", ns, owner,
                                        {"statefulset.kubernetes.io/pod-name": f"{name}-{i}",
                                         "apps.kubernetes.io/pod-index": str(i)},
                                        hostname=f"{name}-{i}", subdomain=spec.get("serviceName") or None))
                for i in range(replicas)]
    lwt = spec["leaderWorkerTemplate"]
    size = int(lwt.get("size", 1))
    owner = owner_ref(f"{LWS_GROUP}/v1", "LeaderWorkerSet", name, meta["uid"])
    out: list[tuple[str | None, int, dict[str, Any]]] = []
    for g in range(replicas):
        leader = f"{name}-{g}"
        key = hashlib.sha1(f"{ns}/{leader}".encode()).hexdigest()
        for w in range(size):
            pname = leader if w == 0 else f"{leader}-{w}"
            template = lwt.get("leaderTemplate") if w == 0 and lwt.get("leaderTemplate") else lwt["workerTemplate"]
            env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{leader}.{name}.{ns}"},
                   {"name": "LWS_GROUP_SIZE", "value": str(size)}, {"name": "LWS_WORKER_INDEX", "value": str(w)}]
            labels = {LWS_PREFIX + "name": name, LWS_PREFIX + "group-index": str(g),
                      LWS_PREFIX + "worker-index": str(w), LWS_PREFIX + "group-key": key}
            ann = {LWS_PREFIX + "size": str(size), **({LWS_PREFIX + "leader-name": leader} if w else {})}
            out.append((pname, g, _pod(template, pname, ns, owner, labels, ann, env, hostname=pname,
                                       subdomain=name)))
    return out


def rs_uid(obj: dict[str, Any]) -> str:
    import uuid

    name = replicaset_name(obj)
    key = (obj["metadata"]["uid"], name)
    uid = _RS_UIDS.get(key)
    if uid is None:
        if len(_RS_UIDS) > 100_000:
            _RS_UIDS.clear()
        uid = _RS_UIDS[key] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{key[0]}/{name}"))
    return uid


_RS_UIDS: dict[tuple[Any, str], str] = {}       # (Deployment uid, ReplicaSet name) -> the ReplicaSet's uid


def owned_by(pod: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or [])


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def status(obj: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The owner's status from its live pods (``readyReplicas`` is what "back in service" reads)."""
    kind, spec = obj["kind"], obj["spec"]
    replicas = int(spec.get("replicas", 1))
    gen = obj["metadata"].get("generation", 1)
    if kind == "LeaderWorkerSet":
        size = int(spec["leaderWorkerTemplate"].get("size", 1))
        groups: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            groups.setdefault(p["metadata"]["labels"].get(LWS_PREFIX + "group-index", ""), []).append(p)
        ready = sum(1 for g in groups.values() if len(g) == size and all(pod_ready(p) for p in g))
        return {"replicas": len(groups), "readyReplicas": ready, "updatedReplicas": len(groups),
                "hpaPodSelector": f"{LWS_PREFIX}name={obj['metadata']['name']},{LWS_PREFIX}worker-index=0",
                "conditions": [{"type": "Available", "status": "True" if ready == replicas else "False",
                                "reason": "AllGroupsReady" if ready == replicas else "GroupsNotReady",
                                "message": "All replicas are ready" if ready == replicas
                                else "Replicas are progressing"}]}
    ready = sum(1 for p in pods if pod_ready(p))
    out: dict[str, Any] = {"observedGeneration": gen, "replicas": len(pods), "readyReplicas": ready,
                           "updatedReplicas": len(pods), "availableReplicas": ready}
    if kind == "Deployment":
        out["unavailableReplicas"] = max(0, replicas - ready)
        out["conditions"] = [{"type": "Available", "status": "True" if ready >= replicas else "False",
                              "reason": "MinimumReplicasAvailable" if ready >= replicas
                              else "MinimumReplicasUnavailable",
                              "message": "Deployment has minimum availability." if ready >= replicas
                              else "Deployment does not have minimum availability."}]
    if kind == "StatefulSet":
        out["currentReplicas"] = len(pods)
    return out


def new_object(kind: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Defaults the API server fills in on create (replicas 1; LWS size 1 and its restart policy)."""
    spec = copy.deepcopy(body.get("spec") or {})
    spec.setdefault("replicas", 1)
    if kind == "LeaderWorkerSet":
        lwt = spec.setdefault("leaderWorkerTemplate", {})
        lwt.setdefault("size", 1)
        lwt.setdefault("restartPolicy", RECREATE_GROUP)
        spec.setdefault("startupPolicy", "LeaderCreated")
    return {"apiVersion": KINDS[kind][0], "kind": kind, "metadata": {**(body.get("metadata") or {}), "namespace": ns},
            "spec": spec}


def invalid(kind: str, body: dict[str, Any]) -> str | None:
    """What field validation refuses (the API server's ``is invalid`` causes), or None."""
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return "spec: Required value"
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate")
        if not isinstance(lwt, dict) or not isinstance(lwt.get("workerTemplate"), dict):
            return "spec.leaderWorkerTemplate.workerTemplate: Required value"
        templates = [lwt["workerTemplate"]] + ([lwt["leaderTemplate"]] if lwt.get("leaderTemplate") else [])
    else:
        if not isinstance(spec.get("template"), dict):
            return "spec.template: Required value"
        templates = [spec["template"]]
    for t in templates:
        cs = (t.get("spec") or {}).get("containers")
        if not isinstance(cs, list) or not cs:
            return "spec.template.spec.containers: Required value"
    return None
