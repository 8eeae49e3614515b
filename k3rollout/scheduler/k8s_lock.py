"""The cluster-wide lock on Kubernetes: a ``coordination.k8s.io/v1`` Lease in the cluster.

A lock file on the controller keys a run by the inventory file's path: two operators on two
controllers, or one with a copy of the inventory, would both proceed. The Lease lives in
the cluster itself, so every run against that API server sees it, whatever inventory file or
controller it comes from. One Lease per cluster (kubeconfig and context) the run's
Kubernetes nodes belong to, in ``k3_lease_namespace`` (default ``kube-system``) named
``k3_lease_name`` (default ``k3rollout``), holder ``k3rollout <user>@<host>:<run dir>``.

It is created when the run starts, renewed every third of its duration while the run
lives, and deleted when it ends. A Lease held by anyone else is never taken, expired or
not: a run that died may have left nodes cordoned. The refusal names the holder, when it
last renewed, and how to release it by hand once that run is known to be gone. A ``resume``
or ``rollback`` of the same run (same run directory, user and host) renews its own Lease.
"""

from __future__ import annotations

import getpass
import socket
import threading
from typing import Any

from k3rollout.errors import LockHeld
from k3rollout.scheduler import scheduler_for
from k3rollout.scheduler.k8s_api import KubernetesApi, KubernetesError, kubeconfig_for

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_NAME = "k3rollout"
DURATION_S = 300


def holder_identity(run_dir: str) -> str:
    """Who holds the Lease: the run's directory on its controller. A resume, a rollback, or
    a run started again in the directory of one killed before its first record (the file
    lock admits only one of them at a time) is the same holder."""
    return f"k3rollout {getpass.getuser()}@{socket.gethostname()}:{run_dir}"


# (kubeconfig, context, namespace, name): one cluster's lock Lease
LeaseKey = tuple[str | None, str | None, str, str]


def lease_targets(hosts: dict[str, Any], inventory_path: str, executor: Any = None) -> dict[LeaseKey, list[str]]:
    """(kubeconfig, context, namespace, name) -> the Kubernetes hosts of that cluster."""
    out: dict[LeaseKey, list[str]] = {}
    for name, host in hosts.items():
        v = host.vars
        if scheduler_for(v).kind != "kubernetes":
            continue
        cfg, context = kubeconfig_for(v, inventory_path, executor)
        key = (cfg, context, str(v.get("k3_lease_namespace") or DEFAULT_NAMESPACE),
               str(v.get("k3_lease_name") or DEFAULT_NAME))
        out.setdefault(key, []).append(name)
    return out


class ClusterLeases:
    """``acquire()`` every Lease the run needs (or none: LockHeld), ``release()`` them."""

    def __init__(self, targets: dict[LeaseKey, list[str]], run_dir: str, duration_s: int = DURATION_S):
        self.targets = targets
        self.holder = holder_identity(run_dir)
        self.duration_s = duration_s
        self.held: list[tuple[KubernetesApi, str, str]] = []
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        try:
            for (cfg, context, ns, name), nodes in self.targets.items():
                try:
                    api = KubernetesApi(cfg, context)
                except KubernetesError as exc:
                    raise LockHeld(f"cannot take the cluster lock for {', '.join(nodes[:3])}: {exc}") from None
                try:
                    api.acquire_lease(ns, name, self.holder, self.duration_s)
                except KubernetesError as exc:
                    api.close()
                    if exc.status == 409:
                        raise LockHeld(f"another k3rollout run holds this cluster ({api.server}): {exc}") from None
                    raise LockHeld(f"cannot take the cluster lock Lease {ns}/{name} on {api.server}: {exc}") from None
                self.held.append((api, ns, name))
        except LockHeld:
            self.release()
            raise
        if self.held:
            self._thread = threading.Thread(target=self._renew, name="k3rollout-lease", daemon=True)
            self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.duration_s / 3):
            for api, ns, name in self.held:
                try:
                    api.renew_lease(ns, name, self.holder)
                except KubernetesError as exc:
                    self.lost.append(str(exc))

    def servers(self) -> list[str]:
        return [f"{api.server} Lease {ns}/{name}" for api, ns, name in self.held]

    def abandon(self) -> None:
        """Stop renewing and release nothing: the Leases as a killed controller leaves them
        (they run out, or this run's resume takes them over as the same holder). The crash
        tests call it where they stop a run in their own process (tests/support/crash.py)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for api, ns, name in self.held:
            try:
                api.release_lease(ns, name, self.holder)
            except Exception:  # noqa: BLE001 - an unreleased Lease expires; the next run reports it
                pass
            api.close()
        self.held = []


class Locks:
    """The run's file lock and its cluster Leases, released together."""

    def __init__(self, *locks: Any):
        self.locks = locks

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()
