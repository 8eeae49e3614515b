"""Triage signals harvested from the tools' own sources (not from a missed log): each text is
rendered from the format string or error table of the file named beside it, as the tool prints
it, and decides its tree step alone. Beside them, texts that look alike but are not the failure
(a harmless warning, another resource, another vendor's accelerator) must not be taken."""

from __future__ import annotations

import pytest

from k3rollout.checks.triage import classify

UPSTREAM = [
    # driver_incompatible
    ("CUDA driver_types.h cudaErrorCallRequiresNewerDriver (36)", "driver_incompatible",
     "RuntimeError: CUDA error: API call is not supported in the installed CUDA driver"),
    ("xla/stream_executor/cuda/cuda_diagnostics.cc", "driver_incompatible",
     "2023-11-14 22:30:50.201665: E external/local_xla/xla/stream_executor/cuda/cuda_diagnostics.cc:312] kernel "
     "version 470.182.3 does not match DSO version 470.223.2 -- cannot find working devices in this configuration"),
    ("tensorflow/stream_executor/cuda/cuda_diagnostics.cc (TensorFlow 1.x)", "driver_incompatible",
     "E tensorflow/stream_executor/cuda/cuda_diagnostics.cc:296] kernel version 352.63.0 does not match DSO version "
     "361.93.2 -- cannot find working devices in this configuration"),
    ("glibc elf/dl-lookup.c + nvml.h", "driver_incompatible",
     "nvidia-smi: symbol lookup error: nvidia-smi: undefined symbol: nvmlInit_v2"),
    ("NCCL src/misc/cudawrap.cc", "driver_incompatible",
     "node1:1234:1234 [0] misc/cudawrap.cc:90 NCCL WARN CUDA Driver version found is 11040. Minimum requirement is "
     "12020"),
    ("ollama discover/cuda_compat.go (slog, WARN)", "driver_incompatible",
     'time=2026-01-01T00:00:00.000Z level=WARN source=cuda_compat.go:65 msg="NVIDIA driver too old" '
     'device="NVIDIA H100 80GB HBM3" compute=9.0 driver=535 required_driver="550 or newer"'),
    ("libnvidia-container nvidia-container-cli + nvml.h NVML_ERROR_LIB_RM_VERSION_MISMATCH", "driver_incompatible",
     "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"),
    ("JuliaGPU/CUDA.jl src/initialization.jl (@warn)", "driver_incompatible",
     "\u250c Warning: You are using CUDA 12.2.0 with a driver that only supports up to 11.x."),
    ("JuliaGPU/CUDAnative.jl src/CUDAnative.jl (@warn)", "driver_incompatible",
     "\u250c Warning: You are using CUDA toolkit 10.2.89 with a driver that only supports up to 10.1.0."),
    # container_runtime
    ("NVIDIA nvidia-installer kernel.c (older releases' wording)", "container_runtime",
     "ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  This may be because it "
     "is in use (for example, by the X server), but may also happen if your kernel was configured without support "
     "for module unloading."),
    ("rpmfusion/xorg-x11-drv-nvidia nvidia-fallback.service", "container_runtime",
     "NVIDIA kernel module missing. Falling back to nouveau"),
    ("CUDA driver_types.h cudaErrorStubLibrary (34)", "container_runtime",
     "ggml_cuda_init: failed to initialize CUDA: CUDA driver is a stub library"),
    ("CUDA driver_types.h cudaErrorMpsConnectionFailed (805)", "container_runtime",
     "RuntimeError: CUDA error: MPS client failed to connect to the MPS control daemon or the MPS server"),
    ("torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "container_runtime",
     "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
    ("lightning/pytorch/trainer/connectors/accelerator_connector.py", "container_runtime",
     "lightning_fabric.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can not run on your "
     "system since the accelerator is not available. The following accelerator(s) is available and can be passed "
     "into `accelerator` argument of `Trainer`: ['cpu']."),
    ("jax/_src/xla_bridge.py", "container_runtime",
     "RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices. (you may "
     "need to uninstall the failing plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)"),
    ("apptainer --nv (etc/nvliblist.conf)", "container_runtime", "WARNING: Could not find any nv libraries on this host!"),
    ("slurm src/common/gres.c", "container_runtime",
     "NodeName=gpu01 State=IDLE+DRAIN+INVALID_REG Reason=gres/gpu count reported lower than configured (0 < 8)"),
    ("kubernetes pkg/kubelet/cm/devicemanager/manager.go", "container_runtime",
     "Warning  UnexpectedAdmissionError  pod/vllm-0  Allocate failed due to requested number of devices "
     "unavailable for nvidia.com/gpu. Requested: 4, Available: 0, which is unexpected"),
    ("kubernetes pkg/kubelet/cm/devicemanager/manager.go", "container_runtime",
     "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
     "nvidia.com/gpu, which is unexpected"),
    ("NVIDIA gpu-driver-container nvidia-driver", "container_runtime",
     "Could not unload NVIDIA driver kernel modules, driver is in use"),
    ("CUDA driver_types.h cudaErrorDeviceNotLicensed (102)", "container_runtime",
     "RuntimeError: CUDA error: device doesn't have valid Grid license"),
    ("CUDA driver_types.h cudaErrorJitCompilerNotFound (221)", "container_runtime",
     "RuntimeError: CUDA error: PTX JIT compiler library not found"),
    ("CUDA driver_types.h cudaErrorECCUncorrectable (214)", "container_runtime",
     "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ("pynvml NVML_ERROR_RESET_REQUIRED", "container_runtime", "pynvml.NVMLError_ResetRequired: GPU requires restart"),
    ("open-gpu-kernel-modules GSP_RPC_TIMEOUT_XID_MESSAGE_FMT", "container_runtime",
     "kernel: NVRM: Xid (PCI:0000:01:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC "
     "response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."),
    ("kmod tools/modprobe.c", "container_runtime",
     "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"),
    ("kmod tools/modprobe.c", "container_runtime",
     "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-40-generic"),
    ("containerd internal/cri server sandbox_run.go", "container_runtime",
     'Warning  FailedCreatePodSandBox  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc = '
     'failed to get sandbox runtime: no runtime for "nvidia" is configured'),
    ("deepspeed/launcher/runner.py", "container_runtime", "RuntimeError: Unable to proceed, no GPU resources available"),
    ("cri-o internal/config", "container_runtime",
     'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime handler nvidia from '
     'runtime list map[crun:0xc000 runc:0xc001]'),
    ("NVIDIA/k8s-device-plugin health check (log.Printf, before klog)", "container_runtime",
     "2019/05/01 10:00:00 XidCriticalError: Xid=79, All devices will go unhealthy."),
    ("nvidia-container-toolkit cmd/nvidia-ctk/cdi/generate", "container_runtime",
     'level=error msg="failed to generate CDI spec: failed to create device CDI specs: failed to initialize NVML: '
     'ERROR_LIBRARY_NOT_FOUND"'),
    ("nvidia-container-toolkit internal/discover", "container_runtime",
     "Error: IMEX channel 0 not found at /dev/nvidia-caps-imex-channels/channel0"),
    ("NCCL src/os/linux.cc", "container_runtime",
     "node1:99:99 [0] NCCL WARN Failed to open libnvidia-ml.so.1: libnvidia-ml.so.1: cannot open shared object file"),
    ("NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go", "container_runtime",
     "E0101 00:00:00.000000       1 main.go:132] If this is a GPU node, did you set the docker default runtime to "
     "`nvidia`?"),
    ("NVIDIA/k8s-device-plugin MPS control daemon", "container_runtime",
     "E0101 00:00:00.000000       1 main.go:200] Failed to start MPS daemon: exit status 1"),
    ("NVIDIA/k8s-device-plugin internal/rm", "container_runtime",
     "E0101 00:00:00.000000       1 main.go:180] error starting plugins: error creating plugin manager: "
     "at least one device with migEnabled=true was not configured correctly: device 0 has no MIG devices "
     "configured"),
    ("slurm src/plugins/gpu/nvml/gpu_nvml.c", "container_runtime",
     "[2026-01-01T00:00:00.000] error: System GPU detection failed"),
    ("NVIDIA/cuda-python cuda/bindings/_bindings/cydriver.pyx.in", "container_runtime",
     "RuntimeError: Failed to dlopen libcuda.so.1"),
    ("SchedMD/slurm src/sinfo/opts.c (sinfo --list-reasons)", "container_runtime",
     "gres/gpu count repor root      2026-01-01T00:00:00 node[001-002]"),
    # model_load_capacity
    ("xla/pjrt/pjrt_stream_executor_client.cc", "model_load_capacity",
     "E0000 00:00:1700000000.000000 1 pjrt_stream_executor_client.cc:3045] Execution of replica 0 failed: "
     "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 58982400 bytes."),
    ("tensorflow/core/framework/op_kernel.cc", "model_load_capacity",
     "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[192,576,16,16] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"),
    ("aten/src/ATen/cuda/CublasHandlePool.cpp", "model_load_capacity",
     "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ("sglang srt/model_executor/model_runner.py", "model_load_capacity",
     "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ("sglang srt/model_executor/model_runner.py", "model_load_capacity",
     "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
     "min_per_gpu_memory=16.28, local_gpu_memory=46.81, local_gpu_memory * 0.9=42.13"),
    ("ollama llm/server.go", "model_load_capacity",
     "Error: model requires more system memory (44.0 GiB) than is available (7.6 GiB)"),
    ("ray python/ray/exceptions.py OutOfMemoryError", "model_load_capacity",
     "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."),
    ("slurm task/cgroup", "model_load_capacity",
     "slurmstepd: error: Detected 1 oom_kill event in StepId=18835145.batch. Some of the step tasks have been OOM "
     "Killed."),
    ("kubernetes pkg/kubelet/eviction/helpers.go", "model_load_capacity",
     "Warning  Evicted  pod/vllm-0  The node was low on resource: memory. Container vllm was using 120Gi, which "
     "exceeds its request of 64Gi."),
    ("torch/nn/modules/module.py load_state_dict", "model_load_capacity",
     "RuntimeError: Error(s) in loading state_dict for GPT2LMHeadModel:"),
    ("caffe2/serialize/inline_container.cc", "model_load_capacity",
     "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"),
    ("torch/serialization.py", "model_load_capacity",
     "_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to "
     "`False` will likely succeed, but it can result in arbitrary code execution."),
    ("llama.cpp src/llama-model-loader.cpp", "model_load_capacity",
     "llama_model_load: error loading model: tensor 'blk.23.ffn_down.weight' data is not within the file bounds, "
     "model is corrupted or incomplete"),
    ("torch/cuda/__init__.py _check_capability", "model_load_capacity",
     "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation."),
    ("ptxas (Triton)", "model_load_capacity",
     "(EngineCore_DP0 pid=1477831) ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'"),
    ("triton python/triton/runtime/errors.py", "model_load_capacity",
     "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: "
     "65536. Reducing block sizes or `num_stages` may help."),
    ("TGI server/text_generation_server/models/flash_causal_lm.py", "model_load_capacity",
     "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`"),
    ("llama.cpp src/llama-kv-cache.cpp", "model_load_capacity",
     "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache"),
    ("transformers src/transformers/quantizers/quantizer_bnb_4bit.py", "model_load_capacity",
     "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the "
     "quantized model."),
    ("transformers src/transformers/modeling_utils.py", "model_load_capacity",
     "ValueError: The current `device_map` had weights offloaded to the disk. Please provide an `offload_folder` for "
     "them."),
    ("NCCL src/include/alloc.h", "model_load_capacity",
     "node1:1234:1300 [0] include/alloc.h:124 NCCL WARN Failed to CUDA calloc 6291456 bytes"),
    ("ollama 0.1 llm/llama.go", "model_load_capacity",
     "Error: llama runner exited, you may not have enough available memory to run this model"),
    ("triton python/triton/language/semantic.py", "model_load_capacity",
     "AssertionError: fp8e4nv data type is not supported on CUDA arch < 89"),
    ("TensorRT-LLM kernels/cutlass_kernels/cutlass_preprocessors.cpp", "model_load_capacity",
     "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Unsupported Arch "
     "(/workspace/TensorRT-LLM/cpp/tensorrt_llm/kernels/cutlass_kernels/cutlass_preprocessors.cpp:147)"),
    ("sgl-project/sglang python/sglang/srt/model_executor/model_runner.py", "model_load_capacity",
     "RuntimeError: SGLang only supports sm75 and above."),
    ("OpenNMT/CTranslate2 src/cuda/utils.h", "model_load_capacity",
     "RuntimeError: CUDA failed with error out of memory"),
    ("pytorch/pytorch c10/cuda/CUDAMallocAsyncAllocator.cpp", "model_load_capacity",
     "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)"),
    ("PaddlePaddle/Paddle paddle/fluid/memory/allocation/cuda_virtual_mem_allocator.cc", "model_load_capacity",
     "ResourceExhaustedError: Out of memory error on GPU Virtual Memory 0. Cannot allocate 2.000000GB memory on GPU "
     "Virtual Memory 0"),
    ("apache/mxnet src/storage/pooled_storage_manager.h", "model_load_capacity",
     "MXNetError: cudaMalloc retry failed: out of memory"),
    ("microsoft/onnxruntime onnxruntime/core/framework/bfc_arena.cc", "model_load_capacity",
     "Failed to allocate memory for requested buffer of size 33554432"),
    ("ggml-org/whisper.cpp ggml/src/ggml-alloc.c", "model_load_capacity",
     "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 12582912"),
    ("turboderp/exllamav2 exllamav2/model.py", "model_load_capacity",
     "RuntimeError: Insufficient VRAM for model and cache"),
    ("huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/flash_dbrx_modeling.py",
     "model_load_capacity",
     "AssertionError: The chosen size 10752 is not compatible with sharding on 3 shards"),
    ("ollama llm/llama_server.go", "model_load_capacity",
     'time=2026-01-01T00:00:00.000Z level=ERROR source=server.go:300 msg="load failed" error="llama-server '
     'reported out-of-memory during startup: cudaMalloc failed"'),
    # communication
    ("NCCL src/misc/socket.cc", "communication",
     "node1:2200689:2200706 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
     "node2<55693>"),
    ("NCCL src/bootstrap.cc", "communication",
     "node1:1234:1300 [0] bootstrap.cc:85 NCCL WARN Message truncated : received 1024 bytes instead of 4"),
    ("NCCL src/proxy.cc", "communication", "worker-0:195626:198757 [0] proxy.cc:808 NCCL WARN Proxy Call to rank 1 "
     "failed (Connect)"),
    ("torch/csrc/distributed/c10d/TCPStore.cpp", "communication",
     "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined."),
    ("torch/csrc/distributed/c10d/Utils.hpp recvBytes", "communication",
     "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the "
     "remote server shutdown or crash?"),
    ("horovod/common/stall_inspector.cc", "communication",
     "[2021-02-02 21:19:07.345988: W horovod/common/stall_inspector.cc:105] One or more tensors were submitted to "
     "be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than "
     "60 seconds."),
    ("horovod/common/operations.cc", "communication",
     "tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut down. This was caused by an "
     "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the "
     "ranks finished execution."),
    ("Open MPI / PRRTE errmgr help text", "communication", "PRTE has lost communication with a remote daemon."),
    ("Open MPI orte/mca/plm help text", "communication", "ORTE was unable to reliably start one or more daemons."),
    ("openucx src/uct/ib/mlx5/ib_mlx5_log.c", "communication",
     "[1700000000.123456] [node1:1234:0] ib_mlx5_log.c:177 UCX ERROR Transport retry count exceeded on "
     "mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)"),
    ("NCCL src/bootstrap.cc root", "communication",
     "node1:1234:1300 [0] bootstrap.cc:150 NCCL WARN Bootstrap Root : mismatch in rank count from procs 16 : 8"),
    ("CUDA driver_types.h cudaErrorNvlinkUncorrectable (220)", "communication",
     "RuntimeError: CUDA error: uncorrectable NVLink error was detected during the execution"),
    ("ray src/ray/core_worker/core_worker_process.cc", "communication",
     "[2024-07-19 11:36:53,765 E 1446555 1446656] core_worker_process.cc:217: Failed to get the system config from "
     "raylet because it is dead. Worker will terminate."),
    ("deepspeed/launcher/runner.py", "communication",
     "RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you are running "
     "with a single node please remove /job/hostfile or setup passwordless ssh."),
    ("pdsh", "communication", "pdsh@worker-0: worker-1: ssh exited with exit code 255"),
    ("slurm src/plugins/mpi/pmix/pmixp_coll_ring.c", "communication",
     "slurmstepd: error:  mpi/pmix_v3: pmixp_coll_ring_reset_if_to: node1 [0]: pmixp_coll_ring.c:742: "
     "0x14ce0c02cb20: collective timeout seq=0"),
    ("ray src/ray/core_worker/core_worker_process.cc", "communication",
     "[2026-03-03 21:12:46,736 E 46008 46008] core_worker_process.cc:232: Failed to register worker to Raylet: "
     "IOError: Failed to read data from the socket: End of file"),
    ("NCCL src/bootstrap.cc", "communication",
     "node1:1234:1234 [0] bootstrap.cc:120 NCCL WARN NET/Socket : No usable listening interface found"),
    ("NCCL src/init.cc", "communication",
     "node1:1234:1300 [0] init.cc:1043 NCCL WARN Mismatched NCCL version detected : rank 0 version 22105 rank 8 "
     "version 21805"),
    ("NCCL src/transport.cc", "communication",
     "node1:1234:1300 [0] transport.cc:39 NCCL WARN No transport found for rank 0[1000] -> rank 8[1000]"),
    ("NCCL src/mnnvl.cc", "communication",
     "node1:1234:1300 [0] mnnvl.cc:74 NCCL WARN MNNVL (cliqueSize 72) is available but not working on this system. "
     "Check the IMEX channel configuration (/dev/nvidia-caps-imex-channels)."),
    ("NCCL src/transport/net_ib.cc", "communication",
     "node1:1234:1300 [0] transport/net_ib.cc:1500 NCCL WARN ibv_post_send() failed with error Cannot allocate "
     "memory, Bad WR 0x1, First WR 0x1"),
    ("ompi/mca/pml/ucx/pml_ucx.c", "communication",
     "[gpu02:05215] pml_ucx.c:419  Error: ucp_ep_create(proc=0) failed: Destination is unreachable"),
    ("openucx/ucx src/ucs/debug/log.c", "communication",
     "[1653901933.475958] [gpu02:5215 :0]            sock.c:325  UCX  ERROR   connect(fd=40, "
     "dest_addr=172.17.0.1:40703) failed: Connection refused"),
    ("torch/csrc/distributed/c10d/TCPStore.cpp doWait", "communication",
     "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0"),
    ("torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp broadcastUniqueNCCLID", "communication",
     "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
     "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"),
    # other
    ("transformers src/transformers/utils/hub.py", "other",
     "OSError: custom_model is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'"),
    ("pip resolver", "other",
     "ERROR: Could not find a version that satisfies the requirement vllm==0.99.0 (from versions: 0.1.0, 0.2.0)"),
    ("PyTorch operator registry", "other", "RuntimeError: operator torchvision::nms does not exist"),
    ("huggingface_hub utils/_http.py", "other",
     "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
     "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B"),
    ("transformers src/transformers/models/auto/configuration_auto.py", "other",
     "ValueError: The checkpoint you are trying to load has model type `kimi_k3` but Transformers does not "
     "recognize this architecture. This could be because of an issue with the checkpoint, or because your version "
     "of Transformers is out of date."),
    ("jax/version.py", "other", "RuntimeError: jaxlib is version 0.4.7, but this version of jax requires version >= "
     "0.4.14."),
    ("accelerate src/accelerate/launchers.py", "other", "ValueError: The node_rank must be less than the number of "
     "nodes."),
    # rendered from the format strings named beside each signal in signals.py
    ("NGC nvidia_entrypoint.sh driver check", "driver_incompatible",
     "ERROR: This container was built for NVIDIA Driver Release 570.86 or later, but"),
    ("NGC nvidia_entrypoint.sh driver check (second line)", "driver_incompatible",
     "version 550.54.15 was detected and compatibility mode is UNAVAILABLE."),
    ("numba/cuda/cudadrv/driver.py _check_error + cuda.h 222", "driver_incompatible",
     "numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in UNKNOWN_CUDA_ERROR"),
    ("numba LinkerError carrying the driver JIT's ptxas log", "driver_incompatible",
     "ptxas application ptx input, line 9; fatal   : Unsupported .version 8.5; current version is '8.4'"),
    ("dkms.in read_conf", "container_runtime", "Error! Could not locate dkms.conf file."),
    ("dkms.in read_conf, the NVIDIA module's path", "container_runtime",
     "File: /var/lib/dkms/nvidia/550.54.15/source/dkms.conf does not exist."),
    ("NVIDIA/enroot conf/hooks/98-nvidia.sh", "container_runtime",
     "[ERROR] Command not found: nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container"),
    ("apptainer --nvccli, Go os/exec", "container_runtime",
     'FATAL:   container creation failed: exec: "/usr/local/bin/nvidia-container-cli": stat '
     "/usr/local/bin/nvidia-container-cli: no such file or directory"),
    ("SingularityCE legacy --nv, nvliblist.conf", "container_runtime",
     "WARNING: Could not find any Nvidia libraries on this host!"),
    ("TensorRT ErrorCode kOUT_OF_MEMORY", "model_load_capacity",
     "[TRT] [E] 2: [executionContext.cpp::allocate::310] Error Code 2: OutOfMemory (no further information)"),
    ("TensorRT allocator warning", "model_load_capacity",
     "[TRT] [W] Requested amount of GPU memory (1073741824 bytes) could not be allocated. There may not be enough "
     "free memory for allocation to succeed."),
    ("tensorrt_llm/common/cudaUtils.h check()", "model_load_capacity",
     "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory "
     "(/src/cpp/tensorrt_llm/runtime/tllmBuffers.h:134)"),
    ("triton python/triton/language/core.py dtype.to_ir", "model_load_capacity",
     "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
     "('fp8e4b15', 'fp8e5')\")"),
    ("nunchaku src/kernels/zgemm/gemm_w4a4.cuh trap_no_fp4", "model_load_capacity",
     "FP4 is not available on this device"),
    ("tensorrt_llm/_ipc_utils.py set_peer_access", "communication",
     "RuntimeError: Can't enable access between nodes 0 and 3"),
    ("cuda.h CUDA_ERROR_INVALID_IMAGE (200)", "driver_incompatible",
     "RuntimeError: CUDA_ERROR_INVALID_IMAGE(200): device kernel image is invalid"),
    ("dnf/cli/commands/install.py PackagesNotAvailableError", "container_runtime",
     "Error: Unable to find a match: kernel-headers-5.14.0-427.13.1.el9_4.x86_64 "
     "kernel-devel-5.14.0-427.13.1.el9_4.x86_64"),
    ("SchedMD/slurm src/interfaces/gpu.c", "container_runtime",
     "slurmd: fatal: We were configured to autodetect nvml functionality, but we weren't able to find that lib "
     "when Slurm was configured."),
    ("ollama gpu/gpu.go (log.Printf, 0.1.x)", "model_load_capacity",
     "2024/01/14 19:50:06 gpu.go:138: CUDA GPU is too old. Falling back to CPU mode. Compute Capability "
     "detected: 5.2"),
    ("llvm/lib/Target/NVPTX/NVPTXSubtarget.cpp", "model_load_capacity",
     "LLVM ERROR: PTX version 8.4 does not support target 'sm_120a'. Minimum required PTX version is 8.7."),
    ("ptxas, an instruction the target lacks", "model_load_capacity",
     "ptxas /tmp/tmpxft_00001a2b_00000000-6_gemm_kernels.ptx, line 412; error   : Feature '.m16n8k16' requires "
     ".target sm_80 or higher"),
    ("TensorRT-LLM weightOnlyGroupwiseQuantMatmulPlugin.cpp", "model_load_capacity",
     "[TensorRT-LLM][ERROR] Assertion failed: No valid weight only groupwise GEMM tactic(It is usually caused by "
     "the failure to execute all candidate configurations of the CUTLASS kernel, please pay attention to the "
     "warning information when building the engine.)"),
    ("xla/stream_executor/cuda/subprocess_compilation.cc", "model_load_capacity",
     "2025-02-01 10:00:00.000000: W external/xla/xla/stream_executor/cuda/subprocess_compilation.cc:238] Falling "
     "back to the CUDA driver for PTX compilation; ptxas does not support CC 12.0"),
    ("tensorflow stream_executor/cuda/cuda_dnn.cc (TensorFlow 0.x)", "other",
     "E tensorflow/stream_executor/cuda/cuda_dnn.cc:347] Loaded cudnn library: 5005 but source was compiled "
     "against 5110.  If using a binary install, upgrade your cudnn library to match.  If building from sources, "
     "make sure the library loaded matches the version you specified during compile configuration."),
    ("jax jax_plugins/cuda/__init__.py", "other",
     "WARNING:2025-01-01 00:00:00,000:jax._src.xla_bridge:1000: CUDA version check failed during initialization. "
     "CUDA backend will not be available. Error: Outdated cuDNN installation found."),
    ("abetlen/llama-cpp-python llama_cpp/llama.py", "other",
     "ValueError: Attempt to split tensors that exceed maximum supported devices. Current LLAMA_MAX_DEVICES=1"),
    ("microsoft/onnxruntime onnxruntime/core/platform/posix/env.cc", "other",
     "RuntimeError: Failed to load library libonnxruntime_providers_cuda.so with error: libcudnn.so.9: cannot open "
     "shared object file: No such file or directory"),
    ("huggingface/text-generation-inference router/src/validation.rs", "other",
     "Input validation error: `max_new_tokens` must be <= 1024. Given: 2048"),
    # container_runtime
    ("NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c", "container_runtime",
     "NVRM: installed in this system is not supported by open"),
    ("NVIDIA/DCGM dcgmlib/src/DcgmHostEngineHandler.cpp", "container_runtime", "Error: Failed to initialize NVML"),
    ("NVIDIA/gpu-monitoring-tools bindings/go/dcgm/admin.go", "container_runtime",
     "Error starting nv-hostengine: DCGM initialization error"),
    ("xla/stream_executor/cuda/assemble_compilation_provider.cc", "other",
     "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: No PTX compilation provider is available. Neither "
     "ptxas/nvlink nor nvjtlink is available. As a fallback you can enable JIT compilation in the CUDA driver via "
     "the flag `--xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found`. Details:"),
    # model_load_capacity
    ("huggingface/text-generation-inference server/text_generation_server/interceptor.py", "model_load_capacity",
     "2024-04-19T11:06:25.868590Z ERROR text_generation_launcher: Method Warmup encountered an error."),
    ("huggingface/text-generation-inference backends/v3/src/lib.rs V3Error::NotEnoughMemory", "model_load_capacity",
     "Error: Backend(NotEnoughMemory(8192))"),
    ("huggingface/text-generation-inference server/text_generation_server/utils/weights.py", "model_load_capacity",
     "RuntimeError: weight model.layers.0.self_attn.q_proj.qweight does not exist"),
    ("bitsandbytes-foundation/bitsandbytes bitsandbytes/functional.py igemmlt", "model_load_capacity",
     "Exception: cublasLt ran into an error!"),
    ("AutoGPTQ/AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_marlin.py", "model_load_capacity",
     "ValueError: Can not use Marlin int4*fp16 kernel with a device of compute capability (7, 5), the minimum "
     "compute capability is 8.0 for Marlin kernel. Please do not use `use_marlin=True`, or please upgrade your GPU "
     "(\"The more you buy, the more you save.\" - Taiwanese proverb)."),
    ("huggingface/optimum optimum/gptq/quantizer.py post_init_model", "model_load_capacity",
     "ValueError: Found modules on cpu/disk. Using Exllama or Exllamav2 backend requires all the modules to be on "
     "GPU.You can deactivate exllama backend by setting `disable_exllama=True` or `disable_exllamav2=True` in the "
     "quantization config object"),
    ("microsoft/onnxruntime onnxruntime/core/framework/bfc_arena.cc BFCArena::Extend", "model_load_capacity",
     "onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
     "Non-zero status code returned while running MatMul node. Name:'/MatMul' Status Message: "
     "/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* "
     "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
     "onnxruntime::WaitNotificationFn) Available memory of 0 is smaller than requested bytes of 1073741824"),
    ("microsoft/onnxruntime onnxruntime/core/providers/cuda/cuda_call.cc CudaCall", "model_load_capacity",
     "RuntimeError: /onnxruntime_src/onnxruntime/core/providers/cuda/cuda_call.cc:121 onnxruntime::CudaCall CUDA "
     "failure 2: out of memory ; GPU=0 ; hostname=node1 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/"
     "cuda_allocator.cc ; line=47 ; expr=cudaMalloc((void**)&p, size);"),
    ("huggingface/transformers src/transformers/modeling_utils.py load_state_dict", "model_load_capacity",
     "OSError: You seem to have cloned a repository without having git-lfs installed. Please install git-lfs and "
     "run `git lfs install` followed by `git lfs pull` in the folder you cloned."),
    # driver_incompatible and container_runtime
    ("NVIDIA/warp warp/native/cuda_util.cpp init_cuda_driver", "driver_incompatible",
     "Warp CUDA error: Warp requires CUDA driver 12.0 or higher, but the current driver only supports CUDA 11.4"),
    ("NVIDIA/warp warp/native/cuda_util.cpp get_driver_entry_point + cuda.h 34", "container_runtime",
     "Warp CUDA error: Failed to get driver entry point 'cuDriverGetVersion' (CUDA error 34)"),
    ("NVIDIA/warp warp/native/cuda_util.cpp init_cuda_driver (warning)", "container_runtime",
     "Warp CUDA warning: Unable to determine CUDA driver version"),
    ("glibc elf/dl-load.c open_verify, the driver's library", "container_runtime",
     "python3: error while loading shared libraries: libcuda.so.1: file too short"),
    # driver_incompatible, from the raise sites and error tables named in signals.py
    ("numba/numba numba/cuda/cudadrv/driver.py MISSING_FUNCTION_ERRMSG", "driver_incompatible",
     "numba.cuda.cudadrv.driver.CudaDriverError: driver missing function: cuMemAllocAsync."),
    ("TensorRT Developer Guide, Common TensorRT Core Library Error Messages (35)", "driver_incompatible",
     "[TRT] [E] createInferBuilder: Error Code 6: API Usage Error (CUDA initialization failure with error: 35. "
     "Please check the CUDA installation: http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html.)"),
    ("ollama/ollama discover/gpu.go loadNVCUDAMgmt (slog, WARN)", "driver_incompatible",
     'time=2026-01-01T00:00:00.000Z level=WARN source=gpu.go:600 msg="version mismatch between driver and cuda '
     'driver library - reboot or upgrade may be required: library /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01"'),
    # container_runtime, likewise
    ("NVIDIA/enroot src/common.sh common::runparts (via pyxis)", "container_runtime",
     "pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1"),
    ("NVIDIA/enroot conf/hooks/98-nvidia.sh (common::log ERROR)", "container_runtime",
     "[ERROR] Unknown NVIDIA driver capability: compute,utility"),
    ("NVIDIA/enroot conf/hooks/98-nvidia.sh (common::log WARN)", "container_runtime",
     "[WARN] Kernel module nvidia_uvm is not loaded. Make sure the NVIDIA device driver is installed and loaded."),
    ("apptainer/apptainer internal/pkg/util/gpu/nvidia.go NVCLIEnvToFlags", "container_runtime",
     "FATAL:   container creation failed: unknown NVIDIA_DRIVER_CAPABILITIES value: gpu"),
    ("apptainer/apptainer internal/pkg/runtime/launch/launcher_linux.go", "container_runtime",
     "FATAL:   --fakeroot does not support --nvccli in set-uid installations"),
    ("apptainer/apptainer internal/pkg/util/gpu/nvidia.go errNvCCLIInsecure", "container_runtime",
     "FATAL:   container creation failed: nvidia-container-cli is not owned by root user"),
    ("NVIDIA/libnvidia-container src/nvc.c nvc_init", "container_runtime",
     "WSL environment detected but no adapters were found"),
    ("NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime-hook/main.go getCLIPath", "container_runtime",
     "couldn't find binary nvidia-container-cli in PATH: exec: \"nvidia-container-cli\": executable file not found "
     "in $PATH"),
    ("containerd/containerd contrib/nvidia/nvidia.go WithGPUs (nerdctl)", "container_runtime",
     'FATA[0000] exec: "nvidia-container-cli": executable file not found in $PATH'),
    ("moby/moby daemon/devices.go + daemon/devices_amd_linux.go", "container_runtime",
     "docker: Error response from daemon: failed to discover GPU vendor from CDI: no known GPU vendor found"),
    ("numba/numba numba/cuda/cudadrv/driver.py DRIVER_NOT_FOUND_MSG", "container_runtime",
     "numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: CUDA driver library cannot be found."),
    ("TensorRT Developer Guide, Common TensorRT Core Library Error Messages (100)", "container_runtime",
     "[TRT] [E] createInferBuilder: Error Code 6: API Usage Error (CUDA initialization failure with error: 100. "
     "Please check the CUDA installation: http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html.)"),
    ("ollama/ollama discover/gpu.go loadNVCUDAMgmt (slog, WARN)", "container_runtime",
     'time=2026-01-01T00:00:00.000Z level=WARN source=gpu.go:616 msg="unknown error initializing cuda driver '
     "library /usr/lib/x86_64-linux-gnu/libcuda.so.575.64.03: cuda driver library init failure: 999. see "
     'https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md for more information"'),
    ("NVIDIA/gpu-operator cmd/nvidia-validator/main.go validateComponent", "container_runtime",
     'time="2026-01-01T00:00:00Z" level=fatal msg="error validating driver installation: error running nvidia-smi: '
     'exit status 9"'),
    ("NVIDIA/gpu-operator cmd/nvidia-validator/main.go validateComponent", "container_runtime",
     'time="2026-01-01T00:00:00Z" level=fatal msg="error validating toolkit installation: exit status 1"'),
    ("NVIDIA/gpu-operator cmd/nvidia-validator/main.go validateGPUResource", "container_runtime",
     'time="2026-01-01T00:00:00Z" level=fatal msg="error validating plugin installation: GPU resources are not '
     'discovered by the node"'),
    ("NVIDIA/gpu-driver-container nvidia-driver _install_prerequisites", "container_runtime",
     "Could not locate Linux kernel version string"),
    # the heldout22 round, from each tool's own raise site
    ("kubernetes/kubernetes pkg/kubelet/dockershim/docker_sandbox.go RunPodSandbox", "container_runtime",
     'E0730 04:54:23.216598   50437 remote_runtime.go:116] "RunPodSandbox from runtime service failed" '
     'err="rpc error: code = Unknown desc = RuntimeHandler \\"nvidia\\" not supported"'),
    ("Go os/exec exec.Error (%q) through runc, the exec: prefix cut", "container_runtime",
     '"nvidia-smi": executable file not found in $PATH: unknown'),
    ("InternLM/lmdeploy src/turbomind/utils/cuda_utils.h check()", "model_load_capacity",
     "[TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:246"),
    ("NVIDIA/FasterTransformer src/fastertransformer/utils/cuda_utils.h check()", "model_load_capacity",
     "what():  [FT][ERROR] CUDA runtime error: out of memory /workspace/FasterTransformer/src/fastertransformer/"
     "utils/allocator.h:181"),
    ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/tllmRuntime.cpp TllmRuntime", "model_load_capacity",
     "[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine. "
     "(/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:256)"),
    ("openxla/xla xla/service/rendezvous.cc (NCCL clique)", "communication",
     "E0218 03:50:19.000000 1234 rendezvous.cc:100] [id=1] This thread has been waiting for `acquire clique for "
     "rank 3; clique=devices=[4,5,6,7]; is_p2p=0; run_id=-1558191007` for 10 seconds and may be stuck. Expected 4 "
     "threads to join the rendezvous, but not all of them arrived on time."),
    ("git/git advice.c error_resolve_conflict", "other",
     "error: Pulling is not possible because you have unmerged files."),
    ("git/git advice.c die_resolve_conflict", "other", "fatal: Exiting because of an unresolved conflict."),
    # node-side container texts of Kubernetes and Slurm GPU nodes
    ("kubernetes/kubernetes pkg/kubelet/runtimeclass/runtimeclass_manager.go LookupRuntimeHandler", "container_runtime",
     'E0101 00:00:00.000000    1234 kuberuntime_manager.go:1166] "CreatePodSandbox for pod failed" '
     'err="runtimeclass.node.k8s.io \\"nvidia\\" not found" pod="default/cuda-vectoradd"'),
    ("kubernetes/kubernetes pkg/kubelet/lifecycle/predicate.go InsufficientResourceError", "container_runtime",
     "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0"),
    ("NVIDIA/gpu-operator cmd/nvidia-validator/main.go validateComponent, main's \"Error: %v\"", "container_runtime",
     "Error: error validating cuda workload: gave up waiting for pod nvidia-cuda-validator-x7k2p to be available"),
    ("NVIDIA/gpu-operator cmd/nvidia-validator/main.go getGPUResourceName, main's \"Error: %v\"", "container_runtime",
     "Error: error validating plugin installation: unable to find any allocatable GPU resource"),
    ("NVIDIA/k8s-driver-manager cmd/driver-manager/main.go", "container_runtime",
     'time="2026-01-01T00:00:00Z" level=fatal msg="failed to uninstall nvidia driver components: failed to unload '
     'driver: exit status 1"'),
    ("NVIDIA/pyxis pyxis_slurmstepd.c", "container_runtime",
     "slurmstepd: error: pyxis: failed to import docker image: nvcr.io#nvidia/pytorch:24.01-py3"),
    ("NVIDIA/enroot src/common.sh common::curl (via pyxis)", "container_runtime",
     "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth?scope=repository:nvidia/pytorch:pull "
     "returned error code: 401 Unauthorized"),
    ("SchedMD/slurm src/interfaces/gres.c _set_gres_device_desc", "container_runtime",
     "slurmd: error: _set_gres_device_desc: stat(/dev/nvidia3): No such file or directory"),
    ("SchedMD/slurm src/plugins/gres/gpu/gres_gpu.c node_config_load", "container_runtime",
     "slurmd: fatal: Gres GPU plugin failed to load configuration"),
    ("SchedMD/slurm src/plugins/task/cgroup/task_cgroup_devices.c", "container_runtime",
     "slurmstepd: error: Could not apply device constrain to step"),
    ("SchedMD/slurm src/plugins/task/cgroup/task_cgroup.c", "container_runtime",
     "slurmd: error: failure enabling device enforcement: Unspecified error"),
    ("SchedMD/slurm src/interfaces/gres.c _check_node_links", "container_runtime",
     "slurmctld: error: _check_node_links: Invalid GRES Links value (-1,0,0) on node gpu01: i=2 >= link_len=2. If "
     "using AutoDetect the amount of GPUs configured in slurm.conf does not match what was detected. If this is "
     "intentional, please turn off AutoDetect and manually specify them in gres.conf."),
    ("InternLM/lmdeploy src/turbomind/utils/cuda_utils.h check()", "model_load_capacity",
     "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:231"),
    ("InternLM/lmdeploy lmdeploy/pytorch/engine/executor/base.py", "model_load_capacity",
     "RuntimeError: No enough gpu memory for kv cache."),
    ("InternLM/lmdeploy lmdeploy/pytorch/engine/executor/base.py", "model_load_capacity",
     "AssertionError: No enough gpu memory for state cache. Please reduce max_batch_size."),
    ("InternLM/lmdeploy lmdeploy/pytorch/engine/executor/base.py", "model_load_capacity",
     "RuntimeError: No enough gpu memory for runtime."),
    ("InternLM/lmdeploy src/turbomind/models/llama/LlamaBatch.cc", "model_load_capacity",
     "RuntimeError: [TM][ERROR] No enough blocks. Assertion fail: /lmdeploy/src/turbomind/models/llama/"
     "LlamaBatch.cc:522"),
    ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/tllmRuntime.cpp", "model_load_capacity",
     "[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine. (/src/tensorrt_llm/cpp/"
     "tensorrt_llm/runtime/tllmRuntime.cpp:152)"),
    ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/tllmRuntime.cpp", "model_load_capacity",
     "RuntimeError: [TensorRT-LLM][ERROR] Failed to allocate memory for weights. Please try reducing "
     "--gpu_weights_percent. (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:247)"),
    ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp", "model_load_capacity",
     "[TensorRT-LLM][ERROR] Assertion failed: maxTokensInPagedKvCache (693) must be large enough to process at "
     "least 1 sequence to completion (i.e. must be larger than beam_width (1) * tokensPerBlock (64) * "
     "maxBlocksPerSeq (32)) (/src/tensorrt_llm/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:403)"),
    ("NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/resource_manager.py", "model_load_capacity",
     "AssertionError: Impossible to fit in any sequence in kvCache"),
    ("ggml-org/llama.cpp src/llama-context.cpp", "model_load_capacity",
     "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers"),
    ("turboderp/exllamav2 exllamav2/model.py set_device_map", "model_load_capacity",
     "AssertionError: Insufficient space in device allocation"),
    ("turboderp/exllamav2 exllamav2/config.py", "model_load_capacity",
     "ValueError:  ## Could not find model.layers.0.mlp.* in model"),
    ("NVIDIA/Megatron-LM megatron/training/checkpointing.py check_checkpoint_args", "model_load_capacity",
     "AssertionError: tensor_model_parallel_size value from checkpoint (8) is not equal to the input argument "
     "value (4)."),
    ("NVIDIA/Megatron-LM megatron/training/checkpointing.py check_checkpoint_args", "model_load_capacity",
     "AssertionError: num_layers value from checkpoint (32) is not equal to the input argument value (40)."),
    ("NVIDIA/Megatron-LM megatron/training/checkpointing.py load_checkpoint", "model_load_capacity",
     "RuntimeError: (TP, PP) mismatch after resume ((4, 1) vs (8, 1) from checkpoint): not supported for "
     "DistributedOptimizer with sharding type dp_zero_gather_scatter. Please use `--ckpt-fully-parallel-save` "
     "flag during checkpoint saving."),
    ("deepspeedai/DeepSpeed deepspeed/runtime/engine.py _load_zero_checkpoint", "model_load_capacity",
     "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 16 "
     "but the current world size is 8. Automatic adjustment of ZeRO's optimizer state partitioning with a new "
     "world size is not currently supported."),
    ("deepspeedai/DeepSpeed deepspeed/runtime/state_dict_factory.py", "model_load_capacity",
     "AssertionError: Invalid checkpoints and world size for sd merge"),
    ("huggingface/diffusers src/diffusers/models/model_loading_utils.py", "model_load_capacity",
     "ValueError: Cannot load /models/sdxl because conv_in.weight expected shape torch.Size([320, 4, 3, 3]), but "
     "got torch.Size([320, 9, 3, 3]). If you want to instead overwrite randomly initialized weights, please make "
     "sure to pass both `low_cpu_mem_usage=False` and `ignore_mismatched_sizes=True`."),
    ("huggingface/accelerate src/accelerate/utils/modeling.py set_module_tensor_to_device", "model_load_capacity",
     'ValueError: Trying to set a tensor of shape torch.Size([32000, 4096]) in "weight" (which has shape '
     "torch.Size([32064, 4096])), this looks incorrect."),
    ("huggingface/accelerate src/accelerate/big_modeling.py dispatch_model", "model_load_capacity",
     "ValueError: We need an `offload_dir` to dispatch this model according to this `device_map`, the following "
     "submodules need to be offloaded: model.layers.30, model.layers.31, lm_head."),
    # container_runtime
    ("lxc/lxc src/lxc/conf.c run_buffer (later src/lxc/utils.c)", "container_runtime",
     "lxc c1 20240101000000.000 ERROR    conf - conf.c:run_buffer:322 - Script exited with status 1"),
    ("lxc/lxc src/lxc/conf.c mount_entry (LXD's unix.gpu device files)", "container_runtime",
     "lxc c1 20240101000000.000 ERROR    conf - conf.c:mount_entry:2412 - No such file or directory - Failed to "
     'mount "/var/snap/lxd/common/lxd/devices/c1/unix.gpu.dev-nvidia-caps" on '
     '"/usr/lib/x86_64-linux-gnu/lxc/dev/nvidia-caps"'),
    # model_load_capacity
    ("NVIDIA/TensorRT plugin/common/checkMacrosPlugin.cpp TRTException::log (CudaError)", "model_load_capacity",
     "[TensorRT] ERROR: ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)"),
    ("pytorch/pytorch caffe2/core/common_gpu.h CUDA_ENFORCE", "model_load_capacity",
     "RuntimeError: [enforce fail at context_gpu.cu:415] error == cudaSuccess. 2 vs 0. Error at: "
     "/opt/pytorch/caffe2/core/context_gpu.cu:415: out of memory"),
    ("huggingface/text-generation-inference server/text_generation_server/utils/layers.py (0.7-0.8)",
     "model_load_capacity", "assert in_features % self.tp_world_size == 0"),
    ("huggingface/text-generation-inference server/text_generation_server/utils/dist.py", "model_load_capacity",
     "AssertionError: Each process is one gpu"),
    # communication
    ("ray-project/ray src/ray/core_worker/core_worker.cc + src/ray/raylet_client/raylet_client.cc", "communication",
     "[2024-01-01 00:00:00,000 E 4242 4242] core_worker.cc:201: Failed to register worker "
     "01000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. IOError: [RayletClient] Unable to "
     "register worker with raylet. No such file or directory"),
    # other
    ("jax-ml/jax jax/_src/lib/__init__.py check_jaxlib_version", "other",
     "RuntimeError: jaxlib version 0.4.30 is newer than and incompatible with jax version 0.4.26. Please update your "
     "jax and/or jaxlib packages."),
    # version pins and ABIs between the image's own packages
    ("jax-ml/jax jax/_src/lib/__init__.py check_jaxlib_version", "other",
     "RuntimeError: jaxlib version 0.4.30 is newer than and incompatible with jax version 0.4.26. Please update "
     "your jax and/or jaxlib packages."),
    ("numpy/numpy numpy/core/_multiarray_umath.py __getattr__", "other",
     "A module that was compiled using NumPy 1.x cannot be run in"),
    ("numpy/numpy numpy/_core/code_generators/generate_numpy_api.py _import_array", "other",
     "RuntimeError: module compiled against ABI version 0x1000009 but this version of numpy is 0x2000000"),
    ("numpy/numpy numpy/_core/code_generators/generate_numpy_api.py _import_array", "other",
     "RuntimeError: module was compiled against NumPy C-API version 0x13 (NumPy 2.1) but the running NumPy has "
     "C-API version 0x12. Check the section C-API incompatibility at the Troubleshooting ImportError section at "
     "https://numpy.org/devdocs/user/troubleshooting-importerror.html#c-api-incompatibility for indications on how "
     "to solve this problem."),
    ("numpy/numpy numpy/core/code_generators/generate_numpy_api.py (NumPy 1.x)", "other",
     "RuntimeError: module compiled against API version 0x10 but this version of numpy is 0xf . Check the section "
     "C-API incompatibility at the Troubleshooting ImportError section at "
     "https://numpy.org/devdocs/user/troubleshooting-importerror.html#c-api-incompatibility for indications on how "
     "to solve this problem ."),
    ("numpy/numpy numpy/core/code_generators/generate_numpy_api.py (NumPy 1.x header)", "other",
     "AttributeError: _ARRAY_API not found"),
    ("protocolbuffers/protobuf python/message.c", "other", "TypeError: Descriptors cannot be created directly."),
    ("protocolbuffers/protobuf python/google/protobuf/runtime_version.py", "other",
     "google.protobuf.runtime_version.VersionError: Detected incompatible Protobuf Gencode/Runtime versions when "
     "loading grpc_health/v1/health.proto: gencode 6.31.1 runtime 5.29.5. Runtime version cannot be older than the "
     "linked gencode version. See Protobuf version guarantees at "
     "https://protobuf.dev/support/cross-version-runtime-guarantee."),
    ("huggingface/transformers src/transformers/utils/versions.py _compare_versions", "other",
     "ImportError: tokenizers>=0.14,<0.19 is required for a normal functioning of this module, but found "
     "tokenizers==0.19.1."),
    ("huggingface/transformers src/transformers/utils/versions.py require_version", "other",
     "importlib.metadata.PackageNotFoundError: The 'accelerate>=0.26.0' distribution was not found and is "
     "required by this application."),
    ("pytorch/audio src/torchaudio/_extension/utils.py _check_cuda_version", "other",
     "RuntimeError: Detected that PyTorch and TorchAudio were compiled with different CUDA versions. PyTorch has "
     "CUDA version 12.8 whereas TorchAudio has CUDA version 12.9. Please install the TorchAudio version that "
     "matches your PyTorch version."),
    # the package managers' solvers
    ("pypa/pip src/pip/_internal/resolution/resolvelib/factory.py get_installation_error", "other",
     "ERROR: Cannot install vllm==0.6.3 and torch==2.5.1 because these package versions have conflicting "
     "dependencies."),
    ("pypa/pip src/pip/_internal/resolution/resolvelib/factory.py get_installation_error", "other",
     "ERROR: ResolutionImpossible: for help visit "
     "https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts"),
    ("conda/conda conda/exceptions.py UnsatisfiableError", "other",
     "UnsatisfiableError: The following specifications were found to be incompatible with each other:"),
    ("conda/conda conda/resolve.py find_conflicts", "other", "Found conflicts! Looking for incompatible packages."),
    ("conda/conda-libmamba-solver conda_libmamba_solver/exceptions.py", "other",
     "LibMambaUnsatisfiableError: Encountered problems while solving:"),
    ("astral-sh/uv crates/uv-resolver/src/error.rs NoSolutionHeader", "other",
     "\u00d7 No solution found when resolving dependencies:"),
    # extensions built in the image, and servers' chat templates and registries
    ("CUDA toolkit include/crt/host_config.h", "other",
     "/usr/local/cuda/bin/../targets/x86_64-linux/include/crt/host_config.h:143:2: error: #error -- unsupported GNU "
     "version! gcc versions later than 13 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used "
     "to override this version check; however, using an unsupported host compiler may cause compilation failure or "
     "incorrect run time execution. Use at your own risk."),
    ("pytorch/pytorch torch/utils/cpp_extension.py CUDA_MISMATCH_MESSAGE", "other",
     "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compilePyTorch (12.1). "
     "Please make sure to use the same CUDA versions."),
    ("huggingface/transformers src/transformers/tokenization_utils_base.py get_chat_template", "other",
     "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template "
     "argument was passed! For information about writing templates and setting the tokenizer.chat_template "
     "attribute, please see the documentation at https://huggingface.co/docs/transformers/main/en/chat_templating"),
    ("vllm-project/vllm vllm/renderers/hf.py safe_apply_chat_template", "other",
     "ValueError: As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat "
     "template if the tokenizer does not define one."),
    ("ollama/ollama server/images.go PullModel", "other", "Error: pull model manifest: file does not exist"),
]


@pytest.mark.parametrize("where,category,line", UPSTREAM, ids=[f"{w}-{i}" for i, (w, _, _) in enumerate(UPSTREAM)])
def test_an_upstream_message_decides_its_tree_step(where, category, line):
    t = classify(line + "\n")
    assert t.category == category, (where, t.scores)
    assert t.evidence == [line]


# Texts that share words with the signals above and are not the failure they name.
NEAR_MISSES = [
    # TensorFlow's allocator says so itself: a retry, not an OOM (tensorflow/core/common_runtime/bfc_allocator.cc)
    ("model_load_capacity",
     "2020-04-29 16:25:36.594950: W tensorflow/core/common_runtime/bfc_allocator.cc:243] Allocator (GPU_0_bfc) ran "
     "out of memory trying to allocate 1.25GiB with freed_by_count=0. The caller indicates that this is not a "
     "failure, but may mean that there could be performance gains if more memory were available."),
    # torch's range warning for a GPU newer than the wheel's list: harmless, it runs
    ("model_load_capacity",
     "UserWarning: Found GPU0 NVIDIA GB10 which is of cuda capability 12.1. Minimum and Maximum cuda capability "
     "supported by this version of PyTorch is (8.0) - (12.0)"),
    # Apple's accelerator missing is no NVIDIA GPU path
    ("container_runtime",
     "MisconfigurationException: `MPSAccelerator` can not run on your system since the accelerator is not "
     "available."),
    # the kubelet evicting for disk, not memory
    ("model_load_capacity", "Warning  Evicted  pod/vllm-0  The node was low on resource: ephemeral-storage."),
    # another device plugin's resource
    ("container_runtime",
     "Allocate failed due to requested number of devices unavailable for example.com/fpga. Requested: 1, "
     "Available: 0, which is unexpected"),
    # a toolkit library's symbol (lower case after "cu") is the environment, not the driver's age
    ("driver_incompatible",
     "ImportError: /usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: "
     "cublasLtGetStatusString, version libcublasLt.so.12"),
    # pdsh's exit code 127 is the remote command missing, not ssh failing to connect
    ("communication", "pdsh@uan: nid000008: ssh exited with exit code 127"),
    # a keyword argument is not a state-dict key: a library version mismatch, not a checkpoint
    ("model_load_capacity", "TypeError: __init__() got an unexpected keyword argument 'use_safetensors'"),
    # ssh's own words for a closed session are not NCCL's
    ("communication", "Connection to 10.0.0.2 closed by remote host."),
    # the NGC entrypoint with forward compatibility working, and its CPU check: not the driver
    ("driver_incompatible", "NOTE: Legacy NVIDIA Driver detected.  Compatibility mode ENABLED."),
    ("driver_incompatible",
     "ERROR: This container was built for CPUs supporting at least the AVX instruction set, but"),
    # a toolkit ptxas run on a file, older than its front end: the environment, not the driver
    ("driver_incompatible",
     "ptxas /tmp/tmpa1b2c3.ptx, line 5; fatal   : Unsupported .version 8.9; current version is '8.8'"),
    # Numba's code 218 (invalid PTX) alone says nothing about the driver's age
    ("driver_incompatible", "LinkerError: [218] Call to cuLinkAddData results in UNKNOWN_CUDA_ERROR"),
    # Singularity's --nv with no nvidia-smi: logged at INFO, the libraries may still be there
    ("container_runtime", "INFO:    Could not find any NVIDIA binaries on this host!"),
    # Triton's other unsupported type is not a number format the GPU lacks
    ("model_load_capacity", "ValueError: type uint8 not supported in this architecture for now."),
    # TensorRT's other error codes (kINVALID_ARGUMENT = 3) are not memory
    ("model_load_capacity", "[TRT] [E] 3: [builder.cpp::build::100] Error Code 3: API Usage Error"),
    # dnf missing another package than the running kernel's headers is not the driver container's
    ("container_runtime", "Error: Unable to find a match: python3-devel"),
    # slurmd built with NVML that finds the library at run time is working
    ("container_runtime", "slurmd: gpu/nvml: init: GPU NVML plugin loaded"),
    # ptxas's warning for a target it will drop, not a feature it refuses
    ("model_load_capacity", "nvcc warning : The 'compute_35', 'compute_37', 'sm_35', and 'sm_37' architectures "
     "are deprecated, and may be removed in a future release"),
    # TensorRT-LLM's other assertions are not the GPU lacking kernels
    ("model_load_capacity", "[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp"),
    # XLA using its ptxas normally names its version, not a compute capability it lacks
    ("model_load_capacity", "I external/xla/xla/stream_executor/cuda/subprocess_compilation.cc:123] Using ptxas "
     "version 12.8.93"),
    # nvidia-container-cli relaying another NVML error than the version mismatch is the container's
    ("driver_incompatible", "nvidia-container-cli: initialization error: nvml error: driver not loaded"),
    # Ollama's runner terminating without Ollama's reading of memory says nothing of its cause
    ("model_load_capacity", "Error: llama runner process has terminated: exit status 2"),
    # JAX's debug report of a CUDA library that passed its check is not an outdated one
    ("other", "Version JAX was built against: 12020"),
    # an "Unsupported architecture" outside TensorRT-LLM's assertion is not its kernels
    ("model_load_capacity", "RuntimeError: Assertion failed: Unsupported architecture (src/arch/detect.c:42)"),
    # FlashInfer's own note on the GPUs it runs on is documentation, not SGLang refusing the GPU
    ("model_load_capacity", "FlashInfer is the default attention kernel backend. It only supports sm75 and above."),
    # libfabric's loader failing on the toolkit's runtime library is not the driver's libcuda
    ("container_runtime", "libfabric:1234:core:core:cuda_hmem_dl_init():200<info> Failed to dlopen libcudart.so"),
    # an allocation on the device named in prose is not PyTorch's allocator refusing one
    ("model_load_capacity", "Mem allocation on device"),
    # Unsloth's CUDA check is not its torch check
    ("other", "RuntimeError: CUDA = 12.9 not supported!"),
]


@pytest.mark.parametrize("category,line", NEAR_MISSES)
def test_a_near_miss_is_not_taken(category, line):
    t = classify(line + "\n")
    assert t.scores[category] == 0, t.scores


def test_c10d_name_resolution_warning_supports_but_does_not_decide_alone():
    # torch/csrc/distributed/c10d/socket.cpp logs it at W and tries the other address family
    line = ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (head, 29500) cannot be retrieved "
            "(gai error: -2 - Name or service not known).")
    t = classify(line + "\n")
    assert t.category == "other" and 0 < t.scores["communication"] < 1.5, t.scores
    # beside the store client's own failure it adds to communication
    store = ("torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to "
             "connect to (head, 29500).\n")
    both, alone = classify(line + "\n" + store), classify(store)
    assert both.category == "communication", both.scores
    assert both.scores["communication"] > alone.scores["communication"], (both.scores, alone.scores)


def test_the_device_plugins_klog_xid_line_is_info_context():
    # NVIDIA/k8s-device-plugin internal/rm/health.go logs the Xid with klog.Infof: an INFO line
    # counts a quarter, context that does not decide alone
    t = classify("I0101 00:00:00.000000       1 health.go:159] XidCriticalError: Xid=79 on Device=GPU-d23d91a3; "
                 "marking device as unhealthy.\n")
    assert t.category == "other" and 0 < t.scores["container_runtime"] < 1.5, t.scores


def test_nccls_own_allocation_failure_outweighs_its_peers_closed_sockets():
    # NCCL src/include/alloc.h (CUDACHECK's "Cuda failure '%s'", "Failed to CUDA calloc %ld bytes") on
    # the rank that ran out, src/misc/socket.cc ("socketProgress: Connection closed by remote peer %s")
    # and proxy.cc on its peers, torch's DistBackendError after them: GPU memory (docs/domain.md)
    log = ("n1:10:20 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer n2<51159>\n"
           "n1:10:20 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x55a51966cc80\n"
           "n1:13:30 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
           "n1:13:30 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
           "torch.distributed.DistBackendError: NCCL error\n")
    t = classify(log, backoff=False)
    assert t.category == "model_load_capacity", t.scores
    # without NCCL's own allocation lines the peers' view stays communication
    peers = "\n".join(line for line in log.splitlines() if "alloc.h" not in line) + "\n"
    assert classify(peers, backoff=False).category == "communication"
