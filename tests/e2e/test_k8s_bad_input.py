"""Bad input on containerd Kubernetes nodes with the kubernetes workload backend is refused by
the read-only preflight with exit 2 and nothing changed: a right the backend needs that the
controller's credentials lack (the simulated API server refuses it: ``sim_k8s_deny``), a
workload namespace that does not exist, and a playbook probe naming an owner no node runs.
Each error names the host, the right or the variable, and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest
from support import api_changes, commands, kubectl_exe, sim_state, write_inventory, write_playbook

from k3rollout.cli import main
from k3sim import kubestore, netd

CONTAINERD = {"sim_container_runtime": "containerd", "k3_workload_backend": "kubernetes"}
B300 = {"rack": "b", "k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268,
        "sim_k8s_serving": {"kind": "Deployment", "name": "k3-b300"}}
HOSTS = {"gpu-b01": B300, "gpu-b02": B300}
CHANGES = ("apt-get", "apt install", "apt-mark hold", "dnf install", "dnf module", "dpkg -i", "reboot", "systemctl stop",
           "systemctl start", "systemctl restart", "modprobe", "rmmod", "crictl pull", "crictl rm")


def nothing_changed(run_dir) -> None:
    """No journal, no request that changes a node or a pod, the old driver, no package step."""
    assert not (run_dir / "journal.jsonl").exists()
    for node in HOSTS:
        assert api_changes(run_dir, node) == []
        state = sim_state(run_dir, node)
        assert state["loaded_driver"] == "575.57.08" and state["scheduler"]["state"] == "schedulable"
        # the preflight's own queries (apt-cache madison, nvidia-smi, df ...) ran, no change
        assert not [c for c in commands(run_dir, node) if c.startswith(CHANGES)]


def kubectl(run_dir, tmp_path, *args: str) -> subprocess.CompletedProcess:
    root = run_dir / "sim-hosts"
    netd.ensure(root)
    return subprocess.run([kubectl_exe(), "--kubeconfig", str(root / "kubeconfig"), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})


@pytest.mark.preflight
def test_a_right_the_kubernetes_backend_needs_is_refused_with_exit_2_naming_it(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", HOSTS, {**CONTAINERD, "sim_k8s_deny": ["get pods/log"]})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    # the hosts, the right and its use, and how to grant it
    assert "preflight: controller: FAIL" in err
    assert "for gpu-b01, gpu-b02 lack get pods/log (read pods' logs)" in err
    assert ("Grant them in the Role or ClusterRole bound to these credentials (`kubectl auth can-i get pods/log` "
            "answers yes once granted), or name other credentials with k3_kubeconfig and k3_kube_context") in err
    assert "preflight refused the input for the controller's credentials: nothing was changed" in err
    nothing_changed(run_dir)
    # the simulated API server does refuse it, as RBAC without the rule does (403)
    pod = kubectl(run_dir, tmp_path, "get", "pods", "-n", "inference", "-o", "name").stdout.split()[0]
    p = kubectl(run_dir, tmp_path, "logs", "-n", "inference", pod)
    assert p.returncode != 0 and 'cannot get resource "pods/log" in API group "" in the namespace "inference"' \
        in p.stderr, p.stderr
    # `preflight` says the same with exit 2, and `plan --check-access` (here with the cluster's
    # kubeconfig named, as a real inventory names it) answers NO for that right alone
    assert main(["preflight", str(pb), "-i", str(inv), "--output", str(run_dir)]) == 2
    capsys.readouterr()
    named = write_inventory(tmp_path / "named", HOSTS, {**CONTAINERD,
                                                         "k3_kubeconfig": str(run_dir / "sim-hosts" / "kubeconfig")})
    netd.ensure(run_dir / "sim-hosts")          # the cluster's API server, after the daemon's idle exit
    assert main(["plan", str(pb), "-i", str(named), "--check-access"]) == 2
    out, err = capsys.readouterr()
    assert [ln for ln in out.splitlines() if ln.startswith("  NO ")] == ["  NO  get pods/log: read pods' logs"], err
    assert "NO  get pods/log: read pods' logs" in out and "yes create pods: run check and test-server pods" in out


@pytest.mark.preflight
def test_a_workload_namespace_that_does_not_exist_is_refused_with_exit_2_and_the_command_to_create_it(tmp_path,
                                                                                                       capsys):
    inv = write_inventory(tmp_path / "inv", HOSTS, {**CONTAINERD, "k3_workload_namespace": "k3-validation"})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    for node in HOSTS:
        assert (f"preflight: {node}: workload_namespace: k3_workload_namespace is k3-validation, but no namespace "
                "k3-validation exists on ") in err
    assert ("Create it (kubectl create namespace k3-validation), or set k3_workload_namespace to an existing "
            "namespace") in err
    assert "preflight refused the input for gpu-b01 (workload_namespace), gpu-b02 (workload_namespace)" in err
    assert "| gpu-b01 | workload_namespace | **FAIL** (input) | " in (run_dir / "preflight.md").read_text()
    nothing_changed(run_dir)
    # what the run would have met: the API server refuses a Pod there, as a real one does
    # (NamespaceLifecycle admission: the namespace lookup's 404)
    root = run_dir / "sim-hosts"
    netd.ensure(root)
    import yaml

    server = yaml.safe_load((root / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    with httpx.Client(base_url=server, headers={"Authorization": "Bearer sim-admin-token"}) as api:
        r = api.post("/api/v1/namespaces/k3-validation/pods", json={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        assert r.status_code == 404
        body = r.json()
        assert (body["reason"], body["message"], body["details"]) == (
            "NotFound", 'namespaces "k3-validation" not found', {"name": "k3-validation", "group": "",
                                                                  "kind": "namespaces"})
        assert api.get("/api/v1/namespaces/k3-validation").status_code == 404
    # the fix the error names, with the real kubectl: then the preflight passes
    p = kubectl(run_dir, tmp_path, "create", "namespace", "k3-validation")
    assert p.returncode == 0 and "namespace/k3-validation created" in p.stdout, p.stderr
    assert main(["preflight", str(pb), "-i", str(inv), "--output", str(run_dir)]) == 0
    report = json.loads((run_dir / "preflight.json").read_text())
    for node in HOSTS:
        checks = {c["check"]: c["detail"] for c in report["nodes"][node]["checks"]}
        assert checks["workload"] == "Pods through the API server; crictl answers (containerd)"
        assert checks["workload_namespace"] == "namespace k3-validation exists"
    nothing_changed(run_dir)


@pytest.mark.preflight
def test_a_workload_probe_naming_an_owner_no_node_runs_is_refused_with_exit_2(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", HOSTS, CONTAINERD)
    probes = [{"match": "k3-b300", "path": "/health"}, {"match": "k3-b30", "path": "/ping", "status": 204}]
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, stage_with={"baseline": {"workload_probes": probes}})
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    # the typo is named, with what the nodes do run; the probe that matches passes
    assert ("preflight: playbook: FAIL stage 'Capture baseline evidence' (baseline) with.workload_probes[1] match "
            "'k3-b30' names no serving workload or owner on the play's nodes (they run: ") in err
    assert "k3-b300, " in err and f"Fix the pattern in the playbook {pb}" in err
    assert "workload_probes[0]" not in err
    assert "preflight refused the input for the playbook: nothing was changed" in err
    nothing_changed(run_dir)


@pytest.mark.preflight
def test_a_serving_pod_whose_owner_no_longer_exists_is_refused_with_exit_2(tmp_path, capsys):
    """The Deployment of the B300 pods is gone while its pods still run (a garbage collector
    that has not caught up): after the drain nothing would bring them back, and the uncordon
    stage would wait in vain, after the node was changed. The preflight refuses it first."""
    from k3rollout.model.inventory import load_inventory
    from k3sim.dispatch import init_cluster

    inv = write_inventory(tmp_path / "inv", HOSTS, CONTAINERD)
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    run_dir = tmp_path / "run"
    root = run_dir / "sim-hosts"
    hosts = load_inventory(str(inv)).hosts
    init_cluster(root, {h: hosts[h].vars for h in HOSTS})
    netd.ensure(root)                            # its API server seeds the Deployment and its pods
    netd.shutdown(root)
    deadline = time.monotonic() + 60
    while netd.running(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not netd.running(root)
    # the Deployment is gone from the API server's store; its pods are left as they were
    with kubestore.edit(root) as store:
        pods = sorted(k for k in store["pods"] if k.startswith("inference/"))
        assert len(pods) == 2 and "Deployment/inference/k3-b300" in store["workloads"]
        del store["workloads"]["Deployment/inference/k3-b300"]
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    for node, pod in zip(HOSTS, pods, strict=True):
        assert (f"preflight: {node}: workload_owners: serving pod {pod} names its owner ReplicaSet "
                f"inference/{pod.split('/')[1].rsplit('-', 1)[0]}, which does not exist: after the drain nothing "
                "brings such a pod back") in err
    assert "Recreate the owner (or delete the stray pod), or leave the node out with --skip-node" in err
    assert "preflight refused the input for gpu-b01 (workload_owners), gpu-b02 (workload_owners)" in err
    nothing_changed(run_dir)


def test_a_malformed_sim_k8s_deny_is_refused_with_exit_2_naming_the_host(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", HOSTS, {**CONTAINERD, "sim_k8s_deny": ["pods/log"]})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    assert main(["preflight", str(pb), "-i", str(inv), "--output", str(tmp_path / "pre")]) == 2
    err = capsys.readouterr().err
    assert "host gpu-b01: sim_k8s_deny: a list of \"VERB RESOURCE[/SUBRESOURCE]\" rights, got ['pods/log']" in err
