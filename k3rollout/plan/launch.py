"""The multi-node ``vllm serve`` command of one replica, per node, from its layout and profile.

vLLM needs no Ray for this (docs/domain.md "Multi-node launches"):

- tensor/pipeline parallel: every node runs the same command with ``--nnodes N
  --node-rank R --master-addr HEAD``; ranks above 0 add ``--headless``;
- data parallel (with experts): ``--data-parallel-size D --data-parallel-size-local L
  --data-parallel-address HEAD --data-parallel-rpc-port P --enable-expert-parallel``; the
  other nodes add ``--headless --data-parallel-start-rank K``.

Expert-parallel layouts pass ``--all2all-backend`` explicitly (the environment variable was
removed): the profile's backend for the replica's interconnect. Pure: no host is contacted.
"""

from __future__ import annotations

from typing import Any

from k3rollout.model.profile import ModelProfile

DP_RPC_PORT = 29550          # vLLM's default --data-parallel-rpc-port (vllm/config/parallel.py)


def head_address(inventory: Any, node: str) -> str:
    v = inventory.hosts[node].vars
    return str(v.get("k3_master_addr") or v.get("ansible_host") or node)


def replica_launch(profile: ModelProfile, replica: dict[str, Any], inventory: Any) -> list[dict[str, Any]]:
    """One entry per node of the replica: its rank, whether it is the head, the ``vllm serve``
    arguments after the model name, and the environment."""
    lay = replica["layout"]
    nodes: list[str] = replica["nodes"]
    nnodes = len(nodes)
    base = profile.launch_for(replica["gpu"])
    head = head_address(inventory, nodes[0])
    gpus_per_node = replica["gpus"] // nnodes
    common: list[str] = list(base.args)
    if lay["ep"] > 1:
        common += ["--enable-expert-parallel"]
        if replica.get("all2all_backend"):
            common += ["--all2all-backend", replica["all2all_backend"]]
    out = []
    for rank, node in enumerate(nodes):
        args = list(common)
        if lay["dp"] > 1:
            local = max(1, lay["dp"] // nnodes)
            args += ["--tensor-parallel-size", str(lay["tp"]), "--data-parallel-size", str(lay["dp"]),
                     "--data-parallel-size-local", str(local), "--data-parallel-address", head,
                     "--data-parallel-rpc-port", str(DP_RPC_PORT)]
            if rank > 0:
                args += ["--headless", "--data-parallel-start-rank", str(rank * local)]
        else:
            args += ["--tensor-parallel-size", str(lay["tp"])]
            if lay["pp"] > 1:
                args += ["--pipeline-parallel-size", str(lay["pp"])]
            if nnodes > 1:
                args += ["--nnodes", str(nnodes), "--node-rank", str(rank), "--master-addr", head]
                if rank > 0:
                    args += ["--headless"]
        out.append({"node": node, "rank": rank, "head": rank == 0, "gpus": gpus_per_node, "args": args,
                    "env": dict(base.env)})
    return out
