"""Triage signals from the rest of the GPU stack's own sources (CUDA's math libraries, the ML
libraries around the servers, schedulers, launchers and fabric daemons): each text is rendered
from the format string or error table of the file named beside it, as the tool prints it, and
decides its tree step alone. Beside them, texts that look alike but are not the failure must not
be taken (the style of test_triage_upstream.py)."""

from __future__ import annotations

import pytest

from k3rollout.checks.triage import classify

UPSTREAM = [
    # container_runtime
    ("kubernetes plugin/pkg/admission/runtimeclass/admission.go", "container_runtime",
     'Error creating: pods "vllm-0" is forbidden: pod rejected: RuntimeClass "nvidia" not found'),
    ("nvidia-fabricmanager (fabricmanager.log)", "container_runtime",
     "[Sep 08 2025 23:21:50] [ERROR] [tid 1139] detected number of NVSwitches don't match with any supported system "
     "topology, aborting fabric manager"),
    ("triton python/triton/backends/nvidia/driver.py", "container_runtime",
     "AssertionError: libcuda.so cannot found!"),
    ("nvidia-smi mig -cgi", "container_runtime",
     "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources"),
    ("nvidia-smi mig -cgi", "container_runtime", "Failed to create GPU instances: In use by another client"),
    ("open-gpu-kernel-modules Xid 48", "container_runtime",
     "[430954.509105] NVRM: Xid (PCI:0000:52:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
     "error (DBE) has been detected on GPU in the framebuffer at physAddr 0x18f31d80 partition 16, subpartition 3."),
    ("open-gpu-kernel-modules Xid 95", "container_runtime",
     "NVRM: Xid (PCI:0000:37:00): 95, pid=5171, Uncontained: FBHUB. RST: Yes, D-RST: No"),
    ("open-gpu-kernel-modules Xid 63 (ECC_ROW_REMAP_PENDING_CTRL_CALL_XID_MESSAGE_FMT)", "container_runtime",
     "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."),
    ("NVIDIA/gpu-driver-container nvidia-driver", "container_runtime", "Could not resolve Linux kernel version"),
    ("slurm src/common/slurm_errno.c ESLURM_INVALID_GRES", "container_runtime",
     "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"),
    # model_load_capacity
    ("llama.cpp src/llama-model-loader.cpp check_tensor_dims", "model_load_capacity",
     "llama_model_load: error loading model: check_tensor_dims: tensor 'token_embd.weight' has wrong shape; "
     "expected 4096, 32005, got 384, 32000, 1, 1"),
    ("llama.cpp src/llama-model-loader.cpp", "model_load_capacity",
     "llama_model_load: error loading model: missing tensor 'blk.64.ssm_conv1d.weight'"),
    ("NGC image entrypoint (unsupported GPU)", "model_load_capacity",
     "ERROR: No supported GPU(s) detected to run this container"),
    ("torch/distributed/elastic/multiprocessing/api.py", "model_load_capacity",
     "E0611 02:50:04.977000 3766697 torch/distributed/elastic/multiprocessing/api.py:914] failed (exitcode: -9) "
     "local_rank: 0 (pid: 3766727) of binary: /opt/venv/bin/python"),
    ("vllm/v1/executor/ray_utils.py", "model_load_capacity",
     "ValueError: Current node has no GPU available. current_node_resource={'accelerator_type:L4': 1.0, 'CPU': 3.0, "
     "'memory': 10868666368.0}. vLLM engine cannot start without GPU."),
    ("cufft.h CUFFT_ALLOC_FAILED (PyTorch's cuFFT error)", "model_load_capacity",
     "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED"),
    ("curand.h CURAND_STATUS_ALLOCATION_FAILED", "model_load_capacity",
     "cupy_backends.cuda.libs.curand.CURANDError: CURAND_STATUS_ALLOCATION_FAILED"),
    ("cublas_api.h CUBLAS_STATUS_ARCH_MISMATCH", "model_load_capacity",
     "RuntimeError: CUDA error: CUBLAS_STATUS_ARCH_MISMATCH when calling `cublasGemmEx( handle, opa, opb, m, n, k, "
     "&falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, "
     "CUBLAS_GEMM_DFALT_TENSOR_OP)`"),
    ("cudnn.h CUDNN_STATUS_ARCH_MISMATCH", "model_load_capacity", "RuntimeError: cuDNN error: CUDNN_STATUS_ARCH_MISMATCH"),
    ("CUDA driver_types.h cudaErrorLaunchOutOfResources (701)", "model_load_capacity",
     "RuntimeError: CUDA error: too many resources requested for launch"),
    ("aten/src/ATen/cuda/CublasHandlePool.cpp", "model_load_capacity",
     "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"),
    ("TensorRT IRuntime::deserializeCudaEngine (engine for another GPU)", "model_load_capacity",
     "[10/26/2022-07:25:57] [E] [TRT] INVALID_CONFIG: The engine plan file is generated on an incompatible device, "
     "expecting compute 8.0 got compute 8.6, please rebuild."),
    ("TensorRT IRuntime::deserializeCudaEngine (engine of another TensorRT)", "model_load_capacity",
     "[TensorRT-LLM][ERROR] 6: The engine plan file is not compatible with this version of TensorRT, expecting "
     "library version 9.2.0.5 got 9.3.0.1, please rebuild."),
    ("sglang python/sglang/srt/mem_cache/common.py", "model_load_capacity",
     "[2025-09-17 10:00:00 TP0] Prefill out of memory. Try to lower your batch size."),
    ("NVIDIA/nccl src/misc/shmutils.cc", "model_load_capacity",
     "3d3e22c3066f:168:168 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-UbzKZ9 to "
     "9637892 bytes"),
    ("torch/utils/data/_utils/signal_handling.py", "model_load_capacity",
     "RuntimeError: DataLoader worker (pid 249) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit."),
    ("open-mpi orte/mca/errmgr (mpirun)", "model_load_capacity",
     "mpirun noticed that process rank 0 with PID 77967 on node n342 exited on signal 9 (Killed)."),
    ("open-mpi orte/mca/rmaps help-orte-rmaps-base.txt", "model_load_capacity",
     "There are not enough slots available in the system to satisfy the 16 slots that were requested by the "
     "application:"),
    # communication
    ("ray src/ray/gcs/gcs_client/global_state_accessor.cc", "communication",
     "RuntimeError: This node has an IP address of 192.168.67.2, and Ray expects this IP address to be either the "
     "GCS address or one of the Raylet addresses. Connected to GCS at 192.168.0.119 and found raylets at "
     "192.168.66.2 but none of these match this node's IP 192.168.67.2."),
    ("mpich src/pm/hydra utils/sock/sock.c", "communication",
     '[mpiexec@node1] HYDU_sock_connect (utils/sock/sock.c:145): unable to connect from "node1" to "node2" '
     "(No route to host)"),
    ("nvidia-fabricmanager (fabricmanager.log)", "communication",
     "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id "
     "00000000:86:00.0 physical id 3 port 33"),
    ("ray python/ray/_private/services.py", "communication",
     "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting "
     "`--address` flag or `RAY_ADDRESS` environment variable."),
    ("ray src/ray/gcs/gcs_health_check_manager.cc", "communication",
     "[2025-01-10 10:00:00,000 W 123 456] (gcs_server) gcs_health_check_manager.cc:90: Node "
     "5f2d4c6e8a0b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f is dead because the health check failed."),
    ("kmod tools/modprobe.c + nvidia-peermem", "communication",
     "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument"),
    ("rdma-core libibverbs/examples", "communication", "No IB devices found"),
    # other
    ("text-generation-inference launcher/src/main.rs", "other",
     'Error: ArgumentValidation("`max_batch_prefill_tokens` must be >= `max_input_length`. Given: 4096 and 4874")'),
    ("torchvision/extension.py", "other",
     "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions. PyTorch "
     "has CUDA Version=12.8 and torchvision has CUDA Version=13.0."),
    ("vllm/config/model.py", "other",
     "ValueError: Quantization method specified in the model config (gptq) does not match the quantization method "
     "specified in the `quantization` argument (gptq_marlin)."),
    ("triton python/triton/runtime/build.py", "other",
     "RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set "
     "triton.knobs.build.impl."),
    ("gcc, Triton's launcher build", "other",
     "/tmp/tmpx2l1/cuda_utils.c:6:10: fatal error: Python.h: No such file or directory"),
    ("text-generation-inference router (Rust std::io::Error)", "other",
     'Error: WebServer(Axum(Os { code: 98, kind: AddrInUse, message: "Address in use" }))'),
    ("deepspeed/ops/op_builder/builder.py", "other",
     "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version 11.8 "
     "does not match the version torch was compiled with 12.1, unable to compile cuda/cpp extensions without a "
     "matching cuda version."),
    ("bitsandbytes/cextension.py", "other",
     "RuntimeError: CUDA Setup failed despite GPU being available. Please run the following command to get more "
     "information:"),
    ("vllm/distributed/device_communicators/pynccl_wrapper.py", "other",
     "ERROR 10-18 14:42:48 pynccl_wrapper.py:196] Failed to load NCCL library from libnccl.so.2 .It is expected if "
     "you are not running on NVIDIA/AMD GPUs.Otherwise, the nccl library might not exist, be corrupted or it does "
     "not support the current platform Linux-5.15.0-50-generic-x86_64-with-glibc2.31."),
    ("llama.cpp src/llama-model.cpp load_arch", "other",
     "llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen3'"),
    ("torch/utils/cpp_extension.py (_join_cuda_home)", "other",
     "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root."),
    ("torch/utils/cpp_extension.py (verify_ninja_availability)", "other",
     "RuntimeError: Ninja is required to load C++ extensions"),
    ("torch/utils/cpp_extension.py (_run_ninja_build), DeepSpeed op", "other",
     "RuntimeError: Error building extension 'fused_adam'"),
    ("transformers src/transformers/modeling_utils.py (flash-attn)", "other",
     "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: the "
     "package flash_attn seems to be not installed. Please refer to the documentation of "
     "https://huggingface.co/docs/transformers/perf_infer_gpu_one#flashattention-2 to install Flash Attention 2."),
    ("transformers src/transformers/modeling_utils.py (accelerate)", "other",
     "ValueError: Using a `device_map`, `tp_plan`, `torch.device` context manager or setting "
     "`torch.set_default_device(device)` requires `accelerate`. You can install it with `pip install accelerate`"),
    ("xla/stream_executor/cuda/cuda_dnn.cc", "other",
     "2022-12-21 17:18:57.232955: E external/org_tensorflow/tensorflow/compiler/xla/stream_executor/cuda/"
     "cuda_dnn.cc:421] Loaded runtime CuDNN library: 8.5.0 but source was compiled with: 8.6.0.  CuDNN library "
     "needs to have matching major version and equal or higher minor version."),
    ("torch/backends/cudnn/__init__.py", "other",
     "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) but found runtime "
     "version (8, 4, 0). PyTorch already comes bundled with cuDNN."),
]


@pytest.mark.parametrize("where,category,line", UPSTREAM, ids=[f"{w}-{i}" for i, (w, _, _) in enumerate(UPSTREAM)])
def test_a_stack_message_decides_its_tree_step(where, category, line):
    t = classify(line + "\n")
    assert t.category == category, (where, t.scores)
    assert t.evidence == [line]


NEAR_MISSES = [
    # cuFFT's other statuses are not memory
    ("model_load_capacity", "RuntimeError: cuFFT error: CUFFT_INVALID_SIZE"),
    # cuBLAS's handle and an unrelated status: an invalid value is a caller's bug, not memory or a GPU
    ("model_load_capacity",
     "RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmStridedBatchedEx(handle)`"),
    # a RuntimeClass of another runtime is not the GPU's
    ("container_runtime", 'pods "sandbox" is forbidden: pod rejected: RuntimeClass "kata-fc" not found'),
    # the control plane's own taint is not the GPU nodes'
    ("container_runtime",
     "0/3 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }."),
    # Fabric Manager on a system without NVSwitches has nothing to do: not an error
    ("container_runtime",
     "request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do "
     "[NV_WARN_NOTHING_TO_DO]"),
    # a non-fatal NVSwitch error is corrected
    ("communication",
     "[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci "
     "bus id 00000000:86:00.0 physical id 3 port 61"),
    # the NVIDIA module itself refused is still the node's driver, not the transport
    ("communication", "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"),
    # another exit code of a worker is not the OOM killer's signal
    ("model_load_capacity",
     "torch/distributed/elastic/multiprocessing/api.py:914] failed (exitcode: 1) local_rank: 0 (pid: 1234) of binary: "
     "/usr/bin/python"),
    # Xid 94 is contained to the process that touched the memory: the GPU goes on
    ("container_runtime",
     "[430954.533994] NVRM: Xid (PCI:0000:52:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, "
     "D-RST: No"),
    # the NGC entrypoint's note about MOFED is printed on every single-node start
    ("communication", "NOTE: MOFED driver for multi-node communication was not detected."),
    # the driver container naming the kernel it builds for is progress
    ("container_runtime", "Proceeding with Linux kernel version 6.8.0-44-generic"),
    # a rank that exited on another signal is not the OOM killer's
    ("model_load_capacity",
     "mpirun noticed that process rank 1 with PID 4242 on node n7 exited on signal 11 (Segmentation fault)."),
    # SGLang retracting requests when decode runs short is a warning it recovers from
    ("model_load_capacity", "[2025-09-17 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2"),
    # a shared-memory segment NCCL opens at INFO is no failure
    ("model_load_capacity", "node1:168:168 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"),
    # MIG instances created are the layout working
    ("container_runtime", "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)"),
    # a Ray node with GPUs free is no failure
    ("model_load_capacity", "Current node has 8 GPUs available, placement group created."),
    # TensorRT loading an engine it can run says so at INFO
    ("model_load_capacity", "[12/01/2024-10:00:00] [TRT] [I] Loaded engine size: 512 MiB"),
    # DeepSpeed's op report lists what it could not build; a missing libaio is not a failure
    ("other", "[WARNING]  async_io requires the dev libaio .so object and headers but these were not found."),
    # an architecture named in a config dump is no unknown one
    ("other", "llm_load_print_meta: arch             = llama"),
    # a cuDNN version printed as information is not a mismatch
    ("other", "INFO: cuDNN version: 90100, compiled against 90100"),
]


@pytest.mark.parametrize("category,line", NEAR_MISSES)
def test_a_near_miss_is_not_taken(category, line):
    t = classify(line + "\n")
    assert t.scores[category] == 0, t.scores


def test_library_warnings_support_but_do_not_decide_alone():
    # xformers/_cpp_lib.py and bitsandbytes/cextension.py print these as warnings: the wheel does not
    # match, the server may still run without it, so they count below a deciding error
    for line in ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:",
                 "UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit "
                 "optimizers, 8-bit multiplication, and GPU quantization are unavailable."):
        t = classify(line + "\n")
        assert 0 < t.scores["other"] < 2.0, (line, t.scores)
        assert t.evidence == [line]


def test_the_ngc_entrypoint_warnings_decide_only_their_own_step():
    # nvidia_entrypoint.sh prints these as WARNING lines: damped, they still name their step alone
    nodriver = classify("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.\n"
                        "   Use the NVIDIA Container Toolkit to start this container with GPU support; see\n")
    assert nodriver.category == "container_runtime" and nodriver.scores["container_runtime"] < 3.0, nodriver.scores
    old = classify("WARNING: Detected NVIDIA NVIDIA GeForce RTX 4090 GPU, which is not yet supported in this version "
                   "of the container\nERROR: No supported GPU(s) detected to run this container\n")
    assert old.category == "model_load_capacity", old.scores
    # beside a real driver verdict the warning loses
    both = classify("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.\n"
                    "CUDA driver version is insufficient for CUDA runtime version\n")
    assert both.category == "driver_incompatible", both.scores


def test_open_mpis_openib_warning_is_context_only():
    # help-mpi-btl-openib.txt's warning is printed on healthy runs that go over UCX: it never decides
    line = "WARNING: There was an error initializing an OpenFabrics device."
    t = classify(line + "\n")
    assert t.category == "other" and 0 < t.scores["communication"] < 1.5, t.scores


def test_nccls_shm_failure_is_host_memory_evidence_beside_the_system_error():
    # NCCL's WARN names /dev/shm (the container's --shm-size or --ipc=host); PyTorch then reports the
    # communicator's ncclSystemError. The shm lines are counted as host memory whatever else the log holds
    shm = ("node1:168:168 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-UbzKZ9 to 9637892 bytes\n"
           "node1:168:168 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment "
           "/dev/shm/nccl-UbzKZ9 (size 9637888)\n")
    system = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:94, "
              "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n")
    alone, both, without = classify(shm), classify(shm + system), classify(system)
    assert alone.category == "model_load_capacity", alone.scores
    assert both.scores["model_load_capacity"] >= 3.5 and without.scores["model_load_capacity"] == 0, (both.scores,
                                                                                                     without.scores)


def test_nvidia_peermem_is_the_transport_and_the_nvidia_module_the_driver():
    # kmod's one text for both: the GPU driver's module is tree step 2, GPUDirect RDMA's is step 4
    peermem = classify("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n")
    assert peermem.scores["container_runtime"] == 0 and peermem.category == "communication", peermem.scores
    driver = classify("modprobe: ERROR: could not insert 'nvidia_uvm': Key was rejected by service\n")
    assert driver.category == "container_runtime" and driver.scores["communication"] == 0, driver.scores


def test_the_schedulers_gpu_taint_event_counts_as_the_warning_it_is():
    # kubectl prints scheduler events with their type, Warning: damped, the GPU nodes' taint still
    # names the GPU path when nothing else in the log does, and a decisive line elsewhere outweighs it
    line = ("Warning  FailedScheduling  12s  default-scheduler  0/4 nodes are available: 4 node(s) had untolerated "
            "taint {nvidia.com/gpu: present}.")
    t = classify(line + "\n")
    assert t.category == "container_runtime" and t.scores["container_runtime"] < 2.5, t.scores
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    both = classify(line + "\n" + oom + "\n")
    assert both.category == "model_load_capacity", both.scores
