"""The simulator's own host variables (``sim_*``), checked when an inventory loads.

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

DURATION_VARS = ("sim_token_s", "sim_latency_s", "sim_reboot_s", "sim_slow_reboot_s", "sim_slurm_job_s",
                 "sim_slurm_job_after_drain_s", "sim_gpu_operator_state_s")


def check_host_vars(v: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first invalid ``sim_*`` variable of a host, as (variable, why); None when all are
    valid."""
    for var in ("sim_driver",):
        if var in v and not (isinstance(v[var], str) and re.match(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", v[var])):
            return var, f"must be a full driver version string like \"575.57.08\", got {v[var]!r}"
    for var in ("sim_gpu_count", "sim_gpu_mem_gib", "sim_slurm_job_cpus"):
        if var in v and (not isinstance(v[var], int) or isinstance(v[var], bool) or v[var] < 0):
            return var, f"must be a non-negative integer, got {v[var]!r}"
    if "sim_gpu_count" in v and not 1 <= v["sim_gpu_count"] <= 64:
        return "sim_gpu_count", "must be between 1 and 64"
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
