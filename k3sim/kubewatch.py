"""Watches of the simulated Kubernetes API server: what ``GET ...?watch=true`` streams.

The API server's watch (k8s.io/apiserver ``endpoints/handlers/watch.go``, the watch cache) sends
``{"type": "ADDED"|"MODIFIED"|"DELETED"|"ERROR", "object": ...}`` events, one JSON object per
line, for the objects the field and label selectors match: without a ``resourceVersion`` (or
with "0") the current state first, as ADDED events, then the changes; from a resourceVersion,
the changes since it, or an ERROR event 410 Expired when it is older than the history
(kubernetes.io, "API Concepts: Efficient detection of changes"). Each function here checks the
request (a selector on a field the kind cannot select on is 400, in the API server's words) and
returns the events as an iterator that ends after ``timeoutSeconds``; the HTTP handler
(sim/kubeapi.py) writes them. The simulated cluster's state changes when it is looked at (its
kubelets post status when asked), so a watch looks again every TICK_S: pods by their
resourceVersion and a five-minute history of deletions (``Cluster.tombstones``); nodes and
owners, whose status is computed when read, by what they show (a node's heartbeat time alone is
no change), without history: from a resourceVersion they start at the current state with no
ADDED events. Nothing here writes to the cluster beyond what a read does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from k3sim import controllers as ctl
from k3sim.kubebase import ApiError

TICK_S = 0.2
Event = tuple[str, dict[str, Any]]

POD_FIELDS = {"spec.nodeName": lambda p: p["spec"].get("nodeName"), "metadata.name": lambda p: p["metadata"]["name"],
              "metadata.namespace": lambda p: p["metadata"]["namespace"],
              "status.phase": lambda p: p["status"]["phase"]}
# the node fields a selector may name (pkg/registry/core/node/strategy.go NodeToSelectableFields)
NODE_FIELDS = {"metadata.name": lambda n: n["metadata"]["name"],
               "spec.unschedulable": lambda n: "true" if n["spec"].get("unschedulable") else "false"}
# an owner's: the object meta of a namespaced kind (generic.ObjectMetaFieldsSet)
OWNER_FIELDS = {"metadata.name": lambda o: o["metadata"]["name"],
                "metadata.namespace": lambda o: o["metadata"]["namespace"]}


def _unsupported(k: str) -> ApiError:
    # the API server's own words for a field it cannot select on (the field label conversion)
    return ApiError(400, "BadRequest", f"field label not supported: {k}")


def selector(fields: dict[str, Any], field_selector: str, label_selector: str,
             unknown: Callable[[str], ApiError] = _unsupported) -> Callable[[dict[str, Any]], bool]:
    """A predicate over objects for a field selector (``=``, ``==``, ``!=`` terms on the kind's
    selectable fields) and an equality label selector."""
    terms = []
    for term in filter(None, field_selector.split(",")):
        k, _, v = term.replace("==", "=").partition("=")
        neg = k.endswith("!")
        k = k.rstrip("!")
        if k not in fields:
            raise unknown(k)
        terms.append((fields[k], v, neg))
    labels = [t.replace("==", "=").partition("=")[::2] for t in filter(None, label_selector.split(","))]

    def match(obj: dict[str, Any]) -> bool:
        return all((str(get(obj) or "") == v) != neg for get, v, neg in terms) and \
            all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in labels)
    return match


def pod_matcher(namespace: str | None, field_selector: str, label_selector: str) -> Callable[[dict[str, Any]], bool]:
    def unknown(k: str) -> ApiError:
        return ApiError(400, "BadRequest", f'"{k}" is not a known field selector: only "metadata.name", '
                                           '"metadata.namespace", "spec.nodeName", "status.phase"')
    match = selector(POD_FIELDS, field_selector, label_selector, unknown)
    return (lambda p: p["metadata"]["namespace"] == namespace and match(p)) if namespace else match


def node_matcher(field_selector: str, label_selector: str) -> Callable[[dict[str, Any]], bool]:
    return selector(NODE_FIELDS, field_selector, label_selector)


def named(field_selector: str) -> str | None:
    """The name a ``metadata.name=NAME`` term pins, if any."""
    return next((t.replace("==", "=").split("=", 1)[1] for t in field_selector.split(",")
                 if t.replace("==", "=").startswith("metadata.name=")), None)


def _deadline(q: dict[str, str]) -> float:
    return time.monotonic() + float(q.get("timeoutSeconds") or 1800)


def _changes(look: Callable[[], dict[str, dict[str, Any]]], seen: dict[str, dict[str, Any]], deadline: float,
             changed: Callable[[dict[str, Any], dict[str, Any]], bool],
             gone: Callable[[str, dict[str, Any]], dict[str, Any]] = lambda k, o: o) -> Iterator[Event]:
    while time.monotonic() < deadline:
        time.sleep(TICK_S)
        now = look()
        for k, obj in now.items():
            if k not in seen:
                yield "ADDED", obj
            elif changed(obj, seen[k]):
                yield "MODIFIED", obj
        for k, obj in seen.items():
            if k not in now:
                yield "DELETED", gone(k, obj)
        seen = now


def pod_events(c: Any, ns: str | None, q: dict[str, str]) -> Iterator[Event]:
    """``GET .../pods?watch=true`` over the cluster ``c`` (sim/kubeapi.py ``Cluster``)."""
    fs, ls = q.get("fieldSelector", ""), q.get("labelSelector", "")
    match = pod_matcher(ns, fs, ls)
    deadline = _deadline(q)

    def look() -> dict[str, dict[str, Any]]:
        return {p["metadata"]["uid"]: p for p in c.watched_pods(ns, fs, ls)}

    def tombstone(uid: str, last: dict[str, Any]) -> dict[str, Any]:
        with c.lock:
            return next((t[2] for t in c.tombstones if t[2]["metadata"]["uid"] == uid), last)

    seen = look()
    since = q.get("resourceVersion") or "0"

    def events() -> Iterator[Event]:
        if since == "0":
            for pod in seen.values():
                yield "ADDED", pod
        else:
            with c.lock:
                expired = int(since) < c.history_from
                deleted = [t[2] for t in c.tombstones if t[0] > int(since) and match(t[2])]
                born = dict(c.data.get("born", {}))
            if expired:
                yield "ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": f"too old resource version: {since} ({c.history_from})",
                                "reason": "Expired", "code": 410}
                return
            for uid, pod in seen.items():
                if int(pod["metadata"]["resourceVersion"]) > int(since):
                    yield ("ADDED" if born.get(uid, 0) > int(since) else "MODIFIED"), pod
            for pod in deleted:
                if pod["metadata"]["uid"] not in seen:
                    yield "DELETED", pod
        yield from _changes(look, seen, deadline,
                            lambda a, b: bool(a["metadata"]["resourceVersion"] != b["metadata"]["resourceVersion"]),
                            tombstone)
    return events()


def _no_heartbeat(o: dict[str, Any]) -> Any:
    status = {**o["status"], "conditions": [{k: v for k, v in x.items() if k != "lastHeartbeatTime"}
                                            for x in o["status"]["conditions"]]}
    spec = {**o["spec"], "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in o["spec"].get("taints", [])]}
    return o["metadata"], spec, status


def node_events(c: Any, q: dict[str, str]) -> Iterator[Event]:
    """``GET /api/v1/nodes?watch=true``: selected on ``metadata.name``, ``spec.unschedulable``
    and labels; a change is a cordon, a label, Ready or the device plugin's ``nvidia.com/gpu``."""
    match = node_matcher(q.get("fieldSelector", ""), q.get("labelSelector", ""))
    name = named(q.get("fieldSelector", ""))
    deadline = _deadline(q)

    def look() -> dict[str, dict[str, Any]]:
        out = {}
        for n in [name] if name else list(c.host_dirs()):
            try:
                obj = c.node(n)
            except ApiError:
                continue
            if match(obj):
                out[n] = obj
        return out

    seen = look()

    def events() -> Iterator[Event]:
        if (q.get("resourceVersion") or "0") == "0":
            for obj in seen.values():
                yield "ADDED", obj
        yield from _changes(look, seen, deadline, lambda a, b: bool(_no_heartbeat(a) != _no_heartbeat(b)))
    return events()


def owner_events(c: Any, kind: str, ns: str | None, q: dict[str, str]) -> Iterator[Event]:
    """``GET /apis/apps/v1[/namespaces/NS]/deployments?watch=true`` (and StatefulSets,
    LeaderWorkerSets): a change is one in the owner's status (``readyReplicas``) too, as its
    controller posts it."""
    assert kind in ctl.KINDS, kind
    match = selector(OWNER_FIELDS, q.get("fieldSelector", ""), q.get("labelSelector", ""))
    name = named(q.get("fieldSelector", ""))
    deadline = _deadline(q)

    def look() -> dict[str, dict[str, Any]]:
        return {o["metadata"]["uid"]: o for o in c.work.watched_workloads(kind, ns, name) if match(o)}

    seen = look()

    def events() -> Iterator[Event]:
        if (q.get("resourceVersion") or "0") == "0":
            for obj in seen.values():
                yield "ADDED", obj
        yield from _changes(look, seen, deadline, lambda a, b: a != b)
    return events()


__all__ = ["TICK_S", "node_events", "node_matcher", "owner_events", "pod_events", "pod_matcher", "selector"]
