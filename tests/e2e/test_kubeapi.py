"""The simulated Kubernetes API server, driven by the real kubectl and by plain HTTP: the
same paths, verbs, status codes and object shapes as a real API server, over the sim
hosts' own state (a cordon through the API is the host's scheduler state)."""

from __future__ import annotations

import os
import subprocess
import time

import httpx
import pytest
from support import kubectl_exe

from k3sim import state as st
from k3sim.kubeapi import KubeApiServer


@pytest.fixture(scope="module")
def kubectl() -> str:
    return kubectl_exe()


@pytest.fixture
def cluster(tmp_path):
    root = tmp_path / "sim"
    for i, name in enumerate(("gpu-01", "gpu-02", "gpu-03")):
        faults = ["pdb_blocks_eviction"] if name == "gpu-02" else []
        # Docker hosts: the serving pod is the one their vllm-serving container stands for
        st.init_host(root / name, name, {"sim_container_runtime": "docker", "sim_address": f"127.0.9.{i + 1}",
                                         "sim_faults": faults,
                                         "sim_cordoned": name == "gpu-03"})
    with KubeApiServer(root, pdb_release_s=None) as api:
        api.root = root
        yield api


def run(kubectl: str, api: KubeApiServer, tmp_path, *args: str) -> subprocess.CompletedProcess:
    kc = api.kubeconfig(tmp_path / "kubeconfig")
    return subprocess.run([kubectl, "--kubeconfig", str(kc), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})


def test_kubectl_gets_cordons_labels_drains_and_uncordons(kubectl, cluster, tmp_path):
    p = run(kubectl, cluster, tmp_path, "get", "nodes")
    assert p.returncode == 0, p.stderr
    rows = {ln.split()[0]: ln.split()[1] for ln in p.stdout.splitlines()[1:]}
    assert rows == {"gpu-01": "Ready", "gpu-02": "Ready", "gpu-03": "Ready,SchedulingDisabled"}

    p = run(kubectl, cluster, tmp_path, "drain", "gpu-01", "--ignore-daemonsets", "--timeout=30s")
    assert p.returncode == 0, p.stderr
    assert "node/gpu-01 cordoned" in p.stdout and "evicted" in p.stdout and "node/gpu-01 drained" in p.stdout
    assert "ignoring DaemonSet-managed Pods: gpu-operator/nvidia-dcgm-exporter" in p.stderr
    # the cordon is the host's own scheduler state: the same one the sim's node commands see
    assert st.load(cluster.root / "gpu-01")["scheduler"]["state"] == "cordoned"
    pods = run(kubectl, cluster, tmp_path, "get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-01")
    assert "k2-serving" not in pods.stdout and "nvidia-dcgm-exporter" in pods.stdout      # the DaemonSet pod stays

    p = run(kubectl, cluster, tmp_path, "label", "node", "gpu-01", "k3rollout.io/upgrade-state=upgrade-required")
    assert p.returncode == 0 and "node/gpu-01 labeled" in p.stdout, p.stderr
    p = run(kubectl, cluster, tmp_path, "label", "node", "gpu-01", "k3rollout.io/upgrade-state=upgrade-done")
    assert p.returncode != 0 and "--overwrite is false" in p.stderr
    p = run(kubectl, cluster, tmp_path, "label", "--overwrite", "node", "gpu-01",
            "k3rollout.io/upgrade-state=upgrade-done")
    assert p.returncode == 0, p.stderr
    assert st.load(cluster.root / "gpu-01")["scheduler"]["labels"] == {"k3rollout.io/upgrade-state": "upgrade-done"}

    p = run(kubectl, cluster, tmp_path, "uncordon", "gpu-01")
    assert p.returncode == 0 and "node/gpu-01 uncordoned" in p.stdout, p.stderr
    assert st.load(cluster.root / "gpu-01")["scheduler"]["state"] == "schedulable"
    # once schedulable again, the ReplicaSet's replacement serving pod lands on it
    pods = run(kubectl, cluster, tmp_path, "get", "pods", "-n", "inference", "--field-selector",
               "spec.nodeName=gpu-01")
    assert "k2-serving" in pods.stdout


def test_a_disruption_budget_holds_kubectl_drain_until_its_timeout(kubectl, cluster, tmp_path):
    t = time.monotonic()
    p = run(kubectl, cluster, tmp_path, "drain", "gpu-02", "--ignore-daemonsets", "--timeout=3s")
    assert p.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in p.stderr
    assert time.monotonic() - t >= 3
    # cordoned, but the serving pod is still there: the node is not drained
    assert st.load(cluster.root / "gpu-02")["scheduler"]["state"] == "cordoned"
    assert "k2-serving" in run(kubectl, cluster, tmp_path, "get", "pods", "-A", "--field-selector",
                               "spec.nodeName=gpu-02").stdout


def test_status_codes_and_bodies_are_the_real_apis(cluster):
    api = httpx.Client(base_url=cluster.url)
    r = api.get("/api/v1/nodes/gpu-99")
    assert r.status_code == 404
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": 'nodes "gpu-99" not found', "reason": "NotFound",
                        "details": {"name": "gpu-99", "group": "", "kind": "nodes"}, "code": 404}
    pods = api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=gpu-02"}).json()
    serving = next(p for p in pods["items"] if p["metadata"]["namespace"] == "inference")
    ev = {"apiVersion": "policy/v1", "kind": "Eviction",
          "metadata": {"name": serving["metadata"]["name"], "namespace": "inference"}}
    r = api.post(f"/api/v1/namespaces/inference/pods/{serving['metadata']['name']}/eviction", json=ev)
    assert r.status_code == 429 and r.json()["reason"] == "TooManyRequests"
    assert r.json()["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert api.get("/api/v1/pods", params={"fieldSelector": "bogus=1"}).status_code == 400

    # leases: create, conflict on a second create and on a stale resourceVersion
    base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "k3rollout-lock"},
             "spec": {"holderIdentity": "ops@ctl-1", "leaseDurationSeconds": 60}}
    r = api.post(base, json=lease)
    assert r.status_code == 201
    rv = r.json()["metadata"]["resourceVersion"]
    assert api.post(base, json=lease).json()["reason"] == "AlreadyExists"
    renewed = {**lease, "metadata": {"name": "k3rollout-lock", "resourceVersion": rv}}
    assert api.put(f"{base}/k3rollout-lock", json=renewed).status_code == 200
    stale = api.put(f"{base}/k3rollout-lock", json=renewed)
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    assert api.get(f"{base}/k3rollout-lock").json()["spec"]["holderIdentity"] == "ops@ctl-1"
    assert api.delete(f"{base}/k3rollout-lock").status_code == 200
    assert api.get(f"{base}/k3rollout-lock").status_code == 404


def test_a_node_that_is_down_is_not_ready(cluster):
    with st.transaction(cluster.root / "gpu-01") as s:
        s["down_until"] = time.time() + 60
    node = httpx.get(f"{cluster.url}/api/v1/nodes/gpu-01").json()
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"


def _objects(api) -> dict:
    """Every object the API server keeps, as (kind, namespace, name) -> uid (a lease: its holder)."""
    out = {("Pod", p.metadata.namespace, p.metadata.name): p.metadata.uid
           for p in api.core.list_pod_for_all_namespaces().items}
    out |= {("Deployment", d.metadata.namespace, d.metadata.name): d.metadata.uid
            for d in api.apps.list_deployment_for_all_namespaces().items}
    out |= {("Namespace", "", n.metadata.name): n.metadata.uid for n in api.core.list_namespace().items}
    out |= {("Event", e.metadata.namespace, e.metadata.name): e.metadata.uid
            for e in api.core.list_event_for_all_namespaces().items}
    out |= {("Lease", "kube-system", x.metadata.name): x.spec.holder_identity
            for x in api.coord.list_namespaced_lease("kube-system").items}
    return out


def test_an_api_server_whose_daemon_was_killed_comes_back_with_every_object(tmp_path):
    """The API server keeps its objects on disk before each reply (sim/kubestore.py): its
    daemon killed (SIGKILL, no clean-up) and started again, every pod, owner, namespace, event
    and lease is there, with the same uid, and the resourceVersion goes on from where it was."""
    import signal

    from kubernetes import client as k8s

    from k3rollout.scheduler.k8s_api import KubernetesApi
    from k3sim import netd

    root = tmp_path / "sim"
    for i, name in enumerate(("gpu-c01", "gpu-c02")):
        st.init_host(root / name, name, {"sim_container_runtime": "containerd", "sim_address": f"127.0.10.{i + 1}",
                                         "sim_k8s_serving": {"kind": "Deployment", "name": "k3-serving"}})
    try:
        netd.ensure(root)
        api = KubernetesApi(str(netd.kubeconfig_path(root)))
        # changes of every kind: a namespace, a pod, an owner, a lease, an eviction (its pod
        # replaced by the owner, with the scheduler's and kubelet's events)
        api.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="team-a")))
        api.core.create_namespaced_pod("team-a", {"metadata": {"name": "probe"}, "spec": {
            "nodeName": "gpu-c01", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu22.04",
                            "command": ["sleep", "3600"]}]}})
        api.apps.create_namespaced_deployment("team-a", {"metadata": {"name": "web"}, "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu22.04",
                                         "command": ["sleep", "3600"]}]}}}})
        api.acquire_lease("kube-system", "k3rollout", "alice@ctl-1 run A", 60)
        victim = next(p for p in api.core.list_namespaced_pod("inference").items if p.spec.node_name == "gpu-c02")
        api.core.create_namespaced_pod_eviction(victim.metadata.name, "inference", k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name=victim.metadata.name, namespace="inference")))
        before = _objects(api)
        rv = int(api.core.list_namespaced_pod("team-a").metadata.resource_version)
        assert ("Pod", "team-a", "probe") in before and ("Deployment", "team-a", "web") in before
        assert ("Pod", "inference", victim.metadata.name) not in before
        assert any(k[0] == "Event" for k in before) and before[("Lease", "kube-system", "k3rollout")]

        pid = int((root / "netd.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while netd.running(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not netd.running(root)
        netd.ensure(root)
        api = KubernetesApi(str(netd.kubeconfig_path(root)))
        after = _objects(api)
        # events may be added since (a kubelet goes on posting); nothing else is, and nothing went
        assert {k: after.get(k) for k in before} == before
        assert {k: v for k, v in after.items() if k[0] != "Event"} == {k: v for k, v in before.items()
                                                                       if k[0] != "Event"}
        assert int(api.core.list_namespaced_pod("team-a").metadata.resource_version) >= rv
    finally:
        netd.shutdown(root)
