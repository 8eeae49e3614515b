"""Parsers on real command output (tests/data/parsers, sources in its README)."""

import re

import pytest
from support import DATA

from k3rollout.checks import parsers
from k3rollout.checks.parsers import ParseError
from k3rollout.stages.features import prefix_counters

P = DATA / "parsers"


def test_vllm_metrics_with_deprecated_and_created_series():
    m = parsers.parse_vllm_metrics((P / "vllm-0.10-metrics.txt").read_text())
    assert m["vllm:prefix_cache_queries_total"] == 32.0
    assert m["vllm:prefix_cache_hits_total"] == 0.0
    # the _created gauges are timestamps, never counted as queries
    assert prefix_counters(m) == {"queries": 32.0, "hits": 0.0}
    only_old = {k: v for k, v in m.items() if "gpu_prefix" in k}
    assert prefix_counters(only_old) == {"queries": 32.0, "hits": 0.0}
    assert prefix_counters({"vllm:num_requests_running": 0.0}) is None
    with pytest.raises(ParseError):
        parsers.parse_vllm_metrics("vllm:prefix_cache_hits_total{engine=\"0\" 1.0\n")


def test_all_reduce_perf_current_format():
    r = parsers.parse_nccl_tests((P / "all_reduce_perf-2x8xH100.txt").read_text())
    assert len(r["rows"]) == 11
    assert r["avg_busbw"] == pytest.approx(100.952)
    assert r["largest_size"] == 33554432 and r["largest_busbw"] == pytest.approx(300.51)
    assert r["rows"][0]["busbw_inplace"] == pytest.approx(3.20)
    assert r["wrong_rows"] == 0


def test_all_reduce_perf_old_format_without_root_column():
    r = parsers.parse_nccl_tests((P / "all_reduce_perf-old-format-8xA100.txt").read_text())
    assert [row["size"] for row in r["rows"]] == [16777216, 33554432]
    assert r["avg_busbw"] == pytest.approx(142.933)
    assert r["wrong_rows"] == 0             # 5e-07 is float rounding, not a wrong result
    bad = (P / "all_reduce_perf-2x8xH100.txt").read_text().replace("300.51       0", "300.51       3")
    assert parsers.parse_nccl_tests(bad)["wrong_rows"] == 1


def test_all_reduce_perf_cut_before_the_summary_is_an_error():
    text = (P / "all_reduce_perf-2x8xH100.txt").read_text()
    with pytest.raises(ParseError):
        parsers.parse_nccl_tests(text.split("# Out of bounds")[0])


def test_nvidia_smi_table_and_query_csv():
    t = parsers.parse_smi_table((P / "nvidia-smi-570-h20.txt").read_text())
    assert t == {"smi_version": "570.124.06", "driver_version": "570.124.06", "cuda_version": "12.8",
                 "gpu_count": 2}
    f = parsers.gpu_facts(parsers.parse_gpu_query((P / "nvidia-smi-query-h200.csv").read_text()))
    assert f["driver_branch"] == 575 and f["gpu_count"] == 2 and f["gpu_mem_total_mib"] == 143771
    with pytest.raises(ParseError):
        parsers.parse_smi_table("Failed to initialize NVML: Unknown Error\n")


def test_docker_image_inspect_and_info():
    img = parsers.image_facts(parsers.parse_json((P / "vllm-openai-image-inspect.json").read_text(), "inspect"))
    assert img["cuda"] == "12.8.1"
    assert img["tags"] == ["vllm/vllm-openai:v0.15.1"] and img["digest"].startswith("vllm/vllm-openai@sha256:")
    info = parsers.docker_info_facts(parsers.parse_json((P / "docker-info.json").read_text(), "info"))
    assert info["nvidia_runtime"] and info["docker_version"] == "20.10.21" and info["default_runtime"] == "runc"
    with pytest.raises(ParseError):
        parsers.parse_json("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", "docker info")


def test_vllm_metrics_filtered_to_the_families_asked_for():
    text = (P / "vllm-0.10-metrics.txt").read_text()
    m = parsers.parse_vllm_metrics(text, only=("vllm:prefix_cache_",))
    assert m["vllm:prefix_cache_queries_total"] == 32.0
    assert not any(k.startswith(("vllm:gpu_", "vllm:num_requests")) for k in m)


@pytest.mark.parametrize("sample, state", [
    ("idle", "schedulable"), ("mixed", "schedulable"), ("allocated", "schedulable"),
    # DRAIN set while jobs still run (sinfo "draining"): not out of service
    ("mixed-drain", "draining"), ("allocated-drain", "draining"),
    # DRAIN with nothing running (sinfo "drained"), or DOWN: out of service
    ("idle-drain", "cordoned"), ("down", "cordoned"),
])
def test_scontrol_show_node_draining_is_not_drained(sample, state):
    text = (P / f"scontrol-show-node-{sample}.txt").read_text()
    assert parsers.scheduler_state("slurm", text) == state


def test_scontrol_state_flags_and_errors():
    assert parsers.scheduler_state("slurm", "   State=IDLE+COMPLETING+DRAIN ThreadsPerCore=2") == "draining"
    assert parsers.scheduler_state("slurm", "   State=IDLE+NOT_RESPONDING ThreadsPerCore=1") == "schedulable"
    assert parsers.scheduler_state("slurm", "   State=IDLE+FAIL ThreadsPerCore=1") == "cordoned"
    assert parsers.scheduler_state("slurm", "   State=ALLOCATED+FAIL ThreadsPerCore=1") == "draining"
    with pytest.raises(ParseError):
        parsers.scheduler_state("slurm", "Node gpu-09 not found\n")
    assert parsers.scheduler_state("kubernetes", "true") == "cordoned"
    assert parsers.scheduler_state("kubernetes", "") == "schedulable"
    assert parsers.scheduler_state("none", "") == "unmanaged"


@pytest.mark.parametrize("sample, idle", [
    ("idle", True), ("idle-drain", True),          # nothing runs there, drained or not
    ("mixed", False), ("allocated", False), ("mixed-drain", False), ("allocated-drain", False), ("down", False),
])
def test_scontrol_show_node_idle_is_the_base_state_idle(sample, idle):
    text = (P / f"scontrol-show-node-{sample}.txt").read_text()
    got, state = parsers.scontrol_node_idle(text)
    assert got is idle and state == re.search(r"State=(\S+)", text).group(1)


def test_scontrol_idle_with_a_job_completing_or_planned_is_not_idle():
    assert parsers.scontrol_node_idle("   State=IDLE+COMPLETING ThreadsPerCore=2") == (False, "IDLE+COMPLETING")
    assert parsers.scontrol_node_idle("   State=IDLE+PLANNED ThreadsPerCore=2") == (False, "IDLE+PLANNED")
    with pytest.raises(ParseError):
        parsers.scontrol_node_idle("Node gpu-09 not found\n")
