"""What the simulated API server's parts share: ``metav1.Status`` bodies and the ``ApiError``
that carries one, the time format of object timestamps, the node's unschedulable taint, and the
per-node audit log of changes asked of the server. A leaf: it imports nothing of the simulator.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def now_iso() -> str:
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
