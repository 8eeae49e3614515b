"""vLLM's expert-parallel all-to-all backends and the manager class it logs for each.

vLLM builds an all-to-all manager only when ``ParallelConfig.use_all2all`` holds
(vllm/config/parallel.py): data parallel above 1, sequence-parallel MoE (which needs data
parallel above 1 too), or expert parallel with prefill context parallel above 1. Then
``--all2all-backend NAME`` makes it log ``Using <Manager> all2all manager.``
(vllm/distributed/device_communicators/cuda_communicator.py): the replica gate reads that
line from the head's log to prove the backend asked for is the one in use, and the
simulated vLLM prints it. Without a manager (TP16 with expert parallel and DP 1, say) the
experts' exchange is the tensor-parallel group's collectives, ``--all2all-backend`` is
ignored and no such line is logged. ``pplx`` and ``naive`` were removed from vLLM and fall
back to the default with a warning (docs/domain.md "All-to-all backend").
"""

from __future__ import annotations

ALL2ALL_MANAGERS = {
    "allgather_reducescatter": "AgRsAll2AllManager", "deepep_high_throughput": "DeepEPHTAll2AllManager",
    "deepep_low_latency": "DeepEPLLAll2AllManager", "deepep_v2": "DeepEPV2All2AllManager",
    "flashinfer_nvlink_one_sided": "FlashInferNVLinkOneSidedManager",
    "flashinfer_nvlink_two_sided": "FlashInferNVLinkTwoSidedManager",
    "flashinfer_all2allv": "FlashInferNVLinkTwoSidedManager", "nixl_ep": "NixlEPAll2AllManager",
    "mori_high_throughput": "MoriAll2AllManager", "mori_low_latency": "MoriAll2AllManager",
}
REMOVED_ALL2ALL = ("pplx", "naive")
DEFAULT_ALL2ALL = "allgather_reducescatter"


def builds_all2all(dp: int, ep: bool, pcp: int = 1) -> bool:
    """``ParallelConfig.use_all2all`` (vllm/config/parallel.py): ``dp > 1 or
    use_sequence_parallel_moe or (enable_expert_parallel and prefill_context_parallel_size > 1)``;
    sequence-parallel MoE needs ``dp > 1`` itself, so it adds no case."""
    return dp > 1 or (ep and pcp > 1)


def _flag(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        key, eq, val = a.partition("=")
        if key in names:
            return val if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def all2all_in_use(args: list[str]) -> str | None:
    """The all-to-all backend a ``vllm serve`` command line runs, or None when vLLM builds no
    manager for it (no expert parallel, or neither data parallel nor prefill context parallel)."""
    ep = "--enable-expert-parallel" in args
    dp = int(_flag(args, "--data-parallel-size", "-dp") or 1)
    pcp = int(_flag(args, "--prefill-context-parallel-size", "-pcp") or 1)
    if not ep or not builds_all2all(dp, ep, pcp):
        return None
    return _flag(args, "--all2all-backend") or DEFAULT_ALL2ALL
