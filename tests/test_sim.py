"""The simulated node answers real commands with real formats, exit codes and faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import DEFAULT_GPU, DOCKER_HOST

from k3rollout.checks import parsers
from k3sim.dispatch import dispatch, init_cluster

# Ubuntu 22.04 archive versions (jammy-updates): -0ubuntu0.22.04.N, never -0ubuntu1
PKGS_580 = ["nvidia-driver-580-server-open=580.95.05-0ubuntu0.22.04.1",
            "nvidia-dkms-580-server-open=580.95.05-0ubuntu0.22.04.1",
            "nvidia-utils-580-server=580.95.05-0ubuntu0.22.04.1", "nvidia-fabricmanager-580=580.95.05-0ubuntu0.22.04.1"]


@pytest.fixture
def cluster(tmp_path):
    # Docker hosts: these tests drive the node with the docker CLI (a node under scheduler:
    # kubernetes is a containerd node with none, unless its inventory says docker)
    def make(**hosts):
        return init_cluster(tmp_path / "hosts", {n: {**DOCKER_HOST, **v} for n, v in hosts.items()})
    return make


def sh(d, *argv, stdin=None):
    return dispatch(d, list(argv), stdin)


def upgrade(d):
    assert sh(d, "apt-get", "install", "-y", *PKGS_580).rc == 0
    assert sh(d, "reboot").rc == 0
    deadline = time.time() + 5
    while sh(d, "true").unreachable and time.time() < deadline:
        time.sleep(0.02)


def test_nvidia_smi_formats_parse(cluster):
    d = cluster(n1={})["n1"]
    table = sh(d, "nvidia-smi")
    assert table.rc == 0
    assert parsers.parse_smi_table(table.stdout) == {"smi_version": "575.57.08", "driver_version": "575.57.08",
                                                    "cuda_version": "12.9", "gpu_count": 8}
    csv = sh(d, *parsers.GPU_QUERY_ARGV)
    f = parsers.gpu_facts(parsers.parse_gpu_query(csv.stdout))
    assert (f["gpu_count"], f["gpu_model"], f["driver_branch"], f["gpu_mem_total_mib"]) == (8, "NVIDIA H200", 575,
                                                                                            143771)
    with_header = sh(d, "nvidia-smi", "--query-gpu=index,memory.total", "--format=csv")
    assert with_header.stdout.splitlines()[:2] == ["index, memory.total [MiB]", "0, 143771 MiB"]
    bad = sh(d, "nvidia-smi", "--query-gpu=bogus", "--format=csv")
    assert bad.rc == 2 and 'Field "bogus" is not a valid field to query.' in bad.stderr


def test_r575_host_refuses_the_cu130_image_like_nvidia_container_toolkit(cluster):
    d = cluster(n1={})["n1"]
    r = sh(d, "docker", "run", "--rm", "--gpus", "all", "--entrypoint", "nvidia-smi", "vllm/vllm-openai:kimi-k3")
    assert r.rc == 125
    assert "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0" in r.stderr
    logs = sh(d, "docker", "logs", "kimi-k3")
    assert "Error 35: CUDA driver version is insufficient for CUDA runtime version" in logs.stderr


def test_upgrade_shows_nvml_mismatch_until_reboot_then_cuda_13(cluster):
    d = cluster(n1={})["n1"]
    assert sh(d, "apt-get", "install", "-y", *PKGS_580).rc == 0
    mismatch = sh(d, "nvidia-smi")
    assert mismatch.rc == 18 and "Driver/library version mismatch" in mismatch.stdout
    upgrade(d)
    table = parsers.parse_smi_table(sh(d, "nvidia-smi").stdout)
    assert (table["driver_version"], table["cuda_version"]) == ("580.95.05", "13.0")
    init = sh(d, "docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", "vllm/vllm-openai:kimi-k3",
              "-c", "import torch; torch.cuda.init()")
    assert init.rc == 0 and "device_count=8" in init.stdout


def test_driver_install_fails_with_the_dkms_error_and_exit_100(cluster):
    d = cluster(n1={"sim_faults": ["driver_install_fails"]})["n1"]
    r = sh(d, "apt-get", "install", "-y", *PKGS_580)
    assert r.rc == 100
    assert "Bad return status for module build on kernel" in r.stdout
    assert "E: Sub-process /usr/bin/dpkg returned an error code (1)" in r.stderr
    assert sh(d, "modinfo", "-F", "version", "nvidia").rc == 1


def test_no_boot_after_upgrade_leaves_the_host_unreachable(cluster):
    d = cluster(n1={"sim_faults": ["no_boot_after_upgrade"], "sim_reboot_s": 0.0})["n1"]
    sh(d, "apt-get", "install", "-y", *PKGS_580)
    sh(d, "reboot")
    time.sleep(0.05)
    r = sh(d, "nvidia-smi")
    assert r.unreachable and r.rc == 255 and "No route to host" in r.stderr


def test_cuda_init_fails_with_error_802_on_a_new_driver(cluster):
    d = cluster(n1={"sim_faults": ["cuda_init_fails"]})["n1"]
    upgrade(d)
    r = sh(d, "docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", "vllm/vllm-openai:kimi-k3",
           "-c", "import torch; torch.cuda.init()")
    assert r.rc == 1 and "error 802" in r.stderr
    # the fabric manager runs on the driver's version: the GPUs' fabric registration is what fails
    assert sh(d, "systemctl", "is-active", "nvidia-fabricmanager").stdout == "active\n"


def test_container_runtime_missing(cluster):
    d = cluster(n1={"sim_faults": ["container_runtime_missing"]})["n1"]
    r = sh(d, "docker", "run", "--rm", "--gpus", "all", "--entrypoint", "nvidia-smi", "vllm/vllm-openai:v0.11.0")
    assert r.rc == 125 and 'could not select device driver "" with capabilities: [[gpu]]' in r.stderr
    info = json.loads(sh(d, "docker", "info", "--format", "{{json .}}").stdout)
    assert "nvidia" not in info["Runtimes"]


def start_server(d, *flags):
    r = sh(d, "docker", "run", "-d", "--name", "t", "--gpus", "all", "vllm/vllm-openai:kimi-k3", "moonshotai/Kimi-K3",
           "--tensor-parallel-size", "8", *flags)
    assert r.rc == 0


def chat(d, body):
    r = sh(d, "curl", "-sS", "-d", "@-", "http://127.0.0.1:8000/v1/chat/completions", stdin=json.dumps(body).encode())
    return json.loads(r.stdout)


def hits(d):
    m = parsers.parse_vllm_metrics(sh(d, "curl", "-s", "http://127.0.0.1:8000/metrics").stdout)
    return m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"]


# two of K3's 1,536-token cache blocks and a tail: K3 recomputes the last matched block, so a
# shorter shared prefix scores no hits at all
LONG = {"model": "moonshotai/Kimi-K3",
        "messages": [{"role": "system", "content": " ".join(f"w{i}" for i in range(2 * 1536 + 768))},
                     {"role": "user", "content": "q"}]}


@pytest.mark.parametrize("faults,flags,expect_hits", [
    ([], ["--enable-prefix-caching"], True),
    ([], [], True),                                    # vLLM 0.33: on by default, Kimi K3 included
    ([], ["--no-enable-prefix-caching"], False),
    ([], ["--no-enable-prefix-caching", "--enable-prefix-caching"], True),     # the last of the pair wins
    (["prefix_cache_miss"], ["--enable-prefix-caching"], False),
])
def test_prefix_cache_hits_only_when_enabled_and_healthy(cluster, faults, flags, expect_hits):
    d = cluster(n1={**DEFAULT_GPU, "sim_faults": faults})["n1"]   # GPUs that hold K3 on one node
    upgrade(d)
    start_server(d, *flags)
    chat(d, LONG)
    h1, q1 = hits(d)
    chat(d, LONG)
    h2, q2 = hits(d)
    assert q2 > q1 > 0
    assert (h2 > h1) == expect_hits


def test_tool_calls_need_the_auto_tool_choice_flags(cluster):
    d = cluster(n1=dict(DEFAULT_GPU))["n1"]
    upgrade(d)
    start_server(d)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                        "properties": {"x": {"type": "string"}},
                                                                        "required": ["x"]}}}
    err = chat(d, {**LONG, "tools": [tool]})
    assert err["error"]["code"] == 400 and "--enable-auto-tool-choice" in err["error"]["message"]
    sh(d, "docker", "rm", "-f", "t")
    start_server(d, "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3")
    ok = chat(d, {**LONG, "tools": [tool]})
    call = ok["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "f" and json.loads(call["function"]["arguments"]) == {"x": "Beijing"}


def test_vllm_oom_kills_the_server_with_a_real_oom_log(cluster):
    d = cluster(n1={"sim_faults": ["vllm_oom"]})["n1"]
    upgrade(d)
    start_server(d)
    st = sh(d, "docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "t")
    assert st.stdout.strip() == "exited 1"
    logs = sh(d, "docker", "logs", "t").stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in logs
    # vLLM 0.33's own words before PyTorch's (vllm/v1/worker/gpu_model_runner.py)
    assert "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization" in logs
    assert sh(d, "curl", "-sf", "http://127.0.0.1:8000/health").rc == 7


def test_k3_weights_that_do_not_fit_one_node_stop_vllm_with_its_own_words(cluster):
    """One fit rule for every launch (sim/vllm.py): K3's 1.5 TB over TP8 is 174.6 GiB a GPU.
    An H200 (141 GiB) runs out of memory while the weights load; a B300 (268 GiB) holds
    them, but at --gpu-memory-utilization 0.6 (160.8 GiB) leaves no room for the KV cache;
    at vLLM's default 0.92 it serves. Triage reads both failures as capacity."""
    from k3rollout.checks.triage import classify

    h200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141}
    hosts = cluster(h=h200, b=dict(DEFAULT_GPU), c=dict(DEFAULT_GPU))
    for d in hosts.values():
        upgrade(d)
    start_server(hosts["h"])
    start_server(hosts["b"], "--gpu-memory-utilization", "0.6")
    start_server(hosts["c"])
    for name, line in (("h", "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization "
                              "to free memory for weights, increasing --tensor-parallel-size, or using "
                              "--quantization."),
                       ("b", "ValueError: No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine")):
        d = hosts[name]
        st = sh(d, "docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "t")
        assert st.stdout.strip() == "exited 1", name
        logs = sh(d, "docker", "logs", "t").stderr
        assert line in logs and "Application startup complete" not in logs
        assert logs.rstrip().endswith("RuntimeError: Engine core initialization failed. See root cause above. "
                                      "Failed core proc(s): {'EngineCore': 1}")
        assert classify(logs, stage="vllm_smoke", cuda_init_ok=True).category == "model_load_capacity"
        assert sh(d, "curl", "-sf", "http://127.0.0.1:8000/health").rc == 7
    assert "is allocated by PyTorch" in sh(hosts["h"], "docker", "logs", "t").stderr
    assert sh(hosts["c"], "curl", "-sf", "http://127.0.0.1:8000/health").rc == 0


def test_nccl_broken_fails_across_nodes_but_not_inside_one(cluster):
    dirs = cluster(a={}, b={"sim_faults": ["nccl_broken"]})
    local = sh(dirs["b"], "all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "8")
    assert local.rc == 0 and parsers.parse_nccl_tests(local.stdout)["largest_busbw"] > 400
    multi = sh(dirs["a"], "mpirun", "-np", "16", "-H", "a:8,b:8", "all_reduce_perf", "-b", "8", "-e", "1G", "-g", "1")
    assert multi.rc == 1 and "NCCL WARN NET/IB : Got completion from peer" in multi.stderr


def test_ssh_drops_runs_the_install_but_loses_the_connection_once(cluster):
    d = cluster(n1={"sim_faults": ["ssh_drops"]})["n1"]
    first = sh(d, "apt-get", "install", "-y", *PKGS_580)
    assert first.dropped
    pk = parsers.parse_packages(sh(d, *parsers.DPKG_ARGV).stdout)
    assert {p["name"]: p["version"] for p in pk}["nvidia-utils-580-server"] == "580.95.05-0ubuntu0.22.04.1"
    assert not sh(d, "apt-get", "install", "-y", *PKGS_580).dropped


def test_slow_reboot_keeps_the_host_down_longer(cluster):
    # wide margins: the assertion is about down time, not about how busy the machine is
    d = cluster(n1={"sim_faults": ["slow_reboot"], "sim_slow_reboot_s": 3.0, "sim_reboot_s": 0.05})["n1"]
    t = time.monotonic()
    sh(d, "reboot")
    assert sh(d, "true").unreachable
    while sh(d, "true").unreachable:
        assert time.monotonic() - t < 30, "the host never came back"
        time.sleep(0.1)
    assert time.monotonic() - t >= 3.0        # down for the slow reboot, not the normal 0.05 s


def test_sim_commands_run_as_plain_executables(cluster, tmp_path):
    d = cluster(n1={})["n1"]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "K3SIM_STATE": str(d), "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "k3sim", "nvidia-smi", "--query-gpu=driver_version",
                        "--format=csv,noheader"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.splitlines() == ["575.57.08"] * 8
    link = tmp_path / "bin" / "nvidia-smi"
    link.parent.mkdir()
    link.write_text(f"#!{sys.executable}\nimport sys\nfrom k3sim.__main__ import main\nsys.exit(main())\n")
    link.chmod(0o755)
    p = subprocess.run([str(link), "-L"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.startswith("GPU 0: NVIDIA H200")
    missing = subprocess.run([sys.executable, "-m", "k3sim", "nvidia-smi"], capture_output=True, text=True,
                             env={k: v for k, v in env.items() if k != "K3SIM_STATE"})
    assert missing.returncode == 2 and "K3SIM_STATE" in missing.stderr


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "replace-fallback"])
def test_state_changes_are_atomic_and_free_no_inode(cluster, monkeypatch, exchange):
    """A state change swaps the new file in whole. With RENAME_EXCHANGE the old file is kept
    as the next write's scratch file, so a host's state changes free no inode (on ext4
    without a journal, each freed inode made every later file creation dearer); without
    it, the new file replaces the old one."""
    from k3sim import state as st

    if not exchange:
        monkeypatch.setattr(st, "_RENAMEAT2", None)
    elif st._RENAMEAT2 is None:
        pytest.skip("no renameat2 in this C library")
    d = cluster(**{"gpu-x": {}})["gpu-x"]
    seen = []
    for i in range(4):
        assert sh(d, "kubectl", "cordon" if i % 2 == 0 else "uncordon", "gpu-x").rc == 0
        seen.append(json.loads((d / "state.json").read_text())["scheduler"]["state"])
        scratch = d / "state.json.tmp"
        if exchange:
            # the previous state, swapped out, not deleted
            assert json.loads(scratch.read_text())["scheduler"]["state"] == ("schedulable" if i % 2 == 0
                                                                             else "cordoned")
        else:
            assert not scratch.exists()
    assert seen == ["cordoned", "schedulable"] * 2
