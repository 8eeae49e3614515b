"""Triage signals from the rest of the GPU stack's own sources (CUDA's math libraries, the ML
libraries around the servers, schedulers, launchers and fabric daemons): each text is rendered
from the format string or error table of the file named beside it, as the tool prints it, and
decides its tree step alone. Beside them, texts that look alike but are not the failure must not
be taken (the style of test_triage_upstream.py)."""

from __future__ import annotations

import pytest

from k3rollout.checks.triage import classify

UPSTREAM = [
    # model_load_capacity
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
    # other
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
    # TensorRT loading an engine it can run says so at INFO
    ("model_load_capacity", "[12/01/2024-10:00:00] [TRT] [I] Loaded engine size: 512 MiB"),
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
