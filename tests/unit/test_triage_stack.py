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
    # other
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
    # a cuDNN version printed as information is not a mismatch
    ("other", "INFO: cuDNN version: 90100, compiled against 90100"),
]


@pytest.mark.parametrize("category,line", NEAR_MISSES)
def test_a_near_miss_is_not_taken(category, line):
    t = classify(line + "\n")
    assert t.scores[category] == 0, t.scores
