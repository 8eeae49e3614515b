"""The one container-execution core of a simulated node, shared by the Docker CLI (sim/docker.py)
and the kubelet (sim/kubelet.py).

A container is a record (image, args, env, status, exit code, logs, port) in the host's state;
what its process does is decided here, once: the NVIDIA container stack's checks in the order
it applies them (GPU runtime, kernel driver loaded, the image's ``NVIDIA_REQUIRE_CUDA``), then
the process itself: a one-shot probe (``nvidia-smi``, ``python3 -c`` with torch), or ``vllm
serve`` (one node, or one rank of a multi-node replica: sim/vllm_multinode.py), with vLLM's and
PyTorch's own lines; both load the weights under one fit rule (``vllm.load_failure_logs``).
The front ends only word the refusals as their own CLI or API does. This module never formats
a Docker or Kubernetes message and never touches another host's state except through
sim/vllm_multinode.py.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from k3sim import vllm
from k3sim import vllm_multinode as mn
from k3sim.gpu import driver_cuda
from k3sim.repos import fm_down
from k3sim.state import fabric_manager_fails

Out = tuple[int, str, str]
NO_GPU_RUNTIME = "no-gpu-runtime"
# the OCI runtime's words when the NVIDIA prestart hook refuses a container (runc 1.1 with
# nvidia-container-toolkit 1.15; quoted in MauriceNino/dashdot#1226, ggml-org/llama.cpp#9665)
HOOK_FAILED = ("failed to create shim task: OCI runtime create failed: runc create failed: unable to start container "
               "process: error during container init: error running prestart hook #0: exit status 1, stdout: , "
               "stderr: Auto-detected mode as 'legacy'\n")


def vt(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "0")[:2])


def image_env(img: dict[str, Any]) -> list[str]:
    major_minor = ".".join(img["cuda"].split(".")[:2])
    return ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
            "NVARCH=x86_64", f"NVIDIA_REQUIRE_CUDA=cuda>={major_minor}",
            f"CUDA_VERSION={img['cuda']}", "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "VLLM_USAGE_SOURCE=production-docker-image"]


def gpu_refusal(state: dict[str, Any], img: dict[str, Any], env: dict[str, str]) -> str | None:
    """Why the NVIDIA container stack refuses a GPU container here, or None: ``NO_GPU_RUNTIME``
    (no nvidia runtime registered), else the hook's failure text ending in
    nvidia-container-cli's own line."""
    if not state["docker"]["nvidia_runtime"]:
        return NO_GPU_RUNTIME
    if not state["loaded_driver"]:
        return HOOK_FAILED + "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown\n"
    need = ".".join(img["cuda"].split(".")[:2])
    have = driver_cuda(state["loaded_driver"])
    if vt(have) < vt(need) and env.get("NVIDIA_DISABLE_REQUIRE", "").lower() not in ("1", "true"):
        return HOOK_FAILED + (f"nvidia-container-cli: requirement error: unsatisfied condition: cuda>={need}, "
                              "please update your driver to a newer version, or use an earlier cuda container: "
                              "unknown\n")
    return None


def all_containers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container record on the host by its key: Docker's by name, the kubelet's (CRI)
    by container id. One host runs one kind in practice; the multi-node rendezvous looks at both."""
    return {**state["docker"]["containers"], **(state.get("cri") or {}).get("containers", {})}


def stop_servers(state: dict[str, Any], key: str) -> None:
    """The container's process is gone: nothing listens for it any more."""
    for port, srv in list(state["servers"].items()):
        if srv["container"] == key:
            del state["servers"][port]


def server_port_key(c: dict[str, Any], port: int) -> str:
    """Where a server is recorded in ``state["servers"]``: its port on the node's address, or
    ``ADDRESS:PORT`` for a pod on its own address (the pod network)."""
    return f"{c['address']}:{port}" if c.get("address") else str(port)


def launch(state: dict[str, Any], key: str, c: dict[str, Any], img: dict[str, Any], state_dir: Path | None) -> None:
    """Run ``vllm serve`` with the container's args (the GPU checks passed); the outcome lands in
    the record's ``status``, ``exit_code`` and ``logs``, and a ready server in ``state["servers"]``."""
    opts, err = vllm.parse_serve_args(c["args"])
    c["status"] = "running"
    if err:
        c["logs"], c["status"], c["exit_code"] = [err], "exited", 2
        return
    assert opts is not None
    c["port"] = opts["port"]
    logs = vllm.startup_logs(opts, img["vllm"])
    if vt(driver_cuda(state["loaded_driver"])) < vt(img["cuda"]):
        c["logs"], c["status"], c["exit_code"] = logs + vllm.cuda_insufficient_logs(), "exited", 1
        return
    # error 802: the cuda_init_fails fault on the new driver, or no fabric manager on the driver's version
    if fabric_manager_fails(state) or fm_down(state):
        c["logs"], c["status"], c["exit_code"] = logs + vllm.cuda_not_ready_logs(), "exited", 1
        return
    topo = mn.topology(opts)
    if topo is not None:
        # one process of a multi-node replica (sim/vllm_multinode.py)
        if "vllm_oom" in state["faults"] and "k3" in c["image"]:
            c["logs"], c["status"], c["exit_code"] = logs + vllm.oom_logs(state["gpu"]["mem_gib"]), "exited", 1
            return
        c["_vllm_version"] = img["vllm"]
        mn.start(state, key, c, opts, logs, topo, state_dir)
        return
    tp = int(opts.get("tensor_parallel_size", 1))
    gpus = int(c.get("gpu_count") or state["gpu"]["count"])
    if tp > gpus:
        c["logs"] = logs + [f"ValueError: The number of required GPUs exceeds the total number of available GPUs "
                            f"in the placement group. (requested {tp}, available {gpus})"]
        c["status"], c["exit_code"] = "exited", 1
        return
    if "vllm_oom" in state["faults"] and "k3" in c["image"]:
        c["logs"], c["status"], c["exit_code"] = logs + vllm.oom_logs(state["gpu"]["mem_gib"]), "exited", 1
        return
    # the weights' share of each GPU under the launch's layout must fit it (the one fit rule
    # of one-node and multi-node launches, sim/vllm.py): else vLLM's own words, and the API
    # server exits 1
    fail = vllm.load_failure_logs(opts, state["gpu"]["mem_gib"])
    if fail:
        c["logs"], c["status"], c["exit_code"] = logs + fail, "exited", 1
        return
    c["logs"] = logs + vllm.ready_logs(opts)
    state["servers"][server_port_key(c, opts["port"])] = {
        "container": key, "status": "running", "faults": list(state["faults"]), "instance": uuid.uuid4().hex,
        "opts": {**opts, "_vllm_version": img["vllm"]}, **({"address": c["address"]} if c.get("address") else {})}


def oneshot(state: dict[str, Any], img: dict[str, Any], entry: str, args: list[str], gpus: bool) -> Out:
    """A probe's process in the image: ``nvidia-smi ...`` or ``python3 -c CODE`` (torch's CUDA
    init). An entry point the image lacks answers 127 with the OCI runtime's ``exec`` text."""
    if entry == "nvidia-smi":
        from k3sim.gpu import nvidia_smi

        return nvidia_smi(state, args)
    if entry in ("python3", "python") and len(args) >= 2 and args[0] == "-c":
        code = args[1]
        if "torch.cuda" not in code:
            return 0, "", ""
        tb = ('Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
              '  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py", line 412, in _lazy_init\n'
              "    torch._C._cuda_init()\n")
        if not gpus:
            return 1, "", tb + "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an " \
                               "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx\n"
        have = driver_cuda(state["loaded_driver"])
        if vt(have) < vt(img["cuda"]):
            found = "".join(f"{int(x):d}" for x in [have.split(".")[0]]) + f"{int(have.split('.')[1]) * 10:03d}"
            return 1, "", tb + (f"RuntimeError: The NVIDIA driver on your system is too old (found version {found}). "
                                "Please update your GPU driver by downloading and installing a new version from the "
                                "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
                                "https://pytorch.org to install a PyTorch version that has been compiled with your "
                                "version of the CUDA driver.\n")
        # error 802: the cuda_init_fails fault on the new driver, or no fabric manager on the driver's version
        if fabric_manager_fails(state) or fm_down(state):
            return 1, "", tb + "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.\n" \
                               "CUDA error: system not yet initialized (cudaErrorSystemNotReady, error 802)\n"
        return 0, f"cuda_available=True device_count={state['gpu']['count']} " \
                  f"device0={state['gpu']['model']} cuda={img['cuda']}\n", ""
    return 127, "", f"exec: \"{entry}\": executable file not found in $PATH: unknown.\n"
