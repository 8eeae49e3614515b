"""Replicas of a model: which nodes serve one copy of it, in which parallel layout.

Pure arithmetic over a model profile (``model/profile.py``) and each node's GPUs; no host
is contacted. A node's GPUs come from its inventory vars (``k3_gpu_model``/``k3_gpu_count``/
``k3_gpu_mem_gib``; a simulated node is described with the same), then from baseline facts
when the caller has them (``gpu_model``, ``gpu_count``, ``gpu_mem_total_mib``).

A layout holds the model when its GPUs' usable memory covers the profile's need::

    layout GPUs x GiB per GPU x gpu_memory_utilization >= vram_minimum_gb (in GiB)

Grouping: an explicit serving-group host var (``serving_group`` unless the play's
``group_by`` names another) wins; other nodes form replicas of consecutive nodes within one
NVLink domain (host var ``nvlink_domain``) or rack (``rack``), as many nodes as the smallest
layout that holds the model needs. A replica that cannot hold the model is refused with the
arithmetic (``ReplicaError``: exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from k3rollout.checks.all2all import builds_all2all
from k3rollout.errors import InputError
from k3rollout.model.profile import Layout, ModelProfile
from k3rollout.plan.launch import replica_launch

DOMAIN_VARS = ("nvlink_domain", "rack")


class ReplicaError(InputError):
    """A replica that cannot hold the model (exit 2), with the arithmetic."""


@dataclass(frozen=True)
class Hardware:
    gpu: str
    count: int
    mem_gib: float
    source: str            # which vars or facts said so

    @property
    def key(self) -> tuple[str, int, float]:
        return (self.gpu, self.count, self.mem_gib)


def _origin(inventory: Any, host: str, var: str | None = None) -> tuple[str | None, int | None]:
    h = inventory.hosts[host]
    o = h.var_origins.get(var, h.origin) if var else h.origin
    return getattr(o, "path", None), getattr(o, "line", None)


def node_hardware(host: str, inventory: Any, facts: dict[str, Any] | None = None) -> Hardware:
    """The node's GPU model, count and per-GPU memory in GiB (inventory vars, then facts)."""
    v = inventory.hosts[host].vars
    for prefix, names in (("k3_gpu", ("k3_gpu_model", "k3_gpu_count", "k3_gpu_mem_gib")),):
        if any(n in v for n in names):
            missing = [n for n in names if v.get(n) in (None, "")]
            if missing:
                path, line = _origin(inventory, host, next(n for n in names if n in v))
                raise InputError(f"host {host}: {', '.join(missing)} missing; a model profile needs the GPU model, "
                                 f"count and memory ({', '.join(names)})", path=path, line=line)
            try:
                count, mem = int(v[names[1]]), float(v[names[2]])
            except (TypeError, ValueError):
                path, line = _origin(inventory, host, names[1])
                raise InputError(f"host {host}: {names[1]} and {names[2]} must be numbers, got "
                                 f"{v[names[1]]!r} and {v[names[2]]!r}", path=path, line=line) from None
            if count < 1 or mem <= 0:
                path, line = _origin(inventory, host, names[1])
                raise InputError(f"host {host}: {names[1]} must be >= 1 and {names[2]} > 0", path=path, line=line)
            return Hardware(str(v[names[0]]), count, mem, f"inventory {prefix}_* vars")
    f = facts or {}
    if f.get("gpu_model") and f.get("gpu_count") and f.get("gpu_mem_total_mib"):
        return Hardware(str(f["gpu_model"]), int(f["gpu_count"]), float(f["gpu_mem_total_mib"]) / 1024.0,
                        "baseline facts")
    path, line = _origin(inventory, host)
    raise InputError(f"host {host}: GPU model, count and memory unknown; the model profile needs them to size "
                     "replicas: set k3_gpu_model, k3_gpu_count and k3_gpu_mem_gib", path=path, line=line)


@dataclass
class Sizing:
    layout: Layout
    nnodes: int
    usable_gib: float
    fits: bool


def size_layout(profile: ModelProfile, lay: Layout, hw: Hardware) -> Sizing:
    nnodes = max(1, math.ceil(lay.gpus / hw.count))
    usable = lay.gpus * hw.mem_gib * profile.footprint.gpu_memory_utilization
    return Sizing(lay, nnodes, usable, usable >= profile.footprint.need_gib)


def _generic(hw: Hardware, nnodes: int) -> Layout:
    """TP inside a node, PP across nodes: what a replica of ``nnodes`` nodes runs when the
    profile publishes no layout for exactly its GPUs."""
    name = f"tp{hw.count}" + (f"-pp{nnodes}" if nnodes > 1 else "")
    return Layout(name=name, tp=hw.count, pp=nnodes, min_gpus=hw.count * nnodes, hardware=[hw.gpu])


def choose_layout(profile: ModelProfile, hw: Hardware) -> Sizing:
    """The pinned layout, else the smallest published one for this GPU that holds the model,
    else the largest published one (not fitting: the caller refuses it with the arithmetic)."""
    if profile.layout is not None:
        return size_layout(profile, next(x for x in profile.layouts if x.name == profile.layout), hw)
    options = [size_layout(profile, lay, hw) for lay in profile.layouts_for(hw.gpu)]
    for s in options:
        if s.fits:
            return s
    if options:
        return options[-1]
    return size_layout(profile, _generic(hw, 1), hw)


def _arith(profile: ModelProfile, s: Sizing, hw: Hardware) -> str:
    fp = profile.footprint
    return (f"layout {s.layout.name} = {s.layout.gpus} x {hw.gpu} x {hw.mem_gib:g} GiB x "
            f"{fp.gpu_memory_utilization:g} usable = {s.usable_gib:.1f} GiB "
            f"{'>=' if s.fits else '<'} {fp.need_gib:.1f} GiB that {profile.name} needs "
            f"(vram_minimum_gb {fp.vram_minimum_gb:g} GB)")


def _hint(profile: ModelProfile, hw: Hardware) -> str:
    good = [s for s in (size_layout(profile, lay, hw) for lay in profile.layouts_for(hw.gpu)) if s.fits]
    if good:
        s = good[0]
        return (f"; the smallest layout that holds it on {hw.gpu} is {s.layout.name} "
                f"({s.layout.gpus} GPUs, {s.nnodes} node(s) of {hw.count})")
    return f"; the profile publishes no layout for {hw.gpu} that holds it"


def _domain(host: str, inventory: Any) -> str | None:
    v = inventory.hosts[host].vars
    for var in DOMAIN_VARS:
        if v.get(var) not in (None, ""):
            return f"{var} {v[var]}"
    return None


def _replica(rid: str, nodes: list[str], s: Sizing, hw: Hardware, profile: ModelProfile, inventory: Any,
             problem: str | None) -> dict[str, Any]:
    lay = s.layout
    nv = {inventory.hosts[n].vars.get("nvlink_domain") for n in nodes}
    interconnect = "nvlink" if len(nodes) == 1 or (len(nv) == 1 and None not in nv) else "rdma"
    return {"id": rid, "nodes": list(nodes), "head": nodes[0],
            "layout": {"name": lay.name, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep,
                       "nnodes": len(nodes)},
            "gpu": hw.gpu, "gpus": hw.count * len(nodes), "generation": profile.generation(hw.gpu),
            "gpu_mem_gib": round(hw.mem_gib * hw.count * len(nodes), 1),
            "usable_gib": round(s.usable_gib, 1), "need_gib": round(profile.footprint.need_gib, 1),
            "fits": problem is None, "interconnect": interconnect,
            # vLLM builds an all-to-all manager only with data parallel (checks/all2all.py): an
            # expert-parallel layout with DP 1 (tp16-ep16) runs its experts over the TP group
            "all2all_backend": getattr(profile.all2all, interconnect)
            if lay.ep > 1 and builds_all2all(lay.dp, ep=True) else None,
            "layout_source": lay.source,
            "hardware_source": hw.source, "problem": problem}


def plan_replicas(profile: ModelProfile, hosts: list[str], inventory: Any, group_var: str = "serving_group",
                  facts: dict[str, dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """(replicas in inventory order, notes); raises ReplicaError when any replica cannot
    hold the model, naming every such replica with its arithmetic."""
    hw = {h: node_hardware(h, inventory, (facts or {}).get(h)) for h in hosts}
    notes: list[str] = []
    explicit: dict[str, list[str]] = {}
    rest: list[str] = []
    for h in hosts:
        key = inventory.hosts[h].vars.get(group_var)
        if key is None:
            rest.append(h)
            continue
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            path, line = _origin(inventory, h, group_var)
            raise InputError(f"host {h}: {group_var} must be a name or number, got {key!r}", path=path, line=line)
        explicit.setdefault(str(key), []).append(h)
    out: list[dict[str, Any]] = []
    for gid, nodes in explicit.items():
        kinds = {hw[n].key for n in nodes}
        if len(kinds) > 1:
            path, line = _origin(inventory, nodes[0], group_var)
            raise InputError(f"{group_var} {gid}: its nodes have different GPUs ("
                             + "; ".join(f"{n}: {hw[n].count} x {hw[n].gpu} {hw[n].mem_gib:g} GiB" for n in nodes)
                             + "); a replica runs on one kind of GPU", path=path, line=line)
        h0 = hw[nodes[0]]
        total = h0.count * len(nodes)
        if profile.layout is not None:
            lay = next(x for x in profile.layouts if x.name == profile.layout)
        else:
            lay = next((x for x in profile.layouts_for(h0.gpu) if x.gpus == total), None) or _generic(h0, len(nodes))
        s = size_layout(profile, lay, h0)
        problem = None
        if s.nnodes != len(nodes):
            problem = (f"layout {lay.name} needs {lay.gpus} GPUs = {s.nnodes} node(s) of {h0.count}, "
                       f"but {group_var} {gid} has {len(nodes)} ({', '.join(nodes)})")
        elif not s.fits:
            problem = _arith(profile, s, h0) + _hint(profile, h0)
        out.append(_replica(gid, nodes, s, h0, profile, inventory, problem))
    if explicit:
        notes.append(f"{sum(len(v) for v in explicit.values())} node(s) in {len(explicit)} replica(s) named by "
                     f"host var `{group_var}`")
    # the rest: consecutive nodes of one domain and one kind of GPU
    buckets: dict[tuple[str | None, tuple[str, int, float]], list[str]] = {}
    no_domain = []
    for h in rest:
        d = _domain(h, inventory)
        if d is None:
            no_domain.append(h)
        buckets.setdefault((d, hw[h].key), []).append(h)
    if no_domain:
        notes.append(f"{len(no_domain)} node(s) name no nvlink_domain or rack; they are grouped in inventory order: "
                     f"{', '.join(no_domain[:8])}{' ...' if len(no_domain) > 8 else ''}")
    # one domain (or none) holding two kinds of GPU: each kind's replicas get its GPU in their
    # id, or both kinds would number theirs "nodes/1", "nodes/2" ... and one would hide the other
    kinds_in: dict[str | None, int] = {}
    for dom, _ in buckets:
        kinds_in[dom] = kinds_in.get(dom, 0) + 1
    for (dom, _), nodes in buckets.items():
        h0 = hw[nodes[0]]
        s = choose_layout(profile, h0)
        for i in range(0, len(nodes), s.nnodes):
            part = nodes[i:i + s.nnodes]
            label = (dom or "nodes").replace(" ", "-")
            if kinds_in[dom] > 1:
                label = f"{label}-{h0.gpu}".replace(" ", "-")
            rid = f"{label}/{i // s.nnodes + 1}"
            problem = None
            if not s.fits:
                problem = _arith(profile, s, h0) + _hint(profile, h0)
            elif len(part) < s.nnodes:
                problem = (f"layout {s.layout.name} needs {s.nnodes} nodes of {h0.count} x {h0.gpu} but only "
                           f"{len(part)} remain in {dom or 'the play'} ({', '.join(part)}); group them with "
                           f"`{group_var}` or leave them out of the play's hosts")
            out.append(_replica(rid, part, s, h0, profile, inventory, problem))
    order = {h: i for i, h in enumerate(hosts)}
    out.sort(key=lambda r: order[r["nodes"][0]])
    ids = [r["id"] for r in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        path, line = _origin(inventory, out[0]["head"])
        raise ReplicaError(f"replica id(s) {', '.join(dup)} name more than one replica; give the nodes "
                           f"`{group_var}` values of their own", path=path, line=line)
    bad = [r for r in out if not r["fits"]]
    if bad:
        path, line = _origin(inventory, bad[0]["head"])
        raise ReplicaError(f"{len(bad)} of {len(out)} replica(s) cannot serve {profile.model} (profile "
                           f"{profile.name}):\n" + "\n".join(f"  replica {r['id']} ({', '.join(r['nodes'])}): "
                                                              f"{r['problem']}" for r in bad), path=path, line=line)

    for r in out:
        r["launch"] = replica_launch(profile, r, inventory)
    shapes: dict[str, int] = {}
    for r in out:
        k = f"{r['layout']['name']} on {r['layout']['nnodes']} x {r['gpu']}"
        shapes[k] = shapes.get(k, 0) + 1
    notes.append(f"model profile {profile.name}: " + "; ".join(f"{n} replica(s) {k}" for k, n in shapes.items()))
    return out, notes
