"""Triage by docs/domain.md's decision tree over real log text (samples in tests/data/logs)."""

import json

import pytest
from support import DATA

from k3rollout.checks.cuda_table import compat_verdict, driver_supports, image_cuda
from k3rollout.checks.triage import CATEGORIES, classify, scan
from k3rollout.cli import main

LOGS = DATA / "logs"


def _table() -> list[tuple[str, str, str]]:
    """(file, category, source) rows of tests/data/logs/README.md."""
    rows = []
    for line in (LOGS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].endswith(".log"):
            rows.append((cells[0], cells[1], cells[4]))
    return rows


def test_samples_are_many_cited_and_cover_every_category():
    rows = _table()
    assert len(rows) >= 30
    assert {c for _, c, _ in rows} == set(CATEGORIES)
    assert sorted(f for f, _, _ in rows) == sorted(p.name for p in LOGS.glob("*.log"))
    for f, _, source in rows:
        assert source, f"{f} has no source"
    cited = [f for f, _, source in rows if "https://github.com/" in source]
    assert len(cited) >= 25


@pytest.mark.parametrize("name,category", [(f, c) for f, c, _ in _table()])
def test_triage_categories(name, category):
    t = classify((LOGS / name).read_text())
    assert t.category == category, (t.category, t.evidence)
    if category != "other":
        assert t.evidence and t.next_steps
        # the deciding lines are lines of the sample, never NCCL INFO noise
        text = (LOGS / name).read_text()
        for line in t.evidence:
            assert line in text
            assert "NCCL INFO" not in line


def test_live_facts_decide_before_any_log_is_read():
    t = classify((LOGS / "oom-with-nccl-info.log").read_text(), driver="575.57.08", image_cuda="13.0.1")
    assert t.category == "driver_incompatible"
    assert "575.57.08" in t.evidence[0] and "580" in t.evidence[0]


def test_a_driver_below_the_image_floor_decides_whatever_the_log_scores(tmp_path, capsys):
    # issue #35: fitted family weights made error 802 score container_runtime 6.70 against the
    # live fact's 6.30, and the score overruled the tree's first step
    text = (LOGS / "error-802.log").read_text()
    fitted = {"fabric_manager": 1.6, "gpu_visibility": 0.9}
    assert classify(text, weights=fitted).scores["container_runtime"] == 6.70
    t = classify(text, driver="575.57.08", image_cuda="13.0.1", weights=fitted)
    assert t.category == "driver_incompatible" and t.runner_up == "container_runtime"
    assert t.scores["container_runtime"] > t.scores["driver_incompatible"] and t.confidence == 1.0
    assert "580" in t.evidence[0] and any("live facts (tree step 1)" in r for r in t.reasons)
    # a driver new enough leaves the log to decide
    assert classify(text, driver="580.65.06", image_cuda="13.0.1", weights=fitted).category == "container_runtime"
    # through the CLI, on an 802 log that outscores the live fact by hand weights alone
    log = tmp_path / "802-in-container.log"
    log.write_text(text + "Failed to initialize NVML: Unknown Error\n")
    assert classify(log.read_text()).category == "container_runtime"
    assert main(["triage", "--json", str(log), "--driver", "575.57.08", "--image-cuda", "13.0.1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["category"] == "driver_incompatible" and d["runner_up"] == "container_runtime"
    assert d["scores"]["container_runtime"] > d["scores"]["driver_incompatible"]
    assert main(["triage", "--explain", str(log), "--driver", "575.57.08", "--image-cuda", "13.0.1"]) == 0
    assert "decided by the live facts (tree step 1) over the log's container_runtime" in capsys.readouterr().out


@pytest.mark.parametrize("name", [f for f, _, _ in _table()])
def test_no_log_overrules_a_driver_below_the_image_floor(name):
    t = classify((LOGS / name).read_text(errors="replace"), driver="575.57.08", image_cuda="13.0.1")
    assert t.category == "driver_incompatible", (t.scores, t.runner_up)


def test_cuda_table_uses_the_family_floor():
    assert not driver_supports("575.57.08", "13.0.1")
    assert driver_supports("580.65.06", "13.0.1")
    assert driver_supports("580.65.06", "13.2")          # minor-version compatibility
    assert driver_supports("575.57.08", "12.9.1")
    v = compat_verdict("580.65.06", "13.2")
    assert v["compatible"] and "595.45.04" in v["reason"]
    assert image_cuda(["PATH=/usr/bin", "CUDA_VERSION=13.0.1"]) == "13.0.1"
    assert image_cuda(["NVIDIA_REQUIRE_CUDA=cuda>=12.9 brand=tesla,driver>=535"]) == "12.9"


def test_triage_cli_json_contract(capsys):
    files = [str(LOGS / "r575-cu130-error35.log"), str(LOGS / "nccl-ib-failure.log")]
    assert main(["triage", *files, "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["file"] for x in lines] == files
    assert [x["category"] for x in lines] == ["driver_incompatible", "communication"]
    for x in lines:
        assert set(x) >= {"file", "category", "evidence", "next_steps"}
    assert main(["triage", str(LOGS / "missing.log")]) == 2


def test_explain_shows_the_scoring(capsys):
    log = str(LOGS / "qwen3-235b-v1-nccl-unhandled-cuda-oom.log")
    assert main(["triage", "--explain", log]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{log}: model_load_capacity (confidence ")
    assert "runner-up communication" in out
    assert "gpu_memory" in out and "nccl_error" in out and "Cuda failure 'out of memory'" in out
    for cat in CATEGORIES:
        assert f"  {cat}" in out
    # the live facts appear as contributions of their own, and can turn the answer
    assert main(["triage", "--explain", "--stage", "multinode", "--nnodes", "2", "--cuda-init", "ok",
                 str(LOGS / "nccl-ib-failure.log")]) == 0
    out = capsys.readouterr().out
    assert ": communication" in out.splitlines()[0] and "failed in stage multinode" in out
    assert main(["triage", "--json", "--explain", log]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"file", "category", "evidence", "next_steps", "confidence", "runner_up"} <= set(d)
    assert d["runner_up"] == "communication" and 0 < d["confidence"] < 1
    assert any(c["family"] == "gpu_memory" and c["line"] in (LOGS / "qwen3-235b-v1-nccl-unhandled-cuda-oom.log")
               .read_text() for c in d["contributions"])


def test_low_confidence_reports_other_with_candidates():
    # one generic line for two categories: nothing is proven, the answer lists what it might be
    t = classify("RuntimeError: Unexpected error from cudaGetDeviceCount()\n")
    assert t.category == "other" and t.candidates and t.candidates[0].startswith("container_runtime")
    assert t.runner_up == "container_runtime" and t.reasons[0].startswith("not decided")
    # a near tie between two strong families goes to the earlier step of the tree
    t = classify("CUDA driver version is insufficient for CUDA runtime version\ntorch.OutOfMemoryError: CUDA out of "
                 "memory\n")
    assert t.category == "driver_incompatible" and t.runner_up == "model_load_capacity"
    assert t.confidence < 0.6


def test_live_facts_follow_the_tree():
    text = (LOGS / "llmd-vllm-error-803.log").read_text()
    assert classify(text).category == "driver_incompatible"
    # driver new enough for the image: the same 803 is the container's (stale compat libcuda)
    t = classify(text, driver="580.65.06", image_cuda="13.0.1")
    assert t.category == "container_runtime" and any("803" in e for e in t.evidence)
    # CUDA init already succeeded: a communication failure is not undone by a CUDA-looking line
    text = (LOGS / "h100-nvls-cuda-failure-invalid-argument.log").read_text()
    assert classify(text, cuda_init_ok=True, stage="multinode", nnodes=2).category == "communication"
    # a launch that fails on one node alone is not a communication failure
    t = classify((LOGS / "watchdog-allreduce-timeout.log").read_text(), single_node_ok=False)
    assert t.category != "communication"
    # one-node replica: communication evidence weighs less, and is said so
    t = classify((LOGS / "nccl-ib-failure.log").read_text(), nnodes=1)
    assert any(h.family == "nnodes" and h.weight < 0 for h in t.hits)


@pytest.mark.e2e          # a whole rollout on the simulated cluster
def test_report_shows_the_scoring_for_a_triaged_node(tmp_path):
    from support import journal, write_inventory, write_playbook

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["vllm_oom"]}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 1
    rec = next(r for r in journal(run_dir) if r["type"] == "triage")
    assert rec["category"] == "model_load_capacity" and rec["stage"] == "vllm_smoke"
    assert any(c["family"] == "stage" and "vllm_smoke" in c["why"] for c in rec["contributions"])
    md = (run_dir / "report.md").read_text()
    assert f"scoring: confidence {rec['confidence']:.2f}" in md and "model_load_capacity / gpu_memory" in md
    html = (run_dir / "report.html").read_text()
    assert 'class="triage-scoring"' in html and "gpu_memory" in html


def test_one_node_replica_dying_at_load_is_step_three():
    text = (LOGS / "nccl-unhandled-system-error.log").read_text()
    assert classify(text).category == "communication"
    t = classify(text, stage="vllm_smoke", nnodes=1, cuda_init_ok=True)
    assert t.category == "model_load_capacity" and t.evidence and all(e in text for e in t.evidence)
    assert classify(text, stage="multinode", nnodes=2, cuda_init_ok=True).category == "communication"


def test_the_prefix_cache_proofs_verdict_is_other_not_capacity():
    # the features stage's own words share "cache" and "load" with KV-cache capacity failures;
    # a server that answers and does not reuse a prefix has a serving setting wrong, no GPU cause
    for reason in ("no prefix-cache hits on the repeated prefix", "hits did not behave as a prefix cache should"):
        t = classify(f"load ladder stopped at prefix_cache: {reason}\n", stage="features")
        assert t.category == "other" and t.backoff is None, (reason, t.reasons)
        assert t.evidence == [f"load ladder stopped at prefix_cache: {reason}"]


def test_replica_failure_lines_of_the_simulator_triage_to_their_step():
    """The lines a K3 replica fails with (sim/vllm_multinode.py, sim/vllm.py, the communication
    gate) land where docs/domain.md's tree puts them: a worker that never joined, a socket fallback
    and an expert-parallel transport in communication; a layout or memory that does not hold
    the model in model_load_capacity."""
    from k3sim import vllm

    worker = ("[W1203 16:20:00.000000000 socket.cpp:755] [c10d] The client socket has failed to connect to "
              "[gpu-a01]:29501 (errno: 110 - Connection timed out).")
    head = ("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
            "weight loading for large models. Waited 3600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).")
    fallback = ("NCCL used network Socket, not IB/RoCE RDMA; no RDMA device on gpu-a03\n"
                "gpu-a03:1:1 [0] NCCL INFO NET/IB : No device found.\n"
                "gpu-a03:1:1 [0] NCCL INFO Using network Socket\n")
    cases = [
        (head + "\n" + worker, "communication", worker),
        (fallback, "communication", "NCCL used network Socket, not IB/RoCE RDMA; no RDMA device on gpu-a03"),
        ("AssertionError: world_size=16 must be divisible by nnodes=3.", "model_load_capacity", None),
        ("AssertionError: node_rank=2 must be less than nnodes=2.", "other", None),
        ("\n".join(vllm.oom_logs(80, allocated=87.3)), "model_load_capacity", None),
    ]
    for text, category, line in cases:
        t = classify(text, stage="vllm_smoke", nnodes=2, cuda_init_ok=True)
        assert t.category == category, (text[:80], t.category, t.reasons)
        assert all("NCCL INFO" not in e for e in t.evidence)
        if line:
            assert line in t.evidence[0]
    # NCCL's INFO lines alone never decide: a log that only says so is not a verdict
    assert classify("gpu-a03:1:1 [0] NCCL INFO NET/IB : No device found.\n"
                    "gpu-a03:1:1 [0] NCCL INFO Using network Socket\n").category == "other"


# vLLM 0.33's raise sites (the file each comes from) and NVML's texts inside containers, rendered
# as the process prints them: each decides its tree step alone.
RAISE_SITES = [
    ("v1/core/kv_cache_planning.py", "model_load_capacity",
     "ValueError: To serve at least one request with the model's max seq len (262144), (61.0 GiB KV cache is "
     "needed, which is larger than the available KV cache memory (23.45 GiB). Based on the available memory, the "
     "estimated maximum model length is 100544. Try increasing `gpu_memory_utilization`"),
    ("v1/core/kv_cache_planning.py", "model_load_capacity",
     "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
     "Try increasing `gpu_memory_utilization`."),
    ("v1/worker/gpu_model_runner.py", "model_load_capacity",
     "ERROR 05-02 10:00:01 [gpu_model_runner.py:5086] Failed to load model - not enough GPU memory. Try lowering "
     "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
     "--quantization."),
    ("v1/worker/utils.py", "model_load_capacity",
     "ValueError: Free memory on device cuda:0 (61.2/139.8 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 125.82 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    ("v1/worker/utils.py", "model_load_capacity",
     "ValueError: Externally held weights on device cuda:0 (130.0/139.8 GiB) exceed the desired GPU memory "
     "utilization (0.9, 125.82 GiB). Increase GPU memory utilization or reduce GPU memory used by other processes."),
    ("config/parallel.py", "model_load_capacity",
     "ValueError: World size (16) is larger than the number of available GPUs (8) in this node. If this is "
     "intentional and you are using:"),
    ("v1/executor/ray_utils.py", "model_load_capacity",
     "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group. "
     "Required number of devices: 16. Total number of devices: 8."),
    ("v1/engine/utils.py", "model_load_capacity",
     "AssertionError: Not enough total available nodes (1) and devices per node (8) to satisfy required world "
     "size 16 and data parallel size 2"),
    ("model_executor/model_loader/default_loader.py", "model_load_capacity",
     "RuntimeError: Cannot find any model weights with `/models/Kimi-K3`"),
    ("model_executor/model_loader/default_loader.py", "model_load_capacity",
     "ValueError: Following weights were not initialized from checkpoint: {'model.layers.0.mlp.gate.weight'}"),
    ("model_executor/model_loader/sharded_state_loader.py", "model_load_capacity",
     "ValueError: Could not find checkpoint files '/models/k3/model-rank-*-part-*.safetensors', only pre-sharded "
     "checkpoints are currently supported!"),
    ("distributed/device_communicators/shm_broadcast.py", "model_load_capacity",
     "RuntimeError: Insufficient space in /dev/shm for MessageQueue: 1024 MiB required, 64 MiB free. Increase "
     "/dev/shm (e.g. --shm-size or --ipc=host)."),
    ("engine/arg_utils.py", "model_load_capacity",
     "ValueError: Invalid data-parallel launch options: `--nnodes 3` must evenly divide the total world size (16). "
     "Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size`, `--tensor-parallel-size`, or "
     "`--prefill-context-parallel-size`."),
    ("config/compilation.py", "model_load_capacity",
     "ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (97). Each decode sequence requires one "
     "Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 97 or "
     "increase gpu_memory_utilization."),
    ("model_executor/model_loader/weight_utils.py", "model_load_capacity",
     "RuntimeError: Weight files referenced in index but missing: ['model-00061-of-00064.safetensors']"),
    ("model_executor/model_loader/weight_utils.py", "model_load_capacity",
     "AssertionError: Attempted to load weight (torch.Size([7168, 2048])) into parameter "
     "(torch.Size([7168, 1024]))"),
    ("v1/executor/multiproc_executor.py", "model_load_capacity",
     "AssertionError: world_size (16) must be equal to the tensor_parallel_size (8) x pipeline_parallel_size (1) "
     "x prefill_context_parallel_size (1)."),
    ("v1/executor/ray_utils.py", "model_load_capacity",
     "ValueError: Cannot provide a placement group requiring 16 GPUs (placement_group_specs=[{'GPU': 1.0}]) within "
     "1800 seconds. Tensor parallel size may exceed available GPUs in your cluster. Check resources with "
     "`ray status` and `ray list nodes`."),
    ("config/model.py", "model_load_capacity",
     "NotImplementedError: Pipeline parallelism is not supported for this model. Supported models implement the "
     "`SupportsPP` interface."),
    ("engine/arg_utils.py", "model_load_capacity",
     "ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and 1; got `--node-rank 2`. "
     "Set it to this node's zero-based index."),
    ("model_executor/layers/quantization/auto_awq.py", "model_load_capacity",
     "ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large "
     "tensor parallel size."),
    ("config/model.py", "model_load_capacity",
     "ValueError: The model type gemma3 does not support float16. Reason: Numerical instability. Please use "
     "bfloat16 or float32 instead."),
    ("distributed/device_communicators/all2all.py", "communication",
     "RuntimeError: DeepEPv2 requires NCCL GIN (GPU-Initiated Networking). This usually means IBGDA-capable "
     "InfiniBand NICs or drivers are not available. See tools/ep_kernels/README.md for requirements."),
    ("third_party/pynvml.py", "container_runtime", "pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
    ("third_party/pynvml.py", "container_runtime", "pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded"),
    ("third_party/pynvml.py", "container_runtime", "pynvml.NVMLError_NoPermission: Insufficient Permissions"),
    ("third_party/pynvml.py", "driver_incompatible",
     "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch."),
    ("go-nvml pkg/nvml/return.go", "container_runtime", "E0301 10:00:00 main.go:132] Failed to initialize NVML: "
     "ERROR_UNKNOWN"),
    ("nvidia-container-toolkit #48", "container_runtime", "Failed to initialize NVML: Unknown Error"),
    ("third_party/pynvml.py", "container_runtime",
     "pynvml.NVMLError_OperatingSystem: The operating system has blocked the request."),
    ("third_party/pynvml.py", "container_runtime", "pynvml.NVMLError_GpuIsLost: GPU is lost"),
    ("nvidia-smi", "container_runtime", "Failed to initialize NVML: GPU access blocked by the operating system"),
    ("nvidia-smi", "container_runtime",
     "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
     "Driver is properly installed and present in your system."),
    ("nvidia-smi", "container_runtime", "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error"),
    ("nvidia-smi", "container_runtime", "No devices were found"),
]


@pytest.mark.parametrize("where,category,line", RAISE_SITES, ids=[f"{w}-{i}" for i, (w, _, _) in
                                                                  enumerate(RAISE_SITES)])
def test_vllm_raise_sites_and_nvml_texts_decide_their_step(where, category, line):
    t = classify(line + "\n")
    assert t.category == category, (where, t.scores)
    assert t.evidence == [line]


# Container toolkit, container CLI, driver build, Ray, Gloo and c10d texts, rendered from the
# format strings of the file named beside each: each decides its tree step alone.
TOOL_TEXTS = [
    ("nvidia-container-toolkit internal/modifier/stable.go", "container_runtime",
     "docker: Error response from daemon: failed to create shim: OCI runtime create failed: failed to locate "
     "NVIDIA Container Runtime Hook: executable file not found: unknown."),
    ("nvidia-container-toolkit cmd/nvidia-container-runtime-hook/hook_config.go", "container_runtime",
     "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not "
     "supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead."),
    ("crun src/libcrun/container.c", "container_runtime",
     'Error: OCI runtime error: crun: {"msg":"error executing hook `/usr/bin/nvidia-container-runtime-hook` '
     '(exit code: 1)","level":"error"}'),
    ("docker/cli + spf13/pflag errors.go", "container_runtime", "unknown flag: --gpus"),
    ("Go os/exec", "container_runtime",
     'docker: Error response from daemon: failed to create task for container: OCI runtime create failed: '
     'exec: "nvidia-smi": executable file not found in $PATH: unknown.'),
    ("c10/cuda/CUDAFunctions.cpp", "container_runtime",
     "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
     "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero."),
    ("nvidia-installer kernel.c", "container_runtime",
     'ERROR: An error occurred while performing the step: "Building kernel modules". See '
     "/var/log/nvidia-installer.log for details."),
    ("nvidia-installer kernel.c", "container_runtime",
     "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel module "
     "was built against the wrong or improperly configured kernel sources"),
    ("linux scripts/mod/modpost.c", "container_runtime",
     "ERROR: modpost: GPL-incompatible module nvidia-uvm.ko uses GPL-only symbol '__rcu_read_lock'"),
    ("dkms dkms.in", "container_runtime",
     "Error! Bad return status for module build on kernel: 6.8.0-49-generic (x86_64)"),
    ("NCCL src/init.cc", "communication",
     "RuntimeError: internal error - please report this issue to the NCCL developers"),
    ("gloo/transport/tcp/pair.cc", "communication", "RuntimeError: Connection closed by peer"),
    ("gloo/transport/tcp/unbound_buffer.cc", "communication",
     "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
     "for recv operation to complete"),
    ("torch/lib/c10d/Utils.hpp", "communication", "RuntimeError: Socket Timeout"),
    ("torch/lib/c10d/Utils.cpp", "communication", "RuntimeError: connect() timed out."),
    ("Ray 1.x python/ray/_private/services.py", "communication",
     "RuntimeError: Unable to connect to Redis at 10.0.0.1:6379 after 16 retries. Check that 10.0.0.1:6379 is "
     "reachable from this machine."),
    ("nvidia-docker 1.0 utils.go", "driver_incompatible",
     "nvidia-docker | 2017/03/01 10:00:00 Error: unsupported CUDA version: driver 8.0 < image 9.0.176"),
    ("crun src/libcrun/container.c", "container_runtime",
     "Error: crun: executable file `nvidia-smi` not found in $PATH: No such file or directory: OCI runtime "
     "attempted to invoke a command that was not found"),
    ("cudarc src/lib.rs", "container_runtime",
     'thread \'main\' panicked at cudarc-0.12.1/src/lib.rs:98:5: Unable to dynamically load the "cuda" shared '
     'library - searched for library names: ["cuda", "nvcuda"].'),
    ("podman pkg/specgen/generate/config_linux.go", "container_runtime",
     "Error: stat nvidia.com/gpu=all: no such file or directory"),
    ("void-packages xbps-triggers/files/dkms", "container_runtime",
     "DKMS module 'nvidia-535.154.05' failed to build, please check /var/lib/dkms"),
    ("void-packages xbps-triggers/files/dkms", "container_runtime",
     "DKMS module 'zfs-2.0.1' failed to build, please check /var/lib/dkms"),
    ("vllm model_executor/models/llama.py load_weights", "model_load_capacity",
     "ERROR 01-21 02:26:24 engine.py:366] 'model.layers.3.self_attn.qkv_proj.weight_scale'"),
    ("ray python/ray/_private/services.py", "communication",
     "RuntimeError: No node info found matching attributes: '' when trying to resolve node to connect to."),
    ("k8s-device-plugin internal/plugin/factory.go", "container_runtime",
     "E0101 00:00:00.000000       1 main.go:180] error starting plugins: error getting plugins: unable to create "
     "plugins: failed to construct resource managers: error creating NVML resource managers"),
    ("CUDA runtime error 46", "container_runtime",
     "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable"),
    ("LXD lxd/device", "container_runtime",
     'Error: Failed to start device "gpu0": Failed to create device "/var/lib/lxd/devices/c1/unix.gpu0.dev-nvidia1" '
     'for "/dev/nvidia1": file exists'),
    ("CUDA runtime error 209", "model_load_capacity",
     "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device"),
    ("ggml ggml-cuda.cu CUDA_CHECK", "model_load_capacity",
     "CUDA error 2 at /src/llama.cpp/ggml-cuda.cu:6246: out of memory"),
    ("ggml ggml-cuda.cu ggml_cuda_host_malloc", "model_load_capacity",
     "ggml_cuda_host_malloc: failed to allocate 8192.00 MiB of pinned memory: out of memory"),
    ("vllm model_executor/models/utils.py AutoWeightsLoader", "model_load_capacity",
     "ValueError: There is no module or parameter named 'model.visual.blocks.0.norm1.bias' in Qwen2VLModel"),
    ("cudarc src/driver/sys/mod.rs", "driver_incompatible",
     "thread 'main' panicked at cudarc-0.17.1/src/driver/sys/mod.rs:12001:18: Expected symbol in library: "
     "DlSym { desc: \"/usr/lib/x86_64-linux-gnu/libcuda.so: undefined symbol: cuCtxCreate_v4\" }"),
    ("gloo/transport/tcp/pair.cc connect", "communication",
     "RuntimeError: [gloo/transport/tcp/pair.cc:799] connect [10.0.0.2]:41512: No route to host"),
    ("ray src/ray/raylet_client/raylet_client.cc", "communication",
     "F0101 00:00:00.000000 12345 raylet_client.cc:83] Could not connect to socket "
     "/tmp/ray/session_latest/sockets/raylet"),
    ("CUDAnative.jl deps/build.jl", "driver_incompatible",
     "ERROR: LoadError: CUDA 10.1 is not supported by your driver (which supports up to 10.0)"),
    ("accelerate src/accelerate/utils/modeling.py check_device_map", "model_load_capacity",
     "ValueError: The device_map provided does not give any device for the following parameters: lm_head.weight"),
    ("TensorRT-LLM kernels/contextFusedMultiHeadAttention/fmhaRunner.cpp", "model_load_capacity",
     "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Unsupported architecture "
     "(/src/tensorrt_llm/cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/fmhaRunner.cpp:89)"),
    ("jax jax/_src/xla_bridge.py _check_cuda_versions", "other",
     "RuntimeError: Found cuDNN version 8700, but JAX was built against version 8904, which is newer. The copy of "
     "cuDNN that is installed must be at least as new as the version against which JAX was built."),
    ("cuda-python cuda/_cuda/ccuda.pyx.in cuPythonInit", "container_runtime",
     "RuntimeError: Failed to dlopen libcuda.so"),
    ("slurm src/sinfo/opts.c (sinfo -R, %20E)", "container_runtime",
     "gres/gpu count repor slurm     2026-01-01T00:00:00 gpu-[01-04]"),
    ("sglang python/sglang/srt/model_executor/model_runner.py", "model_load_capacity",
     "RuntimeError: SGLang only supports sm75 and above."),
    ("llama-cpp-python llama_cpp/llama.py Llama.__init__", "other",
     "ValueError: Attempt to split tensors that exceed maximum supported devices. Current LLAMA_MAX_DEVICES=1"),
    ("onnxruntime core/platform/posix/env.cc LoadDynamicLibrary", "other",
     "[E:onnxruntime:Default, provider_bridge_ort.cc:1548 TryGetProviderInfo_CUDA] [ONNXRuntimeError] : 1 : FAIL : "
     "Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.11: cannot open shared "
     "object file: No such file or directory"),
    ("ctranslate2 src/cuda/utils.h CUDA_CHECK", "model_load_capacity",
     "RuntimeError: CUDA failed with error out of memory"),
    ("pytorch c10/cuda/CUDAMallocAsyncAllocator.cpp (ComfyUI execution.py)", "model_load_capacity",
     "!!! Exception during processing !!! Allocation on device"),
    ("paddle paddle/fluid/memory/allocation/cuda_allocator.cc", "model_load_capacity",
     "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, 7.084717GB "
     "memory has been allocated and available memory is only 716.750000MB."),
    ("mxnet src/storage/pooled_storage_manager.h", "model_load_capacity",
     "mxnet.base.MXNetError: [10:00:00] src/storage/./pooled_storage_manager.h:161: cudaMalloc retry failed: out of "
     "memory"),
    ("onnxruntime core/framework/bfc_arena.cc", "model_load_capacity",
     "onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
     "Non-zero status code returned while running Conv node. Name:'Conv_3' Status Message: "
     "/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* "
     "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
     "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 2081488896"),
    ("ggml ggml/src/ggml-alloc.c ggml_gallocr_reserve_n", "model_load_capacity",
     "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4580180992"),
    ("exllamav2 exllamav2/model.py load_autosplit_gen", "model_load_capacity",
     "RuntimeError: Insufficient VRAM for model and cache"),
    ("tigros/Whisperer whisperer/Form1.cs", "model_load_capacity", "Insufficient graphics memory for this model!"),
    ("text-generation-inference server/text_generation_server/utils/weights.py get_sharded", "model_load_capacity",
     "AssertionError: The choosen size 50432 is not compatible with sharding on 3 shards"),
    ("unsloth unsloth/_auto_install.py", "other", "RuntimeError: Torch = 2.6.0+cu124 too new!"),
    ("tensorflow stream_executor/cuda/cuda_diagnostics.cc, cut after its DSO", "driver_incompatible",
     "2018-01-22 10:12:52.860934: E tensorflow/stream_executor/cuda/cuda_diagnostics.cc:303] kernel version "
     "384.90.0 does not match DSO versio"),
    ("NVIDIA nvidia-installer kernel.c check_for_unloaded_kernel_module", "container_runtime",
     "ERROR: An NVIDIA kernel module 'nvidia-drm' appears to already be loaded in your kernel.  This may be because "
     "it is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may "
     "also happen if your kernel was configured without support for module unloading."),
    ("xla/pjrt/pjrt_stream_executor_client.cc (jaxlib's older status text)", "model_load_capacity",
     "E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] Execution of replica 0 failed: "
     "Resource exhausted: Out of memory while trying to allocate 5520758552 bytes."),
    ("xla/stream_executor/stream_executor_memory_allocator.cc", "model_load_capacity",
     "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 6.27GiB "
     "(6727663616B) on device ordinal 0"),
    ("EricLBuehler/candle-vllm src/paged_attention/mod.rs (Rust before 1.73)", "model_load_capacity",
     "thread 'main' panicked at 'attempt to divide by zero', src/paged_attention/mod.rs:34:34"),
    ("EricLBuehler/candle-vllm src/paged_attention/mod.rs (Rust 1.73 on)", "model_load_capacity",
     "thread 'main' panicked at src/paged_attention/mod.rs:34:34:"),
]


@pytest.mark.parametrize("where,category,line", TOOL_TEXTS, ids=[f"{w}-{i}" for i, (w, _, _) in
                                                                enumerate(TOOL_TEXTS)])
def test_toolkit_driver_build_and_rendezvous_texts_decide_their_step(where, category, line):
    t = classify(line + "\n")
    assert t.category == category, (where, t.scores)
    assert t.evidence == [line]
    # the tool's own text decides, not a generic wrapper around it ("OCI runtime create failed": 1.5)
    assert t.scores[category] >= 2.5, (where, t.scores)


def test_cuda_initialization_error_points_at_the_container_path_without_deciding_alone_loudly():
    # libnvidia-container src/error.c error_set_cuda ("cuda error: %s") with CUDA_ERROR_NOT_INITIALIZED's
    # text: a symptom of step 2 (2.0), enough to name it when nothing else speaks, and below a
    # decisive signal of another step (a forked CUDA worker, "other" at 3.0) on the same log
    t = classify("RuntimeError: CUDA error: initialization error\n")
    assert t.category == "container_runtime" and t.scores["container_runtime"] < 2.5, t.scores
    t = classify("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
                 "you must use the 'spawn' start method\nRuntimeError: CUDA error: initialization error\n")
    assert t.category == "other", t.scores


def test_a_quoted_name_that_is_not_a_parameter_is_not_a_weight_error():
    # the bare KeyError signal needs the line's whole message to be a dotted parameter name
    for line in ("ERROR 01-21 02:26:24 engine.py:366] 'model_type'",
                 "ERROR 01-21 02:26:24 engine.py:366] 'layers.17.mlp.down_proj.weight' is not a valid choice",
                 "KeyError raised while reading 'config.weight'. Retrying"):
        assert classify(line + "\n").scores["model_load_capacity"] == 0, line


def test_a_bare_socket_timeout_in_a_message_is_not_a_rendezvous():
    # c10d's "Socket Timeout" is the exception's whole text; a sentence that mentions one is not it
    assert classify("requests.exceptions.ConnectionError: RuntimeError: Socket Timeout while downloading "
                    "config.json\n").scores["communication"] == 0


def test_quotes_escaped_by_nested_logs_still_match():
    # dockerd logging containerd logging runc logging exec: each level escapes the quotes again
    line = ('Jan  1 00:00:00 host dockerd[1]: time="2017-01-01T00:00:00Z" level=error msg="containerd: start '
            'container" error="oci runtime error: container_linux.go:247: starting container process caused '
            '\\"exec: \\\\\\"nvidia-smi\\\\\\": executable file not found in $PATH\\"\\n"')
    assert '\\\\\\"nvidia-smi' in line
    t = classify(line + "\n")
    assert t.category == "container_runtime" and t.evidence == [line], t.scores


def test_package_listings_and_echoed_arguments_are_not_evidence():
    pkgs = "[pip3] nvidia-nccl-cu12==2.27.3\n[pip3] nvidia-nvshmem-cu12==3.3.20\n[conda] deep-ep 1.2.1 pypi_0 pypi\n"
    assert scan(pkgs) == []
    # argparse echoes the user's arguments: an all-to-all backend named there is no transport failure
    line = "vllm: error: unrecognized arguments: --all2all-backend deepep_low_latency --nccl-debug"
    t = classify(pkgs + line + "\n")
    assert t.category == "other" and t.scores["communication"] == 0, t.scores
    # the same words outside an echoed command line still count
    assert classify("RuntimeError: DeepEP buffer failed: nvshmem init failed\n").category == "communication"


def test_a_message_wrapped_over_two_lines_is_read_joined():
    text = ("ValueError: Free memory on device cuda:0 (13.2/15.5 GiB\n"
            ") on startup is less than desired GPU memory utilization (0.9, 13.9 GiB).\n")
    t = classify(text)
    assert t.category == "model_load_capacity", t.scores
    # the evidence is the two lines as the log has them
    assert t.evidence and all(e in text for e in t.evidence) and "\n" in t.evidence[0]
    # no join across a new record, an NCCL INFO line or a traceback frame
    for nxt in ("INFO 01-01 00:00:00 ) on startup is less than desired GPU memory utilization",
                "host:1:2 [0] NCCL INFO ) on startup is less than desired GPU memory utilization",
                '  File "x.py", line 1, ) on startup is less than desired GPU memory utilization'):
        hits = scan("ValueError: Free memory on device cuda:0 (13.2/15.5 GiB\n" + nxt + "\n")
        assert not any("wrapped" in h.why for h in hits), nxt
    # a family either line matches alone is not counted a second time through the join
    hits = scan("RuntimeError: CUDA out of memory while loading\nthe weights: CUDA out of memory\n")
    assert [h.family for h in hits].count("gpu_memory") == 2


def test_julias_wrapped_toolkit_check_is_the_driver_and_jaxs_runtime_check_is_not():
    # CUDAnative.jl's message has a newline of its own ("is not supported by\n your driver"): read
    # joined, it is the driver's age, step 1
    t = classify("ERROR: LoadError: CUDA 10.0 is not supported by\nyour driver (which supports up to 9.0)\n")
    assert t.category == "driver_incompatible" and t.scores["driver_incompatible"] >= 4, t.scores
    # JAX's "CUDA version" is the CUDA runtime library it loaded (a pip wheel), not the driver: the
    # environment's, with no weight on step 1
    t = classify("CUDA backend failed to initialize: Found CUDA version 12010, but JAX was built against version "
                 "12020, which is newer. The copy of CUDA that is installed must be at least as new as the version "
                 "against which JAX was built. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)\n",
                 backoff=False)
    assert t.category == "other" and t.scores["driver_incompatible"] == 0, t.scores
    # an installer's own architecture check is not TensorRT-LLM's kernels
    assert classify("ERROR: Unsupported architecture: armv7l\n").scores["model_load_capacity"] == 0


def test_a_cpu_build_and_a_missing_toolkit_library_are_the_environment_not_the_gpu_path():
    # llama-cpp-python built without a GPU backend says LLAMA_MAX_DEVICES=1; a CUDA build's 16 refusing
    # a longer split is a launch argument, not taken
    assert classify("ValueError: Attempt to split tensors that exceed maximum supported devices. "
                    "Current LLAMA_MAX_DEVICES=16\n", backoff=False).scores["other"] == 0
    # ONNX Runtime's provider library missing the driver's libcuda is step 2, not the environment
    t = classify("Failed to load library libonnxruntime_providers_cuda.so with error: libcuda.so.1: cannot open "
                 "shared object file: No such file or directory\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["other"] == 0, t.scores
    # cuda-python failing on the toolkit's runtime library is not the driver's libcuda
    assert classify("RuntimeError: Failed to dlopen libcudart.so.12\n", backoff=False).scores["container_runtime"] == 0
    # sinfo's reason column holding another reason is not the GPU count
    assert classify("gres/gpu count too l slurm     2026-01-01T00:00:00 gpu01\n",
                    backoff=False).scores["container_runtime"] == 0


def test_out_of_memory_texts_are_read_whole_and_not_from_lookalikes():
    # PyTorch's cudaMallocAsync message cut at the NUL its int8 device index writes, after the exception's
    # name; a code comment's "allocation on device" is not the allocator
    t = classify("torch.OutOfMemoryError: Allocation on device \n", backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, t.scores
    assert classify("    // Allocation on device (cudaMalloc)\n", backoff=False).scores["model_load_capacity"] == 0
    # CTranslate2's other CUDA errors are not memory
    t = classify("RuntimeError: CUDA failed with error CUDA driver version is insufficient for CUDA runtime version\n",
                 backoff=False)
    assert t.scores["model_load_capacity"] == 0, t.scores
    # ggml's pinned host buffer is not GPU memory at 4
    t = classify("ggml_gallocr_reserve_n: failed to allocate CUDA_Host buffer of size 1024\n", backoff=False)
    assert t.scores["model_load_capacity"] < 4, t.scores


def test_driver_diagnostics_and_daemon_texts_weigh_as_symptoms_and_lookalikes_are_not_taken():
    # TensorFlow's diagnostics finding no kernel driver (cuda_diagnostics.cc LogDiagnosticInformation):
    # no module loaded where the process runs, the container path's, 3
    t = classify("2018-01-22 10:12:52.860688: I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:158] kernel "
                 "driver does not appear to be running on this host (node1): /proc/driver/nvidia/version does not "
                 "exist\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, t.scores
    assert t.scores["driver_incompatible"] == 0, t.scores
    # nvidia-persistenced (nvidia-persistenced.c setup_devices) is a symptom, 2, not a verdict
    t = classify("Sep 11 04:47:05 node1 nvidia-persistenced[887]: Failed to query NVIDIA devices. Please ensure that "
                 "the NVIDIA device files (/dev/nvidia*) exist, and that user 991 has read and write permissions for "
                 "those files.\n", backoff=False)
    assert t.category == "container_runtime" and 2.0 <= t.scores["container_runtime"] < 3, t.scores
    # the diagnostics' agreement is not a mismatch
    assert classify("I cuda_diagnostics.cc:190] kernel version seems to match DSO: 470.1.1\n",
                    backoff=False).scores["driver_incompatible"] == 0
    # a division by zero elsewhere in a Rust program, or at another line of the file, is not the KV-head layout
    assert classify("thread 'main' panicked at src/main.rs:34:34:\nattempt to divide by zero\n",
                    backoff=False).scores["model_load_capacity"] == 0
    assert classify("thread 'main' panicked at src/paged_attention/mod.rs:120:9:\n",
                    backoff=False).scores["model_load_capacity"] == 0
    # another driver's request allocator (a Wi-Fi firmware's) is not XLA's device memory
    assert classify("wma_self_peer_remove: Failed to allocate request for vdev_id 3\n",
                    backoff=False).scores["model_load_capacity"] == 0
    # NVIDIA's installer finding nouveau is not taken (its one corpus log has a doubtful label)
    assert classify("ERROR: The Nouveau kernel driver is currently in use by your system.\n",
                    backoff=False).scores["container_runtime"] == 0


def test_the_kernel_drivers_refusals_dcgms_nvml_and_tgis_request_limit_decide_their_step():
    # the open modules refusing a GPU without GSP (osapi.c rm_is_supported_device): no GPU comes up
    # under a loaded module, step 2 as the probe failure, 3, even with the probe lines cut off
    t = classify("[ 1157.046099] NVRM: The NVIDIA GPU 0000:af:00.0 (PCI ID: 10de:1db5)\n"
                 "               NVRM: installed in this system is not supported by open\n"
                 "               NVRM: nvidia.ko because it does not include the required GPU\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, t.scores
    assert t.scores["driver_incompatible"] == 0, t.scores
    # the same function's text for a GPU the release dropped, the version on either line
    for line in ("NVRM: installed in this system is not supported by the 304.116\n",
                 "NVRM: installed in this system is not supported by the\n"):
        assert classify(line, backoff=False).scores["container_runtime"] >= 3, line
    # DCGM's host engine failing nvmlInit in the exporter, and the Go binding's start failure after it
    for line in ("Error: Failed to initialize NVML\n",
                 "level=error msg=\"Failed to initialize NVML: 9\"\n",
                 'time="2020-07-21T18:49:33Z" level=fatal msg="Error starting nv-hostengine: DCGM initialization '
                 'error"\n'):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    # nvidia-smi's NVML failure naming a driver mismatch stays the driver's, not this container text
    t = classify("Failed to initialize NVML: Driver/library version mismatch\n", backoff=False)
    assert t.category == "driver_incompatible" and t.scores["container_runtime"] == 0, t.scores
    # TGI's router: a request's max_new_tokens above the launch's limit is the request, other, 3
    t = classify("Input validation error: `max_new_tokens` must be <= 1. Given: 20\n", backoff=False)
    assert t.category == "other" and t.scores["other"] >= 3, t.scores
    # its total-tokens check (a prompt longer than the context) is not this signal
    assert classify("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4031 "
                    "`inputs` tokens and 200 `max_new_tokens`\n", backoff=False).scores["other"] == 0


def test_tgi_warmup_int8_gptq_onnxruntime_warp_and_checkpoint_texts_decide_their_step_and_lookalikes_do_not():
    # TGI's warmup failing after the load (interceptor.py, the router's V3Error::Warmup): step 3 as a
    # symptom, 2, enough alone; its other methods fail while serving and are not taken
    for line in ("2024-04-19T11:06:25.868590Z ERROR text_generation_launcher: Method Warmup encountered an error.\n",
                 "Error: Backend(Warmup(Connection(Status { code: Unavailable, message: \"error trying to connect\" "
                 "})))\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and 2 <= t.scores["model_load_capacity"] < 3, (line, t.scores)
    for method in ("Prefill", "Decode"):
        assert classify(f"ERROR text_generation_launcher: Method {method} encountered an error.\n",
                        backoff=False).scores["model_load_capacity"] == 0, method
    # the router's KV-cache check after warmup (NotEnoughMemory), in both of main's nestings: the cache, 4
    for line in ("Error: Backend(NotEnoughMemory(8192))\n", "Error: WebServer(NotEnoughMemory(8192))\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, (line, t.scores)
    # TGI's loader missing a dotted tensor name, 3; a missing file is not that
    t = classify("RuntimeError: weight lm_head.weight does not exist\n", backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3, t.scores
    assert classify("Error: weight file does not exist\n", backoff=False).scores["model_load_capacity"] == 0
    # bitsandbytes' int8 matmul failing in cuBLASLt, old and new raise, 3; its fp32 fallback warning and
    # its slow-int8 notice on an older GPU are not failures
    for line in ("Exception: cublasLt ran into an error!\n", "RuntimeError: cublasLt ran into an error!\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3, (line, t.scores)
    for line in ("UserWarning: int8_linear_matmul has no usable (hip|cu)blasLt algo for shape "
                 "shapeA=torch.Size([1, 4096]) shapeB=torch.Size([4096, 4096]); falling back to fp32 matmul.\n",
                 "WARNING: Compute capability < 7.5 detected! Only slow 8-bit matmul is supported for your GPU!\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # AutoGPTQ's Marlin floor decides; its refusal on ROCm is another accelerator's
    assert classify("ValueError: Can not use Marlin int4*fp16 kernel with AMD ROCm version of PyTorch as the kernel "
                    "is not compatible.\n", backoff=False).scores["model_load_capacity"] == 0
    # Optimum's GPTQ refusal of offloaded modules decides, 3; its warning while quantizing goes on
    t = classify("ValueError: Found modules on cpu/disk. Using Exllama backend requires all the modules to be on "
                 "GPU.You can deactivate exllama backend by setting `disable_exllama=True` in the quantization config "
                 "object\n", backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3, t.scores
    assert classify("Found modules on cpu/disk. Using Exllamav2 backend requires all the modules to be on GPU. "
                    "Setting `disable_exllamav2=True`\n", backoff=False).scores["model_load_capacity"] == 0
    # ONNX Runtime: the arena at its limit (its ERROR log too) and the CUDA provider's OOM; its INFO line
    # extending the arena, another CUDA failure and the ROCm provider's failure are not GPU memory
    t = classify("2023-01-01 00:00:00.000 [E:onnxruntime:, bfc_arena.cc:342 AllocateRawInternal] BFC Arena ran out "
                 "of memory trying to allocate 268435456.  Current allocation summary follows.\n", backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3.5, t.scores
    for line in ("2023-01-01 00:00:00.000 [I:onnxruntime:, bfc_arena.cc:317 AllocateRawInternal] Extending BFCArena "
                 "for Cuda. bin_num:20 (requested) num_bytes: 268435456 (actual) rounded_bytes:268435456\n",
                 "onnxruntime::CudaCall CUDA failure 100: no CUDA-capable device is detected ; GPU=1045 ; "
                 "hostname=node1 ; expr=cudaSetDevice(info_.device_id);\n",
                 "onnxruntime::RocmCall HIP failure 2: out of memory ; GPU=0 ; hostname=node1 ; "
                 "expr=hipMalloc((void**)&p, size);\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # transformers reading a checkpoint that is not one, in either release's words, 3.5; a tokenizer's
    # vocabulary is not the weights
    t = classify("OSError: Unable to load weights from pytorch checkpoint file for '/m/pytorch_model.bin' at "
                 "'/m/pytorch_model.bin'. If you tried to load a PyTorch model from a TF 2.0 checkpoint, please set "
                 "from_tf=True.\n", backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3.5, t.scores
    assert classify("OSError: Unable to load vocabulary from file. Please check that the provided vocabulary is "
                    "accessible and not corrupted.\n", backoff=False).scores["model_load_capacity"] == 0
    # Warp: the driver older than its build is step 1, 4; the stub libcuda (error 34, or a version it
    # cannot tell, a warning that still decides) step 2; an entry point newer than the driver (500) and
    # no libcuda at all (a CPU-only host prints it) are neither
    t = classify("Warp CUDA error: Warp requires CUDA driver 12.0 or higher, but the current driver only supports "
                 "CUDA 11.4\n", backoff=False)
    assert t.category == "driver_incompatible" and t.scores["driver_incompatible"] >= 4, t.scores
    t = classify("Warp CUDA warning: Unable to determine CUDA driver version\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["driver_incompatible"] == 0, t.scores
    for line in ("Warp CUDA error: Failed to get driver entry point 'cuMemcpyBatchAsync' (CUDA error 500)\n",
                 "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver. GPU execution will not be "
                 "available.\n"):
        t = classify(line, backoff=False)
        assert t.scores["container_runtime"] == t.scores["driver_incompatible"] == 0, (line, t.scores)
    # an empty driver library where the runtime should have bound the host's, in the loader's and
    # Python's words, 3; a toolkit or TensorRT library the image carries is not the driver's
    for line in ("nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: file too short\n",
                 "ImportError: libcuda.so.1: file too short\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    for line in ("./app: error while loading shared libraries: libnvinfer.so.8: file too short\n",
                 "ImportError: libcudnn.so.8: file too short\n"):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line


def test_numbas_tensorrts_and_ollamas_driver_verdicts_are_step_one_and_lookalikes_are_not():
    # Numba binding a driver API entry point the installed libcuda lacks (cudadrv/driver.py
    # MISSING_FUNCTION_ERRMSG): the driver is older than the API, 3
    t = classify("numba.cuda.cudadrv.driver.CudaDriverError: driver missing function: cuMemAllocAsync.\n",
                 backoff=False)
    assert t.category == "driver_incompatible" and t.scores["driver_incompatible"] >= 3, t.scores
    # its ROCm driver's missing hsa_... function says nothing of the NVIDIA driver
    assert classify("driver missing function: hsa_amd_memory_lock.\n", backoff=False).scores["driver_incompatible"] == 0
    # TensorRT's CUDA init failure with error 35, in both its wordings, is the driver's age
    for line in ("[TRT] [E] createInferBuilder: Error Code 6: API Usage Error (CUDA initialization failure with "
                 "error: 35. Please check the CUDA installation: http://docs.nvidia.com/cuda/"
                 "cuda-installation-guide-linux/index.html.)\n",
                 "[2019-04-04 17:21:17 ERROR] Cuda initialization failure with error 35. Please check cuda "
                 "installation: http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html.\n"):
        t = classify(line, backoff=False)
        assert t.category == "driver_incompatible" and t.scores["driver_incompatible"] >= 3.5, (line, t.scores)
    # its other codes are not: error 2 is memory, error 350 another number
    for code in ("2", "350"):
        t = classify(f"[TRT] [E] CUDA initialization failure with error: {code}. Please check the CUDA "
                     "installation\n", backoff=False)
        assert t.scores["driver_incompatible"] == 0, (code, t.scores)
    # Ollama naming errors 35 and 803 as one "version mismatch" (discover/gpu.go, a warning)
    t = classify('time=2026-01-01T00:00:00.000Z level=WARN source=gpu.go:600 msg="version mismatch between driver '
                 'and cuda driver library - reboot or upgrade may be required: library /usr/lib/libcuda.so.535.183.01"\n',
                 backoff=False)
    assert t.category == "driver_incompatible" and t.scores["container_runtime"] == 0, t.scores
    # its INFO line for a host with no NVIDIA device is not the driver's version
    assert classify('time=2026-01-01T00:00:00.000Z level=INFO source=gpu.go:620 msg="no nvidia devices detected by '
                    'library /usr/lib/libcuda.so.535.183.01"\n', backoff=False).scores["driver_incompatible"] == 0


def test_enroot_apptainer_toolkit_and_docker_gpu_setup_texts_are_step_two_and_lookalikes_are_not():
    # enroot's NVIDIA hook failing, as pyxis relays it (src/common.sh common::runparts)
    t = classify("pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, t.scores
    # another hook of enroot's is not the GPU's
    assert classify("[ERROR] /etc/enroot/hooks.d/99-mellanox.sh exited with return code 1\n",
                    backoff=False).scores["container_runtime"] == 0
    # the hook warning that nvidia_uvm is not loaded counts as the warning it is: decides, below 3
    t = classify("[WARN] Kernel module nvidia_uvm is not loaded. Make sure the NVIDIA device driver is installed and "
                 "loaded.\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] < 3, t.scores
    # a capability the GPU setup does not know, in enroot's and Apptainer's words; Apptainer's own
    # debug line naming the variable is not it
    for line in ("[ERROR] Unknown NVIDIA driver capability: compute,utility\n",
                 "FATAL:   container creation failed: unknown NVIDIA_DRIVER_CAPABILITIES value: gpu\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    assert classify("DEBUG   Setting 'NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32' for --compat32\n",
                    backoff=False).scores["container_runtime"] == 0
    # Apptainer refusing --nvccli; its build warning about --nvccli with --fakeroot is not a refusal
    for line in ("FATAL:   --fakeroot does not support --nvccli in set-uid installations\n",
                 "FATAL:   container creation failed: nvidia-container-cli is not owned by root user\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, (line, t.scores)
    assert classify("WARNING: Due to writable-tmpfs limitations, %test sections will fail with --nvccli & --fakeroot\n",
                    backoff=False).scores["container_runtime"] == 0
    # WSL2 exposing no GPU adapter decides alone; the debug line of every non-WSL host does not
    t = classify("WSL environment detected but no adapters were found\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, t.scores
    assert classify("I0101 00:00:00.000000 1234 nvc.c:100] dxcore initialization failed, continuing assuming a "
                    "non-WSL environment\n", backoff=False).scores["container_runtime"] == 0
    # nvidia-container-cli not installed: the toolkit's hook, containerd's --gpus (nerdctl)
    for line in ('couldn\'t find binary nvidia-container-cli in PATH: exec: "nvidia-container-cli": executable file '
                 "not found in $PATH\n",
                 'FATA[0000] exec: "nvidia-container-cli": executable file not found in $PATH\n'):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, (line, t.scores)
    # another binary missing from the PATH is not the GPU's
    assert classify('FATA[0000] exec: "containerd": executable file not found in $PATH\n',
                    backoff=False).scores["container_runtime"] == 0
    # Docker with CDI and no GPU vendor's spec; its AMD path on a host with another spec is not it
    t = classify("docker: Error response from daemon: failed to discover GPU vendor from CDI: no known GPU vendor "
                 "found\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, t.scores
    assert classify("docker: Error response from daemon: AMD CDI spec not found\n",
                    backoff=False).scores["container_runtime"] == 0


def test_gpu_operator_numba_tensorrt_and_ollama_gpu_path_texts_are_step_two_and_lookalikes_are_not():
    # the GPU Operator's validator: driver, toolkit, GPU resources
    for line in ('time="2026-01-01T00:00:00Z" level=fatal msg="error validating driver installation: error running '
                 'nvidia-smi: exit status 9"\n',
                 'time="2026-01-01T00:00:00Z" level=fatal msg="error validating toolkit installation: exit status 1"\n',
                 'time="2026-01-01T00:00:00Z" level=fatal msg="error validating plugin installation: GPU resources '
                 'are not discovered by the node"\n'):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    # its validation of the RDMA stack is not the GPU path
    for line in ('time="2026-01-01T00:00:00Z" level=fatal msg="error validating nvidia-peermem driver installation: '
                 'exit status 1"\n',
                 'time="2026-01-01T00:00:00Z" level=fatal msg="error validating MOFED driver installation: not '
                 'ready"\n'):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line
    # the driver container with no kernel package to take the version string from; its progress line is not it
    t = classify("Could not locate Linux kernel version string\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, t.scores
    assert classify("Generating Linux kernel version string...\n", backoff=False).scores["container_runtime"] == 0
    # Numba finding no libcuda; its missing libNVVM is the toolkit's, not the driver's
    t = classify("numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: CUDA driver library cannot be "
                 "found.\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["driver_incompatible"] == 0, t.scores
    assert classify("numba.cuda.cudadrv.error.NvvmSupportError: libNVVM cannot be found. Do `conda install "
                    "cudatoolkit`:\n", backoff=False).scores["container_runtime"] == 0
    # TensorRT's CUDA init failure with error 100 is no GPU visible, not the driver's age
    t = classify("[TRT] [E] createInferBuilder: Error Code 6: API Usage Error (CUDA initialization failure with error: "
                 "100. Please check the CUDA installation)\n", backoff=False)
    assert t.category == "container_runtime" and t.scores["driver_incompatible"] == 0, t.scores
    # Ollama's cuInit error 999, a warning; its pointer to the troubleshooting page alone is nothing
    t = classify('time=2026-01-01T00:00:00.000Z level=WARN source=gpu.go:616 msg="unknown error initializing cuda '
                 "driver library /usr/lib/libcuda.so.575.64.03: cuda driver library init failure: 999. see "
                 'https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md for more information"\n',
                 backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] < 3, t.scores
    assert classify('time=2026-01-01T00:00:00.000Z level=WARN source=gpu.go:563 msg="see https://github.com/ollama/'
                    'ollama/blob/main/docs/troubleshooting.md for more information"\n',
                    backoff=False).scores["container_runtime"] == 0


def test_kubelet_pyxis_slurm_and_operator_node_texts_are_step_two_and_lookalikes_are_not():
    # the kubelet's dockershim and RuntimeClass lookup with no nvidia handler or class; another
    # handler or class is not the GPU's
    for line in ('E0730 04:54:23.216598   50437 remote_runtime.go:116] "RunPodSandbox from runtime service failed" '
                 'err="rpc error: code = Unknown desc = RuntimeHandler \\"nvidia\\" not supported"\n',
                 'E0101 00:00:00.000000    1234 kuberuntime_manager.go:1166] "CreatePodSandbox for pod failed" '
                 'err="runtimeclass.node.k8s.io \\"nvidia\\" not found" pod="default/cuda-vectoradd"\n'):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, (line, t.scores)
    for line in ('err="rpc error: code = Unknown desc = RuntimeHandler \\"kata\\" not supported"\n',
                 'err="runtimeclass.node.k8s.io \\"gvisor\\" not found"\n'):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line
    # the kubelet's admission without the GPUs it was scheduled for; another resource is not the GPU path
    for line in ("Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, "
                 "capacity: 0\n",
                 "cuda-vectoradd   0/1     OutOfnvidia.com/gpu   0          12s\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    assert classify("Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 1000, capacity: "
                    "4000\n", backoff=False).scores["container_runtime"] == 0
    # nvidia-smi quoted in Go's words without the exec: prefix; another binary is not the driver's
    t = classify('"nvidia-smi": executable file not found in $PATH: unknown\n', backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, t.scores
    assert classify('"python3": executable file not found in $PATH: unknown\n',
                    backoff=False).scores["container_runtime"] == 0
    # the GPU Operator's validator on a CUDA workload or the plugin's resources; its GPUDirect Storage
    # check is not the GPU path
    for line in ("Error: error validating cuda workload: gave up waiting for pod nvidia-cuda-validator-x7k2p to be "
                 "available\n",
                 "Error: error validating plugin installation: unable to find any allocatable GPU resource\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3, (line, t.scores)
    assert classify("Error: error validating nvidia-fs driver installation: exit status 1\n",
                    backoff=False).scores["container_runtime"] == 0
    # the driver manager unable to take the old driver off; its retry with a drain is not a failure
    t = classify('time="2026-01-01T00:00:00Z" level=fatal msg="failed to uninstall nvidia driver components: failed '
                 'to unload driver: exit status 1"\n', backoff=False)
    assert t.category == "container_runtime" and t.scores["container_runtime"] >= 2.5, t.scores
    assert classify('time="2026-01-01T00:00:00Z" level=info msg="Unable to cleanup driver modules, attempting again '
                    'with node drain..."\n', backoff=False).scores["container_runtime"] == 0
    # pyxis and enroot unable to fetch the image; the imported image and a registry's 500 are not taken
    for line in ("slurmstepd: error: pyxis: failed to import docker image: nvcr.io#nvidia/pytorch:24.01-py3\n",
                 "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth?scope=repository:nvidia/"
                 "pytorch:pull returned error code: 401 Unauthorized\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 2.5, (line, t.scores)
    for line in ("pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.01-py3\n",
                 "[ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.01-py3 returned error code: 500 Internal "
                 "Server Error\n"):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line
    # Slurm: a GPU device file of gres.conf missing, the GPU plugin stopping slurmd, the device cgroup
    # not applied, the detected GPUs unlike the configuration; an RDMA device file, another GRES
    # plugin and the memory constraint are not the GPUs
    for line in ("slurmd: error: _set_gres_device_desc: stat(/dev/nvidia3): No such file or directory\n",
                 "slurmd: fatal: Gres GPU plugin failed to load configuration\n",
                 "slurmstepd: error: Could not apply device constrain to step\n",
                 "slurmd: error: failure enabling device enforcement: Unspecified error\n",
                 "slurmctld: error: _check_node_links: Invalid GRES Links value (-1,0,0) on node gpu01: i=2 >= "
                 "link_len=2. If using AutoDetect the amount of GPUs configured in slurm.conf does not match what was "
                 "detected.\n"):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 2.5, (line, t.scores)
    for line in ("slurmd: error: _set_gres_device_desc: stat(/dev/infiniband/uverbs0): No such file or directory\n",
                 "slurmd: fatal: Gres NIC plugin failed to load configuration\n",
                 "slurmd: error: failure enabling memory enforcement: Unspecified error\n"):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line


def test_turbomind_tensorrt_llm_xla_and_git_texts_decide_their_step_and_lookalikes_are_not():
    # TurboMind's and FasterTransformer's CUDA check on an allocation; another CUDA error is not memory
    for line in ("[TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:246\n",
                 "what():  [FT][ERROR] CUDA runtime error: out of memory /workspace/FasterTransformer/src/"
                 "fastertransformer/utils/allocator.h:181\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, (line, t.scores)
    assert classify("[TM][ERROR] CUDA runtime error: invalid argument /lmdeploy/src/turbomind/kernels/x.cu:10\n",
                    backoff=False).scores["model_load_capacity"] == 0
    # TensorRT-LLM's engine that does not deserialize: step 3, 3 (a broken CUDA context can print it
    # too), below an out-of-memory text's 4
    t = classify("[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine. "
                 "(/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:256)\n", backoff=False)
    assert t.category == "model_load_capacity" and 3 <= t.scores["model_load_capacity"] < 4, t.scores
    assert classify("Failed to deserialize JSON config: missing field `model`\n",
                    backoff=False).scores["model_load_capacity"] == 0
    # XLA's rendezvous stuck on the NCCL clique, in both its releases' wordings; a program's own
    # collective and the all-clear after a false alarm are not taken
    for line in ("2024-07-29 17:14:59.920189: E external/xla/xla/service/rendezvous.cc:38] This thread has been "
                 "waiting for `initialize clique for rank 2; clique=devices=[0,1,2,3]; stream=0; run_id=42` for 10 "
                 "seconds and may be stuck. Expected 4 threads to join the rendezvous, but not all of them arrived "
                 "on time.\n",
                 "E0218 03:50:19.000000 1234 rendezvous.cc:100] [id=1] This thread has been waiting for `acquire "
                 "clique for rank 3; clique=devices=[4,5,6,7]; is_p2p=0; run_id=-1558191007` for 10 seconds and may "
                 "be stuck. Expected 4 threads to join the rendezvous, but not all of them arrived on time.\n"):
        t = classify(line, backoff=False)
        assert t.category == "communication" and t.scores["communication"] >= 2, (line, t.scores)
    for line in ("E0101 rendezvous.cc:100] [id=0] This thread has been waiting for `first call to collective "
                 "operation 190; run_id=-851342065` for 20 seconds and may be stuck.\n",
                 "E0101 rendezvous.cc:120] Thread is unstuck! Warning above was a false-positive. Perhaps the timeout "
                 "is too short.\n"):
        assert classify(line, backoff=False).scores["communication"] == 0, line
    # git refusing to pull into a half-merged checkout is the environment's; its hint alone is not taken
    for line in ("error: Pulling is not possible because you have unmerged files.\n",
                 "fatal: Exiting because of an unresolved conflict.\n"):
        t = classify(line, backoff=False)
        assert t.category == "other" and t.scores["other"] >= 3, (line, t.scores)
    assert classify("hint: Fix them up in the work tree, and then use 'git add/rm <file>'\n",
                    backoff=False).scores["other"] == 0


def test_lmdeploy_tensorrt_llm_and_llama_cpp_loading_texts_are_step_three_and_lookalikes_are_not():
    # LMDeploy: TurboMind's CUDA check on an allocation, the PyTorch engine's cache and runtime budgets
    for line in ("RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/"
                 "allocator.h:231 \n",
                 "RuntimeError: No enough gpu memory for kv cache.\n",
                 "AssertionError: No enough gpu memory for state cache. Please reduce max_batch_size.\n",
                 "RuntimeError: No enough gpu memory for runtime.\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, (line, t.scores)
    # TurboMind's blocks not holding one sequence, found while serving: 3
    t = classify("RuntimeError: [TM][ERROR] No enough blocks. Assertion fail: /lmdeploy/src/turbomind/models/llama/"
                 "LlamaBatch.cc:522 \n", backoff=False)
    assert t.category == "model_load_capacity" and 3 <= t.scores["model_load_capacity"] < 4, t.scores
    # TurboMind's other CUDA errors are not memory, and the engine's warning that shrinks the prefill goes on
    for line in ("RuntimeError: [TM][ERROR] CUDA runtime error: invalid argument /lmdeploy/src/turbomind/utils/"
                 "allocator.h:231 \n",
                 "2024-01-01 00:00:00,000 - lmdeploy - WARNING - base.py:402 - No enough memory. Update "
                 "max_prefill_token_num=4096\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # TensorRT-LLM: the weights that do not fit and a KV cache without room for one sequence (the C++
    # batch manager's and the PyTorch backend's words, in both spellings of its assert) decide, 4
    for line in ("RuntimeError: [TensorRT-LLM][ERROR] Failed to allocate memory for weights. Please try reducing "
                 "--gpu_weights_percent. (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:247)\n",
                 "[TensorRT-LLM][ERROR] Assertion failed: maxTokensInPagedKvCache (693) must be large enough to "
                 "process at least 1 sequence to completion (i.e. must be larger than beam_width (1) * "
                 "tokensPerBlock (64) * maxBlocksPerSeq (32)) (/src/tensorrt_llm/cpp/tensorrt_llm/batch_manager/"
                 "kvCacheManager.cpp:403)\n",
                 "AssertionError: Impossible to fit in any sequence in kvCache\n",
                 "AssertionError: Impossibe to fit in any sequence in kvCache\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, (line, t.scores)
    # the engine file TensorRT refused: the model's file, 3
    t = classify("[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine. (/src/tensorrt_llm/cpp/"
                 "tensorrt_llm/runtime/tllmRuntime.cpp:152)\n", backoff=False)
    assert t.category == "model_load_capacity" and 3 <= t.scores["model_load_capacity"] < 4, t.scores
    # its INFO lines about the same budgets are not failures
    for line in ("[TensorRT-LLM][INFO] Set gpu weights percent to 0.500000, which is 7516192768 bytes. Valid range: "
                 "0 bytes - 15032385536 bytes.\n",
                 "[TensorRT-LLM][INFO] Max tokens in paged KV cache: 128. Allocating 16777216 bytes.\n",
                 "[TensorRT-LLM][INFO] Loaded engine size: 3122 MiB\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # llama.cpp's compute buffer that does not fit when the context is made, 3; its size line is not it
    for line in ("llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n",
                 "graph_reserve: failed to allocate compute buffers\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3, (line, t.scores)
    assert classify("llama_init_from_model:      CUDA0 compute buffer size =   304.00 MiB\n",
                    backoff=False).scores["model_load_capacity"] == 0


def test_exllamav2_megatron_deepspeed_diffusers_and_accelerate_loading_texts_decide_and_lookalikes_do_not():
    # ExLlamaV2: the GPU split that does not hold the layers, and a layer the checkpoint lacks: 3
    for line in ("AssertionError: Insufficient space in device allocation\n",
                 "ValueError:  ## Could not find model.layers.0.mlp.* in model\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and 3 <= t.scores["model_load_capacity"] < 3.5, (line, t.scores)
    # a file the loader cannot find is not a layer the architecture expects
    assert classify("ValueError: Could not find model.safetensors.index.json in /models\n",
                    backoff=False).scores["model_load_capacity"] == 0
    # a checkpoint saved with another parallel layout: Megatron-LM's argument check (old checkpoints'
    # model_parallel_size too), its distributed optimizer, DeepSpeed's ZeRO world size and mp shards: 3.5
    for line in ("AssertionError: tensor_model_parallel_size value from checkpoint (8) is not equal to the input "
                 "argument value (4).\n",
                 "AssertionError: model_parallel_size value from checkpoint (2) is not equal to the input argument "
                 "value (1).\n",
                 "RuntimeError: (TP, PP) mismatch after resume ((4, 1) vs (8, 1) from checkpoint): not supported for "
                 "DistributedOptimizer with sharding type dp_zero_gather_scatter. Please use "
                 "`--ckpt-fully-parallel-save` flag during checkpoint saving.\n",
                 "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size "
                 "of 16 but the current world size is 8. Automatic adjustment of ZeRO's optimizer state partitioning "
                 "with a new world size is not currently supported.\n",
                 "AssertionError: Invalid checkpoints and world size for sd split\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3.5, (line, t.scores)
    # Megatron-LM's checkpoint of another model shape: 3
    t = classify("AssertionError: num_layers value from checkpoint (32) is not equal to the input argument value "
                 "(40).\n", backoff=False)
    assert t.category == "model_load_capacity" and 3 <= t.scores["model_load_capacity"] < 3.5, t.scores
    # the run's own settings compared there are not the model's, Megatron-LM's print that drops the RNG state
    # goes on, and DeepSpeed's INFO on the shards it merges is not a failure
    for line in ("AssertionError: global_batch_size value from checkpoint (1024) is not equal to the input argument "
                 "value (512).\n",
                 " (TP, PP) mismatch after resume ((4, 1) vs (8, 1) from checkpoint): RNG state will be ignored\n",
                 "[2024-01-01 00:00:00,000] [INFO] [state_dict_factory.py:122:merge_state_dict] mp_rank: 0, "
                 "ckpt_list: ['/ckpt/mp_rank_00_model_states.pt', '/ckpt/mp_rank_01_model_states.pt']\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # diffusers' and accelerate's shape checks: a checkpoint tensor of another shape, 3.5
    for line in ("ValueError: Cannot load /models/sdxl because conv_in.weight expected shape torch.Size([320, 4, 3, "
                 "3]), but got torch.Size([320, 9, 3, 3]). If you want to instead overwrite randomly initialized "
                 "weights, please make sure to pass both `low_cpu_mem_usage=False` and `ignore_mismatched_sizes=True`.\n",
                 'ValueError: Trying to set a tensor of shape torch.Size([32000, 4096]) in "weight" (which has shape '
                 "torch.Size([32064, 4096])), this looks incorrect.\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3.5, (line, t.scores)
    # diffusers' warning about weights newly initialized and PyTorch's broadcasting warning are not failures
    for line in ("Some weights of UNet2DConditionModel were not initialized from the model checkpoint at /models/sdxl "
                 "and are newly initialized: ['conv_in.weight']\n",
                 "UserWarning: Using a target size (torch.Size([8])) that is different to the input size "
                 "(torch.Size([8, 1])). This will likely lead to incorrect results due to broadcasting.\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # accelerate's dispatch with layers sent to disk and nowhere to put them: 3; its warning on moving a
    # dispatched model is not it
    t = classify("ValueError: We need an `offload_dir` to dispatch this model according to this `device_map`, the "
                 "following submodules need to be offloaded: model.layers.30, model.layers.31, lm_head.\n",
                 backoff=False)
    assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 3, t.scores
    assert classify("You shouldn't move a model that is dispatched using accelerate hooks.\n",
                    backoff=False).scores["model_load_capacity"] == 0


def test_lxc_tensorrt_caffe2_tgi_ray_and_jax_texts_decide_their_step_and_lookalikes_are_not():
    # LXC's hook script in its run_buffer line: generic, 1.5, enough alone; the words without LXC's
    # prefix are any script's, and its INFO line running the hook is no failure
    t = classify("lxc cuda 20190126125032.612 ERROR    conf - conf.c:run_buffer:335 - Script exited with status 1\n",
                 backoff=False)
    assert t.category == "container_runtime" and 1.5 <= t.scores["container_runtime"] < 2.5, t.scores
    for line in ("Script exited with status 1\n",
                 'lxc c1 20240101000000.000 INFO     conf - conf.c:run_script_argv:337 - Executing script '
                 '"/snap/lxd/current/bin/lxd callhook /var/snap/lxd/common/lxd 0 start" for container "c1"\n'):
        assert classify(line, backoff=False).scores["container_runtime"] == 0, line
    # LXC unable to mount an NVIDIA device file LXD prepared (in the typographic quotes a title can
    # carry too); a mount of the root file system is not the GPU's
    for line in ('Failed to mount "/var/lib/lxd/devices/container/unix.gpu2.dev-nvidia-caps" on '
                 '"/usr/lib/x86_64-linux-gnu/lxc/dev/nvidia-caps"\n',
                 'conf - conf.c:mount_entry:2412 - No such file or directory - Failed to mount '
                 '\u201c/var/snap/lxd/common/lxd/devices/c1/unix.gpu.dev-nvidia0\u201d on '
                 '\u201c/usr/lib/x86_64-linux-gnu/lxc/dev/nvidia0\u201d\n'):
        t = classify(line, backoff=False)
        assert t.category == "container_runtime" and t.scores["container_runtime"] >= 3.5, (line, t.scores)
    assert classify('Failed to mount "/var/lib/lxd/storage-pools/default/containers/c1/rootfs" on '
                    '"/usr/lib/x86_64-linux-gnu/lxc/"\n', backoff=False).scores["container_runtime"] == 0
    # TensorRT's CUDA status 2 and Caffe2's CUDA check on an allocation: out of GPU memory, 4; their
    # other CUDA errors are not memory
    for line in ("TENSORRT LOG: ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)\n",
                 "Error at: caffe2/core/context_gpu.cu:343: out of memory\n"):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= 4, (line, t.scores)
    for line in ("[TensorRT] ERROR: ../rtSafe/cuda/cudaConvolutionRunner.cpp (457) - Cudnn Error in execute: 7 "
                 "(CUDNN_STATUS_MAPPING_ERROR)\n",
                 "[TensorRT] ERROR: ../rtSafe/safeRuntime.cpp (32) - Cuda Error in free: 700 (an illegal memory "
                 "access was encountered)\n",
                 "Error at: /caffe2/caffe2/core/context_gpu.cu:343: an illegal memory access was encountered\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # TGI's tensor-parallel layers and its shards against the GPUs seen: the layout, 3.5 and 3; an
    # assert on another divisor and a sentence about one process per GPU are not it
    for line, floor in (("assert in_features % self.tp_world_size == 0 AssertionError\n", 3.5),
                        ("    assert self.num_heads % self.tp_world_size == 0\n", 3.5),
                        ('AssertionError: "Each process is one gpu"\n', 3)):
        t = classify(line, backoff=False)
        assert t.category == "model_load_capacity" and t.scores["model_load_capacity"] >= floor, (line, t.scores)
    for line in ("assert in_features % 128 == 0\n",
                 "INFO: each process uses one GPU (rank=0, local_rank=0)\n"):
        assert classify(line, backoff=False).scores["model_load_capacity"] == 0, line
    # Ray's worker unable to register with its raylet, in the form that names the worker; the GCS's
    # own "Failed to register worker <id>" is not the raylet
    t = classify("Failed to register worker 01000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. "
                 "IOError: [RayletClient] Unable to register worker with raylet. No such file or directory\n",
                 backoff=False)
    assert t.category == "communication" and t.scores["communication"] >= 2.5, t.scores
    assert classify("[2024-01-01 00:00:00,000 E 10 10] gcs_worker_manager.cc:120: Failed to register worker "
                    "01000000ffffffffffffffffffffffffffffffffffffffffffffffff\n",
                    backoff=False).scores["communication"] == 0
    # jaxlib newer than jax: the environment's; with the back-off on it is not read as the driver
    line = ("RuntimeError: jaxlib version 0.3.20 is newer than and incompatible with jax version 0.3.15. Please "
            "update your jax and/or jaxlib packages.\n")
    for t in (classify(line, backoff=False), classify(line)):
        assert t.category == "other" and t.scores["other"] >= 2.5 and t.scores["driver_incompatible"] == 0, t.scores
    assert classify("jax version 0.3.15, jaxlib version 0.3.15\n", backoff=False).scores["other"] == 0


def test_version_pin_and_abi_texts_of_the_images_packages_are_the_environment_and_lookalikes_are_not():
    # the packages' own checks on one another: jax against a newer jaxlib, NumPy's ABI and C-API checks,
    # protobuf's generated code against its runtime, transformers' pins, torchaudio built for another CUDA: 3
    for line in ("RuntimeError: jaxlib version 0.4.30 is newer than and incompatible with jax version 0.4.26. Please "
                 "update your jax and/or jaxlib packages.\n",
                 "A module that was compiled using NumPy 1.x cannot be run in\n",
                 "RuntimeError: module compiled against ABI version 0x1000009 but this version of numpy is 0x2000000\n",
                 "RuntimeError: module compiled against API version 0x10 but this version of numpy is 0xf . Check the "
                 "section C-API incompatibility at the Troubleshooting ImportError section\n",
                 "RuntimeError: module was compiled against NumPy C-API version 0x13 (NumPy 2.1) but the running NumPy "
                 "has C-API version 0x12.\n",
                 "AttributeError: _ARRAY_API not found\n",
                 "TypeError: Descriptors cannot be created directly.\n",
                 "If this call came from a _pb2.py file, your generated code is out of date and must be regenerated "
                 "with protoc >= 3.19.0.\n",
                 "google.protobuf.runtime_version.VersionError: Detected mismatched Protobuf Gencode/Runtime major "
                 "versions when loading grpc_health/v1/health.proto: gencode 5.27.2 runtime 3.20.3.\n",
                 "ImportError: tokenizers>=0.14,<0.19 is required for a normal functioning of this module, but found "
                 "tokenizers==0.19.1.\n",
                 "importlib.metadata.PackageNotFoundError: The 'accelerate>=0.26.0' distribution was not found and is "
                 "required by this application.\n",
                 "RuntimeError: Detected that PyTorch and TorchAudio were compiled with different CUDA versions. "
                 "PyTorch has CUDA version 12.8 whereas TorchAudio has CUDA version 12.9.\n"):
        t = classify(line, backoff=False)
        assert t.category == "other" and t.scores["other"] >= 3, (line, t.scores)
    # NumPy's warning on a module imported twice, protobuf's warning on gencode one major release older (it
    # goes on), pip reporting a pin already met and torchaudio's deprecation warning are not failures
    for line in ("UserWarning: The NumPy module was reloaded (imported a second time). This can in some cases "
                 "result in small but subtle issues and is discouraged.\n",
                 "UserWarning: Protobuf gencode version 5.27.2 is exactly one major version older than the runtime "
                 "version 6.31.1 at grpc_health/v1/health.proto. Please update the gencode to avoid compatibility "
                 "violations in the next runtime release.\n",
                 "Requirement already satisfied: tokenizers<0.19,>=0.14 in /usr/local/lib/python3.10/site-packages "
                 "(from transformers) (0.15.2)\n",
                 "UserWarning: torchaudio._backend.set_audio_backend has been deprecated. With dispatcher enabled, "
                 "this function is no-op. You can remove the function call.\n"):
        assert classify(line, backoff=False).scores["other"] == 0, line
    # beside a CUDA warning printed on the way down, the environment's text decides
    t = classify("UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up "
                 "environment\n"
                 "A module that was compiled using NumPy 1.x cannot be run in\n"
                 "NumPy 2.0.0 as it may crash. To support both 1.x and 2.x\n", backoff=False)
    assert t.category == "other" and t.scores["container_runtime"] > 0, t.scores


def test_package_manager_solvers_that_find_no_solution_are_the_environment_and_lookalikes_are_not():
    # pip's resolver, conda's and libmamba's solvers and uv's resolver refusing the requirements
    for line, floor in (("ERROR: Cannot install vllm==0.6.3 and torch==2.5.1 because these package versions have "
                         "conflicting dependencies.\n", 3),
                        ("ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/"
                         "dependency-resolution/#dealing-with-dependency-conflicts\n", 3),
                        ("UnsatisfiableError: The following specifications were found to be incompatible with each "
                         "other:\n", 3),
                        ("The following specifications were found to be incompatible with a past\n", 3),
                        ("to be incompatible with the existing python installation in your environment:\n", 3),
                        ("  \u00d7 No solution found when resolving dependencies:\n", 3),
                        ("  \u00d7 No solution found when resolving build dependencies:\n", 3),
                        ("LibMambaUnsatisfiableError: Encountered problems while solving:\n", 2.5),
                        ("Found conflicts! Looking for incompatible packages.\n", 2)):
        t = classify(line, backoff=False)
        assert t.category == "other" and t.scores["other"] >= floor, (line, t.scores)
    # conda's announcement weighs less than its verdict, and libmamba's verdict less than a driver's own text
    assert classify("Found conflicts! Looking for incompatible packages.\n", backoff=False).scores["other"] < 2.5
    t = classify("LibMambaUnsatisfiableError: Encountered problems while solving:\n"
                 "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).\n", backoff=False)
    assert t.category == "driver_incompatible", t.scores
    # pip's warning after an install that went through, its conflict lines, conda's virtual package (the
    # driver's CUDA) and uv's summary are not the solvers refusing
    for line in ("ERROR: pip's dependency resolver does not currently take into account all the packages that are "
                 "installed. This behaviour is the source of the following dependency conflicts.\n",
                 "vllm 0.6.3 requires torch==2.4.0, but you have torch 2.5.1 which is incompatible.\n",
                 "The following specifications were found to be incompatible with your system:\n",
                 "Resolved 152 packages in 1.24s\n"):
        assert classify(line, backoff=False).scores["other"] == 0, line


def test_extension_builds_chat_templates_and_ollamas_registry_are_the_environment_and_lookalikes_are_not():
    # nvcc's host-compiler check and torch's extension builder against another toolkit, a model without a
    # chat template in transformers' and vLLM's words, Ollama's registry without the model: 3
    for line in ("/usr/local/cuda/include/crt/host_config.h:132:2: error: #error -- unsupported GNU version! gcc "
                 "versions later than 11 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used "
                 "to override this version check\n",
                 "/usr/local/cuda/include/crt/host_config.h:151:2: error: #error -- unsupported clang version! clang "
                 "version must be less than 16 and greater than 3.2 . The nvcc flag '-allow-unsupported-compiler' "
                 "can be used to override this version check\n",
                 "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile\n",
                 "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no "
                 "template argument was passed!\n",
                 "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': 'As of transformers v4.44, "
                 "default chat template is no longer allowed, so you must provide a chat template if the tokenizer "
                 "does not define one.', 'type': 'BadRequestError', 'param': None, 'code': 400}\n",
                 "Error: pull model manifest: file does not exist\n"):
        t = classify(line, backoff=False)
        assert t.category == "other" and t.scores["other"] >= 3, (line, t.scores)
    # the same header's warning, torch's minor-version note (it builds), vLLM's note on the template it
    # found and Ollama's progress line are not failures
    for line in ('/usr/local/cuda/include/crt/host_config.h:56:2: warning: #warning "crt/host_config.h is an '
                 'internal header file and must not be used directly.  Please use cuda_runtime_api.h or '
                 'cuda_runtime.h instead."\n',
                 "UserWarning: The detected CUDA version (12.4) has a minor version mismatch with the version that "
                 "was used to compile PyTorch (12.1). Most likely this shouldn't be a problem.\n",
                 "INFO 01-01 00:00:00 [hf.py:300] Detected the chat template content format to be 'string'. You can "
                 "set `--chat-template-content-format` to override this.\n",
                 "pulling manifest\n"):
        assert classify(line, backoff=False).scores["other"] == 0, line
    # a build that fails for the toolkit beside the CUDA runtime's own complaint on the way: the build decides
    t = classify("UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up "
                 "environment\n"
                 "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile\n"
                 "PyTorch (12.1). Please make sure to use the same CUDA versions.\n", backoff=False)
    assert t.category == "other" and t.scores["container_runtime"] > 0, t.scores
