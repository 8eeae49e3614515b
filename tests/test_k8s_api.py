"""Kubernetes operations from the controller through the official client, against the
simulated API server on a real socket: cordon with the prior state kept, a drain that
leaves DaemonSet pods alone and waits out a PodDisruptionBudget until its timeout, labels,
GPU Operator detection and the cluster-wide Lease lock."""

from __future__ import annotations

import pytest
from support import DOCKER_HOST

from k3rollout.scheduler.k8s_api import KubernetesApi, KubernetesError
from k3sim import state as st
from k3sim.kubeapi import KubeApiServer


class FakeTime:
    def __init__(self):
        self.t = 0.0
        self.sleeps = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


@pytest.fixture
def k8s(tmp_path):
    root = tmp_path / "sim"
    for i, name in enumerate(("gpu-01", "gpu-02", "gpu-03")):
        # Docker hosts (cri-dockerd), each with a serving pod that no owner recreates: the drain's
        # eviction leaves it gone (containerd nodes' owners would place it again at once)
        st.init_host(root / name, name, {**DOCKER_HOST, "sim_address": f"127.0.8.{i + 1}",
                                         "sim_cordoned": name == "gpu-03",
                                         "sim_faults": ["pdb_blocks_eviction"] if name == "gpu-02" else []})
    with KubeApiServer(root) as server:
        clock = FakeTime()
        api = KubernetesApi(str(server.kubeconfig(tmp_path / "kc")), sleep=clock.sleep, now=clock.now)
        api.root, api.clock, api.srv = root, clock, server
        yield api
        api.close()


def test_cordon_reports_the_prior_state_and_uncordon_restores(k8s):
    assert k8s.cordon("gpu-01") is False
    assert k8s.node("gpu-01")["unschedulable"] is True
    assert st.load(k8s.root / "gpu-01")["scheduler"]["state"] == "cordoned"
    assert k8s.cordon("gpu-03") is True          # cordoned before the run: the caller keeps it so
    k8s.uncordon("gpu-01")
    assert k8s.node("gpu-01")["unschedulable"] is False


def test_drain_evicts_the_serving_pod_and_leaves_the_daemonset_pod(k8s):
    attempts = []
    res = k8s.drain("gpu-01", timeout_s=60, on_attempt=lambda *a: attempts.append(a))
    assert res.ok, res.message
    assert [p.split("/")[0] for p in res.evicted] == ["inference"]
    assert [p.split("/")[0] for p in res.skipped] == ["gpu-operator"]
    assert attempts == [(res.evicted[0], 1, "evicted")]
    left = [p.metadata.namespace for p in k8s.pods_on("gpu-01")]
    assert left == ["gpu-operator"]
    evictions = [r for r in k8s.srv.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert len(evictions) == 1


def _terminating_until_watched(k8s, monkeypatch) -> None:
    """Evictions accepted, their pods left Terminating (the simulated kubelet stops a pod's
    processes at once; a real one gives them the grace period): each goes when the next watch
    is asked for, so the drain must wait for it after its first read."""
    evicted = []
    monkeypatch.setattr(k8s.core, "create_namespaced_pod_eviction", lambda name, ns, body: evicted.append((ns, name)))
    opened = k8s.watch

    def watch(list_method, *args, **kw):
        for ns, name in evicted:
            k8s.core.delete_namespaced_pod(name, ns)
        evicted.clear()
        yield from opened(list_method, *args, **kw)

    monkeypatch.setattr(k8s, "watch", watch)


def _drain_counted(k8s, node: str):
    from k3rollout.scheduler import k8s_calls

    sent = k8s_calls.totals.copy()
    res = k8s.drain(node, timeout_s=60, retry_s=5)
    assert res.ok, res.message
    return k8s_calls.totals - sent


def test_the_drain_waits_for_an_evicted_pod_to_be_gone_with_a_watch_not_a_poll(k8s, monkeypatch):
    # the serving pod seeded when the server came up is replaced by one made after it (the
    # Docker host's serving container stands for it again), within the server's watch history
    (seeded,) = [p for p in k8s.pods_on("gpu-01") if p.metadata.namespace == "inference"]
    k8s.core.delete_namespaced_pod(seeded.metadata.name, "inference")
    (fresh,) = [p for p in k8s.pods_on("gpu-01") if p.metadata.namespace == "inference"]
    assert fresh.metadata.uid != seeded.metadata.uid
    _terminating_until_watched(k8s, monkeypatch)
    calls = _drain_counted(k8s, "gpu-01")
    # one read of the evicted pod, then one watch from it until its DELETED event: no poll
    assert calls["get pods"] == 1 and calls["watch pods"] == 1 and k8s.clock.sleeps == []
    assert [p.metadata.namespace for p in k8s.pods_on("gpu-01")] == ["gpu-operator"]


def test_a_drain_whose_watch_history_expired_reads_the_pod_again_without_polling(k8s, monkeypatch):
    # the serving pod is older than this server's watch history: the watch from its version is
    # an ERROR event 410 Expired, and the wait starts again with a read, which finds it gone
    _terminating_until_watched(k8s, monkeypatch)
    calls = _drain_counted(k8s, "gpu-01")
    assert calls["get pods"] == 2 and calls["watch pods"] == 1 and k8s.clock.sleeps == []


def test_without_the_watch_right_the_drain_polls_until_the_evicted_pod_is_gone(k8s, monkeypatch):
    _terminating_until_watched(k8s, monkeypatch)
    k8s.srv.cluster.set_denied(["watch pods"])
    calls = _drain_counted(k8s, "gpu-01")
    # the watch is refused (403): the pod is read again after a poll's sleep, and found gone
    assert calls["watch pods"] == 1 and calls["get pods"] == 2 and k8s.clock.sleeps == [1.0]


def test_a_disruption_budget_is_retried_until_the_drain_timeout_then_reported(k8s):
    res = k8s.drain("gpu-02", timeout_s=30, retry_s=5)
    assert not res.ok
    assert "timed out after 30s" in res.message
    assert "Cannot evict pod as it would violate the pod's disruption budget." in res.message
    assert res.attempts == 7 and k8s.clock.sleeps == [5] * 6     # at 0, 5, ... 30 s: every 5 s, within 30 s
    assert any(p.metadata.namespace == "inference" for p in k8s.pods_on("gpu-02"))


def test_labels_publish_progress_and_none_removes(k8s):
    after = k8s.label("gpu-01", {"k3rollout.io/upgrade-state": "upgrade-required"})
    assert k8s.node("gpu-01")["labels"]["k3rollout.io/upgrade-state"] == "upgrade-required"
    # the labels the PATCH's reply gives are the server's, the others included
    assert after == k8s.node("gpu-01")["labels"] and after["kubernetes.io/hostname"] == "gpu-01"
    after = k8s.label("gpu-01", {"k3rollout.io/upgrade-state": None})
    assert "k3rollout.io/upgrade-state" not in k8s.node("gpu-01")["labels"]
    assert after == k8s.node("gpu-01")["labels"]


def test_gpu_operator_managed_nodes_are_detected(k8s):
    assert k8s.gpu_operator_manages_driver("gpu-01") is False
    k8s.label("gpu-01", {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"})
    assert k8s.gpu_operator_manages_driver("gpu-01") is True


def test_the_lease_lock_is_exclusive_and_never_stolen(k8s):
    k8s.acquire_lease("kube-system", "k3rollout", "alice@ctl-1 run A", 60)
    k8s.acquire_lease("kube-system", "k3rollout", "alice@ctl-1 run A", 60)      # the holder renews
    with pytest.raises(KubernetesError) as e:
        k8s.acquire_lease("kube-system", "k3rollout", "bob@ctl-2 run B", 60)
    assert "held by 'alice@ctl-1 run A'" in str(e.value) and "kubectl -n kube-system delete lease" in str(e.value)
    held = k8s.lease("kube-system", "k3rollout")
    assert held.holder == "alice@ctl-1 run A" and not held.expired
    k8s.release_lease("kube-system", "k3rollout", "bob@ctl-2 run B")            # not the holder: no effect
    assert k8s.lease("kube-system", "k3rollout") is not None
    k8s.release_lease("kube-system", "k3rollout", "alice@ctl-1 run A")
    assert k8s.lease("kube-system", "k3rollout") is None


def test_a_lease_that_names_no_holder_is_taken_and_then_exclusive(k8s):
    # `spec` is optional in a Lease: one created bare is held by nobody
    from kubernetes import client

    k8s.coord.create_namespaced_lease("kube-system", client.V1Lease(metadata=client.V1ObjectMeta(name="k3rollout")))
    k8s.acquire_lease("kube-system", "k3rollout", "alice@ctl-1 run A", 60)
    held = k8s.lease("kube-system", "k3rollout")
    assert held.holder == "alice@ctl-1 run A" and not held.expired
    with pytest.raises(KubernetesError) as e:
        k8s.acquire_lease("kube-system", "k3rollout", "bob@ctl-2 run B", 60)
    assert "held by 'alice@ctl-1 run A'" in str(e.value)


def test_an_unknown_node_is_a_clear_error(k8s):
    with pytest.raises(KubernetesError) as e:
        k8s.node("gpu-99")
    assert e.value.status == 404 and 'nodes "gpu-99" not found' in str(e.value)


def test_check_access_asks_for_the_pod_workload_rights_only_where_workloads_run_as_pods(k8s, tmp_path):
    """A node with ``k3_workload_backend: kubernetes`` needs to run and delete pods in the
    workload namespace, read logs, reach servers through the pod proxy and read the owners
    of serving pods; a viewer may read the owners but not create pods or proxy to them."""
    plain = {(c["verb"], c["resource"]) for c in k8s.check_access("kube-system")}
    assert ("create", "pods") not in plain and ("get", "pods/proxy") not in plain
    asked = k8s.check_access("kube-system", workload_namespace="k3rollout")
    by = {(c["verb"], c["resource"]): c for c in asked}
    for need in (("create", "pods"), ("delete", "pods"), ("get", "pods/log"), ("get", "pods/proxy"),
                 ("create", "pods/proxy"), ("get", "deployments"), ("get", "statefulsets"),
                 ("get", "leaderworkersets"), ("get", "replicasets")):
        assert by[need]["allowed"], need                    # the admin token may do all of it
    viewer = KubernetesApi(str(k8s.srv.kubeconfig(tmp_path / "viewer", token="sim-viewer-token")))
    try:
        seen = {(c["verb"], c["resource"]): c["allowed"]
                for c in viewer.check_access("kube-system", workload_namespace="k3rollout")}
    finally:
        viewer.close()
    assert seen[("get", "deployments")] and seen[("get", "leaderworkersets")]
    # the built-in view role reads pods/log, but creates no pod and reaches none through the proxy
    assert seen[("get", "pods/log")]
    assert not seen[("create", "pods")] and not seen[("get", "pods/proxy")] and not seen[("create", "pods/proxy")]
