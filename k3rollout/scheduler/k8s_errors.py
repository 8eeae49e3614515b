"""The one error of the controller's Kubernetes requests, and the one translation of the
official client's exceptions into it (status code, reason, the server's message).

A leaf: the API wrapper (k8s_api.py), the waits (k8s_watch.py) and the workload backend
import it; it imports none of them.
"""

from __future__ import annotations

import json
from typing import Any

from k3rollout.errors import K3RolloutError


class KubernetesError(K3RolloutError):
    """The API refused or could not be reached; carries the status code and reason."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


def api_error(exc: Any, what: str) -> KubernetesError:
    """``exc`` (an ``ApiException`` or any other failure of a request) as a KubernetesError
    that says ``what`` was asked."""
    from kubernetes.client.exceptions import ApiException  # the client: imported when a cluster is used

    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "{}")
        except ValueError:
            body = {}
        msg = body.get("message") or exc.reason
        return KubernetesError(f"{what}: HTTP {exc.status} {body.get('reason') or exc.reason}: {msg}",
                               status=exc.status, reason=str(body.get("reason") or exc.reason))
    return KubernetesError(f"{what}: {type(exc).__name__}: {exc}")


__all__ = ["KubernetesError", "api_error"]
