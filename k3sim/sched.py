"""Scheduler commands of the simulated node: kubectl (cordon/drain/uncordon) and scontrol."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k3rollout.checks import hostlist
from k3sim import state as st_mod
from k3sim.state import SLURM_CPUS

Out = tuple[int, str, str]


def kubectl(state: dict[str, Any], args: list[str]) -> Out:
    s = state["scheduler"]
    pos = [a for a in args if not a.startswith("-")]
    if not pos:
        return 1, "", "error: You must specify the type of resource to get.\n"
    verb = pos[0]
    name = pos[-1] if verb not in ("get", "label") else (pos[2] if len(pos) > 2 else "")
    if s["kind"] != "kubernetes":
        return 1, "", "The connection to the server localhost:8080 was refused - did you specify the right host or port?\n"
    if name != state["name"]:
        return 1, "", f'Error from server (NotFound): nodes "{name}" not found\n'
    if verb == "get":
        if any("unschedulable" in a for a in args):
            return 0, "true" if s["state"] != "schedulable" else "", ""
        status = "Ready" if s["state"] == "schedulable" else "Ready,SchedulingDisabled"
        return 0, f"NAME     STATUS   ROLES    AGE   VERSION\n{name}   {status}   <none>   212d   v1.31.4\n", ""
    if verb == "cordon":
        already = s["state"] != "schedulable"
        s["state"] = "cordoned" if not already else s["state"]
        return 0, f"node/{name} {'already cordoned' if already else 'cordoned'}\n", ""
    if verb == "drain":
        was = s["state"]
        s["state"] = "drained"
        out = ("" if was != "schedulable" else f"node/{name} cordoned\n") + \
            f"Warning: ignoring DaemonSet-managed Pods: gpu-operator/nvidia-dcgm-exporter-x7k2p\n" \
            f"evicting pod inference/k2-serving-7d9f8b6c5-q2w8r\npod/k2-serving-7d9f8b6c5-q2w8r evicted\n" \
            f"node/{name} drained\n"
        return 0, out, ""
    if verb == "label":
        labels = s.setdefault("labels", {})
        for kv in pos[3:]:
            k, eq, v = kv.partition("=")
            if kv.endswith("-") and not eq:
                labels.pop(kv[:-1], None)
                continue
            if k in labels and labels[k] != v and "--overwrite" not in args:
                return 1, "", (f"error: '{k}' already has a value ({labels[k]}), and --overwrite is false\n")
            labels[k] = v
        return 0, f"node/{name} labeled\n", ""
    if verb == "uncordon":
        already = s["state"] == "schedulable"
        s["state"] = "schedulable"
        return 0, f"node/{name} {'already uncordoned' if already else 'uncordoned'}\n", ""
    return 1, "", f'error: unknown command "{verb}" for "kubectl"\n'


def _running(s: dict[str, Any], now: float) -> list[dict[str, Any]]:
    return [j for j in s.get("jobs", []) if j["end"] > now]


def show_node(state: dict[str, Any], now: float) -> str:
    """``scontrol show node`` as slurmctld prints it: the base state (IDLE, MIXED when jobs
    hold some CPUs, ALLOCATED when they hold all) and ``+DRAIN`` once drained by an
    administrator. DRAIN with jobs still running is DRAINING (``MIXED+DRAIN``,
    ``ALLOCATED+DRAIN``); with none left it is DRAINED (``IDLE+DRAIN``)."""
    s, name = state["scheduler"], state["name"]
    alloc = min(SLURM_CPUS, sum(int(j.get("cpus", SLURM_CPUS)) for j in _running(s, now)))
    base = "IDLE" if alloc == 0 else ("ALLOCATED" if alloc >= SLURM_CPUS else "MIXED")
    held = s["state"] != "schedulable"
    st = base + ("+DRAIN" if held else "")
    gres = state["gpu"]["count"] if alloc else 0
    reason = f"\n   Reason={s.get('reason') or 'maintenance'} [root@2026-12-02T02:00:00]" if held else ""
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=56\n   CPUAlloc={alloc} CPUEfctv={SLURM_CPUS} "
            f"CPUTot={SLURM_CPUS} CPULoad=0.51\n   AvailableFeatures=h200,ib\n   ActiveFeatures=h200,ib\n"
            f"   Gres=gpu:h200:{state['gpu']['count']}\n   NodeAddr={name} NodeHostName={name} Version=24.11.1\n"
            f"   State={st} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n   Partitions=gpu\n"
            f"   CfgTRES=cpu={SLURM_CPUS},mem=2000000M,billing={SLURM_CPUS},gres/gpu={state['gpu']['count']}\n"
            f"   AllocTRES={f'cpu={alloc},gres/gpu={gres}' if alloc else ''}{reason}\n")


def scontrol(state: dict[str, Any], args: list[str], state_dir: Path | None = None) -> Out:
    """scontrol show node / update, as the cluster's slurmctld answers them: a node answers
    for itself, and for another simulated node of the same cluster (a login or controller
    host named by ``k3_scheduler_host``) by asking that node's state."""
    s = state["scheduler"]
    if s["kind"] != "slurm":
        return 1, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n"
    if args[:2] == ["show", "node"]:
        name = args[2] if len(args) > 2 else state["name"]
        return _on_node(state, state_dir, name, lambda n: (0, show_node(n, time.time()), ""),
                        (1, "", f"Node {name} not found\n"))
    if args[:2] == ["show", "config"]:
        return 0, show_config(), ""
    if args[:2] == ["show", "hostnames"]:
        return 0, "".join(f"{h}\n" for h in hostlist.expand(args[2] if len(args) > 2 else "")), ""
    if args[:1] == ["-o"]:          # --oneliner: one line per record
        rc, out, err = scontrol(state, args[1:], state_dir)
        return rc, out.replace("\n   ", " ").replace("\n\n", "\n"), err
    if args[:1] in (["create"], ["show"], ["delete"]) and state_dir is not None:
        return reservation(state_dir.parent, args)
    if args[:1] == ["update"]:
        kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        st = kv.get("State", "").upper()
        if st not in ("DRAIN", "RESUME"):
            return 1, "", "slurm_update error: Invalid node state specified\n"

        def update(n: dict[str, Any]) -> Out:
            ns = n["scheduler"]
            if st == "DRAIN":
                if not kv.get("Reason"):
                    return 1, "", "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"
                ns["state"], ns["reason"] = "cordoned", kv["Reason"]
                now = time.time()
                for j in ns.get("jobs", []):
                    if "after_drain_s" in j:
                        j["end"] = min(j["end"], now + float(j.pop("after_drain_s")))
            else:
                ns["state"] = "schedulable"
                ns.pop("reason", None)
            return 0, "", ""

        return _on_node(state, state_dir, kv.get("NodeName", ""), update,
                        (1, "", "slurm_update error: Invalid node name specified\n"))
    return 1, "", "invalid command\n"


CLUSTER_NAME = "k3sim"


def show_config() -> str:
    """The head of ``scontrol show config`` as slurmctld 22.05/24.11 prints it. The simulated
    slurmctld runs in the simulating user's processes: that user is its SlurmUser, as for a
    test slurmctld started by hand."""
    import os

    return ("Configuration data as of 2026-12-03T02:00:00\n"
            "AccountingStorageType   = accounting_storage/none\n"
            f"ClusterName             = {CLUSTER_NAME}\n"
            "SLURM_VERSION           = 24.11.1\n"
            "SlurmctldHost[0]        = ctl-01\n"
            f"SlurmUser               = {st_mod.session_user()}({os.geteuid()})\n")


def reservation(root: Path, args: list[str]) -> Out:
    """``scontrol create|show|delete reservation`` against the cluster's one slurmctld: the
    reservations of the simulated cluster live beside its hosts (``root/_slurmctld.json``),
    changed under one lock, so a name is unique cluster-wide as slurmctld makes it
    ("Duplicate reservation name")."""
    import fcntl
    import json
    import os

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "_slurmctld.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        f = root / "_slurmctld.json"
        resv: dict[str, dict[str, str]] = json.loads(f.read_text()) if f.exists() else {}
        out = _reservation(root, resv, args)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(resv))
        os.replace(tmp, f)
        return out
    finally:
        os.close(fd)


def _reservation(root: Path, resv: dict[str, dict[str, str]], args: list[str]) -> Out:
    words = [a for a in args if "=" not in a]
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    if words[:2] == ["create", "reservation"] or words[:1] == ["create"] and "ReservationName" in kv:
        name = kv.get("ReservationName", "")
        if not any(k in kv for k in ("Nodes", "NodeCnt", "CoreCnt", "Licenses", "BurstBuffer", "Watts")):
            return 1, "", ("scontrol: error: CoreCnt, Nodes, NodeCnt, BurstBuffer, Licenses or Watts must be "
                           "specified.  No reservation created.\n")
        if name in resv:
            return 1, "", "Error creating the reservation: Duplicate reservation name\n"
        for n in kv.get("Nodes", "").split(","):
            sd = root / n
            if not n or "/" in n or not (sd / "state.json").exists() or \
                    st_mod.load(sd)["scheduler"]["kind"] != "slurm":
                return 1, "", "Error creating the reservation: Invalid node name specified\n"
        resv[name] = {"Nodes": kv.get("Nodes", ""), "Users": kv.get("Users", "root"),
                      "Flags": ",".join([*filter(None, kv.get("Flags", "").upper().split(",")), "SPEC_NODES"]),
                      "StartTime": "2036-11-30T02:00:00", "EndTime": "2036-11-30T02:01:00"}
        if kv.get("StartTime", "").lower() == "now":
            # a reservation from now on is ACTIVE: a MAINT one holds its nodes for its users' jobs
            resv[name].update({"StartTime": time.strftime("%Y-%m-%dT%H:%M:%S"), "EndTime": "2036-11-30T02:01:00",
                               "State": "ACTIVE"})
        return 0, f"Reservation created: {name}\n", ""
    if words[:2] == ["show", "reservation"] or words[:1] == ["show"] and "reservation" in kv:
        only = words[2] if len(words) > 2 else kv.get("reservation")
        if only is not None and only not in resv:
            return 1, "", f"Reservation {only} not found\n"
        if not resv:
            return 0, "No reservations in the system\n", ""
        return 0, "".join(
            f"ReservationName={n} StartTime={r['StartTime']} EndTime={r['EndTime']} Duration=00:01:00\n"
            f"   Nodes={r['Nodes']} NodeCnt=1 CoreCnt=1 Features=(null) PartitionName=(null) Flags={r['Flags']}\n"
            f"   TRES=cpu=1\n   Users={r['Users']} Groups=(null) Accounts=(null) Licenses=(null) "
            f"State={r.get('State', 'INACTIVE')} "
            "BurstBuffer=(null) Watts=n/a\n   MaxStartDelay=(null)\n\n"
            for n, r in resv.items() if only in (None, n)), ""
    if words[:1] == ["delete"]:
        name = kv.get("ReservationName") or kv.get("reservation") or kv.get("Reservation") or \
            (words[2] if len(words) > 2 and words[1] == "reservation" else "")
        if name not in resv:
            return 1, "", f"delete_reservation ReservationName={name}: Requested reservation is invalid\n"
        del resv[name]
        return 0, "", ""
    return 1, "", "invalid command\n"


def _on_node(state: dict[str, Any], state_dir: Path | None, name: str, fn: Callable[[dict[str, Any]], Out],
             unknown: Out) -> Out:
    if name == state["name"]:
        return fn(state)
    other = state_dir.parent / name if state_dir is not None and name and "/" not in name else None
    if other is None or not (other / "state.json").exists():
        return unknown
    with st_mod.try_transaction(other, 5.0) as peer:
        if peer is None:
            return 1, "", "slurm_load_node error: Socket timed out on send/recv operation\n"
        if peer["scheduler"]["kind"] != "slurm":
            return unknown
        return fn(peer)
