"""The server-side printing kubectl asks for (``Accept: application/json;as=Table;g=meta.k8s.io``):
the columns the real API server prints for nodes, pods, Deployments, StatefulSets and others
(pkg/printers/internalversion/printers.go), ``-o wide`` columns at priority 1. Pure functions.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

TABLE_KINDS = ("Node", "NodeList", "Pod", "PodList", "Deployment", "DeploymentList", "StatefulSet", "StatefulSetList",
               "LeaderWorkerSet", "LeaderWorkerSetList")


def _age(ts: str) -> str:
    try:
        secs = max(0, int(time.time() - datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
                          .replace(tzinfo=timezone.utc).timestamp()))
    except ValueError:
        return "<unknown>"
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= n:
            return f"{secs // n}{unit}"
    return f"{secs}s"


def as_table(obj: dict[str, Any]) -> dict[str, Any]:
    """The server-side printing kubectl asks for (``Accept: ...;as=Table;g=meta.k8s.io``),
    with the columns the real API server prints for nodes and pods."""
    items = obj.get("items", [obj])
    kind = items[0]["kind"] if items else obj["kind"].removesuffix("List")
    if kind == "Node":
        cols = ["Name", "Status", "Roles", "Age", "Version"]
        rows = []
        for n in items:
            ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
            st_ = "Ready" if ready["status"] == "True" else "NotReady"
            if n["spec"].get("unschedulable"):
                st_ += ",SchedulingDisabled"
            rows.append([n["metadata"]["name"], st_, "<none>", _age(n["metadata"]["creationTimestamp"]),
                         n["status"]["nodeInfo"]["kubeletVersion"]])
    elif kind == "Pod":
        cols = ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
        rows = [_pod_row(x) for x in items]
    elif kind == "Deployment":
        cols = ["Name", "Ready", "Up-to-date", "Available", "Age"]
        rows = [[x["metadata"]["name"], f"{x['status'].get('readyReplicas', 0)}/{x['spec'].get('replicas', 1)}",
                 str(x["status"].get("updatedReplicas", 0)), str(x["status"].get("availableReplicas", 0)),
                 _age(x["metadata"]["creationTimestamp"])] for x in items]
    elif kind == "StatefulSet":
        cols = ["Name", "Ready", "Age"]
        rows = [[x["metadata"]["name"], f"{x['status'].get('readyReplicas', 0)}/{x['spec'].get('replicas', 1)}",
                 _age(x["metadata"]["creationTimestamp"])] for x in items]
    else:
        cols = ["Name", "Age"]
        rows = [[x["metadata"]["name"], _age(x["metadata"].get("creationTimestamp", ""))] for x in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")},
            "columnDefinitions": [{"name": c, "type": "string", "format": "name" if c == "Name" else "",
                                   "description": c, "priority": 1 if c in WIDE_COLUMNS else 0} for c in cols],
            "rows": [{"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": x["metadata"]}} for cells, x in zip(rows, items, strict=True)]}


WIDE_COLUMNS = ("IP", "Node", "Nominated Node", "Readiness Gates")


def _pod_row(x: dict[str, Any]) -> list[str]:
    """kubectl's pod row as the API server prints it (pkg/printers/internalversion/printers.go
    printPod): the phase, else the pod's reason, else a container's waiting or terminated reason;
    restarts summed with the time of the last one."""
    st_ = x["status"]
    cs = st_.get("containerStatuses")
    if cs is None:          # not started yet, or a pod that stands for a Docker host's container
        ready = "1/1" if st_["phase"] == "Running" else f"0/{len(x['spec']['containers'])}"
        return [x["metadata"]["name"], ready, st_.get("reason") or st_["phase"], "0",
                _age(x["metadata"]["creationTimestamp"]),
                st_.get("podIP") or "<none>", x["spec"].get("nodeName") or "<none>", "<none>", "<none>"]
    reason = st_.get("reason") or st_.get("phase", "Pending")
    for c in cs:
        w, t = c["state"].get("waiting"), c["state"].get("terminated")
        if w and w.get("reason"):
            reason = w["reason"]
        elif t and t.get("reason"):
            reason = t["reason"]
    if x["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(c.get("restartCount", 0) for c in cs)
    last = max((c.get("lastState", {}).get("terminated", {}).get("finishedAt", "") for c in cs), default="")
    shown = f"{restarts} ({_age(last)} ago)" if restarts and last else str(restarts)
    ready = sum(1 for c in cs if c.get("ready"))
    return [x["metadata"]["name"], f"{ready}/{len(x['spec']['containers'])}", reason, shown,
            _age(x["metadata"]["creationTimestamp"]), st_.get("podIP") or "<none>",
            x["spec"].get("nodeName") or "<none>", "<none>", "<none>"]
