"""The kubernetes workload backend (k3rollout/workload/kubernetes.py) against a strict fake
of the official Kubernetes client: each API method the backend may call is scripted with
its arguments and answer, in order; an unscripted call fails the test at once, and a
scripted one never made fails it at teardown. Objects are the API server's camelCase
dicts (the backend reads them through ``sanitize_for_serialization``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import ANY

import pytest
from kubernetes.client.exceptions import ApiException

from k3rollout.errors import InputError
from k3rollout.workload import workload_for
from k3rollout.workload.kubernetes import pod_name

SERVER = "https://k8s.example:6443"
NS = "k3rollout"
K8S = {"gpu-01": {"k3_workload_backend": "kubernetes"}}
IMAGE = "vllm/vllm-openai:kimi-k3"
DIGEST = "docker.io/vllm/vllm-openai@sha256:" + "a" * 64


class UnscriptedCall(AssertionError):
    pass


@dataclass
class Expected:
    method: str
    args: tuple
    kwargs: dict
    answer: Any = None
    raises: int | None = None          # an ApiException with this status


@dataclass
class FakeKube:
    """Stands in for ``KubernetesApi``: ``core``, ``apps`` and ``custom``, whose
    methods answer from the script, and ``watch``, whose streams do; a fake clock for the
    backend's waits."""
    script: list[Expected] = field(default_factory=list)
    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)
    t: float = 0.0
    server: str = SERVER

    def expect(self, method: str, *args: Any, answer: Any = None, raises: int | None = None, **kwargs: Any) -> None:
        self.script.append(Expected(method, args, kwargs, answer, raises))

    def _call(self, method: str, args: tuple, kwargs: dict) -> Any:
        self.calls.append((method, args, kwargs))
        if not self.script:
            raise UnscriptedCall(f"unscripted {method}{args} {kwargs}: the script is used up")
        e = self.script[0]
        if (e.method, e.args, e.kwargs) != (method, args, kwargs):
            raise UnscriptedCall(f"unscripted {method}{args} {kwargs}; expected {e.method}{e.args} {e.kwargs}")
        self.script.pop(0)
        if e.raises:
            exc = ApiException(status=e.raises, reason="Not Found" if e.raises == 404 else "Bad Request")
            exc.body = json.dumps({"reason": exc.reason, "message": f"{method}: {exc.reason}"})
            raise exc
        return e.answer

    def watch(self, list_method: str, *args: Any, **kwargs: Any) -> Any:
        """A watch over ``core.LIST_METHOD``, scripted as ``watch.LIST_METHOD`` whose answer is
        its events, (type, object) pairs; the request is made at the first event asked for, and
        after the last the stream lasts until the server's ``timeout_seconds``."""
        yield from self._call(f"watch.{list_method}", args, kwargs) or []
        self.t += kwargs["timeout_seconds"]

    def __getattr__(self, group: str) -> Any:
        if group not in ("core", "apps", "custom"):
            raise AttributeError(group)
        fake = self

        class Group:
            def __getattr__(self, name: str) -> Any:
                return lambda *a, **kw: fake._call(f"{group}.{name}", a, kw)

        return Group()

    @staticmethod
    def serialize(obj: Any) -> Any:
        return obj

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def proxy_settings(self) -> dict[str, Any]:
        return {"headers": {"Authorization": "Bearer t"}, "verify": False, "cert": None}


@pytest.fixture
def kube(stage_harness):
    fake = FakeKube()
    h = stage_harness(hosts=K8S)
    h.engine.steps.kube = lambda ctx: fake
    yield h, fake
    assert not fake.script, f"scripted but never called: {[e.method for e in fake.script]}"


def node(ready: bool = True, gpus: int = 8) -> dict:
    return {"metadata": {"name": "gpu-01"},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "allocatable": {"nvidia.com/gpu": str(gpus)},
                       "nodeInfo": {"containerRuntimeVersion": "containerd://1.7.27", "kubeletVersion": "v1.31.4"}}}


def pod(name: str, ns: str = "serving", phase: str = "Running", *, owner: tuple[str, str] | None = None,
        gpus: int = 8, image_id: str = DIGEST, restarts: int = 0, terminated: dict | None = None,
        labels: dict | None = None, port: int = 8000, rv: str | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {"app": "kimi"}}
    if rv:
        meta["resourceVersion"] = rv
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {"metadata": meta,
            "spec": {"nodeName": "gpu-01", "containers": [{"name": "vllm", "image": IMAGE, "args": ["--port", str(port)],
                                                           "ports": [{"containerPort": port}],
                                                           "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "vllm", "imageID": image_id,
                                                               "restartCount": restarts, "state": state}]}}


# ---------------------------------------------------------------- the var and its default

def test_k3_workload_backend_picks_the_kubernetes_backend_and_a_bad_value_is_refused(tmp_path):
    from k3rollout.model import load_inventory

    assert workload_for({"k3_workload_backend": "kubernetes"}).kind == "kubernetes"
    inv = tmp_path / "hosts.yml"
    for value, why in (("podman", "must be docker, kubernetes or slurm"), ("kubernetes", "needs scheduler: kubernetes")):
        inv.write_text(f"all:\n  vars:\n    scheduler: slurm\n  hosts:\n    gpu-01:\n      k3_workload_backend: {value}\n")
        with pytest.raises(InputError, match=why):
            load_inventory(inv, resolver="native")


def test_pod_names_are_deterministic_per_run_node_and_purpose_and_dns_labels():
    a = pod_name("run-1", "gpu-01", "cuda-init")
    assert a == pod_name("run-1", "gpu-01", "cuda-init")
    assert a != pod_name("run-2", "gpu-01", "cuda-init") != pod_name("run-1", "gpu-02", "cuda-init")
    long = pod_name("r", "Node_With.A-very-long-name-" + "x" * 80, "k3rollout-features")
    assert len(long) <= 63 and long == long.lower() and long[0].isalnum() and long[-1].isalnum()


# ---------------------------------------------------------------- the CUDA check pod

def test_the_cuda_check_runs_in_a_pinned_pod_tolerating_the_cordon_and_is_deleted_after(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"gpu_allocatable": 8})
    name = pod_name("unit-run", "gpu-01", "cuda-init")
    fake.expect("core.create_namespaced_pod", NS, ANY,
                answer={"metadata": {"name": name}})
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Pending", rv="41"))
    # Pending: watched from the resourceVersion read (a change between the two is not lost)
    # until it ends, instead of polled
    fake.expect("watch.list_namespaced_pod", NS, field_selector=f"metadata.name={name}", timeout_seconds=600,
                resource_version="41",
                answer=[("MODIFIED", pod(name, NS, "Running", rv="42")),
                        ("MODIFIED", pod(name, NS, "Succeeded", rv="43",
                                         terminated={"exitCode": 0, "reason": "Completed"}))])
    fake.expect("core.read_namespaced_pod_log", name, NS, answer="cuda_available=True device_count=8\n")
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, answer={"status": "Success"})
    res = ctx.workload.run_check(ctx, "cuda-init", IMAGE, "python3", ["-c", "import torch"])
    assert res.ok and "device_count=8" in res.stdout
    body = fake.calls[0][1][1]
    spec = body["spec"]
    assert spec["nodeName"] == "gpu-01"                           # the scheduler (and the cordon) bypassed
    assert spec["tolerations"] == [{"operator": "Exists"}]       # every taint, as the GPU Operator validator
    assert spec["restartPolicy"] == "Never"
    c = spec["containers"][0]
    assert c["command"] == ["python3"] and c["args"] == ["-c", "import torch"] and c["image"] == IMAGE
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}   # the node's GPUs through the device plugin
    assert body["metadata"]["labels"]["k3rollout.io/node"] == "gpu-01"
    assert fake.t == 0.0                                          # no poll while Pending: the watch said
    api_steps = [s for s in h.steps() if s.get("kind") == "api"]
    assert [s["step"] for s in api_steps] == ["cuda-init-pod", "cuda-init-pod-wait", "cuda-init", "cuda-init-pod-delete"]
    assert api_steps[0]["once"] is True and all(s["ran_on"] == SERVER for s in api_steps)


def test_a_failed_check_pod_is_a_failed_check_with_its_exit_code_and_log(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"gpu_allocatable": 8})
    name = pod_name("unit-run", "gpu-01", "cuda-init")
    fake.expect("core.create_namespaced_pod", NS, ANY, answer={"metadata": {"name": name}})
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Failed", terminated={
        "exitCode": 3, "reason": "Error"}))
    fake.expect("core.read_namespaced_pod_log", name, NS, answer="RuntimeError: CUDA error 802\n")
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, answer={})
    res = ctx.workload.run_check(ctx, "cuda-init", IMAGE, "python3", ["-c", "x"])
    assert res.rc == 3 and "802" in res.stdout and "Failed: Error" in res.stderr


def test_a_check_pod_created_before_a_crash_is_found_by_name_not_created_twice(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"gpu_allocatable": 8})
    name = pod_name("unit-run", "gpu-01", "cuda-init")
    # the create was journaled as started and the controller died before its outcome
    h.engine.steps.record("step_started", node="gpu-01", stage=ctx.stage, step="cuda-init-pod",
                          key=f"{ctx.folder}/cuda-init-pod", argv=["POST", "x"], kind="api", once=True, durable=True)
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Running"))      # the probe finds it
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Succeeded",
                                                                 terminated={"exitCode": 0}))
    fake.expect("core.read_namespaced_pod_log", name, NS, answer="ok\n")
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, answer={})
    assert ctx.workload.run_check(ctx, "cuda-init", IMAGE, "python3", ["-c", "x"]).ok
    assert not any(m == "core.create_namespaced_pod" for m, _, _ in fake.calls)
    assert [r["took_effect"] for r in h.steps("step_settled")] == [True]


# ---------------------------------------------------------------- after the driver stage

def test_cuda_check_waits_for_the_node_ready_with_its_gpus_allocatable_and_times_out_failing(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"gpu_allocatable": 8})
    fake.expect("core.read_node", "gpu-01", answer=node(ready=False, gpus=0))
    # then watched (the node's current state first, then its changes) until the device plugin
    # advertises the GPUs again, instead of polled
    fake.expect("watch.list_node", field_selector="metadata.name=gpu-01", timeout_seconds=600,
                answer=[("ADDED", node(ready=False, gpus=0)), ("MODIFIED", node(ready=True, gpus=0)),
                        ("MODIFIED", node(ready=True, gpus=8))])
    ok, why, facts = ctx.workload.after_driver(ctx, 600)
    assert ok and facts == {"node_ready": True, "gpu_allocatable": 8} and fake.t == 0.0

    fake.expect("core.read_node", "gpu-01", answer=node(ready=True, gpus=7))
    fake.expect("watch.list_node", field_selector="metadata.name=gpu-01", timeout_seconds=4,
                answer=[("ADDED", node(ready=True, gpus=7))])
    ok, why, facts = ctx.workload.after_driver(ctx, 4)
    assert not ok and "7 allocatable nvidia.com/gpu of 8 after 4s" in why


def test_where_the_api_server_refuses_the_watch_the_node_wait_polls(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"gpu_allocatable": 8})
    fake.expect("core.read_node", "gpu-01", answer=node(ready=False, gpus=0))
    # no watch right (RBAC grants get, list and watch apart): 403, and the wait polls the node
    fake.expect("watch.list_node", field_selector="metadata.name=gpu-01", timeout_seconds=600, raises=403)
    fake.expect("core.read_node", "gpu-01", answer=node(ready=True, gpus=0))
    fake.expect("core.read_node", "gpu-01", answer=node(ready=True, gpus=8))
    ok, why, facts = ctx.workload.after_driver(ctx, 600)
    assert ok and facts == {"node_ready": True, "gpu_allocatable": 8} and fake.t == 4.0


# ---------------------------------------------------------------- baseline

def test_baseline_records_runtime_pods_owners_digests_and_the_failed_attempts_previous_log(kube):
    h, fake = kube
    ctx = h.ctx("baseline")
    serving = pod("kimi-k2-7d9f-abcde", owner=("ReplicaSet", "kimi-k2-7d9f"), restarts=2)
    failed = pod("kimi-k3-0", ns="serving", phase="Running", owner=("StatefulSet", "kimi-k3"), restarts=5)
    ds = pod("nvidia-device-plugin-x", ns="gpu-operator", owner=("DaemonSet", "plugin"), gpus=0)
    fake.expect("core.read_node", "gpu-01", answer=node())
    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01",
                answer={"items": [serving, failed, ds]})
    wl = ctx.workload
    f = wl.runtime_facts(ctx)
    assert f["container_runtime"] == "containerd://1.7.27" and f["gpu_allocatable"] == 8
    assert f["containers"][0] == {"name": "serving/kimi-k2-7d9f-abcde", "image": IMAGE, "state": "running"}
    assert f["pod_gpu_requests"] == {"serving/kimi-k2-7d9f-abcde": 8, "serving/kimi-k3-0": 8}

    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01",
                answer={"items": [serving, ds]})
    fake.expect("apps.read_namespaced_replica_set", "kimi-k2-7d9f", "serving", answer={
        "metadata": {"ownerReferences": [{"kind": "Deployment", "name": "kimi-k2", "controller": True}]}})
    fake.expect("apps.read_namespaced_deployment", "kimi-k2", "serving", answer={
        "spec": {"selector": {"matchLabels": {"app": "kimi"}}}, "status": {"readyReplicas": 2}})
    (s,) = wl.serving_workloads(ctx, f["containers"])
    assert s["owner"] == {"kind": "Deployment", "name": "kimi-k2", "namespace": "serving", "ready_replicas": 2,
                          "selector": {"app": "kimi"}}
    assert s["digest"] == DIGEST and s["restarts"] == 2 and s["gpus"] == 8

    fake.expect("core.read_namespaced_pod_log", "kimi-k3-0", "serving", answer="INFO loading\n")
    fake.expect("core.read_namespaced_pod_log", "kimi-k3-0", "serving", previous=True,
                answer="RuntimeError: The NVIDIA driver on your system is too old (found version 12090)\n")
    (fail,) = wl.prior_failures(ctx, f["containers"], ["kimi-k3"])
    assert fail["container"] == "serving/kimi-k3-0" and fail["triage"] == "driver_incompatible"


# ---------------------------------------------------------------- test servers and the pod proxy

def test_a_test_server_is_a_pinned_pod_reached_through_the_api_servers_pod_proxy(kube):
    h, fake = kube
    ctx = h.ctx("vllm_smoke", baseline={"gpu_allocatable": 8})
    name = pod_name("unit-run", "gpu-01", "k3rollout-smoke")
    fake.expect("core.create_namespaced_pod", NS, ANY, answer={"metadata": {"name": name}})
    assert ctx.workload.start_server(ctx, "k3rollout-smoke", IMAGE, "moonshotai/Kimi-K3", ["--trust-remote-code"],
                                     8000).ok
    c = fake.calls[0][1][1]["spec"]["containers"][0]
    assert c["args"] == ["moonshotai/Kimi-K3", "--trust-remote-code", "--port", "8000"]
    url, client = h.engine.steps._target(ctx, 8000)
    assert url == f"{SERVER}/api/v1/namespaces/{NS}/pods/{name}:8000/proxy"
    assert client is not h.engine.steps.api                       # the kubeconfig's credentials, not the plain one
    # a Pending pod (image pulling, GPUs being allocated) has not ended: it is starting
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Pending"))
    assert ctx.workload.server_state(ctx, "k3rollout-smoke", "s").running
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Running", restarts=1))
    assert ctx.workload.server_restarts(ctx, "k3rollout-smoke", "r") == ("running", 1)
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Failed", terminated={"exitCode": 1}))
    st = ctx.workload.server_state(ctx, "k3rollout-smoke", "s")
    assert not st.running and st.exit_code == "1"
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, raises=404)
    assert ctx.workload.remove_server(ctx, "k3rollout-smoke", "rm").ok     # gone already is fine
    # after the server is removed, a request for the port looks for a pod that serves it
    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01", answer={"items": []})
    url, _ = h.engine.steps._target(ctx, 8000)
    assert url.startswith("k3rollout-no-pod://")


def test_a_replica_member_runs_on_the_host_network_with_its_launch_environment(kube):
    h, fake = kube
    ctx = h.ctx("vllm_smoke", baseline={"gpu_allocatable": 8})
    fake.expect("core.create_namespaced_pod", NS, ANY, answer={"metadata": {"name": "x"}})
    ctx.workload.start_server(ctx, "k3rollout-smoke", IMAGE, "m", ["--headless"], 8000, {"NCCL_SOCKET_IFNAME": "ib0"})
    spec = fake.calls[0][1][1]["spec"]
    assert spec["hostNetwork"] is True and spec["containers"][0]["env"] == [{"name": "NCCL_SOCKET_IFNAME",
                                                                              "value": "ib0"}]


# ---------------------------------------------------------------- the node's own workloads

SERVING = {"name": "serving/kimi-k2-7d9f-abcde", "image": IMAGE, "digest": DIGEST,
           "owner": {"kind": "Deployment", "name": "kimi-k2", "namespace": "serving", "ready_replicas": 2,
                     "selector": {"app": "kimi"}}}
DEPLOYMENT = ("apps.read_namespaced_deployment", "kimi-k2", "serving")


def test_after_the_uncordon_owners_are_waited_for_until_back_to_baseline_ready_and_digest(kube):
    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING]})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer={"items": [pod("a")]})
    # one replica short: the Deployment is watched (its current state first) until its
    # readyReplicas is back, instead of polled, then everything is looked at again
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("watch.list_namespaced_deployment", "serving", field_selector="metadata.name=kimi-k2",
                timeout_seconds=1800, api="apps",
                answer=[("ADDED", {"status": {"readyReplicas": 1}}), ("MODIFIED", {"status": {"readyReplicas": 2}})])
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 2}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a"), pod("b", restarts=1)]})
    got = ctx.workload.prove_serving(ctx)
    assert not got.failed and fake.t == 0.0 and got.back == ["serving/kimi-k2-7d9f-abcde"]
    owner = got.facts["serving_owners"]["Deployment/serving/kimi-k2"]
    assert owner["ready"] == 2 and owner["baseline_ready"] == 2 and owner["digests"] == ["sha256:" + "a" * 64]
    assert not any(m.endswith(("create_namespaced_pod", "delete_namespaced_pod")) for m, _, _ in fake.calls)


def test_an_owner_back_on_another_digest_or_not_back_in_time_fails_the_uncordon_stage(kube):
    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING]})
    other = "docker.io/vllm/vllm-openai@sha256:" + "b" * 64
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 2}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a", image_id=other), pod("b")]})
    ctx.params = ctx.params.model_copy(update={"serving_ready_timeout": 5.0})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 2}})          # the last look, at 5 s
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a", image_id=other), pod("b")]})
    got = ctx.workload.prove_serving(ctx)
    assert got.failed == ["Deployment/serving/kimi-k2"]
    assert "runs sha256:" + "b" * 64 in got.reason and "not baseline's" in got.reason and "after 5s" in got.reason


def test_the_smoke_stage_never_stops_an_owners_pod(kube):
    h, fake = kube
    ctx = h.ctx("vllm_smoke", baseline={"serving_containers": [SERVING]})
    assert ctx.workload.release_gpus(ctx) == [] and fake.calls == []


def test_observe_starts_no_gpu_work_on_a_node_whose_gpus_belong_to_pods(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check")
    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01",
                answer={"items": [pod("kimi-k2-x")]})
    ok, why = ctx.workload.gpu_work_allowed(ctx)
    assert not ok and "allocated to pods (serving/kimi-k2-x)" in why


def test_a_workload_probe_goes_through_the_pod_proxy_to_a_running_pod_of_its_owner(kube):
    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING]})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 2}})
    elsewhere = pod("kimi-k2-7d9f-zzzzz")
    elsewhere["spec"]["nodeName"] = "gpu-07"
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [elsewhere, pod("kimi-k2-7d9f-new01"), pod("kimi-k2-7d9f-pend", phase="Pending")]})
    assert ctx.workload.route_to_serving(ctx, SERVING, 8000) == ""
    url, _ = h.engine.steps._target(ctx, 8000)
    assert url == f"{SERVER}/api/v1/namespaces/serving/pods/kimi-k2-7d9f-new01:8000/proxy"   # this node's first
    ctx.workload.unroute(ctx, 8000)
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 0}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer={"items": []})
    assert "no Running pod of Deployment serving/kimi-k2" in ctx.workload.route_to_serving(ctx, SERVING, 8000)


def test_a_recreated_leaderworkerset_group_is_probed_at_its_leader_wherever_it_landed(kube):
    # baseline saw the leader on this node; the recreated group put its worker here and the
    # leader on another node: the probe goes to the leader, never to the headless worker
    h, fake = kube
    lws = {"kind": "LeaderWorkerSet", "name": "k3", "namespace": "serving", "ready_replicas": 1}
    leader_was = {"name": "serving/k3-0", "image": IMAGE, "digest": DIGEST, "owner": lws,
                  "args": ["--port", "8000"]}
    ctx = h.ctx("uncordon", baseline={"serving_containers": [leader_was]})
    lab = "leaderworkerset.sigs.k8s.io/"
    worker = pod("k3-0-1", labels={lab + "name": "k3", lab + "worker-index": "1"})
    worker["spec"]["containers"][0]["args"] += ["--headless"]
    leader = pod("k3-0", labels={lab + "name": "k3", lab + "worker-index": "0"})
    leader["spec"]["nodeName"] = "gpu-02"
    read = ("custom.get_namespaced_custom_object", "leaderworkerset.x-k8s.io", "v1", "serving", "leaderworkersets", "k3")
    fake.expect(*read, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector=lab + "name=k3",
                answer={"items": [worker, leader]})
    assert ctx.workload.route_to_serving(ctx, leader_was, 8000) == ""
    url, _ = h.engine.steps._target(ctx, 8000)
    assert url == f"{SERVER}/api/v1/namespaces/serving/pods/k3-0:8000/proxy"
    ctx.workload.unroute(ctx, 8000)
    # the group's leader not yet Running: no pod to probe, not the worker on this node
    leader["status"]["phase"] = "Pending"
    fake.expect(*read, answer={"status": {"readyReplicas": 0}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector=lab + "name=k3",
                answer={"items": [worker, leader]})
    assert "no Running pod of LeaderWorkerSet serving/k3" in ctx.workload.route_to_serving(ctx, leader_was, 8000)


def test_removing_a_server_waits_until_its_pod_is_gone(kube):
    h, fake = kube
    ctx = h.ctx("vllm_smoke")
    name = pod_name("unit-run", "gpu-01", "k3rollout-smoke")
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, answer={})
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Running", rv="7"))      # terminating
    watch = {"field_selector": f"metadata.name={name}", "timeout_seconds": 120}
    # watched from the resourceVersion read until its DELETED event, instead of polled
    fake.expect("watch.list_namespaced_pod", NS, resource_version="7", **watch,
                answer=[("MODIFIED", pod(name, NS, "Running", rv="8")), ("DELETED", pod(name, NS, "Running", rv="9"))])
    assert ctx.workload.remove_server(ctx, "k3rollout-smoke", "k3rollout-smoke-remove").ok
    assert fake.t == 0.0

    # a watch whose history the server no longer has (410 Expired) starts again with a read
    fake.expect("core.delete_namespaced_pod", name, NS, grace_period_seconds=30, answer={})
    fake.expect("core.read_namespaced_pod", name, NS, answer=pod(name, NS, "Running", rv="7"))
    fake.expect("watch.list_namespaced_pod", NS, resource_version="7", **watch, raises=410)
    fake.expect("core.read_namespaced_pod", name, NS, raises=404)
    assert ctx.workload.remove_server(ctx, "k3rollout-smoke", "k3rollout-smoke-remove-2").ok


def test_a_relaunch_after_a_crash_makes_its_pod_again_once_the_cleanup_removed_it(kube):
    h, fake = kube
    ctx = h.ctx("vllm_smoke", baseline={"gpu_allocatable": 8})
    name = pod_name("unit-run", "gpu-01", "k3rollout-smoke")
    key = f"{ctx.folder}/k3rollout-smoke-run"
    # the first launch's create completed before the controller died
    h.engine.steps.record("step_started", node="gpu-01", stage=ctx.stage, step="k3rollout-smoke-run", key=key,
                          argv=["POST"], kind="api", once=True, durable=True)
    h.engine.steps.record("step_done", node="gpu-01", stage=ctx.stage, step="k3rollout-smoke-run", key=key, rc=0,
                          kind="api", once=True, durable=True)
    fake.expect("core.read_namespaced_pod", name, NS, raises=404)          # the relaunch's cleanup removed it
    fake.expect("core.create_namespaced_pod", NS, ANY, answer={"metadata": {"name": name}})
    assert ctx.workload.start_server(ctx, "k3rollout-smoke", IMAGE, "m", [], 8000).ok
    assert [m for m, _, _ in fake.calls].count("core.create_namespaced_pod") == 1


def test_an_api_refusal_at_baseline_is_a_project_error_the_baseline_stage_turns_into_a_failure(kube):
    """(stages/baseline.py catches K3RolloutError around the workload reads: no change follows.)"""
    from k3rollout.errors import K3RolloutError

    h, fake = kube
    ctx = h.ctx("baseline")
    fake.expect("core.read_node", "gpu-01", raises=403)
    with pytest.raises(K3RolloutError, match=r"cannot read gpu-01 and its pods: .*HTTP 403"):
        ctx.workload.runtime_facts(ctx)


def test_observe_reads_a_serving_workload_through_its_owner_with_restarts_and_digest(kube):
    h, fake = kube
    ctx = h.ctx("cuda_check", baseline={"serving_containers": [{**SERVING, "args": ["--port", "8000"]}]})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 2}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a", restarts=1), pod("b", restarts=2)]})
    got = ctx.workload.serving_status(ctx, SERVING["name"])
    assert got == {"state": "running", "restart_count": 3, "image": IMAGE, "args": ["--port", "8000"],
                   "digest": DIGEST}
    other = "docker.io/vllm/vllm-openai@sha256:" + "c" * 64
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a", image_id=other)]})
    got = ctx.workload.serving_status(ctx, SERVING["name"])
    assert got["state"] == "degraded" and got["digest"] == "sha256:" + "c" * 64


# ---------------------------------------------------------------- preflight (read-only, before any change)

def rs(name: str, deployment: str, ns: str = "serving") -> dict:
    return {"metadata": {"name": name, "namespace": ns,
                         "ownerReferences": [{"kind": "Deployment", "name": deployment, "controller": True}]}}


def script_node_and_namespace(fake: FakeKube, pods: list[dict]) -> None:
    fake.expect("core.read_node", "gpu-01", answer=node())
    fake.expect("core.read_namespace", NS, answer={"metadata": {"name": NS}})
    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01", answer={"items": pods})


def test_preflight_refuses_a_serving_pod_whose_owner_does_not_exist_as_bad_input_naming_the_fix():
    fake = FakeKube()
    script_node_and_namespace(fake, [pod("k3-b300-7d9f-x2m4q", owner=("ReplicaSet", "k3-b300-7d9f")),
                                     pod("check-pod", labels={"app.kubernetes.io/managed-by": "k3rollout"})])
    # the pod's ReplicaSet is there; its Deployment is gone (asked by the check, then by owner_of)
    for _ in range(2):
        fake.expect("apps.read_namespaced_replica_set", "k3-b300-7d9f", "serving", answer=rs("k3-b300-7d9f", "k3-b300"))
        fake.expect("apps.read_namespaced_deployment", "k3-b300", "serving", raises=404)
    got = workload_for(K8S["gpu-01"]).preflight_api(lambda: fake, "gpu-01", K8S["gpu-01"])
    assert not fake.script
    checks = dict(got.checks)
    assert checks["workload_node"].ok and checks["workload_namespace"].ok
    owners = checks["workload_owners"]
    assert not owners.ok and owners.bad_input
    assert owners.detail.startswith("serving pod serving/k3-b300-7d9f-x2m4q names its owner Deployment "
                                    "serving/k3-b300 (through ReplicaSet k3-b300-7d9f), which does not exist: after "
                                    "the drain nothing brings such a pod back")
    assert "Recreate the owner (or delete the stray pod), or leave the node out with --skip-node" in owners.detail
    # k3rollout's own pod is not a serving workload; what the probes may match is listed (the
    # pod's owner is its ReplicaSet: the Deployment it names is gone)
    assert got.serving == ["k3-b300-7d9f", "k3-b300-7d9f-x2m4q", "serving/k3-b300-7d9f-x2m4q"]


def test_preflight_passes_a_node_whose_serving_owners_exist_and_lists_them_for_the_probes():
    fake = FakeKube()
    script_node_and_namespace(fake, [pod("k3-h200-0", owner=("StatefulSet", "k3-h200"),
                                         labels={"leaderworkerset.sigs.k8s.io/name": "k3-h200"})])
    sts = {"metadata": {"name": "k3-h200", "namespace": "serving"}}
    lws = ("leaderworkerset.x-k8s.io", "v1", "serving", "leaderworkersets", "k3-h200")
    fake.expect("apps.read_namespaced_stateful_set", "k3-h200", "serving", answer=sts)
    fake.expect("custom.get_namespaced_custom_object", *lws, answer={"metadata": {"name": "k3-h200"}})
    fake.expect("custom.get_namespaced_custom_object", *lws, answer={"metadata": {"name": "k3-h200"},
                                                                     "status": {"readyReplicas": 1}})
    got = workload_for(K8S["gpu-01"]).preflight_api(lambda: fake, "gpu-01", K8S["gpu-01"])
    assert not fake.script
    assert [(n, v.ok) for n, v in got.checks] == [("workload_node", True), ("workload_namespace", True),
                                                  ("workload_owners", True)]
    assert dict(got.checks)["workload_node"].detail == "node gpu-01: kubelet v1.31.4, containerd://1.7.27"
    assert got.serving == ["k3-h200", "k3-h200-0", "serving/k3-h200-0"]


def test_preflight_refuses_the_kubernetes_backend_where_the_api_server_has_no_such_node_or_no_api():
    fake = FakeKube()
    fake.expect("core.read_node", "gpu-01", raises=404)
    got = workload_for(K8S["gpu-01"]).preflight_api(lambda: fake, "gpu-01", K8S["gpu-01"])
    assert not fake.script
    ((name, verdict),) = got.checks
    assert name == "workload_node" and not verdict.ok and verdict.bad_input
    assert verdict.detail.startswith(f"k3_workload_backend is kubernetes, but the API server {SERVER} has no node "
                                     "gpu-01: check k3_kubeconfig and k3_kube_context")
    # a node under another scheduler has no API server to run Pods through
    hv = {**K8S["gpu-01"], "scheduler": "slurm"}
    ((name, verdict),) = workload_for(hv).preflight_api(None, "gpu-01", hv).checks
    assert not verdict.ok and verdict.bad_input
    assert "k3_workload_backend is kubernetes, but the node's scheduler is slurm" in verdict.detail
    assert "Set scheduler: kubernetes (and k3_kubeconfig), or k3_workload_backend" in verdict.detail


def test_preflight_refuses_the_docker_backend_where_the_kubelet_runs_containerd_even_with_a_docker_cli():
    hv = {"k3_workload_backend": "docker"}
    fake = FakeKube()
    fake.expect("core.read_node", "gpu-01", answer=node())          # containerd://1.7.27
    ((name, verdict),) = workload_for(hv).preflight_api(lambda: fake, "gpu-01", hv).checks
    assert name == "workload_runtime" and not verdict.ok and verdict.bad_input
    assert verdict.detail.startswith("k3_workload_backend is docker, but the kubelet on this node runs "
                                     "containerd://1.7.27 (node.status.nodeInfo.containerRuntimeVersion)")
    assert verdict.detail.endswith("Set k3_workload_backend: kubernetes")
    # cri-dockerd: the kubelet's pods are Docker containers
    docker_node = node()
    docker_node["status"]["nodeInfo"]["containerRuntimeVersion"] = "docker://28.2.2"
    fake.expect("core.read_node", "gpu-01", answer=docker_node)
    ((_, verdict),) = workload_for(hv).preflight_api(lambda: fake, "gpu-01", hv).checks
    assert verdict == (True, "the kubelet runs docker://28.2.2", False)
    # a node under no Kubernetes API is not asked
    assert workload_for(hv).preflight_api(None, "gpu-01", hv).checks == []
    assert not fake.script


def test_a_rollbacks_uncordon_is_healthy_only_once_the_owners_are_back(kube, monkeypatch):
    """The rollback's health gate after its uncordon is the success path's: each owner
    baseline saw back to its readyReplicas on its digest. An owner still short fails it."""
    from k3rollout.stages import cordon

    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING], "scheduler_state": "schedulable"})
    ctx.params = ctx.params.model_copy(update={"serving_ready_timeout": 5.0})
    monkeypatch.setattr(cordon, "health_problems", lambda c, s: [])
    uncordoned = []
    monkeypatch.setattr(cordon.uncordon_stage, "uncordon", lambda c, name: (uncordoned.append(name) or True, ""))
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer={"items": [pod("a")]})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("watch.list_namespaced_deployment", "serving", field_selector="metadata.name=kimi-k2",
                timeout_seconds=5, api="apps", answer=[("ADDED", {"status": {"readyReplicas": 1}})])
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})          # the last look, at 5 s
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer={"items": [pod("a")]})
    ok, why, extra = cordon.uncordon_if_healthy(ctx, {})
    assert uncordoned == ["rollback-uncordon"]
    assert not ok and why.startswith("uncordoned, but") and "has 1 ready replicas of 2" in why, why
    # the node is schedulable again: the result says so, for the report's headline
    assert extra == {"in_service": True}


def _elsewhere(p: dict, node: str | None = "gpu-01", unschedulable: str = "") -> dict:
    p["spec"]["nodeName"] = node
    if unschedulable:
        p["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable", "message": unschedulable}]}
    return p


NO_ROOM = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) were unschedulable."


def test_an_owner_short_only_by_pods_waiting_for_nodes_out_of_service_passes_once_this_node_runs_its_share(kube):
    """A node of the batch that is rolled back keeps its GPUs out of service: the owner's pod
    it ran waits, unschedulable. The node that passed takes its own share back and is not
    failed for the other's: the wait ends when readyReplicas moves, and the note says why."""
    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING]})
    both_pending = [_elsewhere(pod("a"), None, NO_ROOM), _elsewhere(pod("b"), None, NO_ROOM)]
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 0}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer={"items": both_pending})
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 0}})
    fake.expect("watch.list_namespaced_deployment", "serving", field_selector="metadata.name=kimi-k2",
                timeout_seconds=1800, api="apps", answer=[("MODIFIED", {"status": {"readyReplicas": 1}})])
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi",
                answer={"items": [pod("a"), _elsewhere(pod("b"), None, NO_ROOM)]})
    got = ctx.workload.prove_serving(ctx)
    assert not got.failed and fake.t == 0.0, got.reason
    (note,) = got.facts["serving_short_elsewhere"]
    assert "has 1 ready replicas of 2" in note and "1 pod(s) wait for GPUs" in note and NO_ROOM in note


def test_an_owner_short_while_this_node_runs_none_of_its_pods_still_fails(kube):
    h, fake = kube
    ctx = h.ctx("uncordon", baseline={"serving_containers": [SERVING]})
    ctx.params = ctx.params.model_copy(update={"serving_ready_timeout": 5.0})
    pods = {"items": [_elsewhere(pod("a"), "gpu-02"), _elsewhere(pod("b"), None, NO_ROOM)]}
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer=pods)
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})
    fake.expect("watch.list_namespaced_deployment", "serving", field_selector="metadata.name=kimi-k2",
                timeout_seconds=5, api="apps", answer=[])
    fake.expect(*DEPLOYMENT, answer={"status": {"readyReplicas": 1}})          # the last look, at 5 s
    fake.expect("core.list_namespaced_pod", "serving", label_selector="app=kimi", answer=pods)
    got = ctx.workload.prove_serving(ctx)
    assert got.failed == ["Deployment/serving/kimi-k2"] and "has 1 ready replicas of 2" in got.reason


# ---------------------------------------------------------------- a ReplicaSet that no Deployment owns

ORPHAN_RS = ("apps.read_namespaced_replica_set", "kimi-k2-7d9f", "serving")


def orphan_rs(ready: int, deployment: str | None = None) -> dict:
    meta: dict[str, Any] = {"name": "kimi-k2-7d9f", "namespace": "serving"}
    if deployment:
        meta["ownerReferences"] = [{"kind": "Deployment", "name": deployment, "controller": True}]
    return {"metadata": meta, "spec": {"selector": {"matchLabels": {"app": "kimi", "pod-template-hash": "7d9f"}}},
            "status": {"readyReplicas": ready}}


@pytest.mark.parametrize("deployment", [None, "kimi-k2"], ids=["no-owner", "deployment-gone"])
def test_a_pod_of_a_replicaset_without_a_deployment_is_owned_by_that_replicaset_and_waited_for(kube, deployment):
    """A ReplicaSet left without its Deployment (``--cascade=orphan`` removes the owner
    reference; a Deployment just deleted leaves it dangling until the garbage collector
    comes) still recreates its pods: baseline records it as the owner, and after the
    uncordon its readyReplicas is watched like any other owner's."""
    h, fake = kube
    ctx = h.ctx("baseline")
    serving = pod("kimi-k2-7d9f-abcde", owner=("ReplicaSet", "kimi-k2-7d9f"),
                  labels={"app": "kimi", "pod-template-hash": "7d9f"})
    fake.expect("core.list_pod_for_all_namespaces", field_selector="spec.nodeName=gpu-01", answer={"items": [serving]})
    fake.expect(*ORPHAN_RS, answer=orphan_rs(2, deployment))
    if deployment:
        fake.expect("apps.read_namespaced_deployment", deployment, "serving", raises=404)
    (s,) = ctx.workload.serving_workloads(ctx, [])
    assert s["owner"] == {"kind": "ReplicaSet", "name": "kimi-k2-7d9f", "namespace": "serving", "ready_replicas": 2,
                          "selector": {"app": "kimi", "pod-template-hash": "7d9f"}}

    ctx = h.ctx("uncordon", baseline={"serving_containers": [s]})
    selector = "app=kimi,pod-template-hash=7d9f"
    fake.expect(*ORPHAN_RS, answer=orphan_rs(1, deployment))
    fake.expect("core.list_namespaced_pod", "serving", label_selector=selector, answer={"items": [pod("a")]})
    # one replica short: the ReplicaSet is watched until its readyReplicas is back, not polled
    fake.expect(*ORPHAN_RS, answer=orphan_rs(1, deployment))
    fake.expect("watch.list_namespaced_replica_set", "serving", field_selector="metadata.name=kimi-k2-7d9f",
                timeout_seconds=1800, api="apps", answer=[("MODIFIED", orphan_rs(2, deployment))])
    fake.expect(*ORPHAN_RS, answer=orphan_rs(2, deployment))
    fake.expect("core.list_namespaced_pod", "serving", label_selector=selector, answer={"items": [pod("a"), pod("b")]})
    got = ctx.workload.prove_serving(ctx)
    assert not got.failed and fake.t == 0.0, got.reason
    assert got.back == ["serving/kimi-k2-7d9f-abcde"]
    assert got.facts["serving_owners"]["ReplicaSet/serving/kimi-k2-7d9f"]["ready"] == 2
