"""Scheduler commands of the simulated node: kubectl (cordon/drain/uncordon) and scontrol."""

from __future__ import annotations

from typing import Any

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


def scontrol(state: dict[str, Any], args: list[str]) -> Out:
    s = state["scheduler"]
    if s["kind"] != "slurm":
        return 1, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n"
    if args[:2] == ["show", "node"]:
        name = args[2] if len(args) > 2 else state["name"]
        if name != state["name"]:
            return 1, "", f"Node {name} not found\n"
        st = "IDLE" if s["state"] == "schedulable" else "IDLE+DRAIN"
        reason = "" if s["state"] == "schedulable" else f"\n   Reason={s.get('reason', 'maintenance')} [root@2026-12-02T02:00:00]"
        return 0, (f"NodeName={name} Arch=x86_64 CoresPerSocket=56\n   CPUAlloc=0 CPUEfctv=224 CPUTot=224 "
                   f"CPULoad=0.51\n   AvailableFeatures=h200,ib\n   Gres=gpu:h200:{state['gpu']['count']}\n"
                   f"   NodeAddr={name} NodeHostName={name} Version=24.11.1\n   State={st} ThreadsPerCore=2 "
                   f"TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n   Partitions=gpu{reason}\n"), ""
    if args[:1] == ["update"]:
        kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        if kv.get("NodeName") != state["name"]:
            return 1, "", "slurm_update error: Invalid node name specified\n"
        st = kv.get("State", "").upper()
        if st == "DRAIN":
            s["state"], s["reason"] = "cordoned", kv.get("Reason", "")
        elif st == "RESUME":
            s["state"] = "schedulable"
        else:
            return 1, "", "slurm_update error: Invalid node state specified\n"
        return 0, "", ""
    return 1, "", "invalid command\n"
