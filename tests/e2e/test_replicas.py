"""Replica planning from a model profile: layout arithmetic, grouping, batches, refusals."""

import json

import pytest
from support import DOCKER_HOST, commands, sim_state, write_inventory, write_playbook

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model import load_inventory, load_playbook
from k3rollout.model.profile import load_profile
from k3rollout.plan import make_plan
from k3rollout.plan.replicas import ReplicaError, choose_layout, node_hardware
from k3rollout.resources import shipped

K3 = shipped("playbooks", "profiles", "kimi-k3.yml")
# sim_peer_mapping_override: the node's modprobe.d sets the module options DeepEP needs
H200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141, "sim_peer_mapping_override": True}
B300 = {"k3_gpu_model": "NVIDIA B300", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268}
# vLLM's data-parallel expert-parallel form on two H200 nodes: with data parallel above 1 vLLM
# builds an all-to-all manager (ParallelConfig.use_all2all), so DeepEP runs; the profile's own
# H200 layout (TP16/EP16, data parallel 1) builds none
DP_EP = {"layouts": [{"name": "tp8-dp2-ep16", "tp": 8, "dp": 2, "ep": 16, "min_gpus": 16, "hardware": ["H200"],
                      "source": "vLLM's --data-parallel-size form with --enable-expert-parallel"}]}


def inv(tmp_path, hosts):
    return load_inventory(write_inventory(tmp_path / "inv", hosts))


def k3_plan(tmp_path, hosts, **over):
    pb = load_playbook(write_playbook(tmp_path / "pb.yml", profile="kimi-k3", **over))
    return make_plan(pb, inv(tmp_path, hosts))


def test_playbook_without_profile_plans_as_before(tmp_path):
    hosts = {f"gpu-{i:02d}": dict(H200) for i in range(1, 5)}
    # (the test helper sizes node-level prefix proofs for the simulated K3; without that, and
    # without a profile, nothing sets the block)
    pb = load_playbook(write_playbook(tmp_path / "pb.yml", stage_with={"features": {"prefix_block_tokens": None}}))
    assert pb.profile is None
    assert next(s for s in pb.stages if s.stage == "features").typed_params().prefix_block_tokens is None
    plan = make_plan(pb, inv(tmp_path, hosts))
    assert plan.unit == "node" and plan.replicas == [] and plan.profile == {}
    assert [b.nodes for b in plan.batches][0] == ["gpu-01"]


# ---- layout arithmetic ----

@pytest.mark.parametrize("gpu,mem,layout,nnodes", [
    ("NVIDIA H200", 141, "tp16-ep16", 2),      # 8 x 141 x 0.95 = 1071.6 < 1564.6; 16 GPUs hold it
    ("NVIDIA B300", 268, "tp8", 1),            # 8 x 268 x 0.95 = 2036.8
    ("NVIDIA B200", 167, "tp8-pp2", 2),
    ("NVIDIA H100 80GB HBM3", 74.5, "tp8-pp4", 4),
])
def test_smallest_layout_that_holds_k3(tmp_path, gpu, mem, layout, nnodes):
    i = inv(tmp_path, {"n1": {"k3_gpu_model": gpu, "k3_gpu_count": 8, "k3_gpu_mem_gib": mem}})
    s = choose_layout(load_profile(K3), node_hardware("n1", i))
    assert (s.layout.name, s.nnodes, s.fits) == (layout, nnodes, True)


def test_hardware_from_baseline_facts_when_inventory_is_silent(tmp_path):
    i = load_inventory(write_inventory(tmp_path / "inv", {"n1": {}}, default_gpu=None))
    hw = node_hardware("n1", i, {"gpu_model": "NVIDIA H200", "gpu_count": 8, "gpu_mem_total_mib": 143771})
    assert (hw.gpu, hw.count, round(hw.mem_gib, 1), hw.source) == ("NVIDIA H200", 8, 140.4, "baseline facts")
    with pytest.raises(InputError, match="host n1: GPU model, count and memory unknown"):
        node_hardware("n1", i)


# ---- planning in replicas ----

def test_h200_rack_plans_two_node_replicas_and_batches_take_whole_replicas(tmp_path):
    hosts = {f"a{i:02d}": {**H200, "rack": "a"} for i in range(1, 9)}
    plan = k3_plan(tmp_path, hosts, serial=[1, 2], min_serving="50%", max_fail_percentage=0)
    assert plan.unit == "replica"
    assert [r["nodes"] for r in plan.replicas] == [["a01", "a02"], ["a03", "a04"], ["a05", "a06"], ["a07", "a08"]]
    r = plan.replicas[0]
    assert r["layout"] == {"name": "tp16-ep16", "tp": 16, "pp": 1, "dp": 1, "ep": 16, "nnodes": 2}
    # TP16/EP16 with data parallel 1: vLLM builds no all-to-all manager, so no backend is chosen
    assert r["gpu_mem_gib"] == 2256 and r["fits"] is True and r["all2all_backend"] is None
    assert "SGLang" in r["layout_source"] and "builds no all-to-all manager" in r["layout_source"]
    # serial [1, 2] counts replicas; min_serving 50% of 4 replicas keeps 2 serving
    assert [b.nodes for b in plan.batches] == [["a01", "a02"], ["a03", "a04", "a05", "a06"], ["a07", "a08"]]
    assert plan.min_serving == 2 and plan.batches[1].serving_during == 2


def test_replicas_do_not_cross_racks_and_explicit_serving_group_wins(tmp_path):
    hosts = {"a01": {**H200, "rack": "a"}, "a02": {**H200, "rack": "a"}, "a03": {**H200, "rack": "a"},
             "b01": {**H200, "rack": "b", "serving_group": "x"}, "a04": {**H200, "rack": "a"},
             "b02": {**H200, "rack": "b", "serving_group": "x"},
             "c01": {**B300, "rack": "c"}, "c02": {**B300, "rack": "c"}}
    plan = k3_plan(tmp_path, hosts, serial=1, min_serving=0)
    got = {r["id"]: r["nodes"] for r in plan.replicas}
    assert got == {"rack-a/1": ["a01", "a02"], "rack-a/2": ["a03", "a04"], "x": ["b01", "b02"],
                   "rack-c/1": ["c01"], "rack-c/2": ["c02"]}
    assert {r["id"]: r["layout"]["name"] for r in plan.replicas}["rack-c/1"] == "tp8"


def test_two_kinds_of_gpu_without_a_rack_each_keep_their_replicas(tmp_path):
    """Nodes naming no rack or nvlink_domain are grouped in inventory order, one kind of GPU at
    a time; each kind's replicas carry its GPU in their id (both were "nodes/1", and the H200
    replica vanished from the plan behind the B300 one)."""
    hosts = {"a01": H200, "a02": H200, "b01": B300, "b02": B300}
    plan = k3_plan(tmp_path, hosts, serial=1, min_serving=0)
    got = {r["id"]: r["nodes"] for r in plan.replicas}
    assert got == {"nodes-NVIDIA-H200/1": ["a01", "a02"], "nodes-NVIDIA-B300/1": ["b01"],
                   "nodes-NVIDIA-B300/2": ["b02"]}
    assert sorted(n for b in plan.batches for n in b.nodes) == ["a01", "a02", "b01", "b02"]


def test_single_node_tp8_on_h200_is_refused_with_the_arithmetic(tmp_path, capsys):
    hosts = {f"a{i:02d}": {**H200, "rack": "a"} for i in range(1, 5)}
    with pytest.raises(ReplicaError) as e:
        k3_plan(tmp_path, hosts, profile_overrides={"layout": "tp8"})
    msg = str(e.value)
    assert "layout tp8 = 8 x NVIDIA H200 x 141 GiB x 0.95 usable = 1071.6 GiB < 1564.6 GiB" in msg
    assert "smallest layout that holds it on NVIDIA H200 is tp16-ep16" in msg
    assert "4 of 4 replica(s) cannot serve" in msg
    # the CLI refuses it: exit 2 from validate and plan
    pb = tmp_path / "pb.yml"
    invp = tmp_path / "inv" / "hosts.yml"
    assert main(["validate", str(pb), "-i", str(invp)]) == 2
    assert main(["plan", str(pb), "-i", str(invp), "--json"]) == 2
    assert "1071.6 GiB < 1564.6 GiB" in capsys.readouterr().err


def test_leftover_node_and_wrong_explicit_group_are_refused(tmp_path):
    hosts = {f"a{i:02d}": {**H200, "rack": "a"} for i in range(1, 4)}
    with pytest.raises(ReplicaError, match=r"needs 2 nodes of 8 x NVIDIA H200 but only 1 remain in rack a \(a03\)"):
        k3_plan(tmp_path, hosts)
    hosts = {"a01": {**H200, "serving_group": "g"}, "a02": {**B300, "serving_group": "g"}}
    with pytest.raises(InputError, match="serving_group g: its nodes have different GPUs"):
        k3_plan(tmp_path, hosts)


def test_plan_json_and_markdown_show_replicas(tmp_path, capsys):
    hosts = {f"a{i:02d}": {**H200, "rack": "a"} for i in range(1, 5)}
    k3_plan(tmp_path, hosts, serial=1, min_serving=0)
    pb, invp = tmp_path / "pb.yml", tmp_path / "inv" / "hosts.yml"
    assert main(["plan", str(pb), "-i", str(invp), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["nodes"], r["layout"]["nnodes"], r["fits"]) for r in out["replicas"]] == [
        ("rack-a/1", ["a01", "a02"], 2, True), ("rack-a/2", ["a03", "a04"], 2, True)]
    assert set(out["replicas"][0]) >= {"id", "nodes", "layout", "gpu_mem_gib", "fits"}
    assert out["profile"]["name"] == "kimi-k3"
    assert main(["validate", str(pb), "-i", str(invp)]) == 0
    assert "2 replicas of moonshotai/Kimi-K3 (profile kimi-k3)" in capsys.readouterr().out
    assert main(["plan", str(pb), "-i", str(invp), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "## Replicas" in md and "tp16-ep16" in md and "rack-a/2" in md
    assert main(["plan", str(pb), "-i", str(invp)]) == 0
    text = capsys.readouterr().out
    assert "replica rack-a/1: a01, a02  tp16-ep16" in text


def test_each_replica_carries_its_multi_node_launch(tmp_path):
    hosts = {"a01": {**H200, "rack": "a", "ansible_host": "10.0.1.11"}, "a02": {**H200, "rack": "a"},
             "c01": {**B300, "rack": "c"}}
    plan = k3_plan(tmp_path, hosts, serial=1, min_serving=0)
    h200, b300 = plan.replicas
    head, worker = h200["launch"]
    assert (head["node"], head["rank"], head["head"]) == ("a01", 0, True)
    for want in (["--tensor-parallel-size", "16"], ["--nnodes", "2"], ["--master-addr", "10.0.1.11"],
                 ["--moe-backend", "marlin"]):
        i = head["args"].index(want[0])
        assert head["args"][i:i + 2] == want and want[0] in worker["args"]
    assert "--enable-expert-parallel" in head["args"] and "--headless" not in head["args"]
    assert "--all2all-backend" not in head["args"] + worker["args"]       # vLLM would build no manager for it
    assert worker["args"][worker["args"].index("--node-rank") + 1] == "1" and "--headless" in worker["args"]
    assert head["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    (only,) = b300["launch"]
    assert "--nnodes" not in only["args"] and "--headless" not in only["args"]
    assert "fastsafetensors" in only["args"] and "--enable-prefix-caching" in only["args"]
    assert only["args"][only["args"].index("--tensor-parallel-size") + 1] == "8"


def test_a_data_parallel_expert_layout_passes_its_all2all_backend(tmp_path):
    hosts = {"a01": {**H200, "rack": "a"}, "a02": {**H200, "rack": "a"}}
    (rep,) = k3_plan(tmp_path, hosts, serial=1, min_serving=0, profile_overrides=DP_EP).replicas
    assert rep["layout"]["dp"] == 2 and rep["all2all_backend"] == "deepep_v2"
    head, worker = rep["launch"]
    for args in (head["args"], worker["args"]):
        assert args[args.index("--all2all-backend") + 1] == "deepep_v2" and "--enable-expert-parallel" in args
    assert worker["args"][worker["args"].index("--data-parallel-start-rank") + 1] == "1"


# ---- on the simulator ----

def test_k3_on_one_h200_node_fails_smoke_with_vllms_oom_and_the_profiles_two_node_replica_serves(tmp_path):
    """Without the profile each H200 node serves K3 alone (TP8): 174.6 GiB of weights a GPU
    against 141 GiB, so vLLM runs out of memory loading them, and the smoke stage fails on
    vLLM's own words, triaged as capacity. The profile serves the same two nodes as one
    TP16/EP16 replica (87.3 GiB a GPU), which passes."""
    from support import journal, result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 3)}
    invp = write_inventory(tmp_path / "inv", hosts, DOCKER_HOST)
    alone = tmp_path / "alone"
    # every node is tried (max_fail_percentage 100): the run completes, with both rolled back
    pb = write_playbook(tmp_path / "nodes.yml", serial=1, max_fail_percentage=100, min_serving=0)
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(alone)]) == 0
    r = result(alone)
    assert [b["status"] for b in r["batches"]] == ["failed", "failed"]
    assert {n: (v["final"], v["failed_stage"], v["triage"]) for n, v in r["nodes"].items()} == {
        n: ("rolled_back", "vllm_smoke", "model_load_capacity") for n in hosts}
    for n in hosts:
        tri = next(e for e in journal(alone) if e["type"] == "triage" and e["node"] == n)
        assert any("Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
                   "memory for weights, increasing --tensor-parallel-size, or using --quantization." in e
                   for e in tri["evidence"]), tri["evidence"]
    replica = tmp_path / "replica"
    pb = write_playbook(tmp_path / "k3.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0)
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(replica)]) == 0
    r = result(replica)
    assert {n: (v["final"], v["replica"]) for n, v in r["nodes"].items()} == {n: ("upgraded", "rack-a/1") for n in hosts}
    assert r["replicas"]["rack-a/1"]["layout"] == {"tp": 16, "pp": 1, "dp": 1, "ep": 16, "nnodes": 2}
    smoke = next(e for e in journal(replica) if e["type"] == "stage_done" and e["node"] == "gpu-01"
                 and e["stage"] == "vllm_smoke")
    assert smoke["passed"] is True


def test_rollout_in_replicas_counts_max_fail_percentage_in_replicas(tmp_path):
    from support import result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 9)}
    hosts["gpu-02"]["sim_faults"] = ["prefix_cache_miss"]
    invp = write_inventory(tmp_path / "inv", hosts)
    # batch 1 takes replicas rack-a/1 and rack-a/2 (4 nodes); gpu-02 fails: 1 of 4 nodes is 25%,
    # but 1 of 2 replicas is 50%, above 40%: the rollout halts before batch 2
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=2, max_fail_percentage=40, min_serving=0)
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)])
    r = result(run_dir)
    assert code == 1 and r["status"] == "halted"
    assert r["nodes"]["gpu-02"]["final"] == "rolled_back"
    assert r["nodes"]["gpu-05"]["final"] == "pending"


def test_a_failed_node_takes_its_whole_replica_back_and_is_named(tmp_path):
    from support import journal, result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 5)}
    hosts["gpu-02"]["sim_faults"] = ["cuda_init_fails"]
    invp = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=2, max_fail_percentage=50, min_serving=0)
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)])
    r = result(run_dir)
    assert code == 0 and r["status"] == "completed"
    assert r["nodes"]["gpu-02"]["final"] == "rolled_back" and r["nodes"]["gpu-02"]["failed_stage"] == "cuda_check"
    # gpu-01 passed every node stage of its own, but its replica cannot launch without gpu-02
    assert r["nodes"]["gpu-01"]["final"] == "rolled_back"
    assert r["nodes"]["gpu-01"]["reason"].startswith("replica rack-a/1 is not serving: gpu-02 failed at cuda_check")
    assert {r["nodes"][n]["final"] for n in ("gpu-03", "gpu-04")} == {"upgraded"}
    # its triage is gpu-02's (CUDA init failed: the container path), naming gpu-02, not "other"
    # for the replica's refusal to launch
    assert (r["nodes"]["gpu-02"]["triage"], r["nodes"]["gpu-01"]["triage"]) == ("container_runtime",) * 2
    triage = {e["node"]: e for e in journal(run_dir) if e["type"] == "triage"}
    assert triage["gpu-01"]["caused_by"] == "gpu-02" and "caused_by" not in triage["gpu-02"]
    assert triage["gpu-01"]["reasons"][0] == "caused by gpu-02: replica rack-a/1 is rolled back whole"
    assert triage["gpu-01"]["evidence"] == triage["gpu-02"]["evidence"] != []
    assert triage["gpu-01"]["next_steps"] == triage["gpu-02"]["next_steps"]
    assert "caused by gpu-02: replica rack-a/1 is rolled back whole" in (run_dir / "report.md").read_text()
    # result.json names each node's replica, and what became of each replica and why
    assert {n: r["nodes"][n]["replica"] for n in r["nodes"]} == {
        "gpu-01": "rack-a/1", "gpu-02": "rack-a/1", "gpu-03": "rack-a/2", "gpu-04": "rack-a/2"}
    assert r["replicas"] == {
        "rack-a/1": {"nodes": ["gpu-01", "gpu-02"], "layout": {"tp": 16, "pp": 1, "dp": 1, "ep": 16, "nnodes": 2},
                     "final": "rolled_back", "caused_by": "gpu-02"},
        "rack-a/2": {"nodes": ["gpu-03", "gpu-04"], "layout": {"tp": 16, "pp": 1, "dp": 1, "ep": 16, "nnodes": 2},
                     "final": "serving", "caused_by": None}}
    # no server was launched for the broken replica, and gpu-01 never returned to service
    ran = [e for e in journal(run_dir) if e.get("node") == "gpu-01" and e["type"] == "stage_done"]
    assert [e["stage"] for e in ran][-1] == "vllm_smoke" and ran[-1]["passed"] is False
    assert not any(c.startswith("docker run") and "k3rollout-smoke" in c for c in commands(run_dir, "gpu-01"))
    assert any(e["type"] == "rollback_done" and e["node"] == "gpu-01" and e["ok"] for e in journal(run_dir))
    # the prefix proof was sized from the server's 1,536-token block (vllm:cache_config_info), in
    # tokens the server counted: two full blocks plus a tail, with fewer words than tokens
    proof = next(e["facts"]["prefix_cache"] for e in journal(run_dir)
                 if e["type"] == "facts" and e["node"] == "gpu-03" and "prefix_cache" in e.get("facts", {}))
    assert proof["ok"] and (proof["block_tokens"], proof["block_source"]) == (1536, "server")
    assert 2 * 1536 + 768 <= proof["prefix_tokens"] <= 1.05 * (2 * 1536 + 768)
    assert proof["prefix_words"] < proof["prefix_tokens"]
    assert proof["readings"][0]["prompt_tokens"] > 2 * 1536
    # the profile turns on the agent flow: a 3-call tool loop in both modes, on the replica's head
    flow = next(e["facts"]["agent_flow"] for e in journal(run_dir)
                if e["type"] == "facts" and e["node"] == "gpu-04" and "agent_flow" in e.get("facts", {}))
    assert {m: (v["tool_turns"], v["schema_accuracy"], v["passed"]) for m, v in flow.items()} == {
        "non_stream": (3, 1.0, True), "stream": (3, 1.0, True)}


def test_a_node_whose_replica_peer_fails_after_its_own_stages_carries_the_peers_triage(tmp_path):
    from support import journal, result

    # gpu-02 has no RDMA device: the replica served, then the cross-node test fails gpu-02 alone;
    # gpu-01 passed every stage and is rolled back at the replica check before its uncordon
    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 3)}
    hosts["gpu-02"]["sim_faults"] = ["rdma_missing"]
    invp = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {n: (v["final"], v["failed_stage"], v["triage"]) for n, v in r["nodes"].items()} == {
        "gpu-01": ("rolled_back", "uncordon", "communication"), "gpu-02": ("rolled_back", "multinode", "communication")}
    tri = next(e for e in journal(run_dir) if e["type"] == "triage" and e["node"] == "gpu-01")
    assert (tri["stage"], tri["caused_by"]) == ("uncordon", "gpu-02")
    assert tri["reasons"][0] == "caused by gpu-02: replica rack-a/1 is rolled back whole"


def test_a_multi_node_replica_is_served_once_from_its_head(tmp_path):
    from support import journal, result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 3)}
    hosts["gpu-02"]["sim_faults"] = ["prefix_cache_miss"]       # a worker's fault is the replica's
    invp = write_inventory(tmp_path / "inv", hosts, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0,
                        stage_with={"features": {"context_tokens": 65536}})
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)])
    r = result(run_dir)
    assert code == 0
    # the smoke stage served the replica: head and headless worker, health and requests on the head
    runs = {h: [c for c in commands(run_dir, h) if c.startswith("docker run") and "k3rollout-smoke" in c]
            for h in ("gpu-01", "gpu-02")}
    assert len(runs["gpu-01"]) == 1 and len(runs["gpu-02"]) == 1
    assert "--nnodes 2 --node-rank 0 --master-addr gpu-01" in runs["gpu-01"][0] and "--headless" not in runs["gpu-01"][0]
    assert "--nnodes 2 --node-rank 1 --master-addr gpu-01 --headless" in runs["gpu-02"][0]
    assert "VLLM_ENGINE_READY_TIMEOUT_S=3600" in runs["gpu-02"][0] and "--tensor-parallel-size 16" in runs["gpu-02"][0]
    # Hopper's launch turns prefix caching off (0.33 caches by default): the smoke stage keeps
    # that; the features stage's explicit --enable-prefix-caching replaces the flag
    assert "--no-enable-prefix-caching" in runs["gpu-01"][0]
    (feat_run,) = [c for c in commands(run_dir, "gpu-01") if c.startswith("docker run") and "k3rollout-features" in c]
    assert "--no-enable-prefix-caching" not in feat_run and "--enable-prefix-caching" in feat_run
    facts = {(e["node"], e["stage"]): e["facts"] for e in journal(run_dir) if e["type"] == "facts"}
    smoke = facts[("gpu-02", "vllm_smoke")]
    assert smoke["smoke_request_ok"] and smoke["replica"] == "rack-a/1" and smoke["replica_role"] == "worker"
    assert smoke["stopped_serving"] == ["vllm-serving"] and "--headless" in smoke["smoke_args"]
    assert smoke["replica_ready_timeout_s"] == 3600
    # TP16/EP16 with data parallel 1: vLLM builds no all-to-all manager and logs none; the gate
    # does not ask for one (it did, and failed a healthy replica)
    assert smoke["all2all_built"] is False and "all2all_manager" not in smoke
    # the features ran once for the replica, so the worker's cache fault failed the replica: both roll back
    for n in ("gpu-01", "gpu-02"):
        assert (r["nodes"][n]["failed_stage"], r["nodes"][n]["final"]) == ("features", "rolled_back")
        assert "no prefix-cache hits" in r["nodes"][n]["reason"]
    assert sum("k3rollout-features" in c and c.startswith("docker run") for c in commands(run_dir, "gpu-02")) == 1
    # the 64k target context of the stage is capped to what Hopper's launch serves (32k), and recorded
    feat = facts[("gpu-01", "features")]
    assert feat["context_tokens_capped"] == {"asked": 65536, "max_model_len": 32768}
    ctx_row = next(row for row in feat["ladder"] if row["step"] == "context")
    assert ctx_row["passed"] and (ctx_row["target_tokens"], ctx_row["limit"]) == (32768, "max_model_len")
    assert ctx_row["prompt_tokens"] <= 32768 - 16


def test_replica_that_does_not_come_up_names_the_node_that_caused_it(tmp_path):
    from support import journal, result

    # the inventory says 141 GiB H200s; gpu-04 really has 80 GiB GPUs: the plan fits, loading does not
    k3 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141}
    hosts = {f"gpu-{i:02d}": {**H200, **k3, "rack": "a"} for i in range(1, 5)}
    hosts["gpu-02"]["sim_faults"] = ["worker_unreachable"]
    hosts["gpu-04"]["sim_gpu_mem_gib"] = 80
    invp = write_inventory(tmp_path / "inv", hosts, DOCKER_HOST)
    # a short engine-ready timeout: the head gives up on its missing worker quickly
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=2, max_fail_percentage=100, min_serving=0,
                        profile_overrides={"engine_ready_timeout_s": 30,
                                           "launch": {"base": {"env": {"VLLM_ENGINE_READY_TIMEOUT_S": "2"}}}})
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)])
    r = result(run_dir)
    assert code == 0 and r["status"] == "completed"
    assert {r["nodes"][n]["final"] for n in r["nodes"]} == {"rolled_back"}
    assert {r["nodes"][n]["failed_stage"] for n in r["nodes"]} == {"vllm_smoke"}
    one = r["nodes"]["gpu-01"]["reason"]
    assert one.startswith("replica rack-a/1 did not come up: vLLM exited before becoming healthy (exited 1)")
    assert "caused by worker gpu-02 (rank 1) never joined the head: [c10d] The client socket has failed to " \
           "connect to [gpu-01]:29501" in one
    assert r["nodes"]["gpu-02"]["reason"] == one
    two = r["nodes"]["gpu-04"]["reason"]
    assert "caused by worker gpu-04 (rank 1) exited with code 1: torch.OutOfMemoryError: CUDA out of memory." in two
    facts = {(e["node"], e["stage"]): e["facts"] for e in journal(run_dir) if e["type"] == "facts"}
    assert facts[("gpu-01", "vllm_smoke")]["replica_culprit"] == "gpu-02"
    assert facts[("gpu-03", "vllm_smoke")]["replica_culprit"] == "gpu-04"
    assert {rid: (rep["final"], rep["caused_by"]) for rid, rep in r["replicas"].items()} == {
        "rack-a/1": ("rolled_back", "gpu-02"), "rack-a/2": ("rolled_back", "gpu-04")}
    md = (run_dir / "report.md").read_text()
    assert "## Replicas" in md and "| rack-a/1 | gpu-01, gpu-02 | TP16 PP1 DP1 EP16 on 2 node(s) | rolled_back | gpu-02 |" in md
    assert '<table id="replicas">' in (run_dir / "report.html").read_text()
    triage = {e["node"]: e for e in journal(run_dir) if e["type"] == "triage"}
    assert triage["gpu-03"]["category"] == "model_load_capacity"
    assert triage["gpu-01"]["category"] == "communication"
    # the head's own log, kept as evidence, shows vLLM's timeout
    ev = (run_dir / "evidence" / "gpu-01").rglob("k3rollout-smoke-logs*")
    assert any("TimeoutError: Timed out waiting for engine core processes to start" in p.read_text() for p in ev)
    # every container of the failed launches was removed again
    for n in r["nodes"]:
        assert not {"k3rollout-smoke", "k3rollout-features"} & set(sim_state(run_dir, n)["docker"]["containers"])


def test_deepep_v2_without_nccl_gin_on_a_worker_takes_the_replica_back_and_names_it(tmp_path):
    from support import journal, result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 3)}
    hosts["gpu-02"]["sim_faults"] = ["rdma_transport_init_fails"]
    invp = write_inventory(tmp_path / "inv", hosts, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=2, max_fail_percentage=100, min_serving=0,
                        profile_overrides=DP_EP)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {(n, v["failed_stage"], v["final"]) for n, v in r["nodes"].items()} == {
        ("gpu-01", "vllm_smoke", "rolled_back"), ("gpu-02", "vllm_smoke", "rolled_back")}
    reason = r["nodes"]["gpu-01"]["reason"]
    assert reason.startswith("replica rack-a/1 did not come up: vLLM exited before becoming healthy (exited 1)")
    # deepep_v2 stops at NCCL's GIN check, not in NVSHMEM (vllm/distributed/device_communicators/all2all.py)
    assert "caused by worker gpu-02 (rank 1) exited with code 1: RuntimeError: DeepEPv2 requires NCCL GIN " \
           "(GPU-Initiated Networking). This usually means IBGDA-capable InfiniBand NICs or drivers are not " \
           "available." in reason and "nvshmem" not in reason.lower()
    assert r["nodes"]["gpu-02"]["reason"] == reason
    assert r["replicas"]["rack-a/1"]["caused_by"] == "gpu-02"
    triage = {e["node"]: e for e in journal(run_dir) if e["type"] == "triage"}
    assert triage["gpu-01"]["category"] == triage["gpu-02"]["category"] == "communication"
    for n in r["nodes"]:
        assert sim_state(run_dir, n)["loaded_driver"] == "575.57.08"


def test_sim_nvshmem_fault_touches_only_deepep_backends(tmp_path):
    from k3sim.dispatch import init_cluster

    def replica(backend, dp=True):
        dirs = init_cluster(tmp_path / f"{backend}-{dp}", {
            "a": {**H200, **NEW}, "b": {**H200, **NEW, "sim_faults": ["rdma_transport_init_fails"]}})
        ep = ["--enable-expert-parallel", "--all2all-backend", backend]
        if dp:
            dpa = ["--tensor-parallel-size", "8", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                   "--data-parallel-address", "a"]
            _serve(dirs, "a", *dpa, *ep)
            _serve(dirs, "b", *dpa, "--headless", "--data-parallel-start-rank", "1", *ep)
        else:
            _serve(dirs, "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a", *ep)
            _serve(dirs, "b", "--nnodes", "2", "--node-rank", "1", "--master-addr", "a", "--headless", *ep)
        return _container(dirs, "a"), _container(dirs, "b")

    # the default all-to-all never initialises NVSHMEM: the replica serves
    (status, logs), _ = replica("allgather_reducescatter")
    assert status == "running 0" and "Application startup complete." in logs
    # DeepEP v2 needs NCCL GIN: the worker stops at vLLM's GIN check, never in NVSHMEM
    (status, logs), (wstatus, wlogs) = replica("deepep_v2")
    assert (status, wstatus) == ("exited 1", "exited 1") and "nvshmem" not in wlogs.lower()
    assert wlogs.rstrip().endswith("RuntimeError: DeepEPv2 requires NCCL GIN (GPU-Initiated Networking). This "
                                   "usually means IBGDA-capable InfiniBand NICs or drivers are not available. See "
                                   "tools/ep_kernels/README.md for requirements.")
    assert "Worker proc VllmWorker-8 died unexpectedly (exit code: 1), shutting down executor." in logs
    # the earlier DeepEP backends initialise NVSHMEM: the worker exits with NVSHMEM's lines
    (status, logs), (wstatus, wlogs) = replica("deepep_high_throughput")
    assert wstatus == "exited 1"
    assert "WARN: init failed for remote transport: ibrc" in wlogs
    assert "nvshmemi_transport_init:287: Unable to initialize any transports. returning error." in wlogs
    assert wlogs.rstrip().endswith("nvshmemi_check_state_and_init:1080: nvshmem initialization failed, exiting")
    assert status == "exited 1" and "died unexpectedly" in logs
    assert "Application startup complete." not in logs
    # TP16 with expert parallel and data parallel 1: vLLM builds no all-to-all manager, DeepEP never starts
    (status, logs), (wstatus, _) = replica("deepep_v2", dp=False)
    assert (status, wstatus) == ("running 0", "running 0") and "Application startup complete." in logs
    assert "all2all manager" not in logs


def test_a_replica_whose_server_falls_back_to_another_all2all_backend_fails(tmp_path):
    from support import result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 3)}
    invp = write_inventory(tmp_path / "inv", hosts)
    # pplx was removed from vLLM: the server comes up on allgather_reducescatter with only a warning
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=1, max_fail_percentage=100, min_serving=0,
                        profile_overrides={**DP_EP, "all2all": {"rdma": "pplx"}})
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    for n in ("gpu-01", "gpu-02"):
        node = r["nodes"][n]
        assert (node["failed_stage"], node["final"]) == ("vllm_smoke", "rolled_back")
        assert node["reason"].startswith("replica rack-a/1: asked for all-to-all backend pplx (removed from vLLM, "
                                         "which falls back to allgather_reducescatter), but the server uses "
                                         "AgRsAll2AllManager")
        assert "The 'pplx' all2all backend has been removed." in node["reason"]


def test_driver_module_parameters_deepep_needs_are_checked_after_the_upgrade(tmp_path):
    from support import result

    hosts = {f"gpu-{i:02d}": {**H200, "rack": "a"} for i in range(1, 5)}
    hosts["gpu-02"]["sim_faults"] = ["driver_params_lost"]      # the reinstall dropped its modprobe.d options
    hosts["gpu-04"]["sim_peer_mapping_override"] = False        # never had PeerMappingOverride
    invp = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=2, max_fail_percentage=100, min_serving=0,
                        profile_overrides=DP_EP)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {(n, v["failed_stage"], v["final"]) for n, v in r["nodes"].items()} == {
        (n, "vllm_smoke", "rolled_back") for n in r["nodes"]}
    assert "the driver's module parameters for deepep_v2 are missing on gpu-02 (EnableStreamMemOPs=1, " \
           "PeerMappingOverride=1)" in r["nodes"]["gpu-01"]["reason"]
    assert "missing on gpu-04 (PeerMappingOverride=1)" in r["nodes"]["gpu-03"]["reason"]
    # no server was started on a replica whose driver cannot run its backend
    assert not any(c.startswith("docker run") and "k3rollout-smoke" in c for c in commands(run_dir, "gpu-01"))
    # the rollback wrote gpu-02's options back before its reboot: the restored driver loaded with them
    from k3rollout.checks.parsers import parse_nvidia_params
    from k3sim.dispatch import dispatch

    params = parse_nvidia_params(dispatch(run_dir / "sim-hosts" / "gpu-02", ["cat", "/proc/driver/nvidia/params"]).stdout)
    assert (params["EnableStreamMemOPs"], params["RegistryDwords"]) == ("1", "PeerMappingOverride=1;")


# ---- the communication gate proves the fast path ----

def test_sim_rdma_missing_falls_back_to_sockets_with_nccls_lines(tmp_path):
    from k3rollout.checks.parsers import parse_nccl_tests
    from k3rollout.stages.multinode import nccl_transport
    from k3sim.dispatch import dispatch, init_cluster

    dirs = init_cluster(tmp_path / "hosts", {"a": {}, "b": {"sim_faults": ["rdma_missing"]}, "c": {}})
    argv = ["mpirun", "-np", "16", "-H", "{}", "-x", "NCCL_DEBUG=INFO", "all_reduce_perf", "-b", "8", "-e", "1G",
            "-g", "1"]
    bad = dispatch(dirs["a"], [x if x != "{}" else "a:8,b:8" for x in argv], None)
    assert bad.rc == 0                          # it "works": only NCCL's log and the bandwidth tell
    net = nccl_transport(bad.stdout)
    assert net["transport"] == "Socket" and net["no_rdma_hosts"] == ["b"] and net["gpudirect_rdma"] is False
    assert any(line.endswith("NCCL INFO NET/IB : No device found.") for line in net["lines"])
    assert parse_nccl_tests(bad.stdout)["largest_busbw"] < 20
    good = dispatch(dirs["a"], [x if x != "{}" else "a:8,c:8" for x in argv], None)
    net = nccl_transport(good.stdout)
    assert (net["transport"], net["gpudirect_rdma"], net["no_rdma_hosts"]) == ("IB", True, [])
    assert parse_nccl_tests(good.stdout)["largest_busbw"] > 300
    # without NCCL_DEBUG=INFO the log says nothing: the gate cannot prove the transport
    quiet = dispatch(dirs["a"], ["mpirun", "-np", "16", "-H", "a:8,c:8", "all_reduce_perf", "-b", "8", "-e", "1G",
                                 "-g", "1"], None)
    assert nccl_transport(quiet.stdout)["transport"] is None


def test_socket_fallback_fails_the_node_without_rdma_by_name(tmp_path):
    from support import result

    hosts = {f"gpu-{i:02d}": {} for i in range(1, 5)}
    hosts["gpu-03"] = {"sim_faults": ["rdma_missing"]}
    invp = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 3], max_fail_percentage=34, min_serving=0)
    run_dir = tmp_path / "run"
    code = main(["run", str(pb), "-i", str(invp), "--yes", "--run-dir", str(run_dir)])
    r = result(run_dir)
    assert code == 0 and r["status"] == "completed"
    n = r["nodes"]["gpu-03"]
    assert (n["failed_stage"], n["final"]) == ("multinode", "rolled_back")
    assert "NCCL used network Socket, not IB/RoCE RDMA; no RDMA device on gpu-03" in n["reason"]
    assert "NCCL INFO NET/IB : No device found." in n["reason"]
    # the other two were measured again without it, over IB
    assert {r["nodes"][x]["final"] for x in ("gpu-02", "gpu-04")} == {"upgraded"}


# ---- replica-scoped serving: the simulator's head/worker semantics ----

K3_IMAGE = "vllm/vllm-openai:kimi-k3"


# the K3 image needs CUDA 13: the upgraded driver; these tests launch vLLM with docker run, so
# the nodes are Docker hosts
NEW = {**DOCKER_HOST, "driver_version": "580.95.05"}


def _serve(dirs, host, *args, env=None, name="k3"):
    from k3sim.dispatch import dispatch

    envs = [x for k, v in (env or {}).items() for x in ("-e", f"{k}={v}")]
    return dispatch(dirs[host], ["docker", "run", "-d", "--name", name, "--gpus", "all", "--network", "host", *envs,
                                 K3_IMAGE, "moonshotai/Kimi-K3", "--tensor-parallel-size", "16",
                                 "--gpu-memory-utilization", "0.95", *args, "--port", "8000"], None)


def _container(dirs, host, name="k3"):
    from k3sim.dispatch import dispatch

    st = dispatch(dirs[host], ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name], None)
    logs = dispatch(dirs[host], ["docker", "logs", name], None)
    return st.stdout.strip(), logs.stderr


def test_sim_head_waits_for_its_worker_then_serves(tmp_path):
    from k3sim.dispatch import init_cluster

    dirs = init_cluster(tmp_path / "hosts", {"a": {**H200, **NEW}, "b": {**H200, **NEW}})
    assert _serve(dirs, "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a").rc == 0
    status, logs = _container(dirs, "a")
    assert status == "running 0"
    # 0.33 logs the handshake waits at DEBUG; at INFO the head names itself leader of the ranks
    assert "DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=a" in logs
    assert "world_size=16, local_world_size=8" in logs and "core engine proc(s)" not in logs
    assert "Application startup complete." not in logs          # no API server before the worker joined
    # the worker joins (started after the head: its TCP store client retries)
    assert _serve(dirs, "b", "--nnodes", "2", "--node-rank", "1", "--master-addr", "a", "--headless").rc == 0
    status, logs = _container(dirs, "a")
    assert status == "running 0" and "Application startup complete." in logs


def test_sim_missing_worker_makes_the_head_time_out(tmp_path):
    from k3sim.dispatch import init_cluster
    from k3sim.state import transaction

    dirs = init_cluster(tmp_path / "hosts", {"a": {**H200, **NEW}, "b": {**H200, **NEW, "sim_faults": ["worker_unreachable"]}})
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": "60"}
    _serve(dirs, "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a", env=env)
    _serve(dirs, "b", "--nnodes", "2", "--node-rank", "1", "--master-addr", "a", "--headless", env=env)
    assert _container(dirs, "a")[0] == "running 0"               # still waiting
    status, logs = _container(dirs, "b")
    assert status == "running 0" and "[c10d] The client socket has failed to connect to [a]:29501" in logs
    # the head has waited its 60 s: its start moves back in its state rather than the test
    # sleeping (a 1 s timeout ran out before the first look on a loaded machine)
    with transaction(dirs["a"]) as s:
        s["docker"]["containers"]["k3"]["started"] -= 61
    status, logs = _container(dirs, "a")
    assert status == "exited 1"
    assert ("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
            "weight loading for large models. Waited 60s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase "
            "the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>") in logs
    # 0.33's words only: no invented summary line before vLLM's own TimeoutError
    assert "did not join" not in logs and "initial message" not in logs
    # a worker that never started at all: the head gives up the same way
    alone = init_cluster(tmp_path / "alone", {"a": {**H200, **NEW}})
    _serve(alone, "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a", env=env)
    with transaction(alone["a"]) as s:
        s["docker"]["containers"]["k3"]["started"] -= 61
    status, logs = _container(alone, "a")
    assert status == "exited 1" and "TimeoutError: Timed out waiting for engine core processes to start." in logs


def test_sim_data_parallel_form_waits_for_its_remote_engines(tmp_path):
    from k3sim.dispatch import dispatch, init_cluster

    dirs = init_cluster(tmp_path / "hosts", {"a": {**H200, **NEW}, "b": {**H200, **NEW}})

    def serve(host, *extra):
        return dispatch(dirs[host], ["docker", "run", "-d", "--name", "k3", "--gpus", "all", "--network", "host",
                                     K3_IMAGE, "moonshotai/Kimi-K3", "--tensor-parallel-size", "8",
                                     "--enable-expert-parallel", "--all2all-backend", "deepep_v2",
                                     "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                                     "--data-parallel-address", "a", "--data-parallel-rpc-port", "29550", *extra,
                                     "--port", "8000"], None)

    serve("a")
    status, logs = _container(dirs, "a")
    assert status == "running 0" and "Application startup complete." not in logs      # waits for b
    serve("b", "--headless", "--data-parallel-start-rank", "1")
    status, logs = _container(dirs, "a")
    assert status == "running 0" and "Application startup complete." in logs
    assert "Using DeepEPV2All2AllManager all2all manager." in logs


@pytest.mark.parametrize("args,error", [
    (["--nnodes", "2", "--node-rank", "2"], "ValueError: Invalid data-parallel launch options: `--node-rank` must "
                                            "be between 0 and 1; got `--node-rank 2`."),
    (["--nnodes", "3", "--node-rank", "1"], "ValueError: Invalid data-parallel launch options: `--nnodes 3` must "
                                            "evenly divide the total world size (16)."),
])
def test_sim_wrong_rank_or_node_count_fails_that_node(tmp_path, args, error):
    from k3sim.dispatch import init_cluster

    dirs = init_cluster(tmp_path / "hosts", {"a": {**H200, **NEW}, "b": {**H200, **NEW}})
    _serve(dirs, "b", *args, "--master-addr", "a", "--headless")
    status, logs = _container(dirs, "b")
    assert status == "exited 1" and error in logs


def test_sim_model_that_does_not_fit_the_replica_runs_out_of_memory(tmp_path):
    from k3sim.dispatch import init_cluster

    # 16 x 80 GiB x 0.95 = 1,216 GiB < the 1,397 GiB of K3's weights: 87.3 GiB per GPU
    h100 = {"k3_gpu_model": "NVIDIA H100 80GB HBM3", "k3_gpu_count": 8, "k3_gpu_mem_gib": 80, **NEW}
    dirs = init_cluster(tmp_path / "hosts", {"a": {**H200, **NEW}, "b": h100})
    _serve(dirs, "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a")
    _serve(dirs, "b", "--nnodes", "2", "--node-rank", "1", "--master-addr", "a", "--headless")
    status, logs = _container(dirs, "a")
    assert status == "exited 1" and "Worker proc VllmWorker-8 died unexpectedly (exit code: 1), shutting down executor." in logs
    status, logs = _container(dirs, "b")          # the worker whose GPUs are too small says why
    assert status == "exited 1"
    assert "torch.OutOfMemoryError: CUDA out of memory." in logs and "total capacity of 78.81 GiB" in logs
    assert "Of the allocated memory 76.62 GiB is allocated by PyTorch" in logs
