"""The cluster-wide lock for Slurm and ``scheduler: none`` clusters, kept in the cluster.

The controller's lock files (runlog/lock.py) only stop runs on the same controller; a
second operator on another controller, or one with a differently written inventory, would
go on. The lock therefore lives where every run against the cluster must look.

**Slurm: an advanced reservation in slurmctld.** Slurm keeps no free-form key/value store,
but slurmctld refuses a second reservation of the same name ("Duplicate reservation name"),
under its own write lock, keeps reservations in its StateSaveLocation across restarts, and
every admin sees them with ``scontrol show reservation``. The lock is the reservation
``k3rollout-lock.<ClusterName>`` (ClusterName as ``scontrol show config`` reports it, so
any inventory or controller reaching that slurmctld meets the same name; a declared
``k3_cluster_id`` is used only where slurmctld reports none). Alternatives weighed:
- a reservation must hold nodes, cores, licenses, burst buffers or watts (scontrol
  refuses one with none); licenses exist only where slurm.conf declares them, and any
  reservation active now takes its nodes away from other jobs (MAINT/IGNORE_JOBS would
  block the very capacity a rolling upgrade keeps serving; FLEX and ANY_NODES only widen
  what the reservation's own jobs may use). So the lock reserves one node of the run for one
  minute ten years ahead, with ``Flags=OVERLAP`` (it never collides with an admin's own
  reservations). Slurm plans a job of unlimited time limit as ending a year after its
  start, so a reservation that far ahead never delays one; ``State=INACTIVE`` shows it idle;
- a held job (``sbatch --hold``, lowest job id wins) is visible to every user, counts
  against submit limits, meets job_submit plugins and account enforcement, and runs if
  someone releases it;
- a lock file on the slurmctld host needs a transport to that host, which a controller
  running ``scontrol`` with its own ``SLURM_CONF`` does not have.
Slurm 22.05 reservations carry no comment, so the holder is named by a second
reservation made right after the lock, ``k3rollout-holder.<ClusterName>;<holder>``
(user@host, pid, start time, run directory). Where the lock exists without it (a run
killed between the two), the refusal says the lock names no holder.

**``scheduler: none``: a directory on a cluster host.** ``mkdir`` is atomic on the host
that runs it: of two runs, exactly one creates ``<dir>/k3rollout-lock.<key>``; the winner
then writes ``holder`` in it (``tee``). The host is ``k3_lock_host`` when set, else the
``k3_scheduler_host`` the run's hosts name, else the first host of the inventory's first
group; it is reached through the run's transport (sim, SSH, Ansible), so another controller
meets the same directory. ``<dir>`` is ``k3_lock_dir``, default ``/var/tmp``: world
writable and sticky like /tmp, and kept across a reboot (``/run/lock`` is a tmpfs, and the
lock host may well be a node this rollout reboots). The key is ``k3_cluster_id`` when the
run's hosts declare one, else derived from the lock host's address (``host:port``), so two
inventories of one cluster meet as long as they name the same lock host.

For both: the lock names its holder; it is released when the run completes or halts, and
kept when the run dies, so ``resume`` or ``rollback`` of that run (same user, controller and
run directory) takes it again. Any other holder, alive or dead, is never taken: a dead run
may have left nodes cordoned. The refusal names the holder, says whether it is known to be
dead (same controller, process gone), and how to take the lock over once that run is known
to be gone: ``k3rollout unlock PLAYBOOK -i INVENTORY``.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from k3rollout.errors import InputError, LockHeld, TransportError
from k3rollout.runlog.lock import host_key
from k3rollout.scheduler import scheduler_for
from k3rollout.transport import local
from k3rollout.transport.base import CommandResult

CONTROLLER = "controller"
LOCK_PREFIX = "k3rollout-lock."
HOLDER_PREFIX = "k3rollout-holder."
DEFAULT_LOCK_DIR = "/var/tmp"
# one minute, ten years ahead: inactive, never delays a job (see the module docstring)
RESERVATION = ("StartTime=now+3650days", "Duration=1", "Users=root", "Flags=OVERLAP")
TIMEOUT_S = 60.0


def me(run_dir: str, started: str, run_id: str = "") -> dict[str, Any]:
    return {"user": getpass.getuser(), "host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id,
            "started": started, "run_dir": run_dir}


def identity(h: dict[str, Any]) -> str:
    """Who holds the lock: a run directory on a controller (as for the Kubernetes Lease)."""
    return f"{h.get('user')}@{h.get('host')}:{h.get('run_dir')}"


def holder_text(h: dict[str, Any]) -> str:
    return (f"pid {h.get('pid')} on {h.get('host')} (user {h.get('user')}), run "
            f"{str(h['run_id']) + ' in ' if h.get('run_id') else ''}{h.get('run_dir')}, started {h.get('started')}")


def _alive_here(h: dict[str, Any]) -> bool | None:
    """Whether the holder's process lives: known only on its own controller."""
    if h.get("host") != socket.gethostname():
        return None
    try:
        os.kill(int(h.get("pid") or 0), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def run_at(executor: Any, where: str, argv: list[str], stdin: bytes | None = None) -> CommandResult:
    """A lock command on the controller (a simulated cluster answers for its own) or on an
    inventory host through the run's transport."""
    try:
        if where == CONTROLLER:
            fn = getattr(executor, "run_controller", None) or local.run
            got: CommandResult = fn(argv, stdin=stdin, timeout=TIMEOUT_S)
        else:
            got = executor.run(where, argv, stdin=stdin, timeout=TIMEOUT_S)
        return got
    except (TransportError, OSError) as exc:
        raise LockHeld(f"cannot reach {where} for the cluster lock ({' '.join(argv[:3])}): {exc}") from None


class _Lock:
    """What the two locks share: holder checks, refusals, take-over."""

    kind = ""
    where = ""
    key = ""

    def __init__(self, executor: Any, info: dict[str, Any]):
        self.executor = executor
        self.info = info
        self.held = False

    def describe(self) -> str:
        raise NotImplementedError

    def _create(self) -> tuple[bool, str]:
        raise NotImplementedError

    def _write_holder(self) -> None:
        raise NotImplementedError

    def holder(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def _remove(self) -> None:
        raise NotImplementedError

    def _refusal(self, h: dict[str, Any] | None) -> LockHeld:
        how = f"take it over with `k3rollout unlock PLAYBOOK -i INVENTORY` (it removes {self.describe()})"
        if h is None:
            return LockHeld(f"the cluster lock {self.describe()} exists but names no holder (a run is taking it "
                            f"right now, or one died while taking it). If no k3rollout run is active on this "
                            f"cluster, {how}")
        alive = _alive_here(h)
        if alive is False:
            return LockHeld(f"stale cluster lock {self.describe()}: its holder is dead ({holder_text(h)}). That run "
                            f"may have left nodes cordoned or mid-change: continue it with `k3rollout resume "
                            f"{h.get('run_dir')}`, or, once you have checked its nodes, {how}")
        return LockHeld(f"another k3rollout run holds the cluster lock {self.describe()}: {holder_text(h)}. Wait for "
                        f"it to finish; if that run is gone (its controller died), check its nodes, then {how}")

    def acquire(self) -> None:
        made, why = self._create()
        if not made:
            if why:
                raise LockHeld(f"cannot take the cluster lock {self.describe()}: {why}")
            h = self.holder()
            mine = h is not None and identity(h) == identity(self.info)
            # the same run again (resume, rollback): its own lock, unless a process of it still runs
            if not mine or (h is not None and h.get("pid") != self.info["pid"] and _alive_here(h) is not False):
                raise self._refusal(h)
        self._write_holder()
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        try:
            h = self.holder()
            if h is None or identity(h) == identity(self.info):
                self._remove()
        except LockHeld:
            pass            # left for the next run to report (and `unlock` to clear)

    def unlock(self) -> dict[str, Any] | None:
        """Remove the lock whoever holds it (``k3rollout unlock``), but not one whose holder
        is known to be alive; returns the holder it removed."""
        h = self.holder()
        if h is not None and _alive_here(h):
            raise self._refusal(h)
        self._remove()
        return h


class SlurmLock(_Lock):
    kind = "slurm"

    def __init__(self, executor: Any, where: str, node: str, cluster_id: str | None, info: dict[str, Any]):
        super().__init__(executor, info)
        self.where, self.node, self.declared = where, node, cluster_id
        self.key = self._cluster_name()

    def _scontrol(self, *args: str) -> CommandResult:
        return run_at(self.executor, self.where, ["scontrol", *args])

    def _cluster_name(self) -> str:
        res = self._scontrol("show", "config")
        m = re.search(r"^ClusterName\s*=\s*(\S+)", res.stdout, re.M) if res.rc == 0 else None
        name = m.group(1) if m and m.group(1) != "(null)" else self.declared
        if not name:
            raise LockHeld(f"cannot name the Slurm cluster for its lock: `scontrol show config` on {self.where} "
                           f"{'failed: ' + (res.stderr or res.stdout).strip()[-300:] if res.rc else 'reports no ClusterName'}"
                           "; set k3_cluster_id")
        return name

    @property
    def name(self) -> str:
        return LOCK_PREFIX + self.key

    def describe(self) -> str:
        return f"Slurm reservation {self.name} (scontrol on {self.where})"

    def _create(self) -> tuple[bool, str]:
        res = self._scontrol("create", "reservation", f"ReservationName={self.name}", f"Nodes={self.node}",
                             *RESERVATION)
        if res.rc == 0:
            return True, ""
        err = (res.stderr + res.stdout).strip()
        return False, "" if "Duplicate reservation name" in err else err[-300:]

    def _holder_names(self) -> list[str]:
        res = self._scontrol("-o", "show", "reservation")
        if res.rc != 0:
            raise LockHeld(f"cannot read the cluster lock: scontrol show reservation on {self.where}: "
                           f"{(res.stderr or res.stdout).strip()[-300:]}")
        names = re.findall(r"^ReservationName=(\S+)", res.stdout, re.M)
        if self.name not in names:
            return []
        prefix = f"{HOLDER_PREFIX}{self.key};"
        return [n for n in names if n.startswith(prefix)]

    def holder(self) -> dict[str, Any] | None:
        for n in self._holder_names():
            fields = dict(f.split("=", 1) for f in n.split(";")[1:] if "=" in f)
            user, _, host = fields.get("by", "").partition("@")
            return {"user": user, "host": host, "pid": int(fields.get("pid", "0") or 0), "run_id": fields.get("id"),
                    "started": fields.get("started"), "run_dir": unquote(fields.get("run", ""))}
        return None

    def _holder_name(self, h: dict[str, Any]) -> str:
        return (f"{HOLDER_PREFIX}{self.key};by={h['user']}@{h['host']};pid={h['pid']};id={h['run_id']};"
                f"started={h['started']};"
                f"run={quote(str(h['run_dir']), safe='/-_.~+')}")

    def _write_holder(self) -> None:
        for old in self._holder_names():       # a previous holder record of this run (or of a dead taker)
            self._scontrol("delete", f"ReservationName={old}")
        res = self._scontrol("create", "reservation", f"ReservationName={self._holder_name(self.info)}",
                             f"Nodes={self.node}", *RESERVATION)
        if res.rc != 0:
            self._scontrol("delete", f"ReservationName={self.name}")
            raise LockHeld(f"cannot record the holder of {self.describe()}: "
                           f"{(res.stderr or res.stdout).strip()[-300:]}")

    def _remove(self) -> None:
        holders = self._holder_names()
        self._scontrol("delete", f"ReservationName={self.name}")
        for n in holders:
            self._scontrol("delete", f"ReservationName={n}")


class HostLock(_Lock):
    kind = "none"

    def __init__(self, executor: Any, where: str, key: str, directory: str, info: dict[str, Any]):
        super().__init__(executor, info)
        self.where, self.key = where, key
        self.path = f"{directory.rstrip('/')}/{LOCK_PREFIX}{quote(key, safe='-_.~+:@')}"

    def describe(self) -> str:
        return f"{self.path} on {self.where}"

    def _create(self) -> tuple[bool, str]:
        res = run_at(self.executor, self.where, ["mkdir", self.path])
        if res.rc == 0:
            return True, ""
        err = (res.stderr + res.stdout).strip()
        return False, "" if "File exists" in err else err[-300:]

    def holder(self) -> dict[str, Any] | None:
        res = run_at(self.executor, self.where, ["cat", f"{self.path}/holder"])
        if res.rc != 0:
            return None
        try:
            h = json.loads(res.stdout)
        except ValueError:
            return None
        return h if isinstance(h, dict) else None

    def _write_holder(self) -> None:
        res = run_at(self.executor, self.where, ["tee", f"{self.path}/holder"],
                   stdin=json.dumps({**self.info, "key": self.key}).encode())
        if res.rc != 0:
            run_at(self.executor, self.where, ["rm", "-rf", self.path])
            raise LockHeld(f"cannot record the holder of {self.describe()}: {(res.stderr or res.stdout).strip()[-300:]}")

    def _remove(self) -> None:
        run_at(self.executor, self.where, ["rm", "-rf", self.path])


@dataclass
class ClusterLocks:
    """Every in-cluster lock a run needs (one per Slurm controller, one per ``none``
    cluster), all taken or none."""

    locks: list[_Lock] = field(default_factory=list)

    def acquire(self) -> None:
        taken: list[_Lock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def servers(self) -> list[str]:
        return [lock.describe() for lock in self.locks if lock.held]

    @property
    def held(self) -> bool:
        return any(lock.held for lock in self.locks)

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def lock_host(inventory: Any, names: list[str]) -> str:
    """Where a ``scheduler: none`` cluster's lock lives (see the module docstring)."""
    for key in ("k3_lock_host", "k3_scheduler_host"):
        named = {str(inventory.hosts[h].vars[key]) for h in names if inventory.hosts[h].vars.get(key)}
        if len(named) > 1:
            raise InputError(f"the run's hosts name different {key}s ({', '.join(sorted(named))}); one cluster has "
                             "one lock host", path=inventory.path)
        if named:
            host = named.pop()
            if host not in inventory.hosts:
                raise InputError(f"{key} {host!r} is not a host of the inventory", path=inventory.path)
            return host
    for group in inventory.groups:
        if group in ("all", "ungrouped"):
            continue
        members = inventory.group_hosts(group)
        if members:
            return str(members[0])
    return str(next(iter(inventory.hosts)))


def _cluster_id(inventory: Any, names: list[str]) -> str | None:
    ids = {str(inventory.hosts[h].vars["k3_cluster_id"]) for h in names
           if inventory.hosts[h].vars.get("k3_cluster_id") not in (None, "")}
    if len(ids) > 1:
        raise InputError(f"the run's hosts declare different k3_cluster_ids ({', '.join(sorted(ids))})",
                         path=inventory.path)
    return ids.pop() if ids else None


def lock_hosts(inventory: Any, hosts: list[str]) -> list[str]:
    """The inventory hosts the run's transport must reach for its locks."""
    none = [h for h in hosts if scheduler_for(inventory.hosts[h].vars).kind == "none"]
    return [lock_host(inventory, none)] if none else []


def slurm_controllers(inventory: Any, hosts: list[str]) -> dict[str, list[str]]:
    """Where ``scontrol`` runs for the run's Slurm nodes (``k3_scheduler_host``, else this
    controller), with the nodes each place serves: one lock per place."""
    out: dict[str, list[str]] = {}
    for h in hosts:
        if scheduler_for(inventory.hosts[h].vars).kind == "slurm":
            out.setdefault(str(inventory.hosts[h].vars.get("k3_scheduler_host") or CONTROLLER), []).append(h)
    return out


def cluster_locks(inventory: Any, hosts: list[str], executor: Any, run_dir: str, started: str,
                  run_id: str = "") -> ClusterLocks:
    """The in-cluster locks of a run on ``hosts`` (Kubernetes has its Lease, k8s_lock.py)."""
    info = me(run_dir, started, run_id)
    out = ClusterLocks()
    none = [h for h in hosts if scheduler_for(inventory.hosts[h].vars).kind == "none"]
    for where, nodes in slurm_controllers(inventory, hosts).items():
        out.locks.append(SlurmLock(executor, where, sorted(nodes)[0], _cluster_id(inventory, nodes), info))
    if none:
        host = lock_host(inventory, none)
        key = _cluster_id(inventory, none) or "host-" + host_key(host, inventory.hosts[host].vars)
        directory = str(inventory.hosts[host].vars.get("k3_lock_dir") or DEFAULT_LOCK_DIR)
        out.locks.append(HostLock(executor, host, key, directory, info))
    return out
