"""Read-only check that the user ``scontrol`` runs as may create Slurm reservations, which
the run's cluster lock is (scheduler/cluster_lock.py), for ``plan --check-access`` and the
preflight. It never creates, changes or deletes anything.

slurmctld lets only root, its ``SlurmUser`` and users whose accounting record carries an
``AdminLevel`` of Operator or Administrator (kept in slurmdbd) create reservations
(Slurm's "Advanced Resource Reservation Guide": "Reservations can be created, updated, or
destroyed only by user root or the configured SlurmUser"; "User Permissions": operators
may "Create/Alter/Delete Reservations"). Any other user gets ``Error creating the
reservation: Invalid user id`` when the run tries to take its lock. The check asks
``scontrol show config`` (``SlurmUser``, ``AccountingStorageType``, ``ClusterName``),
``id -un`` where scontrol runs (the controller, or ``k3_scheduler_host`` through the run's
transport, with its sudo), and, with accounting in slurmdbd, ``sacctmgr show user``.
"""

from __future__ import annotations

import re
from typing import Any

from k3rollout.errors import LockHeld
from k3rollout.scheduler.cluster_lock import CONTROLLER, LOCK_PREFIX, run_at, slurm_controllers

ADMIN_LEVELS = ("Operator", "Administrator")


def _config(text: str) -> dict[str, str]:
    """``Key = value`` lines of ``scontrol show config``."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def reservation_right(executor: Any, where: str) -> dict[str, Any]:
    """May the user scontrol runs as on ``where`` create reservations? ``{"ok", "user",
    "slurm_user", "detail"}``; ``detail`` names what is missing and how to get it."""
    place = "the controller" if where == CONTROLLER else where
    out: dict[str, Any] = {"where": where, "ok": False, "user": None, "slurm_user": None}
    try:
        conf = run_at(executor, where, ["scontrol", "show", "config"])
        if conf.rc != 0:
            out["detail"] = (f"cannot ask slurmctld from {place} (`scontrol show config`, rc {conf.rc}): "
                             f"{(conf.stderr or conf.stdout).strip()[-300:]}")
            return out
        cfg = _config(conf.stdout)
        who = run_at(executor, where, ["id", "-un"])
    except LockHeld as exc:
        out["detail"] = str(exc)
        return out
    slurm_user = re.sub(r"\(\d+\)$", "", cfg.get("SlurmUser", "")) or None
    user = who.stdout.strip() if who.rc == 0 else None
    out.update(user=user, slurm_user=slurm_user)
    lock = LOCK_PREFIX + (cfg.get("ClusterName") or "<ClusterName>")
    if user is None:
        out["detail"] = f"cannot tell which user scontrol runs as on {place} (`id -un`, rc {who.rc})"
        return out
    if user == "root" or user == slurm_user:
        out.update(ok=True, detail=f"scontrol on {place} runs as {user} ({'root' if user == 'root' else 'SlurmUser'}"
                                   f"): it may create the reservation {lock} (the cluster lock)")
        return out
    has = "no AdminLevel: accounting is not in slurmdbd"
    if cfg.get("AccountingStorageType", "").endswith("/slurmdbd"):
        try:
            acct = run_at(executor, where, ["sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel"])
        except LockHeld as exc:
            acct, has = None, f"an AdminLevel sacctmgr could not tell ({exc})"
        if acct is not None and acct.rc != 0:
            has = (f"an AdminLevel sacctmgr could not tell (rc {acct.rc}: "
                   f"{(acct.stderr or acct.stdout).strip()[-200:]})")
        elif acct is not None:
            level = acct.stdout.strip().splitlines()[0].strip() if acct.stdout.strip() else ""
            if level in ADMIN_LEVELS:
                out.update(ok=True, detail=f"scontrol on {place} runs as {user}, a Slurm {level.lower()} (AdminLevel "
                                           f"{level}): it may create the reservation {lock} (the cluster lock)")
                return out
            has = f"AdminLevel {level}" if level else "no user record in slurmdbd"
    out["detail"] = (
        f"scontrol on {place} runs as {user}, who may not create Slurm reservations (slurmctld allows root, its "
        f"SlurmUser {slurm_user or '(unknown)'} and users with AdminLevel Operator or Administrator; {user} has "
        f"{has}). The run's cluster lock is the reservation {lock}: run k3rollout as root"
        + (f" or {slurm_user}" if slurm_user and slurm_user != "root" else "")
        + (" (or with become: true for k3_scheduler_host)" if where != CONTROLLER else "")
        + f", or grant it: sacctmgr modify user {user} set AdminLevel=Operator")
    return out


def check_slurm_access(inventory: Any, hosts: list[str], executor: Any = None) -> list[dict[str, Any]]:
    """One answer per Slurm controller the hosts name (``k3_scheduler_host``, else this
    controller), with the nodes it serves."""
    return [{**reservation_right(executor, where), "nodes": nodes}
            for where, nodes in slurm_controllers(inventory, hosts).items()]
