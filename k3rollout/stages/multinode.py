"""Stage 6b: cross-node communication for the batch (nccl-tests all_reduce_perf).

Runs once per batch across its nodes (a one-node batch tests NVLink inside the node).
A failure is isolated by pairs: a node that passes with some peer is cleared, a node that
fails with every peer is blamed. Bus bandwidth below the playbook's floor fails the stage.

Across nodes the fast path must be proven, not assumed: NCCL silently falls back to TCP
sockets when RDMA is missing (``NET/IB : No device found.``, ``Using network Socket``), and
the collective still "works". The run sets ``NCCL_DEBUG=INFO`` and reads NCCL's own log: the
transport must be IB (RoCE also shows as NET/IB), GPUDirect RDMA too when the playbook
requires it. A host whose log says it has no RDMA device is blamed by name, with the lines.
"""

from __future__ import annotations

import re
from typing import Any

from k3rollout.checks.parsers import ParseError, parse_nccl_tests
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind


def _argv(nodes: list[str], gpus: int, base: list[str]) -> list[str]:
    if len(nodes) == 1 and gpus > 1:
        return list(base)
    prog = [a if a != "-g" else a for a in base]
    if "-g" in prog:
        prog[prog.index("-g") + 1] = "1"
    return ["mpirun", "--allow-run-as-root", "-np", str(gpus * len(nodes)), "-H",
            ",".join(f"{n}:{gpus}" for n in nodes), "-x", "NCCL_DEBUG=INFO", *prog]


def nccl_test(ctx: NodeCtx, nodes: list[str], name: str, gpus: int | None = None,
              argv: list[str] | None = None) -> tuple[bool, str, dict[str, Any]]:
    """The NCCL test (``ctx.params.argv``, or ``argv``) across ``nodes``, ``gpus`` GPUs each,
    as the step ``name``: (ran and parsed, its output when not, the bus bandwidth facts).
    ``observe`` runs it too, on one idle node."""
    gpus = gpus or int(ctx.baseline.get("gpu_count") or 8)
    collective = getattr(ctx.workload, "collective", None)
    if collective is not None:
        # a runtime that starts MPI jobs itself (Slurm: srun --mpi=pmix, one task per GPU)
        prog = list(argv or ctx.params.argv)
        if "-g" in prog:
            prog[prog.index("-g") + 1] = "1"
        res = collective(ctx, name, nodes, gpus, prog, 1800.0)
    else:
        res = ctx.step(name, _argv(nodes, gpus, list(argv or ctx.params.argv)), timeout=1800)
    if not res.ok:
        return False, res.stdout + res.stderr, {}
    try:
        parsed = parse_nccl_tests(res.stdout)
    except ParseError as exc:
        return False, str(exc), {}
    return True, "", {"avg_busbw": parsed["avg_busbw"], "max_busbw": parsed["max_busbw"],
                      "largest_busbw": parsed["largest_busbw"], "wrong_rows": parsed["wrong_rows"],
                      "stdout": res.stdout}


def mixed_check(ctx: NodeCtx, nodes: list[str], outcomes: dict[str, StageOutcome]) -> None:
    """An upgraded node against not-yet-upgraded peers (``ctx.peers``, in rollout order).

    The first upgraded node of the batch that passed is tested with the chosen peer, one
    GPU per node. When it fails, a second peer decides who is at fault: failing with two
    peers blames the upgraded side (every node of the batch fails: they share the new
    driver); passing with the second blames the first peer, which is recorded and left
    to a person (it is still serving and this run does not touch it)."""
    p = ctx.params
    ok_nodes = [n for n in nodes if outcomes[n].passed]
    if not p.mixed_version_peer or not ok_nodes:
        return
    peers = list(ctx.peers)
    if isinstance(p.mixed_version_peer, str):
        if p.mixed_version_peer not in peers:
            for n in ok_nodes:
                outcomes[n] = StageOutcome(False, f"mixed_version_peer {p.mixed_version_peer} is not a node waiting "
                                                  f"for the upgrade (candidates: {', '.join(peers[:5]) or 'none'})",
                                           outcomes[n].facts, "")
            return
        peers = [p.mixed_version_peer] + [x for x in peers if x != p.mixed_version_peer]
    facts: dict[str, Any] = {"nccl_mixed_peer": None, "nccl_mixed_ok": None}
    if not peers:
        facts["nccl_mixed_note"] = "no node left on the old driver: the cluster is no longer mixed"
        for n in ok_nodes:
            outcomes[n].facts.update(facts)
        return
    a = ok_nodes[0]
    tried: list[dict[str, Any]] = []
    for peer in peers[:2]:
        good, logs, m = nccl_test(ctx, [a, peer], f"all-reduce-mixed-{a}-{peer}", gpus=1, argv=p.mixed_argv)
        floor_ok = good and (p.mixed_min_busbw_gbps is None or m["largest_busbw"] >= p.mixed_min_busbw_gbps)
        tried.append({"peer": peer, "ok": floor_ok, "busbw_gbps": m.get("largest_busbw"), "logs": logs[-2000:]})
        if floor_ok:
            break
    first = tried[0]
    facts.update(nccl_mixed_peer=first["peer"], nccl_mixed_ok=first["ok"], nccl_mixed_busbw_gbps=first["busbw_gbps"],
                 nccl_mixed_tries=[{k: v for k, v in t.items() if k != "logs"} for t in tried])
    if tried[-1]["ok"] and not first["ok"]:
        facts["nccl_mixed_suspect_peer"] = first["peer"]      # the old-driver peer failed, not us
        facts["nccl_mixed_ok"] = True
    for n in ok_nodes:
        outcomes[n].facts.update(facts)
    if not tried[-1]["ok"]:
        why = (f"all_reduce between upgraded {a} and not-yet-upgraded {', '.join(t['peer'] for t in tried)} failed"
               + ("" if len(tried) > 1 else " (no second peer to compare with)"))
        logs = "\n".join(t["logs"] for t in tried)
        for n in ok_nodes:
            outcomes[n] = StageOutcome(False, why, outcomes[n].facts, logs)


_NCCL_INFO = re.compile(r"^(?P<host>[^:\s]+):\d+:\d+ \[\d+\] NCCL INFO (?P<msg>.*)$")


def nccl_transport(text: str) -> dict[str, Any]:
    """What NCCL's INFO log says about the inter-node network: the transport it chose
    ("IB", "Socket" or None when the log does not say), GPUDirect RDMA, the hosts that found
    no RDMA device, and the lines that say so (the evidence)."""
    nets, no_ib, lines = set(), [], []
    gdr = None
    for line in text.splitlines():
        m = _NCCL_INFO.match(line.strip())
        if not m:
            continue
        msg = m.group("msg")
        if msg.startswith("Using network "):
            nets.add(msg.removeprefix("Using network ").strip())
            lines.append(line.strip())
        elif msg.startswith("NET/IB : No device found"):
            no_ib.append(m.group("host"))
            lines.append(line.strip())
        elif "GPU Direct RDMA Disabled" in msg:
            gdr = False
            lines.append(line.strip())
        elif re.search(r"via NET/IB/\d+/GDRDMA", msg):
            gdr = True if gdr is None else gdr
    transport = "Socket" if "Socket" in nets else ("IB" if "IB" in nets else (sorted(nets)[0] if nets else None))
    return {"transport": transport, "gpudirect_rdma": gdr, "no_rdma_hosts": list(dict.fromkeys(no_ib)),
            "lines": list(dict.fromkeys(lines))[:12]}


def _fast_path(ctx: NodeCtx, nodes: list[str], logs: str) -> tuple[bool, str, dict[str, Any]]:
    p = ctx.params
    net = nccl_transport(logs)
    facts = {"nccl_transport": net["transport"], "nccl_gpudirect_rdma": net["gpudirect_rdma"],
             "nccl_no_rdma_hosts": net["no_rdma_hosts"], "nccl_transport_lines": net["lines"]}
    if len(nodes) < 2 or not p.require_rdma:
        return True, "", facts
    evidence = "\n".join(net["lines"])
    if net["transport"] != "IB":
        said = (f"NCCL used network {net['transport']}" if net["transport"] else
                "NCCL's log (NCCL_DEBUG=INFO) does not say which network it used")
        who = f"; no RDMA device on {', '.join(net['no_rdma_hosts'])}" if net["no_rdma_hosts"] else ""
        return False, f"{said}, not IB/RoCE RDMA{who}" + (f"; NCCL's log:\n{evidence}" if evidence else ""), facts
    if p.require_gpudirect_rdma and not net["gpudirect_rdma"]:
        return False, "NCCL runs over IB but without GPUDirect RDMA (no NET/IB/.../GDRDMA channel)" + (
            f"; NCCL's log:\n{evidence}" if evidence else ""), facts
    return True, "", facts


def run_group(ctx: NodeCtx, nodes: list[str]) -> dict[str, StageOutcome]:
    """``ctx`` is the first node's context; returns an outcome per node."""
    out = _run_group(ctx, nodes)
    close = getattr(ctx.workload, "close_group", None)
    if close is not None:
        ok, why = close(ctx)
        if not ok:
            out = {n: StageOutcome(False, why, o.facts, why) for n, o in out.items()}
    mixed_check(ctx, nodes, out)
    return out


def _run_group(ctx: NodeCtx, nodes: list[str]) -> dict[str, StageOutcome]:
    floor = ctx.params.min_busbw_gbps
    ok, logs, m = nccl_test(ctx, nodes, "all-reduce-" + ("batch" if len(nodes) > 1 else "local"))
    if ok:
        fast, fast_why, net = _fast_path(ctx, nodes, m.pop("stdout", ""))
        culprits = [n for n in net["nccl_no_rdma_hosts"] if n in nodes]
        if not fast and culprits and len(culprits) < len(nodes):
            # the hosts that found no RDMA device are named and failed; the others are measured
            # again without them, so their numbers are real
            out = {n: StageOutcome(False, fast_why, {"nccl_ok": False, "nccl_nodes": nodes, **net}, fast_why)
                   for n in culprits}
            out.update(_run_group(ctx, [n for n in nodes if n not in culprits]))
            return out
        bw_ok = m["largest_busbw"] >= floor and m["wrong_rows"] == 0
        why = "" if bw_ok else (f"bus bandwidth {m['largest_busbw']:.1f} GB/s below the floor {floor:.1f} GB/s"
                                if m["wrong_rows"] == 0 else f"{m['wrong_rows']} size(s) with wrong results")
        if not fast:
            why = fast_why + (f"; {why}" if why else "")
        passed = bw_ok and fast
        facts = {"nccl_nodes": nodes, "nccl_busbw_gbps": m["largest_busbw"], "nccl_avg_busbw_gbps": m["avg_busbw"],
                 "nccl_floor_gbps": floor, "nccl_ok": passed, **net}
        return {n: StageOutcome(passed, why, dict(facts), "" if passed else why) for n in nodes}
    if len(nodes) == 1:
        return {nodes[0]: StageOutcome(False, "all_reduce_perf failed on the node", {"nccl_ok": False}, logs)}
    cleared: set[str] = set()
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if a in cleared and b in cleared:
                continue
            pair_ok, _, _ = nccl_test(ctx, [a, b], f"all-reduce-pair-{a}-{b}")
            if pair_ok:
                cleared.update((a, b))
    blamed = [n for n in nodes if n not in cleared]
    if not blamed:
        # every pair works but the whole batch does not: blame no single node, fail them all
        return {n: StageOutcome(False, "batch-wide all_reduce failed although every pair passed",
                                {"nccl_ok": False, "nccl_nodes": nodes}, logs) for n in nodes}
    out = {n: StageOutcome(False, "all_reduce_perf fails with every peer", {"nccl_ok": False, "nccl_nodes": nodes},
                           logs) for n in blamed}
    # measure the nodes that remain, together, so their numbers are real (and still floor-checked)
    out.update(_run_group(ctx, [n for n in nodes if n in cleared]) if cleared else {})
    return out


def run(ctx: NodeCtx) -> StageOutcome:
    return run_group(ctx, [ctx.node])[ctx.node]


SPEC = StageSpec(kind("multinode"), run=run, run_batch=run_group)
