"""Waiting on one Kubernetes object: read it, then watch it from that read.

The one implementation of a wait for the controller's Kubernetes requests: the drain's wait
for evicted pods to be gone (k3rollout/scheduler/k8s_api.py) and the workload backend's
waits for a pod, a node and an owner (k3rollout/workload/k8s_pods.py) all go through
``wait_watched``. A watch is asked for through ``KubernetesApi.watch`` (or a test's fake with
the same signature) and its client errors are translated once, by ``api_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from k3rollout.scheduler.k8s_errors import KubernetesError, api_error

# a watch of one object: (resourceVersion to start from, seconds at most) -> its events
Watcher = Callable[[str | None, float], Iterator[tuple[str, dict[str, Any]]]]

# where the API server refuses a watch, the wait polls: 403 (no ``watch`` right: RBAC grants
# get, list and watch separately), 404 and 405 (no watch served there); docs/domain.md,
# "Workloads on Kubernetes GPU nodes"
WATCH_REFUSED = (403, 404, 405)
MAX_WATCH_S = 1800.0      # one stream at most: kube-apiserver ends a watch within --min-request-timeout x 2


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, s: float) -> None: ...


def events(kube: Any, what: str, list_method: str, *args: Any, field_selector: str, resource_version: str | None,
           timeout_s: float, api: str = "core") -> Iterator[tuple[str, dict[str, Any]]]:
    """WATCH (GET ...?watch=true&fieldSelector=...&resourceVersion=...) through ``kube.watch``
    (``KubernetesApi.watch``): the events from ``resource_version`` on (None: the current state
    first, as ADDED events), until the server ends the stream after ``timeout_s``; a refusal
    or an ERROR event raises ``KubernetesError`` with its status."""
    kw: dict[str, Any] = {"field_selector": field_selector, "timeout_seconds": max(1, int(timeout_s))}
    if resource_version:
        kw["resource_version"] = resource_version
    if api != "core":
        kw["api"] = api
    stream = kube.watch(list_method, *args, **kw)
    while True:
        try:
            ev = next(stream)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - translated once, by api_error
            raise api_error(exc, what) from None
        yield ev


def pod_watcher(kube: Any, namespace: str, name: str) -> Watcher:
    """A Watcher of one pod (``metadata.name`` field selector), from a resourceVersion."""
    return lambda rv, left: events(kube, f"watch pod {namespace}/{name}", "list_namespaced_pod", namespace,
                                   field_selector=f"metadata.name={name}", resource_version=rv, timeout_s=left)


def wait_watched(clock: Clock, read: Callable[[], dict[str, Any] | None], watch: Watcher | None,
                 done: Callable[[dict[str, Any] | None], bool], timeout_s: float,
                 poll_s: float) -> tuple[bool, dict[str, Any] | None]:
    """Until ``done(obj)`` holds or ``timeout_s`` passed: (held, the object last seen; None:
    gone). ``read()`` is the object now (a GET; None on 404); ``watch(resourceVersion, seconds)``
    its watch events. As client-go's reflector lists then watches, the object is read once and
    watched from its resourceVersion, so no change between the two is lost: one request for
    the whole wait instead of one per poll, and the change is seen when it happens. A stream
    the server ended is watched again from the last resourceVersion seen; a history that
    expired (410) starts again with a read; where the server refuses the watch (WATCH_REFUSED)
    the wait polls ``read`` every ``poll_s``. ``clock``: its ``now`` and ``sleep``."""
    start = clock.now()
    obj = read()
    while not done(obj):
        left = timeout_s - (clock.now() - start)
        if left <= 0:
            return False, obj
        if watch is None:
            clock.sleep(min(poll_s, left))
            obj = read()
            continue
        rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
        opened, seen = clock.now(), 0
        try:
            for kind, got in watch(str(rv) if rv else None, min(left, MAX_WATCH_S)):
                seen += 1
                obj = None if kind == "DELETED" else got
                if done(obj):
                    return True, obj
            if not seen and clock.now() - opened < 1.0:
                # a stream ended at once with nothing in it (a proxy on the way that does not
                # stream): the next one waits a poll's time rather than spin
                clock.sleep(min(poll_s, left))
        except KubernetesError as err:
            if err.status in WATCH_REFUSED:
                watch = None
            elif err.status == 410:
                obj = read()
            else:
                raise
    return True, obj


__all__ = ["MAX_WATCH_S", "WATCH_REFUSED", "Watcher", "events", "pod_watcher", "wait_watched"]
