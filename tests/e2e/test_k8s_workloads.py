"""A whole rollout on containerd Kubernetes nodes through the kubernetes workload backend: the
simulated cluster's nodes have no docker CLI, their K3 replicas are Pods of a LeaderWorkerSet
(2-node H200 groups) and a Deployment (B300), checks and test servers are pinned Pods reached
through the API server's pod proxy, and the owners must be back to their baseline readyReplicas
on the same image digest. A guard fails the test if any ``docker`` command reaches a node; the
real kubectl reads the Pods the run left."""

from __future__ import annotations

import os
import subprocess

import pytest
from support import (
    api_changes,
    commands,
    journal,
    kubectl_exe,
    no_docker,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.cli import main
from k3sim import netd

CONTAINERD = {"sim_container_runtime": "containerd", "k3_workload_backend": "kubernetes"}
H200 = {"rack": "a", "k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141,
        "sim_nvidia_module_options": 'NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"',
        "nccl_ib_hca": "mlx5_0,mlx5_3,mlx5_4,mlx5_5",
        "sim_k8s_serving": {"kind": "LeaderWorkerSet", "name": "k3-h200", "size": 2}}
B300 = {"rack": "b", "k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268,
        "sim_k8s_serving": {"kind": "Deployment", "name": "k3-b300"}}
HOSTS = {"gpu-a01": H200, "gpu-a02": H200, "gpu-b01": B300, "gpu-b02": B300}


@pytest.mark.preflight
def test_a_whole_rollout_on_containerd_nodes_uses_pods_and_brings_the_owners_back(tmp_path):
    inv = write_inventory(tmp_path / "inv", HOSTS, CONTAINERD)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=[1, 2], min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert r["status"] == "completed"
    assert {n: (v["final"], v["driver_after"]) for n, v in r["nodes"].items()} == \
        dict.fromkeys(HOSTS, ("upgraded", "580.95.05"))
    assert {k: v["final"] for k, v in r["replicas"].items()} == {"rack-a/1": "serving", "rack-b/1": "serving",
                                                                "rack-b/2": "serving"}
    no_docker(run_dir, HOSTS)
    # the read-only preflight (crictl on the node, the API rights) passed before the first change
    started = next(x for x in journal(run_dir) if x["type"] == "run_started")
    assert started["preflight"]["ran"] and started["preflight"]["ok"]
    facts = {(e["node"], e["stage"]): e["facts"] for e in journal(run_dir) if e["type"] == "facts"}
    steps = [e for e in journal(run_dir) if e["type"] == "step_started"]
    for node in HOSTS:
        # baseline saw the node's runtime and its serving pod with the owner that brings it back
        base = facts[(node, "baseline")]
        assert base["container_runtime"].startswith("containerd://") and base["gpu_allocatable"] == 8
        owner = "LeaderWorkerSet" if node.startswith("gpu-a") else "Deployment"
        assert [s["owner"]["kind"] for s in base["serving_containers"]] == [owner]
        # after the driver: the device plugin's GPUs back before any check; the checks were pods
        assert facts[(node, "cuda_check")]["gpu_allocatable"] == 8
        mine = [s for s in steps if s["node"] == node]
        assert any(s["step"] == "container-nvidia-smi-pod" and s["argv"][0] == "POST" for s in mine)
        assert any(s["step"] == "cuda-init-pod" and s["once"] for s in mine)
        # the smoke test's requests went to the replica's head through the API server's pod proxy
        if node != "gpu-a02":
            http = [s["argv"][1] for s in mine if s.get("kind") == "http" and s["stage"] == "vllm_smoke"]
            assert http and all("/api/v1/namespaces/k3rollout/pods/" in u and "/proxy/" in u for u in http)
        # every owner is back to its baseline readyReplicas on baseline's image digest
        back = facts[(node, "uncordon")]["serving_owners"]
        for o in back.values():
            assert o["baseline_ready"] >= 1
            if o["ready"] != o["baseline_ready"]:
                # the replica's other node still cordoned when this one was returned: short only
                # of the pods waiting for its GPUs, this node running its own: said, not failed
                # (the pods are all Running at the end, below)
                (note,) = facts[(node, "uncordon")]["serving_short_elsewhere"]
                assert f"has {o['ready']} ready replicas of {o['baseline_ready']}" in note, (node, o, note)
        digest = base["serving_containers"][0]["digest"].rsplit("@", 1)[-1]
        assert [o["digests"] for o in back.values()] == [[digest]]
    # the 2-node replica served with the launch plan's multi-node arguments, the worker headless
    assert "--headless" in facts[("gpu-a02", "vllm_smoke")]["smoke_args"]
    # the real kubectl reads what the run left: the owners' pods back, the test pods deleted
    root = run_dir / "sim-hosts"
    netd.ensure(root)
    kc = ["--kubeconfig", str(root / "kubeconfig")]
    exe = kubectl_exe()

    def kubectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *kc, *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HOME": str(tmp_path)})

    p = kubectl("get", "pods", "-n", "inference", "-o", "wide")
    assert p.returncode == 0, p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines()[1:]]
    assert sorted(r[6] for r in rows) == sorted(HOSTS) and {r[2] for r in rows} == {"Running"}
    pod = next(r[0] for r in rows if r[6] == "gpu-b01")
    p = kubectl("logs", "-n", "inference", pod)
    assert p.returncode == 0 and p.stdout, p.stderr
    p = kubectl("describe", "pod", "-n", "inference", pod)
    assert p.returncode == 0 and "Node:         gpu-b01/" in p.stdout, p.stderr
    p = kubectl("get", "pods", "-n", "k3rollout")
    assert p.returncode == 0 and "k3rollout-smoke" not in p.stdout and "cuda-init" not in p.stdout, p.stdout


@pytest.mark.preflight
def test_the_docker_backend_on_containerd_nodes_is_refused_at_preflight_with_the_fix_named(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", HOSTS, {**CONTAINERD, "k3_workload_backend": "docker"})
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=[1, 2], min_serving=0)
    run_dir = tmp_path / "run"
    # the inventory's backend does not fit the nodes: bad input, exit 2 (docs/guide.md "Exit codes"),
    # before any change
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    for node in HOSTS:
        assert (f"preflight: {node}: workload: k3_workload_backend is docker, but docker is not installed on this "
                "node") in err
    assert "set k3_workload_backend: kubernetes (with scheduler: kubernetes)" in err
    assert "preflight refused the input for gpu-a01 (workload), gpu-a02 (workload)" in err
    assert "nothing was changed" in err
    assert not (run_dir / "journal.jsonl").exists()
    for node in HOSTS:
        assert api_changes(run_dir, node) == []
        assert sim_state(run_dir, node)["loaded_driver"] == "575.57.08"
        # only the read-only looks ran: the refusal's own `docker info` (rc 127 there) and no change
        assert not [c for c in commands(run_dir, node) if c.startswith(("apt", "dnf", "reboot", "systemctl stop",
                                                                        "modprobe"))]


def test_no_node_of_a_replica_is_cordoned_before_every_node_of_it_has_its_baseline(tmp_path):
    """Cordoning one node of a 2-node LeaderWorkerSet replica takes the whole group down. Every
    node's baseline probes the replica's serving pod, so no node of it may be taken out before
    the other's baseline is recorded, however much slower that node's commands answer."""
    hosts = {"gpu-a01": {**H200, "sim_latency_s": 0.4}, "gpu-a02": H200}
    inv = write_inventory(tmp_path / "inv", hosts, CONTAINERD)
    pb = write_playbook(tmp_path / "pb.yml", profile="kimi-k3", serial=[2], min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--no-preflight"]) == 0
    recs = journal(run_dir)
    base_done = {e["node"]: e["seq"] for e in recs if e["type"] == "stage_done" and e["stage"] == "baseline"}
    first_cordon = min(e["seq"] for e in recs if e["type"] == "stage_started" and e["stage"] == "cordon")
    assert set(base_done) == set(hosts) and max(base_done.values()) < first_cordon
    for e in recs:
        if e["type"] == "facts" and e["stage"] == "baseline" and "workload_probes" in e["facts"]:
            assert [p["ok"] for p in e["facts"]["workload_probes"]] == [True], (e["node"], e["facts"]["workload_probes"])
    assert {n: v["final"] for n, v in result(run_dir)["nodes"].items()} == dict.fromkeys(hosts, "upgraded")
