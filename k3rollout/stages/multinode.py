"""Stage 6b: cross-node communication for the batch (nccl-tests all_reduce_perf).

Runs once per batch across its nodes (a one-node batch tests NVLink inside the node).
A failure is isolated by pairs: a node that passes with some peer is cleared, a node that
fails with every peer is blamed. Bus bandwidth below the playbook's floor fails the stage.
"""

from __future__ import annotations

from k3rollout.checks.parsers import ParseError, parse_nccl_tests
from k3rollout.stages.base import NodeCtx, StageOutcome


def _argv(nodes: list[str], gpus: int, base: list[str]) -> list[str]:
    if len(nodes) == 1:
        return list(base)
    prog = [a if a != "-g" else a for a in base]
    if "-g" in prog:
        prog[prog.index("-g") + 1] = "1"
    return ["mpirun", "--allow-run-as-root", "-np", str(gpus * len(nodes)), "-H",
            ",".join(f"{n}:{gpus}" for n in nodes), "-x", "NCCL_DEBUG=WARN", *prog]


def _test(ctx: NodeCtx, nodes: list[str], name: str) -> tuple[bool, str, dict]:
    gpus = int(ctx.baseline.get("gpu_count") or 8)
    res = ctx.step(name, _argv(nodes, gpus, list(ctx.params.argv)), timeout=1800)
    if not res.ok:
        return False, res.stdout + res.stderr, {}
    try:
        parsed = parse_nccl_tests(res.stdout)
    except ParseError as exc:
        return False, str(exc), {}
    return True, "", {"avg_busbw": parsed["avg_busbw"], "max_busbw": parsed["max_busbw"],
                      "largest_busbw": parsed["largest_busbw"], "wrong_rows": parsed["wrong_rows"]}


def run_group(ctx: NodeCtx, nodes: list[str]) -> dict[str, StageOutcome]:
    """``ctx`` is the first node's context; returns an outcome per node."""
    floor = ctx.params.min_busbw_gbps
    ok, logs, m = _test(ctx, nodes, "all-reduce-" + ("batch" if len(nodes) > 1 else "local"))
    if ok:
        bw_ok = m["largest_busbw"] >= floor and m["wrong_rows"] == 0
        why = "" if bw_ok else (f"bus bandwidth {m['largest_busbw']:.1f} GB/s below the floor {floor:.1f} GB/s"
                                if m["wrong_rows"] == 0 else f"{m['wrong_rows']} size(s) with wrong results")
        facts = {"nccl_nodes": nodes, "nccl_busbw_gbps": m["largest_busbw"], "nccl_avg_busbw_gbps": m["avg_busbw"],
                 "nccl_floor_gbps": floor, "nccl_ok": bw_ok}
        return {n: StageOutcome(bw_ok, why, dict(facts), "" if bw_ok else why) for n in nodes}
    if len(nodes) == 1:
        return {nodes[0]: StageOutcome(False, "all_reduce_perf failed on the node", {"nccl_ok": False}, logs)}
    cleared: set[str] = set()
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if a in cleared and b in cleared:
                continue
            pair_ok, _, _ = _test(ctx, [a, b], f"all-reduce-pair-{a}-{b}")
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
    out.update(run_group(ctx, [n for n in nodes if n in cleared]) if cleared else {})
    return out


def run(ctx: NodeCtx) -> StageOutcome:
    return run_group(ctx, [ctx.node])[ctx.node]
