"""The serving stages of a multi-node replica: one launch across its nodes, checked on the head.

With a model profile, a replica of more than one node is one server: the smoke and feature
stages run once for it, after every node passed its own stages (the engine waits for that).
Each node gets the ``vllm serve`` command the plan computed for it (plan/launch.py): the
workers (``--headless``) first, then the head; /health is then polled on the head for as
long as the profile's engine-ready timeout (``VLLM_ENGINE_READY_TIMEOUT_S`` in the recipe),
and the ladder runs against the head.

The profile's launch is the command; of the stage's own flags only those in
``CARRIED_FLAGS`` are added (the checklist asks for ``--enable-prefix-caching`` explicitly).

When the launch fails, every member's container state and log is read, and the node that
caused it is named when the evidence shows one: a worker whose process exited (a wrong rank
or node count, CUDA out of memory on one of its GPUs), a worker that never reached the
head, or the head itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from k3rollout.checks import parsers
from k3rollout.checks.all2all import ALL2ALL_MANAGERS, all2all_in_use
from k3rollout.stages import vllm_server
from k3rollout.stages.base import NodeCtx
from k3rollout.transport.base import CommandResult

CARRIED_FLAGS = ("--enable-prefix-caching",)
REPLICA_POLL_S = 1.0

_ERROR_LINE = re.compile(r"(torch\.OutOfMemoryError:.*|AssertionError:.*|ValueError:.*|TimeoutError:.*|"
                         r"\[c10d\] The client socket has failed to connect.*|died unexpectedly.*|"
                         r"nvshmemi_transport_init:\d+: Unable to initialize any transports.*|"
                         # deepep_v2 (vllm/distributed/device_communicators/all2all.py): NCCL GIN, not NVSHMEM
                         r"RuntimeError: DeepEPv2 requires NCCL GIN.*)")


def serve_args(launch_args: list[str], stage_args: list[str]) -> list[str]:
    """The profile's launch with the stage's carried flags; a carried flag replaces its
    negation (``--enable-prefix-caching`` over the Hopper launch's ``--no-enable-prefix-caching``:
    the play asks for it explicitly, as the checklist does)."""
    args = list(launch_args)
    for f in CARRIED_FLAGS:
        if f in stage_args and f not in args:
            args = [a for a in args if a != "--no-" + f[2:]] + [f]
    return args


def member_ctx(ctx: NodeCtx, node: str) -> NodeCtx:
    rep = ctx.replica or {}
    return replace(ctx, node=node, baseline=dict((rep.get("baselines") or {}).get(node, {})), facts={})


def stop_serving(ctx: NodeCtx) -> dict[str, list[str]]:
    """Stop the serving containers on every node of the replica (their GPUs are needed);
    node -> the containers stopped there (its uncordon stage restarts them)."""
    stopped: dict[str, list[str]] = {}
    for node in (ctx.replica or {})["nodes"]:
        mctx = member_ctx(ctx, node)
        stopped[node] = mctx.workload.release_gpus(mctx)
    return stopped


def per_node(facts: dict[str, Any], **by_node: dict[str, Any]) -> dict[str, Any]:
    """Facts that differ per member (its own launch, what was stopped on it): the engine
    gives each member its own under the plain key."""
    facts["per_node"] = {n: {k: v[n] for k, v in by_node.items() if n in v}
                         for n in {n for v in by_node.values() for n in v}}
    return facts


def launch(ctx: NodeCtx, name: str, image: str, model: str, stage_args: list[str], port: int
           ) -> tuple[bool, str, str, dict[str, Any]]:
    """Start the replica (workers, then head) and wait for the head's /health; (healthy,
    reason, logs, facts). On failure the reason names the node that caused it when the
    evidence shows one."""
    rep = ctx.replica or {}
    plan = {e["node"]: e for e in rep["launch"]}
    head = rep["nodes"][0]
    facts: dict[str, Any] = {"replica": rep["id"], "replica_head": head, "replica_nodes": list(rep["nodes"]),
                             "replica_layout": rep["layout"], "replica_ready_timeout_s": rep["ready_timeout"],
                             "replica_args": {n: serve_args(plan[n]["args"], stage_args) for n in rep["nodes"]}}
    ok, why, logs = check_driver_params(ctx, facts)
    if not ok:
        return False, why, logs, facts
    start_replica = getattr(ctx.workload, "start_replica", None)
    start: Callable[[], CommandResult] | None = None
    submitted: list[CommandResult] = []
    if start_replica is not None:
        # a runtime that starts the whole replica as one job (Slurm: one job over its nodes,
        # each task's rank and head taken from the job), still served and checked on the head
        members = [(member_ctx(ctx, n), facts["replica_args"][n], dict(plan[n]["env"])) for n in rep["nodes"]]

        def start_job() -> CommandResult:
            submitted.append(start_replica(ctx, name, image, model, port, members))
            return submitted[-1]
        start = start_job
    workers: list[str] = rep["nodes"][1:] if start is None else []
    for node in workers:
        mctx = member_ctx(ctx, node)
        mctx.workload.remove_server(mctx, name, f"{name}-cleanup")
        run = mctx.workload.start_server(mctx, name, image, model, facts["replica_args"][node], port,
                                         dict(plan[node]["env"]))
        if not run.ok:
            facts["replica_culprit"] = node
            why = f"replica {rep['id']}: worker {node} (rank {plan[node]['rank']}) did not start (rc {run.rc})"
            return False, why, run.stdout + run.stderr, facts
    ok, why, logs = vllm_server.launch(ctx, name, image, model, facts["replica_args"][head], port,
                                       rep["ready_timeout"], poll_s=REPLICA_POLL_S,
                                       env=dict(plan[head]["env"]), start=start)
    if ok:
        ok, why, logs = check_all2all(ctx, name, facts)
        return ok, why, logs, facts
    if submitted and not submitted[-1].ok:
        # the job never ran (refused, or left without its nodes): no task of it can be blamed,
        # and the runtime's own words are the reason
        said = submitted[-1].stderr.strip()
        return False, f"replica {rep['id']} did not come up: {why}" + (f": {said}" if said and said not in why
                                                                       else ""), logs, facts
    culprit, detail, more = blame(ctx, name, plan)
    facts["replica_culprit"] = culprit
    reason = f"replica {rep['id']} did not come up: {why}"
    if culprit:
        reason += f"; caused by {detail}"
    return False, reason, logs + more, facts


def check_driver_params(ctx: NodeCtx, facts: dict[str, Any]) -> tuple[bool, str, str]:
    """DeepEP needs the driver's module options ``NVreg_EnableStreamMemOPs=1`` and
    ``PeerMappingOverride=1`` (in ``NVreg_RegistryDwords``), set in /etc/modprobe.d and
    visible in /proc/driver/nvidia/params; a driver reinstall can drop them (docs/domain.md
    "Missing RDMA is silent"). Read on every node of the replica, after its upgrade, where
    vLLM builds a DeepEP all-to-all manager (checks/all2all.py: not with data parallel 1)."""
    rep = ctx.replica or {}
    backend = all2all_in_use(facts["replica_args"][rep["nodes"][0]]) or ""
    if not backend.startswith("deepep"):
        return True, "", ""
    lacking: dict[str, list[str]] = {}
    text = ""
    for node in rep["nodes"]:
        res = member_ctx(ctx, node).step("nvidia-params", ["cat", "/proc/driver/nvidia/params"])
        params = parsers.parse_nvidia_params(res.stdout) if res.ok else {}
        miss = [k for k, ok in (("EnableStreamMemOPs=1", params.get("EnableStreamMemOPs") == "1"),
                                ("PeerMappingOverride=1", "PeerMappingOverride=1" in params.get("RegistryDwords", "")))
                if not ok]
        if miss:
            lacking[node] = miss
            text += f"--- {node}: /proc/driver/nvidia/params ---\n{res.stdout or res.stderr}"
    facts["driver_params_ok"] = not lacking
    if not lacking:
        return True, "", ""
    facts["replica_culprit"] = next(iter(lacking))
    return False, (f"replica {rep['id']}: the driver's module parameters for {backend} are missing on "
                   + "; ".join(f"{n} ({', '.join(m)})" for n, m in lacking.items())
                   + ": set them in /etc/modprobe.d (options nvidia NVreg_EnableStreamMemOPs=1 "
                   'NVreg_RegistryDwords="PeerMappingOverride=1;") and reload the module; a driver reinstall can '
                   "drop them"), text


def check_all2all(ctx: NodeCtx, name: str, facts: dict[str, Any]) -> tuple[bool, str, str]:
    """An expert-parallel replica must run the all-to-all backend it was asked for: the head's
    log names the manager vLLM chose ("Using DeepEPV2All2AllManager all2all manager."); a
    removed backend (pplx, naive) silently falls back to allgather_reducescatter. Only where vLLM
    builds a manager (ParallelConfig.use_all2all, vllm/config/parallel.py): a TP16/EP16 replica
    with data parallel 1 builds none and logs no such line."""
    asked = all2all_in_use(facts["replica_args"][(ctx.replica or {})["nodes"][0]])
    facts["all2all_built"] = asked is not None
    if asked is None:
        return True, "", ""
    res = ctx.workload.server_logs(ctx, name, f"{name}-startup-log")
    text = res.stdout + res.stderr
    used = [m.group(1) for m in re.finditer(r"Using (\w+) all2all manager\.", text)]
    want = ALL2ALL_MANAGERS.get(asked)
    facts.update(all2all_asked=asked, all2all_manager=used[-1] if used else None, all2all_expected_manager=want)
    if used and want and used[-1] == want:
        return True, "", ""
    said = [ln for ln in text.splitlines() if "all2all" in ln][-4:]
    rid = (ctx.replica or {})["id"]
    known = want or ("removed from vLLM, which falls back to allgather_reducescatter" if asked in ("pplx", "naive")
                     else "a backend vLLM does not know")
    why = (f"replica {rid}: asked for all-to-all backend {asked} ({known}), but the server "
           + (f"uses {used[-1]}" if used else "names no all2all manager in its log"))
    return False, why + ("; its log:\n" + "\n".join(said) if said else ""), text


def blame(ctx: NodeCtx, name: str, plan: dict[str, dict[str, Any]]) -> tuple[str | None, str, str]:
    """(culprit, what it shows, the workers' logs) from each worker's container and log; the
    head when only its own log shows the cause."""
    rep = ctx.replica or {}
    logs = ""
    found: tuple[str | None, str] = (None, "")
    for node in rep["nodes"][1:]:
        mctx = member_ctx(ctx, node)
        st = mctx.workload.server_state(mctx, name, f"{name}-failure-state")
        lg = mctx.workload.server_logs(mctx, name, f"{name}-failure-logs")
        text = lg.stdout + lg.stderr
        logs += f"\n--- {node} (rank {plan[node]['rank']}) ---\n{text}"
        if found[0]:
            continue
        line = next((m.group(1) for m in map(_ERROR_LINE.search, reversed(text.splitlines())) if m), "")
        if st.state == "terminated":
            # ended by srun because another task of the replica's job ended (--kill-on-bad-exit):
            # which one srun saw end first is a race, so its own log decides whether it failed
            if "failed to connect" in line:
                found = (node, f"worker {node} (rank {plan[node]['rank']}) never joined the head: {line}")
            elif line and "died unexpectedly" not in line:
                found = (node, f"worker {node} (rank {plan[node]['rank']}) failed: {line}")
            continue
        if not st.found or not st.running:
            how = (f"exited with code {st.exit_code}" if st.state == "exited" else f"is {st.state}") if st.found \
                else f"has no container ({st.error})"
            found = (node, f"worker {node} (rank {plan[node]['rank']}) {how}" + (f": {line}" if line else ""))
        elif "failed to connect" in line:
            found = (node, f"worker {node} (rank {plan[node]['rank']}) never joined the head: {line}")
    if found[0] is None:
        head = rep["nodes"][0]
        hl = ctx.workload.server_logs(ctx, name, f"{name}-failure-logs")
        text = hl.stdout + hl.stderr
        if "OutOfMemoryError" in text:
            found = (head, f"head {head}: CUDA out of memory loading {rep.get('need_gib', '?')} GiB of weights over "
                           f"{rep.get('gpus', '?')} GPUs")
    return found[0], found[1], logs


def stop(ctx: NodeCtx, name: str) -> None:
    """Logs kept and containers removed on every node, head last; a reservation made for the
    replica's one job (Slurm) goes with it (the head's own reservation closes it too, at its
    uncordon or rollback, should this not)."""
    rep = ctx.replica or {}
    for node in rep["nodes"][1:]:
        mctx = member_ctx(ctx, node)
        mctx.workload.server_logs(mctx, name, f"{name}-logs")
        mctx.workload.remove_server(mctx, name, f"{name}-remove")
    vllm_server.stop(ctx, name)
    close = getattr(ctx.workload, "close_group", None)
    if close is not None:
        close(ctx)
