"""The Kubernetes API requests this process sends, counted by verb and resource.

Each request of the official client (``KubernetesApi``, its watches included) and of the pod
proxy's HTTP client is named as the API server's authorizer and audit log name it
(k8s.io/apiserver ``pkg/endpoints/request/requestinfo.go``): the verb (``get``, ``list``,
``watch`` for a GET with ``watch=true``, ``create``, ``update``, ``patch``, ``delete``,
``deletecollection``) and the resource with its subresource (``pods/log``, ``pods/eviction``,
``pods/proxy``) and, outside the core group, its group (``deployments.apps``). ``totals``
counts every request of the process; a thread inside ``counting()`` also gets its own
requests in the tally it was given (the window bench counts a node-stage's calls that way).
Counting only: nothing here sends, refuses or changes a request.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

_lock = threading.Lock()
_local = threading.local()
totals: Counter[str] = Counter()

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_info(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of a request, as ``RequestInfoFactory.NewRequestInfo`` derives them:
    ``/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]`` and the same under
    ``/apis/GROUP/VERSION``; a GET of a collection is ``list``, or ``watch`` with
    ``watch=true``; anything else (discovery: ``/api``, ``/apis/...``) is ``get`` of its path."""
    u = urlsplit(url)
    parts = [p for p in u.path.split("/") if p]
    method = method.upper()
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return "get" if method == "GET" else _VERBS.get(method, method.lower()), "/" + "/".join(parts)
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]             # namespaces/NS/RESOURCE...; namespaces[/NAME] is the resource itself
    resource = rest[0] + (f".{group}" if group else "")
    if len(rest) >= 3:
        resource += f"/{rest[2]}"
    named = len(rest) >= 2
    if method == "GET":
        watch = parse_qs(u.query).get("watch", [""])[0] in ("true", "1")
        verb = "get" if named else "watch" if watch else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, resource


def record(method: str, url: str) -> None:
    """Count one request (called in the thread that sends it)."""
    key = " ".join(request_info(method, url))
    with _lock:
        totals[key] += 1
    for tally in getattr(_local, "open", ()):
        tally[key] += 1


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """``with counting() as tally:`` the requests this thread sends inside, by "verb resource"."""
    tally: Counter[str] = Counter()
    stack: list[Counter[str]] = _local.__dict__.setdefault("open", [])
    stack.append(tally)
    try:
        yield tally
    finally:
        stack.remove(tally)


__all__ = ["counting", "record", "request_info", "totals"]
