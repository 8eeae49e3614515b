"""What the simulated Kubernetes API server serves, as discovery says it: the version, the
groups and resources (``/api``, ``/apis``, ``/api/v1``, ``/apis/GROUP/VERSION``) with their verbs
and short names, and which owner kind a ``/apis/...`` path names. The LeaderWorkerSet group is
served only while its CRD is installed. Pure data and functions; no objects are kept here.
"""

from __future__ import annotations

from typing import Any

from k3sim import controllers as ctl

K8S_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.4", "gitCommit": "a78aa47129b8539636eb86a9d00e31b2720fe06b",
               "gitTreeState": "clean", "buildDate": "2024-12-10T18:19:33Z", "goVersion": "go1.22.9",
               "compiler": "gc", "platform": "linux/amd64"}

# what each group/version serves (name, kind, namespaced, verbs)
RESOURCES: dict[str, list[tuple[str, str, bool, list[str]]]] = {
    "v1": [("nodes", "Node", False, ["get", "list", "patch", "update", "watch"]),
           ("pods", "Pod", True, ["create", "delete", "get", "list", "watch"]),
           ("pods/eviction", "Eviction", True, ["create"]),
           ("pods/log", "Pod", True, ["get"]),
           ("pods/proxy", "PodProxyOptions", True, ["create", "delete", "get", "patch", "update"]),
           ("events", "Event", True, ["list"]),
           ("namespaces", "Namespace", False, ["create", "get", "list"])],
    "apps/v1": [("daemonsets", "DaemonSet", True, ["get", "list"]),
                ("deployments", "Deployment", True, ["create", "delete", "get", "list"]),
                ("replicasets", "ReplicaSet", True, ["get", "list"]),
                ("statefulsets", "StatefulSet", True, ["create", "delete", "get", "list"])],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True, ["get", "list"])],
    "coordination.k8s.io/v1": [("leases", "Lease", True, ["create", "delete", "get", "list", "patch", "update"])],
    "authorization.k8s.io/v1": [("selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ["create"])],
    "nvidia.com/v1alpha1": [("nvidiadrivers", "NVIDIADriver", False, ["get", "list"])],
    # the LeaderWorkerSet CRD (kubernetes-sigs/lws config/crd); served only while installed
    f"{ctl.LWS_GROUP}/v1": [("leaderworkersets", "LeaderWorkerSet", True, ["create", "delete", "get", "list"])],
}
SHORT_NAMES = {"pods": ["po"], "nodes": ["no"], "deployments": ["deploy"], "statefulsets": ["sts"],
               "replicasets": ["rs"], "daemonsets": ["ds"], "leaderworkersets": ["lws"], "events": ["ev"],
               "namespaces": ["ns"]}


def workload_path(p: list[str], lws: bool) -> tuple[str, str | None, str | None] | None:
    """``/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME]`` of an owner kind: (kind, ns, name)."""
    if len(p) < 5 or p[1] != "apis":
        return None
    gv = f"{p[2]}/{p[3]}"
    rest = p[4:]
    ns = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    if not rest or len(rest) > 2:
        return None
    if gv == "apps/v1" and rest[0] == "replicasets":
        return "ReplicaSet", ns, rest[1] if len(rest) == 2 else None
    kind = ctl.PLURAL_KIND.get(rest[0])
    if kind is None or ctl.KINDS[kind][0] != gv or (kind == "LeaderWorkerSet" and not lws):
        return None
    return kind, ns, rest[1] if len(rest) == 2 else None


def discovery(port: int, path: str, lws: bool = True) -> dict[str, Any] | None:
    if path == "/version":
        return K8S_VERSION
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]}
    if path == "/apis":
        groups = []
        for gv in RESOURCES:
            if gv.startswith(ctl.LWS_GROUP) and not lws:
                continue
            if "/" in gv:
                g, v = gv.split("/")
                groups.append({"name": g, "versions": [{"groupVersion": gv, "version": v}],
                               "preferredVersion": {"groupVersion": gv, "version": v}})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    gv = path.removeprefix("/api/").removeprefix("/apis/")
    if gv.startswith(ctl.LWS_GROUP) and not lws:
        return None
    if gv in RESOURCES and path in (f"/api/{gv}", f"/apis/{gv}"):
        res = []
        for name, kind, namespaced, verbs in RESOURCES[gv]:
            r: dict[str, Any] = {"name": name, "singularName": "" if "/" in name else kind.lower(),
                                 "namespaced": namespaced, "kind": kind, "verbs": verbs}
            if name == "pods/eviction":
                r |= {"group": "policy", "version": "v1"}
            if name in SHORT_NAMES:
                r["shortNames"] = SHORT_NAMES[name]
            res.append(r)
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}
    return None
