"""Multi-node ``vllm serve`` on the simulated cluster: a head and its headless workers.

vLLM without Ray (DOMAIN.md "Multi-node launches"):

- tensor/pipeline parallel: every node runs ``--nnodes N --node-rank R --master-addr HEAD``,
  ranks above 0 with ``--headless``. vLLM's ``ParallelConfig`` asserts
  ``world_size % nnodes == 0`` and ``node_rank < nnodes`` (vllm/config/parallel.py), so a
  wrong rank or node count stops that node's process at once, with vLLM's own words;
- data parallel: ``--data-parallel-size D --data-parallel-size-local L --data-parallel-address
  HEAD``; the other nodes add ``--headless --data-parallel-start-rank K``.

The head's API server waits for its engines (``Waiting for 1 local, 0 remote core engine
proc(s) to start.``, vllm/v1/engine/utils.py) until every worker has joined, and gives up
after ``VLLM_ENGINE_READY_TIMEOUT_S`` (default 600 s) with vLLM's ``TimeoutError``. The head
decides lazily, at each docker command on its node, so the order in which head and workers
start does not matter (the workers' TCP store clients retry, as torch's do).

Once all ranks joined, the model is loaded: its weights, split over the replica's GPUs,
must fit each GPU's usable memory (``--gpu-memory-utilization``), else the rank that does not
fit dies with PyTorch's CUDA out-of-memory text. A worker with the ``worker_unreachable``
fault cannot reach the head's rendezvous port (firewall, wrong interface): it logs torch's
connect failures and never joins.

An expert-parallel replica on a DeepEP all-to-all backend initialises NVSHMEM once the model is
loaded; on a node with the ``rdma_transport_init_fails`` fault no NVSHMEM transport comes up
(neither ibrc nor IBGDA): that node's process exits with NVSHMEM's own lines (as in
deepseek-ai/DeepEP#55 and sgl-project/sglang#6017), and the head's executor reports the dead
worker. Any other backend, or a launch without expert parallel, does not touch NVSHMEM.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from k3rollout.checks.all2all import ALL2ALL_MANAGERS, REMOVED_ALL2ALL
from k3rollout.sim import state as st
from k3rollout.sim import vllm

# checkpoint size in GB (1e9 bytes): Kimi K3 is about 1.42-1.5 TB (DOMAIN.md "Kimi K3 deployment shape")
MODEL_WEIGHTS_GB = {"moonshotai/Kimi-K3": 1500.0}
ENGINE_READY_TIMEOUT_S = 600.0        # vLLM's default VLLM_ENGINE_READY_TIMEOUT_S
MASTER_PORT = 29501                   # vLLM's default --master-port


def topology(opts: dict[str, Any]) -> dict[str, Any] | None:
    """How this process takes part in a multi-node replica, or None for a one-node launch."""
    tp, pp = int(opts.get("tensor_parallel_size", 1)), int(opts.get("pipeline_parallel_size", 1))
    dp = int(opts.get("data_parallel_size", 1))
    nnodes = int(opts.get("nnodes", 1))
    if nnodes > 1:
        return {"form": "nodes", "tp": tp, "pp": pp, "dp": dp, "world": tp * pp * dp, "nnodes": nnodes,
                "rank": int(opts.get("node_rank", 0)), "head_addr": opts.get("master_addr"),
                "local_gpus": tp * pp * dp // nnodes if (tp * pp * dp) % nnodes == 0 else None,
                "headless": bool(opts.get("headless"))}
    local = int(opts.get("data_parallel_size_local", dp))
    if dp > local:
        start = int(opts.get("data_parallel_start_rank", 0))
        return {"form": "dp", "tp": tp, "pp": pp, "dp": dp, "world": tp * pp * dp, "nnodes": -(-dp // local),
                "rank": start // max(local, 1), "local": local, "start_rank": start,
                "head_addr": opts.get("data_parallel_address"), "local_gpus": tp * pp * local,
                "headless": bool(opts.get("headless"))}
    return None


def all2all_logs(opts: dict[str, Any]) -> list[str]:
    """What an expert-parallel server logs about its all-to-all backend."""
    if not opts.get("enable_expert_parallel"):
        return []
    asked = str(opts.get("all2all_backend") or "allgather_reducescatter")
    out = []
    if asked in REMOVED_ALL2ALL:
        out.append(f"WARNING {_ts()} [parallel.py:386] The {asked!r} all2all backend has been removed. Falling back "
                   "to 'allgather_reducescatter'.")
        asked = "allgather_reducescatter"
    return out + [f"INFO {_ts()} [cuda_communicator.py:151] Using {ALL2ALL_MANAGERS.get(asked, 'AgRsAll2AllManager')} "
                  "all2all manager."]


def uses_nvshmem(opts: dict[str, Any]) -> bool:
    """Expert parallel on a DeepEP backend (the ones that initialise NVSHMEM)."""
    asked = str(opts.get("all2all_backend") or "allgather_reducescatter")
    return bool(opts.get("enable_expert_parallel")) and asked.startswith("deepep")


def nvshmem_init_failed_logs(opts: dict[str, Any]) -> list[str]:
    """NVSHMEM 3.2.5 finding no usable remote transport when DeepEP allocates its buffer
    (lines from deepseek-ai/DeepEP#55; the closing line, where NVSHMEM calls exit() in the
    worker process, from sgl-project/sglang#6017)."""
    src = "/workspace/nvshmem_src/src/host"
    return all2all_logs(opts) + [
        "WARN: init failed for remote transport: ibrc",
        f"{src}/transport/transport.cpp:nvshmemi_transport_init:275: init failed for transport: IBGDA",
        f"{src}/transport/transport.cpp:nvshmemi_transport_init:287: Unable to initialize any transports. "
        "returning error.",
        f"{src}/init/init.cu:989: non-zero status: 7 nvshmem detect topo failed ",
        "",
        f"{src}/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization failed, exiting",
    ]


def _ts() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def config_error(topo: dict[str, Any], gpus: int) -> str | None:
    """The error a node's own vLLM process stops with before it joins anything."""
    if topo["form"] == "nodes":
        if topo["world"] % topo["nnodes"]:
            return f"AssertionError: world_size={topo['world']} must be divisible by nnodes={topo['nnodes']}."
        if topo["rank"] >= topo["nnodes"]:
            return f"AssertionError: node_rank={topo['rank']} must be less than nnodes={topo['nnodes']}."
    if topo["local_gpus"] and topo["local_gpus"] > gpus:
        return ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the "
                f"placement group. (requested {topo['local_gpus']}, available {gpus})")
    return None


def start(state: dict[str, Any], name: str, c: dict[str, Any], opts: dict[str, Any], logs: list[str],
          topo: dict[str, Any], state_dir: Path | None) -> None:
    """A multi-node process starts: it fails on its own configuration, or runs (a head then
    waits for its workers; a worker waits for its head)."""
    c["started"] = time.time()
    c.pop("serving", None)
    bad = config_error(topo, state["gpu"]["count"])
    if bad:
        c["logs"] = logs + [f"ERROR {_ts()} [core.py:708] EngineCore failed to start.",
                            "ERROR [core.py:708] Traceback (most recent call last):", f"ERROR [core.py:708] {bad}",
                            "RuntimeError: Engine core initialization failed. See root cause above. "
                            "Failed core proc(s): {}"]
        c["status"], c["exit_code"] = "exited", 1
        return
    c["status"], c["mn"] = "running", True
    rank_line = (f"INFO {_ts()} [parallel_state.py:1165] rank {topo['rank'] * (topo['local_gpus'] or 1)} in world "
                 f"size {topo['world']} is assigned as DP rank 0, PP rank 0, TP rank "
                 f"{topo['rank'] * (topo['local_gpus'] or 1)}, EP rank {topo['rank'] * (topo['local_gpus'] or 1)}")
    if topo["headless"]:
        port = int(opts.get("master_port") or opts.get("data_parallel_rpc_port") or MASTER_PORT)
        c["logs"] = logs + [rank_line]
        if "worker_unreachable" in state["faults"]:
            # torch's TCPStore client retrying a head it cannot reach (c10d socket.cpp)
            c["logs"] += [f"[W{time.strftime('%m%d %H:%M:%S')}.000000000 socket.cpp:755] [c10d] The client socket has "
                          f"failed to connect to [{topo['head_addr']}]:{port} (errno: 113 - No route to host)."] * 3
        return
    local, remote = (topo["local"], topo["dp"] - topo["local"]) if topo["form"] == "dp" else (1, 0)
    c["logs"] = logs + [f"INFO {_ts()} [utils.py:741] Waiting for {local} local, {remote} remote core engine proc(s) "
                        "to start."]
    if state_dir is not None:
        settle(state, state_dir, name, c)


def _containers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The host's containers of both front ends: Docker's by name, the kubelet's by id."""
    return {**state["docker"]["containers"], **(state.get("cri") or {}).get("containers", {})}


def _head_ids(state: dict[str, Any], c: dict[str, Any] | None = None) -> set[str]:
    """The names a worker's ``--master-addr`` may give for this head: the node's name and
    address, or (a pod) its own address and DNS names (``c["aliases"]``)."""
    ids = {str(x) for x in (state.get("name"), state.get("address")) if x}
    if c is not None and c.get("address"):
        ids = {str(c["address"]), *map(str, c.get("aliases") or [])}
    return ids


def _workers(state: dict[str, Any], state_dir: Path, topo: dict[str, Any],
             c: dict[str, Any] | None = None) -> dict[int, tuple[str, str, dict]]:
    """rank -> (peer host, container name, peer state) of the running headless processes that
    joined this head: same head address, same shape, a rank the head expects."""
    ids = _head_ids(state, c)
    out: dict[int, tuple[str, str, dict]] = {}
    for pdir in sorted(state_dir.parent.iterdir()):
        if pdir == state_dir or not (pdir / "state.json").exists():
            continue
        try:
            peer = st.load(pdir)
        except (OSError, ValueError):
            continue
        if not st.is_up(peer, time.time()) or "worker_unreachable" in peer["faults"]:
            continue
        for cname, pc in _containers(peer).items():
            if pc["status"] != "running" or not pc.get("mn"):
                continue
            popts, err = vllm.parse_serve_args(pc["args"])
            ptopo = topology(popts) if popts and not err else None
            if not ptopo or not ptopo["headless"] or str(ptopo["head_addr"]) not in ids:
                continue
            same = all(ptopo[k] == topo[k] for k in ("form", "tp", "pp", "dp", "nnodes"))
            if same and 0 < ptopo["rank"] < topo["nnodes"] and ptopo["rank"] not in out:
                out[ptopo["rank"]] = (peer["name"], cname, peer)
    return out


def settle(state: dict[str, Any], state_dir: Path, name: str, c: dict[str, Any]) -> None:
    """A waiting head looks again: all workers joined (load the model: serve or run out of
    memory), or its engine-ready timeout passed (give up), or it goes on waiting."""
    if c["status"] != "running" or not c.get("mn") or c.get("serving"):
        return
    opts, _ = vllm.parse_serve_args(c["args"])
    topo = topology(opts or {})
    if not topo or topo["headless"]:
        return
    joined = _workers(state, state_dir, topo, c)
    missing = [r for r in range(1, topo["nnodes"]) if r not in joined]
    if missing:
        timeout = float(c["env"].get("VLLM_ENGINE_READY_TIMEOUT_S") or ENGINE_READY_TIMEOUT_S)
        if time.time() - c["started"] >= timeout:
            c["logs"] = c["logs"] + [
                f"ERROR {_ts()} [core_client.py:611] Engine startup failed: {len(missing)} of {topo['nnodes'] - 1} "
                "remote node(s) did not join",
                f"TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
                f"weight loading for large models. Waited {timeout:.0f}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). "
                "To increase the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<higher timeout>"]
            c["status"], c["exit_code"] = "exited", 1
        return
    # every rank is there: load the weights, split over the replica's GPUs
    util = float(opts.get("gpu_memory_utilization", 0.9))
    need_gb = MODEL_WEIGHTS_GB.get(opts["model"])
    per_gpu = need_gb * 1e9 / 2**30 / topo["world"] if need_gb else 0.0
    members = [(0, state["name"], name, state)] + [(r, h, cn, ps) for r, (h, cn, ps) in sorted(joined.items())]
    short = [(r, h, cn, ps) for r, h, cn, ps in members if per_gpu > ps["gpu"]["mem_gib"] * util]
    if short:
        _exit_members(state, state_dir, c, topo, short,
                      lambda ps: vllm.oom_logs(ps["gpu"]["mem_gib"], allocated=per_gpu))
        return
    if uses_nvshmem(opts):
        broken = [m for m in members if "rdma_transport_init_fails" in m[3]["faults"]]
        if broken:
            _exit_members(state, state_dir, c, topo, broken, lambda ps: nvshmem_init_failed_logs(opts))
            return
    faults = sorted({f for _, _, _, ps in members for f in ps["faults"]})
    c["logs"] = c["logs"] + all2all_logs(opts) + vllm.ready_logs(opts)
    c["serving"] = True
    key = f"{c['address']}:{opts['port']}" if c.get("address") else str(opts["port"])
    state["servers"][key] = {"container": name, "status": "running", "faults": faults, "instance": uuid.uuid4().hex,
                             "opts": {**opts, "_vllm_version": c.get("_vllm_version", ""),
                                      "_replica_nodes": [m[1] for m in members]},
                             **({"address": c["address"]} if c.get("address") else {})}


def _exit_members(state: dict[str, Any], state_dir: Path, c: dict[str, Any], topo: dict[str, Any],
                  bad: list[tuple[int, str, str, dict]], logs_for: Any) -> None:
    """The members in ``bad`` (rank, host, container, state) exit with ``logs_for(their state)``;
    the head exits too, with its own cause or its executor's word for the first dead worker."""
    for _, h, cn, _ in bad:
        if h == state["name"]:
            continue
        # another host's state, taken while this one's is held: bounded, never a deadlock
        with st.try_transaction(state_dir.parent / h, 5.0) as peer:
            pc = _containers(peer).get(cn) if peer is not None else None
            if pc is not None and pc["status"] == "running":
                pc["logs"] = pc["logs"] + logs_for(peer)
                pc["status"], pc["exit_code"] = "exited", 1
    mine = any(m[1] == state["name"] for m in bad)
    c["logs"] = c["logs"] + (logs_for(state) if mine else [
        f"ERROR {_ts()} [multiproc_executor.py:154] Worker proc VllmWorker-{bad[0][0] * (topo['local_gpus'] or 1)} "
        "died unexpectedly, shutting down executor.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
    c["status"], c["exit_code"] = "exited", 1


def settle_all(state: dict[str, Any], state_dir: Path) -> None:
    for name, c in _containers(state).items():
        settle(state, state_dir, name, c)
