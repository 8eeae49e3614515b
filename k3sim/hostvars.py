"""The simulator's own host variables (``sim_*``), checked when an inventory loads, and the
hardware a simulated node has.

k3rollout knows none of them: it asks every registered transport (k3rollout/plugins.py) to
check its own variables on every host, and reports the first refusal with the file and line
that set the variable. Every host, not only those with ``ansible_connection: k3sim``: a
simulated node behind a real sshd (the ``k3rollout-sim`` executables) is reached over SSH.
The variables themselves are documented in docs/simulator.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# the faults a simulated host may carry from the start (``sim_faults``) or later
# (``sim_late_faults``, with state.LATE_ONLY_FAULTS); docs/simulator.md says what each does
SIM_FAULTS = (
    "driver_install_fails",
    "no_boot_after_upgrade",
    "cuda_init_fails",
    "container_runtime_missing",
    "vllm_oom",
    "nccl_broken",
    "ssh_drops",
    "ssh_drops_read",
    "prefix_cache_miss",
    "slow_reboot",
    "rollback_packages_gone",
    "pdb_blocks_eviction",
    "gpu_operator_driver",
    "gpu_operator_upgrade_fails",
    "rdma_missing",
    "rdma_transport_init_fails",
    "worker_unreachable",
    "empty_streamed_tool_calls",
    "stream_fails_midway",
    "driver_params_lost",
)

# A simulated node's hardware is described with the product's own variables, the ones the
# planner reads for any node (plan/target.py, plan/replicas.py): driver_version, k3_gpu_model,
# k3_gpu_count, k3_gpu_mem_gib. The simulator's own names for them (sim_driver, sim_gpu, ...),
# which k3rollout never reads, win where set: a node whose real hardware differs from what the
# inventory declares (the plan fits 141 GiB GPUs, the node has 80 GiB ones).
HARDWARE_VARS = {
    "driver": ("sim_driver", "driver_version"),
    "gpu_model": ("sim_gpu", "k3_gpu_model"),
    "gpu_count": ("sim_gpu_count", "k3_gpu_count"),
    "gpu_mem_gib": ("sim_gpu_mem_gib", "k3_gpu_mem_gib"),
}
# an HGX H200 on driver 575.57.08 when the inventory says nothing
HARDWARE_DEFAULTS: dict[str, Any] = {"driver": "575.57.08", "gpu_model": "NVIDIA H200", "gpu_count": 8,
                                     "gpu_mem_gib": 141}
DRIVER_RE = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")

DURATION_VARS = ("sim_token_s", "sim_latency_s", "sim_reboot_s", "sim_slow_reboot_s", "sim_slurm_job_s",
                 "sim_slurm_job_after_drain_s", "sim_gpu_operator_state_s")


def hardware(hv: Mapping[str, Any], what: str) -> Any:
    """One fact of a simulated node's hardware (``driver``, ``gpu_model``, ``gpu_count``,
    ``gpu_mem_gib``) from its host vars, else the simulator's default."""
    for var in HARDWARE_VARS[what]:
        if var in hv:
            return hv[var]
    return HARDWARE_DEFAULTS[what]


def initial_scheduler_state(hv: Mapping[str, Any]) -> str:
    """What a new simulated node's scheduler reports, from its host vars (``sim_cordoned``)."""
    return "cordoned" if hv.get("sim_cordoned") else "schedulable"


def check_host_vars(v: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first invalid ``sim_*`` variable of a host, or hardware variable of a simulated
    host (``ansible_connection: k3sim``; what the simulator builds the node from), as
    (variable, why); None when all are valid."""
    simulated = v.get("ansible_connection") == "k3sim"
    drivers = ("sim_driver", "driver_version") if simulated else ("sim_driver",)
    counts = ("sim_gpu_count", "k3_gpu_count") if simulated else ("sim_gpu_count",)
    for var in drivers:
        if var in v and not (isinstance(v[var], str) and DRIVER_RE.match(v[var])):
            return var, f"must be a full driver version string like \"575.57.08\", got {v[var]!r}"
    for var in (*counts, "sim_gpu_mem_gib", "sim_slurm_job_cpus"):
        if var in v and (not isinstance(v[var], int) or isinstance(v[var], bool) or v[var] < 0):
            return var, f"must be a non-negative integer, got {v[var]!r}"
    for var in counts:
        if var in v and not 1 <= v[var] <= 64:
            return var, "must be between 1 and 64"
    if simulated and "k3_gpu_mem_gib" in v:
        mem = v["k3_gpu_mem_gib"]
        if isinstance(mem, bool) or not isinstance(mem, (int, float)) or mem < 0:
            return "k3_gpu_mem_gib", f"must be a non-negative number of GiB, got {mem!r}"
    if "sim_faults" in v:
        faults = v["sim_faults"]
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            return "sim_faults", f"must be a list of fault names, got {faults!r}"
        unknown = [f for f in faults if f not in SIM_FAULTS]
        if unknown:
            return "sim_faults", f"has unknown fault(s) {unknown}; known: {', '.join(SIM_FAULTS)}"
    for var in ("sim_address",):
        # becomes the host part of a URL: a hostname, IPv4 or IPv6 address, nothing else
        if var in v and not (isinstance(v[var], str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}|[0-9A-Fa-f:]+",
                                                                     v[var])):
            return var, f"must be a host name or IP address, got {v[var]!r}"
    for var in DURATION_VARS:
        if var in v and (isinstance(v[var], bool) or not isinstance(v[var], (int, float)) or v[var] < 0):
            return var, f"must be a non-negative number of seconds, got {v[var]!r}"
    return None
