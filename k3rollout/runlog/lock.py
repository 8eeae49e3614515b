"""One run per cluster: exclusive lock files, one per host and one per cluster id, that name their holder.

A run takes one lock file per host it may change, keyed by the host's address as the
inventory resolves it (``ansible_host``, else the inventory name; lower case, an IP
literal in its canonical form) and its SSH port, and one more per ``k3_cluster_id`` when
the inventory sets it. A copy or hard link of the inventory, the same file under another
``$HOME``, or another inventory naming some of the same hosts, therefore meets the same
lock files: two runs whose host sets overlap (or that name the same cluster id) cannot
run at once. Names are not looked up in DNS (a lock must not hang on a resolver); two
inventories that reach one machine under two different names are not detected, which is
what the cluster's own lock closes (a Lease, a Slurm reservation, a lock directory on a
cluster host: scheduler/k8s_lock.py, scheduler/cluster_lock.py).

The files live in a system-wide directory every user's runs see: ``$K3ROLLOUT_LOCK_DIR``
when set, else ``/run/lock/k3rollout`` (or ``/var/lock/k3rollout``), created
world-writable and sticky like ``/tmp`` so any user may lock and none may remove another
user's lock. Where neither is writable the lock falls back to
``~/.cache/k3rollout/locks`` and says so, since that only stops runs of the same user.
``/run/lock`` is emptied by a reboot of the controller: the journal still shows a run
that did not finish.

Each file is created with O_EXCL and holds the holder's pid, host, user, run directory
and start time. A lock whose holder is dead is *stale*: it is reported with how to clear
it, never silently taken, because a dead run may have left nodes cordoned. Only a
``resume`` (or ``rollback``) of the very run that holds it may take a stale lock over.
"""

from __future__ import annotations

import getpass
import hashlib
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from k3rollout.errors import LockHeld

SYSTEM_DIRS = (Path("/run/lock/k3rollout"), Path("/var/lock/k3rollout"))


def _usable(d: Path) -> bool:
    try:
        if not d.is_dir():
            d.mkdir(mode=0o1777)
            os.chmod(d, 0o1777)         # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    except OSError:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def lock_dir() -> Path:
    d = os.environ.get("K3ROLLOUT_LOCK_DIR")
    if d:
        return Path(d)
    for cand in SYSTEM_DIRS:
        if cand.parent.is_dir() and _usable(cand):
            return cand
    return Path.home() / ".cache" / "k3rollout" / "locks"


def host_key(name: str, host_vars: dict[str, Any]) -> str:
    """The address (and SSH port) a host is reached at, as the inventory resolves it."""
    addr = str(host_vars.get("ansible_host") or name).strip().lower().rstrip(".")
    try:
        addr = ipaddress.ip_address(addr.strip("[]")).compressed
    except ValueError:
        pass
    return f"{addr}:{host_vars.get('ansible_port') or 22}"


def lock_keys(inventory: Any, hosts: Iterable[str] | None = None) -> list[str]:
    """The lock keys of a run on ``hosts`` (default: every host) of ``inventory``."""
    names = list(inventory.hosts) if hosts is None else list(hosts)
    keys = {"host " + host_key(h, inventory.hosts[h].vars) for h in names}
    cids = {str(inventory.hosts[h].vars["k3_cluster_id"]) for h in names
            if inventory.hosts[h].vars.get("k3_cluster_id") not in (None, "")}
    keys |= {"cluster " + c for c in cids}
    return sorted(keys)


def lock_paths(inventory: Any, hosts: Iterable[str] | None = None) -> list[Path]:
    d = lock_dir()
    return sorted(d / f"{k.split()[0]}-{hashlib.sha256(k.encode()).hexdigest()[:20]}.lock"
                  for k in lock_keys(inventory, hosts))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_text(h: dict[str, Any]) -> str:
    """A lock holder as a person reads it: its process, host, user, run directory and start."""
    return (f"pid {h.get('pid')} on {h.get('host')} (user {h.get('user')}), run {h.get('run_dir')}, "
            f"started {h.get('started')}")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dead(holder: dict[str, Any]) -> bool:
    return holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", 0) or 0))


class RunLock:
    def __init__(self, inventory: Any, run_dir: Path, started: str, hosts: Iterable[str] | None = None):
        if isinstance(inventory, (str, Path)):
            # lazy: the models (pydantic, YAML) only for a lock taken from a path
            from k3rollout.model.inventory import load_inventory

            inventory = load_inventory(str(inventory))
        self.dir = lock_dir()
        self.keys = lock_keys(inventory, hosts)
        self.paths = lock_paths(inventory, hosts)
        self.path = self.paths[0] if self.paths else self.dir / "none.lock"
        self.run_dir = str(Path(run_dir).resolve())
        self.info = {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(),
                     "run_dir": self.run_dir, "started": started, "inventory": str(Path(inventory.path).resolve())}
        self.taken: list[Path] = []
        self.held = False

    def acquire(self, *, takeover_own_stale: bool = False) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.dir not in SYSTEM_DIRS and not os.environ.get("K3ROLLOUT_LOCK_DIR"):
            print(f"k3rollout: warning: no system-wide lock directory ({', '.join(map(str, SYSTEM_DIRS))}) is "
                  f"writable; the cluster lock is in {self.dir}, which only runs of user {getpass.getuser()} see",
                  file=sys.stderr)
        if takeover_own_stale:
            release_stale(self.run_dir)
        try:
            for path, key in zip(self.paths, self._keys_by_path(), strict=True):
                self._take(path, key, takeover_own_stale)
        except BaseException:
            self._release_taken()
            raise
        self.held = True

    def _keys_by_path(self) -> list[str]:
        by = {f"{k.split()[0]}-{hashlib.sha256(k.encode()).hexdigest()[:20]}.lock": k for k in self.keys}
        return [by[p.name] for p in self.paths]

    def _take(self, path: Path, key: str, takeover_own_stale: bool) -> None:
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _read(path)
                if holder is None:
                    # empty/partial file: its writer died between create and write
                    raise LockHeld(f"cluster lock {path} ({key}) exists but names no holder; if no k3rollout run "
                                   f"is active on these hosts, remove it: rm {path}") from None
                if not _dead(holder):
                    raise LockHeld(f"another k3rollout run holds {key}: {holder_text(holder)}. Wait for it to "
                                   f"finish; lock file {path}") from None
                if takeover_own_stale and holder.get("run_dir") == self.run_dir:
                    path.unlink(missing_ok=True)
                    continue
                raise LockHeld(
                    f"stale cluster lock on {key}: its holder is dead ({holder_text(holder)}). That run may have "
                    f"left nodes cordoned or mid-change: continue it with `k3rollout resume {holder.get('run_dir')}`, "
                    f"or, once you have checked its nodes, remove the lock: rm {path}") from None
            # readable by every user (the run itself is private, umask 077): another user's run
            # must be able to name the holder
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "w") as f:
                json.dump({**self.info, "key": key}, f)
                f.flush()
                os.fsync(f.fileno())
            self.taken.append(path)
            return

    def holder(self) -> dict[str, Any] | None:
        return _read(self.path)

    def _release_taken(self) -> None:
        for p in reversed(self.taken):
            h = _read(p)
            if h and h.get("pid") == os.getpid() and h.get("run_dir") == self.run_dir:
                p.unlink(missing_ok=True)
        self.taken = []

    def release(self) -> None:
        if self.held:
            self._release_taken()
            self.held = False


def live_holders(run_dir: str | Path, directory: Path | None = None) -> list[dict[str, Any]]:
    """The live processes that hold a lock for ``run_dir`` (a run starting right now)."""
    run_dir = str(Path(run_dir).resolve())
    d = directory or lock_dir()
    try:
        files = sorted(d.glob("*.lock"))
    except OSError:
        return []
    return [h for h in map(_read, files) if h and h.get("run_dir") == run_dir and not _dead(h)]


def release_stale(run_dir: str | Path, directory: Path | None = None) -> list[Path]:
    """Remove the locks a dead run of ``run_dir`` left (whatever hosts they name); the
    lock files a live process holds are left alone."""
    run_dir = str(Path(run_dir).resolve())
    d = directory or lock_dir()
    gone: list[Path] = []
    try:
        files = sorted(d.glob("*.lock"))
    except OSError:
        return gone
    for p in files:
        h = _read(p)
        if h and h.get("run_dir") == run_dir and _dead(h):
            try:
                p.unlink()
                gone.append(p)
            except OSError:
                pass
    return gone
