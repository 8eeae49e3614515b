"""One run per cluster: an exclusive lock file that names its holder.

The lock lives in ``$K3ROLLOUT_LOCK_DIR`` (default ``~/.cache/k3rollout/locks``), one file
per inventory (by its resolved path). It is created with O_EXCL and holds the holder's
pid, host, user, run directory and start time. A lock whose holder is dead is *stale*: it
is reported with how to clear it, never silently taken, because a dead run may have left
nodes cordoned. Only a ``resume`` (or ``rollback``) of the very run that holds it may
take a stale lock over.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from k3rollout.errors import LockHeld


def lock_dir() -> Path:
    d = os.environ.get("K3ROLLOUT_LOCK_DIR")
    return Path(d) if d else Path.home() / ".cache" / "k3rollout" / "locks"


def lock_path(inventory_path: str) -> Path:
    key = hashlib.sha256(str(Path(inventory_path).resolve()).encode()).hexdigest()[:16]
    return lock_dir() / f"cluster-{key}.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder_text(h: dict[str, Any]) -> str:
    return (f"pid {h.get('pid')} on {h.get('host')} (user {h.get('user')}), run {h.get('run_dir')}, "
            f"started {h.get('started')}")


class RunLock:
    def __init__(self, inventory_path: str, run_dir: Path, started: str):
        self.path = lock_path(inventory_path)
        self.run_dir = str(Path(run_dir).resolve())
        self.info = {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(),
                     "run_dir": self.run_dir, "started": started, "inventory": str(Path(inventory_path).resolve())}
        self.held = False

    def acquire(self, *, takeover_own_stale: bool = False) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is None:
                    # empty/partial file: its writer died between create and write
                    raise LockHeld(f"cluster lock {self.path} exists but names no holder; if no k3rollout run is "
                                   f"active on this cluster, remove it: rm {self.path}") from None
                same_host = holder.get("host") == socket.gethostname()
                alive = _alive(int(holder.get("pid", 0))) if same_host else True
                if alive:
                    raise LockHeld(f"another k3rollout run holds this cluster: {_holder_text(holder)}. "
                                   f"Wait for it to finish; lock file {self.path}") from None
                if takeover_own_stale and holder.get("run_dir") == self.run_dir:
                    os.unlink(self.path)
                    continue
                raise LockHeld(
                    f"stale cluster lock: its holder is dead ({_holder_text(holder)}). That run may have left nodes "
                    f"cordoned or mid-change: continue it with `k3rollout resume {holder.get('run_dir')}`, or, once "
                    f"you have checked its nodes, remove the lock: rm {self.path}") from None
            with os.fdopen(fd, "w") as f:
                json.dump(self.info, f)
                f.flush()
                os.fsync(f.fileno())
            self.held = True
            return

    def holder(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text() or "null")
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def release(self) -> None:
        if self.held:
            h = self.holder()
            if h and h.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False
