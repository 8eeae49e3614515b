"""Classify a failure by DOMAIN.md's decision tree, before anyone changes anything.

Order matters and follows the tree: (1) a host driver below the image's CUDA floor is
``driver_incompatible`` whatever else the log says (an OOM-looking line in a driver
mismatch log does not make it a capacity problem); (2) driver fine but CUDA/GPU setup
fails: ``container_runtime``; (3) CUDA up, process dies loading the model:
``model_load_capacity``; (4) collective/transport errors: ``communication``. NCCL
``INFO`` lines are noise and never decide; only WARN/error lines do.
Live facts (driver version, image CUDA) decide case (1) before any log is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from k3rollout.checks.cuda_table import compat_verdict

CATEGORIES = ("driver_incompatible", "container_runtime", "model_load_capacity", "communication", "other")

RULES: dict[str, list[tuple[str, str]]] = {
    "driver_incompatible": [
        (r"CUDA driver version is insufficient for CUDA runtime version", "cudaErrorInsufficientDriver (error 35)"),
        (r"cudaErrorInsufficientDriver", "cudaErrorInsufficientDriver"),
        (r"requirement error: unsatisfied condition: cuda\s*>=\s*[\d.]+", "image NVIDIA_REQUIRE_CUDA above the driver"),
        (r"The NVIDIA driver on your system is too old", "PyTorch: driver too old for the wheel's CUDA"),
        (r"forward compatibility was attempted on non supported HW", "error 804: compat libcuda on a non-datacenter GPU"),
        (r"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "error 804"),
        (r"Driver/library version mismatch", "NVML: loaded kernel module differs from the user-space driver"),
        (r"driver version \S+ is below the CUDA \d+\.x minimum", "live facts: driver below image CUDA floor"),
        (r"provided PTX was compiled with an unsupported toolchain|cudaErrorUnsupportedPtxVersion",
         "error 222: kernels built by a newer CUDA toolchain than the driver supports"),
    ],
    "container_runtime": [
        (r'could not select device driver "" with capabilities: \[\[gpu\]\]', "no NVIDIA container runtime"),
        (r"unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia",
         "nvidia runtime not configured in the container engine"),
        (r"nvidia-container-cli: (initialization|mount) error", "nvidia-container-cli failed"),
        (r"Failed to initialize NVML: Unknown Error", "NVML inside the container (cgroup device access)"),
        (r"Error 802|system not yet initialized|cudaErrorSystemNotReady", "error 802: fabric manager / system not ready"),
        (r"system has unsupported display driver / cuda driver combination|Error 803",
         "error 803: user-space libcuda does not match the kernel driver (stale compat lib / ldcache)"),
        (r"no CUDA-capable device is detected|Found no NVIDIA driver on your system|No CUDA GPUs are available",
         "GPUs not visible in the container"),
        (r"CUDA driver initialization failed", "CUDA init failed with a new enough driver"),
        (r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "driver not loaded"),
        (r"permission denied.*(/dev/nvidia|docker\.sock)", "device or socket permissions"),
        (r"manifest unknown|pull access denied|failed to register layer|unexpected EOF|digest mismatch",
         "image pull / integrity"),
    ],
    "model_load_capacity": [
        (r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", "out of GPU memory"),
        (r"No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache",
         "KV cache does not fit"),
        (r"number of required GPUs exceeds the total number of available GPUs", "parallel layout exceeds GPUs"),
        (r"is not divisible by .*(tensor|pipeline) parallel", "parallel layout does not divide the model"),
        (r"SafetensorError|Error while deserializing header|Cannot load weights", "weights format / files"),
        (r"oom-kill|Out of memory: Killed process", "host memory OOM killer"),
    ],
    "communication": [
        (r"NCCL WARN", "NCCL warning"),
        (r"Test NCCL failure|ncclSystemError|ncclRemoteError|ncclInternalError|NCCL error", "NCCL collective failed"),
        (r"remote process exited or there was a network error", "peer or fabric failure"),
        (r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout", "collective timeout"),
        (r"socketStartConnect: Connect to .* failed", "bootstrap connect failed (interface binding / firewall)"),
        (r"Bootstrap : no socket interface found|ncclSocketInit: .*neither AF_INET",
         "no usable bootstrap interface (NCCL_SOCKET_IFNAME)"),
        (r"NET/IB : Got completion from peer .* status=\d+", "InfiniBand completion error"),
    ],
}

_COMPILED = {cat: [(re.compile(p, re.I), why) for p, why in rules] for cat, rules in RULES.items()}
_NOISE = re.compile(r"NCCL INFO")

NEXT_STEPS = {
    "driver_incompatible": [
        "Do not look at GPU memory or model flags yet: the host driver cannot run this image's CUDA.",
        "Confirm the image CUDA (docker image inspect: CUDA_VERSION / NVIDIA_REQUIRE_CUDA) and the full driver "
        "version (nvidia-smi).",
        "Upgrade the host driver to r580 or newer on an isolated, drained node (this playbook), or move validation "
        "to a compatible environment; a private cu129 rebuild is a stop-gap only.",
        "If NVML reports a driver/library mismatch, the new packages are installed but the old module is loaded: "
        "reboot (or reload the module) before testing.",
    ],
    "container_runtime": [
        "The driver is new enough; check the container path: `docker info` runtimes (nvidia), nvidia-container-toolkit "
        "version, CDI specs, device permissions.",
        "Run `docker run --rm --gpus all <image> nvidia-smi` to test GPU visibility in a container.",
        "On NVSwitch systems (HGX H100/H200/B200) check `systemctl status nvidia-fabricmanager` matches the driver "
        "version (error 802).",
        "Check the image digest against the official one (integrity) and for a bundled compat libcuda (error 803).",
    ],
    "model_load_capacity": [
        "CUDA works; the process died loading the model. Record real free memory per GPU (nvidia-smi) before retrying.",
        "Check weight format and --load-format, GPU count vs --tensor-parallel-size, and the parallel layout.",
        "Try the ladder one variable at a time: model only, short request, target context, then concurrency.",
    ],
    "communication": [
        "A single node works; several fail: check NCCL/RDMA, interface binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), "
        "topology and the all-to-all backend.",
        "Run nccl-tests all_reduce_perf between pairs of nodes to isolate the failing peer or link.",
        "Do not change CUDA or driver versions for this.",
    ],
    "other": [
        "No known signature matched: read the captured logs in the evidence directory and classify by hand.",
        "Keep the node cordoned until the cause is understood.",
    ],
}


@dataclass
class Triage:
    category: str
    evidence: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)

    def to_dict(self, file: str | None = None) -> dict[str, Any]:
        d = {"category": self.category, "evidence": self.evidence, "reasons": self.reasons,
             "next_steps": self.next_steps}
        if file is not None:
            d = {"file": file, **d}
        return d


def classify(text: str, *, driver: str | None = None, image_cuda: str | None = None,
             single_node_ok: bool | None = None) -> Triage:
    if driver and image_cuda:
        verdict = compat_verdict(driver, image_cuda)
        if not verdict["compatible"]:
            return Triage("driver_incompatible", [f"live facts: {verdict['reason']}"],
                          ["host driver below the image's CUDA floor"], NEXT_STEPS["driver_incompatible"])
    lines = text.splitlines()
    for cat in ("driver_incompatible", "container_runtime", "model_load_capacity", "communication"):
        hits: list[str] = []
        reasons: list[str] = []
        for line in lines:
            if _NOISE.search(line) and cat != "communication":
                continue
            if _NOISE.search(line) and not re.search(r"NCCL WARN|error", line, re.I):
                continue
            for rx, why in _COMPILED[cat]:
                if rx.search(line):
                    hits.append(line.strip()[:500])
                    if why not in reasons:
                        reasons.append(why)
                    break
        if hits:
            if cat == "communication" and single_node_ok is False:
                continue
            return Triage(cat, hits[:10], reasons, NEXT_STEPS[cat])
    return Triage("other", [], [], NEXT_STEPS["other"])
