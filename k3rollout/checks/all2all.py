"""vLLM's expert-parallel all-to-all backends and the manager class it logs for each.

``--all2all-backend NAME`` makes vLLM log ``Using <Manager> all2all manager.``
(vllm/distributed/device_communicators/cuda_communicator.py): the replica gate reads that
line from the head's log to prove the backend asked for is the one in use, and the
simulated vLLM prints it. ``pplx`` and ``naive`` were removed from vLLM and fall back to
the default with a warning (DOMAIN.md "All-to-all backend").
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
