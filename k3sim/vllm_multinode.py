"""Multi-node ``vllm serve`` on the simulated cluster: a head and its headless workers.

vLLM without Ray (docs/domain.md "Multi-node launches"):

- tensor/pipeline parallel: every node runs ``--nnodes N --node-rank R --master-addr HEAD``,
  ranks above 0 with ``--headless``. vLLM's ``ParallelConfig`` asserts
  ``world_size % nnodes == 0`` and ``node_rank < nnodes`` (vllm/config/parallel.py), so a
  wrong rank or node count stops that node's process at once, with vLLM's own words;
- data parallel: ``--data-parallel-size D --data-parallel-size-local L --data-parallel-address
  HEAD``; the other nodes add ``--headless --data-parallel-start-rank K``.

The head's API server waits for its engine's ready message until every worker has joined
(the engine's handshake waits are logged at DEBUG in 0.33, vllm/v1/engine/utils.py), and gives
up after ``VLLM_ENGINE_READY_TIMEOUT_S`` (default 600 s) with vLLM's ``TimeoutError``
(vllm/v1/engine/core_client.py). The head
decides lazily, at each docker command on its node and whenever a host of the cluster comes up
from a reboot (``settle_waiting_heads``: the Docker daemon restarted the replica's containers at
boot, and no command may follow), so the order in which head and workers start does not matter
(the workers' TCP store clients retry, as torch's do).

Once all ranks joined, the model is loaded: its weights, split over the replica's GPUs,
must fit each GPU's usable memory (``--gpu-memory-utilization``), else the rank that does not
fit dies with vLLM's own words (the one fit rule of every launch, ``vllm.load_failure_logs``). A worker with the ``worker_unreachable``
fault cannot reach the head's rendezvous port (firewall, wrong interface): it logs torch's
connect failures and never joins.

An expert-parallel replica on a DeepEP all-to-all backend (where vLLM builds the manager: data
parallel above 1) needs GPU-initiated RDMA once the model is loaded; on a node with the
``rdma_transport_init_fails`` fault there is none: with ``deepep_v2`` that node's process stops
at NCCL's GIN check with vLLM's "DeepEPv2 requires NCCL GIN" RuntimeError
(vllm/distributed/device_communicators/all2all.py); with the earlier DeepEP backends no NVSHMEM
transport comes up (neither ibrc nor IBGDA) and it exits with NVSHMEM's own lines (as in
deepseek-ai/DeepEP#55 and sgl-project/sglang#6017). The head's executor reports the dead worker.
Any other backend, or a launch without expert parallel, is unaffected.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from k3rollout.checks.all2all import ALL2ALL_MANAGERS, REMOVED_ALL2ALL, builds_all2all
from k3sim import state as st
from k3sim import vllm

ENGINE_READY_TIMEOUT_S = 600.0        # vLLM's default VLLM_ENGINE_READY_TIMEOUT_S (vllm/envs.py)
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


def builds_manager(opts: dict[str, Any]) -> bool:
    """Whether this expert-parallel launch gets an all-to-all manager: ``use_all2all``
    (vllm/config/parallel.py) needs data parallel above 1, or prefill context parallel above 1."""
    return bool(opts.get("enable_expert_parallel")) and builds_all2all(
        int(opts.get("data_parallel_size", 1)), True, int(opts.get("prefill_context_parallel_size", 1)))


def all2all_logs(opts: dict[str, Any]) -> list[str]:
    """What an expert-parallel server logs about its all-to-all backend: the removed-backend
    warning comes from ParallelConfig's checks (vllm/config/parallel.py) whatever the layout;
    the manager line (vllm/distributed/device_communicators/cuda_communicator.py) only where
    vLLM builds one."""
    if not opts.get("enable_expert_parallel"):
        return []
    asked = str(opts.get("all2all_backend") or "allgather_reducescatter")
    out = []
    if asked in REMOVED_ALL2ALL:
        out.append(f"WARNING {_ts()} [parallel.py:538] The {asked!r} all2all backend has been removed. Falling back "
                   "to 'allgather_reducescatter'.")
        asked = "allgather_reducescatter"
    if not builds_manager(opts):
        return out
    return out + [f"INFO {_ts()} [cuda_communicator.py:281] Using {ALL2ALL_MANAGERS.get(asked, 'AgRsAll2AllManager')} "
                  "all2all manager."]


def uses_nvshmem(opts: dict[str, Any]) -> bool:
    """Expert parallel on a DeepEP backend where vLLM builds its manager: the earlier ones
    initialise NVSHMEM, deepep_v2 needs NCCL GIN instead; both need GPU-initiated RDMA."""
    asked = str(opts.get("all2all_backend") or "allgather_reducescatter")
    return builds_manager(opts) and asked.startswith("deepep")


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


def gin_missing_logs(opts: dict[str, Any]) -> list[str]:
    """DeepEP v2 does not use NVSHMEM: before its first buffer it asks NCCL for GPU-Initiated
    Networking on the EP group and raises when the group has none (no IBGDA-capable NIC or
    driver) (DeepEPV2All2AllManager._check_gin_support, vllm/distributed/device_communicators/
    all2all.py); the worker logs it (WorkerProc, vllm/v1/executor/multiproc_executor.py) and exits."""
    return all2all_logs(opts) + [
        f"ERROR {_ts()} [multiproc_executor.py:1063] WorkerProc failed.",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/all2all.py", '
        "line 1095, in _check_gin_support",
        "    raise RuntimeError(",
        "RuntimeError: DeepEPv2 requires NCCL GIN (GPU-Initiated Networking). This usually means IBGDA-capable "
        "InfiniBand NICs or drivers are not available. See tools/ep_kernels/README.md for requirements.",
    ]


def _ts() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def config_error(topo: dict[str, Any], gpus: int) -> str | None:
    """The error a node's own vLLM process stops with before it joins anything: the launch
    options are checked by EngineArgs.create_engine_config (vllm/engine/arg_utils.py) in the
    API server, before any engine starts."""
    if topo["form"] == "nodes":
        if topo["world"] % topo["nnodes"]:
            return (f"ValueError: Invalid data-parallel launch options: `--nnodes {topo['nnodes']}` must evenly "
                    f"divide the total world size ({topo['world']}). Adjust `--nnodes`, `--data-parallel-size`, "
                    "`--pipeline-parallel-size`, `--tensor-parallel-size`, or `--prefill-context-parallel-size`.")
        if topo["rank"] >= topo["nnodes"]:
            return (f"ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and "
                    f"{topo['nnodes'] - 1}; got `--node-rank {topo['rank']}`. Set it to this node's zero-based index.")
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
    if bad and bad.startswith("ValueError: Invalid data-parallel launch options"):
        # raised in the API server process while it builds the engine config: a plain traceback
        c["logs"] = logs[:2] + [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", line 2407, in '
            "create_engine_config", "    raise ValueError(", bad]
        c["status"], c["exit_code"] = "exited", 1
        return
    if bad:
        c["logs"] = logs + [f"ERROR {_ts()} [core.py:1584] EngineCore failed to start.",
                            "ERROR [core.py:1584] Traceback (most recent call last):", f"ERROR [core.py:1584] {bad}",
                            vllm.core_failed(topo["dp"])]
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
    # vLLM 0.33 logs its engine handshake waits at DEBUG only (wait_for_engine_startup,
    # vllm/v1/engine/utils.py); at INFO the head of a TP/PP launch names itself the leader of
    # the ranks it waits for (MultiprocExecutor, vllm/v1/executor/multiproc_executor.py)
    c["logs"] = logs + ([] if topo["form"] == "dp" else [
        f"INFO {_ts()} [multiproc_executor.py:167] DP group leader: node_rank=0, node_rank_within_dp=0, "
        f"master_addr={topo['head_addr']}, mq_connect_ip={state.get('address') or topo['head_addr']} (local), "
        f"world_size={topo['world']}, local_world_size={topo['local_gpus'] or topo['world']}"])
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
            # the API server's wait for its engine's ready message (vllm/v1/engine/core_client.py):
            # an engine whose remote ranks never joined never sends it
            c["logs"] = c["logs"] + [
                "Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 765, in '
                "__init__", "    raise TimeoutError(",
                f"TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
                f"weight loading for large models. Waited {timeout:.0f}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). "
                "To increase the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>"]
            c["status"], c["exit_code"] = "exited", 1
        return
    # every rank is there: load the weights, split over the replica's GPUs (the one fit rule,
    # sim/vllm.py)
    members = [(0, state["name"], name, state)] + [(r, h, cn, ps) for r, (h, cn, ps) in sorted(joined.items())]
    short = [(r, h, cn, ps) for r, h, cn, ps in members if vllm.load_failure_logs(opts, ps["gpu"]["mem_gib"])]
    if short:
        _exit_members(state, state_dir, c, topo, short,
                      lambda ps: vllm.load_failure_logs(opts, ps["gpu"]["mem_gib"]) or [])
        return
    if uses_nvshmem(opts):
        broken = [m for m in members if "rdma_transport_init_fails" in m[3]["faults"]]
        if broken:
            # deepep_v2 fails at NCCL's GIN query; the earlier DeepEP backends in NVSHMEM's init
            fail = gin_missing_logs if opts.get("all2all_backend") == "deepep_v2" else nvshmem_init_failed_logs
            _exit_members(state, state_dir, c, topo, broken, lambda ps: fail(opts))
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
        f"ERROR {_ts()} [multiproc_executor.py:380] Worker proc VllmWorker-{bad[0][0] * (topo['local_gpus'] or 1)} "
        "died unexpectedly (exit code: 1), shutting down executor.",
        vllm.core_failed(topo["dp"])])
    c["status"], c["exit_code"] = "exited", 1


def settle_all(state: dict[str, Any], state_dir: Path) -> None:
    for name, c in _containers(state).items():
        settle(state, state_dir, name, c)


def _waiting(state: dict[str, Any]) -> bool:
    return any(c["status"] == "running" and c.get("mn") and not c.get("serving")
               for c in state["docker"]["containers"].values())


def settle_waiting_heads(root: Path) -> list[Path]:
    """On the Docker hosts under ``root`` that are up, every head still waiting for its workers
    looks again (a host came up from a reboot: its Docker daemon restarted the replica's
    containers, and a head decides at a command that may never come). A kubelet's heads look at
    each of its syncs (sim/kubelet.py). Returns the hosts whose servers changed."""
    changed = []
    for d in sorted(p for p in Path(root).iterdir() if (p / "state.json").is_file()):
        try:
            if not _waiting(st.load(d)):
                continue
        except (OSError, ValueError):
            continue
        with st.transaction(d) as state:
            if not st.is_up(state, time.time()):
                continue
            before = {k: v.get("instance") for k, v in state["servers"].items()}
            for name, c in state["docker"]["containers"].items():
                settle(state, d, name, c)
            if {k: v.get("instance") for k, v in state["servers"].items()} != before:
                changed.append(d)
    return changed
