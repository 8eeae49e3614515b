"""Containerd nodes of the simulated cluster: Pods the API server binds are run by the node's
simulated kubelet in the node's one container model (GPU checks, CUDA init, the vLLM server),
the device plugin's nvidia.com/gpu follows the driver, owners (Deployment, LeaderWorkerSet)
recreate what an eviction takes, and the official Python client drives it all over a real socket."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from k3sim import netd
from k3sim import state as st
from k3sim.dispatch import dispatch
from k3sim.kubeapi import KubeApiServer

NS = "inference"
CONTAINERD = {"sim_container_runtime": "containerd", "sim_crash_backoff_s": 0.05}
B300 = {"k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_mem_gib": 268}


def make_cluster(root: Path, spare: int = 1) -> None:
    """Two B300 nodes behind a Deployment, two H200 nodes holding one 2-node LeaderWorkerSet group,
    and ``spare`` containerd nodes that serve nothing."""
    for n in ("gpu-b01", "gpu-b02"):
        st.init_host(root / n, n, {**CONTAINERD, **B300, "sim_k8s_serving": {"kind": "Deployment", "name": "k3-b300"}})
    for n in ("gpu-a01", "gpu-a02"):
        st.init_host(root / n, n, {**CONTAINERD, "sim_k8s_serving": {"kind": "LeaderWorkerSet", "name": "k3-h200",
                                                                     "size": 2}})
    for i in range(spare):
        st.init_host(root / f"gpu-c0{i + 1}", f"gpu-c0{i + 1}", dict(CONTAINERD))


@pytest.fixture
def cluster(tmp_path):
    root = tmp_path / "sim"
    make_cluster(root)
    try:
        with KubeApiServer(root) as api:
            api.root = root
            api.http = httpx.Client(base_url=api.url, timeout=60)
            k8s_config.load_kube_config(config_file=str(api.kubeconfig(tmp_path / "kubeconfig")))
            api.core, api.apps = k8s.CoreV1Api(), k8s.AppsV1Api()
            api.custom = k8s.CustomObjectsApi()
            yield api
    finally:
        netd.shutdown(root)


def probe_pod(name: str, node: str | None, command: list[str], image: str = "vllm/vllm-openai:v0.11.0",
              gpus: int = 1, policy: str = "Never") -> dict:
    spec: dict = {"restartPolicy": policy, "containers": [{
        "name": "probe", "image": image, "command": command,
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def pods(api, selector: str = "") -> list:
    return api.core.list_namespaced_pod(NS, label_selector=selector).items


def wait_for(fn, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_pinned_probe_pod_gets_a_gpu_from_the_device_plugin_and_succeeds(cluster):
    node = cluster.core.read_node("gpu-c01")
    assert node.status.allocatable["nvidia.com/gpu"] == "8" and node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.node_info.container_runtime_version == "containerd://1.7.24"
    cluster.core.create_namespaced_pod("default", probe_pod("smi", "gpu-c01", ["nvidia-smi", "-L"]))
    pod = cluster.core.read_namespaced_pod("smi", "default")
    assert pod.status.phase == "Succeeded"
    cs = pod.status.container_statuses[0]
    assert cs.state.terminated.exit_code == 0 and cs.state.terminated.reason == "Completed"
    # the kubelet reports the repository digest, as containerd resolved it
    assert cs.image_id == "docker.io/vllm/vllm-openai@" + st.REGISTRY["vllm/vllm-openai:v0.11.0"]["digest"]
    log = cluster.core.read_namespaced_pod_log("smi", "default")
    assert "GPU 0: NVIDIA H200" in log and log.count("GPU ") == 8


def test_create_conflicts_invalid_bodies_and_delete_answer_as_the_real_api(cluster):
    body = probe_pod("twice", "gpu-c01", ["nvidia-smi", "-L"], gpus=0)
    assert cluster.http.post("/api/v1/namespaces/default/pods", json=body).status_code == 201
    r = cluster.http.post("/api/v1/namespaces/default/pods", json=body)
    assert r.status_code == 409 and r.json()["reason"] == "AlreadyExists"
    assert r.json()["message"] == 'pods "twice" already exists'
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noimage"}, "spec": {"containers": [{"name": "c"}]}}
    r = cluster.http.post("/api/v1/namespaces/default/pods", json=bad)
    assert r.status_code == 422 and r.json()["reason"] == "Invalid"
    assert r.json()["message"] == 'Pod "noimage" is invalid: spec.containers[0].image: Required value'
    r = cluster.http.delete("/api/v1/namespaces/default/pods/twice")
    assert r.status_code == 200 and r.json()["metadata"]["deletionTimestamp"]
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 30
    r = cluster.http.delete("/api/v1/namespaces/default/pods/twice")
    assert r.status_code == 404 and r.json()["message"] == 'pods "twice" not found'


def test_a_cuda13_image_on_r575_fails_to_start_with_the_nvidia_hooks_refusal(cluster):
    cluster.core.create_namespaced_pod("default", probe_pod(
        "cuda13", "gpu-c01", ["python3", "-c", "import torch; torch.cuda.init()"], image="vllm/vllm-openai:kimi-k3"))
    pod = cluster.core.read_namespaced_pod("cuda13", "default")
    t = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Failed" and t.reason == "StartError" and t.exit_code == 128
    assert t.message.startswith("failed to create containerd task: failed to create shim task: OCI runtime create")
    assert "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0" in t.message
    # the image came into the CRI store (k8s.io namespace), which crictl reads
    r = dispatch(cluster.root / "gpu-c01", ["crictl", "images"])
    assert r.rc == 0 and "docker.io/vllm/vllm-openai   kimi-k3" in r.stdout


def test_gpus_in_use_keep_a_pod_pending_or_refuse_a_pinned_one(cluster):
    # every serving node's GPUs belong to its serving pod
    cluster.core.create_namespaced_pod("default", probe_pod("wants8", None, ["vllm", "serve"], gpus=8, policy="Always"))
    cluster.core.create_namespaced_pod("default", probe_pod("wants8b", None, ["nvidia-smi", "-L"], gpus=8))
    placed = cluster.core.read_namespaced_pod("wants8", "default")
    assert placed.spec.node_name == "gpu-c01"          # the only node with 8 free
    waiting = cluster.core.read_namespaced_pod("wants8b", "default")
    assert waiting.status.phase == "Pending" and waiting.spec.node_name is None
    r = cluster.http.get("/api/v1/namespaces/default/pods/wants8b/proxy/health")
    assert (r.status_code, r.json()["reason"], r.json()["message"]) == (400, "BadRequest", "address not allowed")
    cond = waiting.status.conditions[0]
    assert cond.type == "PodScheduled" and cond.reason == "Unschedulable"
    assert cond.message.startswith("0/5 nodes are available: 5 Insufficient nvidia.com/gpu.")
    # pinned with nodeName: the scheduler is bypassed, the kubelet's device manager refuses it
    cluster.core.create_namespaced_pod("default", probe_pod("pinned", "gpu-b01", ["nvidia-smi", "-L"], gpus=1))
    pinned = cluster.core.read_namespaced_pod("pinned", "default")
    assert pinned.status.phase == "Failed" and pinned.status.reason == "UnexpectedAdmissionError"
    assert "Requested: 1, Available: 0" in pinned.status.message


def test_the_device_plugin_advertises_no_gpus_while_the_driver_is_unloaded_or_the_node_reboots(cluster):
    def gpus() -> tuple[str, str]:
        n = cluster.core.read_node("gpu-c01").status
        return n.capacity["nvidia.com/gpu"], n.allocatable["nvidia.com/gpu"]

    assert gpus() == ("8", "8")
    for unit in ("nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager"):
        dispatch(cluster.root / "gpu-c01", ["systemctl", "stop", unit])
    assert dispatch(cluster.root / "gpu-c01", ["modprobe", "-r", "nvidia"]).rc == 0
    assert gpus() == ("0", "0")
    # a GPU pod pinned now is refused by the device manager
    cluster.core.create_namespaced_pod("default", probe_pod("nogpu", "gpu-c01", ["nvidia-smi", "-L"]))
    assert cluster.core.read_namespaced_pod("nogpu", "default").status.reason == "UnexpectedAdmissionError"
    # the reboot lasts until the test ends it (a reboot of a fraction of a second was over
    # before the first look on a loaded machine)
    with st.transaction(cluster.root / "gpu-c01") as s:
        s["reboot_s"] = 3600.0
    assert dispatch(cluster.root / "gpu-c01", ["reboot"]).rc == 0
    assert gpus() == ("0", "0")                       # rebooting
    taints = {(t.key, t.effect) for t in cluster.core.read_node("gpu-c01").spec.taints}
    assert taints == {("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
    with st.transaction(cluster.root / "gpu-c01") as s:
        s["down_until"] = time.time() - 1             # the boot ends
    wait_for(lambda: st.is_up(st.load(cluster.root / "gpu-c01"), time.time()))
    assert gpus() == ("8", "8")                       # the module loaded at boot


def test_previous_logs_show_the_r575_failure_and_a_pod_without_one_answers_the_real_400(cluster):
    pod = pods(cluster, "app=k3-b300")[0]
    name = pod.metadata.name
    cs = pod.status.container_statuses[0]
    assert cs.restart_count == 1 and cs.state.running and cs.last_state.terminated.exit_code == 1
    prev = cluster.core.read_namespaced_pod_log(name, NS, previous=True)
    assert "Error 35: CUDA driver version is insufficient for CUDA runtime version" in prev
    now = cluster.core.read_namespaced_pod_log(name, NS, tail_lines=1)
    assert now == "INFO:     Application startup complete.\n"
    cluster.core.create_namespaced_pod("default", probe_pod("once", "gpu-c01", ["nvidia-smi", "-L"], gpus=0))
    r = cluster.http.get("/api/v1/namespaces/default/pods/once/log", params={"previous": "true"})
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == 'previous terminated container "probe" in pod "once" not found'


def test_the_pod_proxy_reaches_the_pods_server_and_streams_sse(cluster):
    name = pods(cluster, "app=k3-b300")[0].metadata.name
    base = f"/api/v1/namespaces/{NS}/pods/{name}"
    assert cluster.http.get(f"{base}:8001/proxy/health").status_code == 200
    models = cluster.http.get(f"{base}/proxy/v1/models").json()       # the declared containerPort
    assert models["data"][0]["id"] == "moonshotai/Kimi-K2-Thinking"
    req = {"model": "moonshotai/Kimi-K2-Thinking", "stream": True, "max_tokens": 16,
           "messages": [{"role": "user", "content": "hello"}]}
    events = []
    with cluster.http.stream("POST", f"{base}:8001/proxy/v1/chat/completions", json=req) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]" and len(events) > 3
    assert json.loads(events[0])["object"] == "chat.completion.chunk"
    # a pod on the pod network is not at the node's address
    ip = cluster.core.read_namespaced_pod(name, NS).status.pod_ip
    assert ip != st.load(cluster.root / cluster.core.read_namespaced_pod(name, NS).spec.node_name)["address"]
    # nothing listens on another port of the pod: the proxy's 503
    r = cluster.http.get(f"{base}:9999/proxy/health")
    assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable"
    assert r.json()["message"] == f"error trying to reach service: dial tcp {ip}:9999: connect: connection refused"


def test_an_evicted_deployment_pod_is_recreated_pending_then_lands_after_uncordon(cluster):
    # fill the spare node so no node has 8 free GPUs
    cluster.core.create_namespaced_pod("default", probe_pod("hold", "gpu-c01", ["vllm", "serve"], gpus=8,
                                                            policy="Always"))
    victim = next(p for p in pods(cluster, "app=k3-b300") if p.spec.node_name == "gpu-b01")
    ip = victim.status.pod_ip
    cluster.core.patch_node("gpu-b01", {"spec": {"unschedulable": True}})
    cluster.core.create_namespaced_pod_eviction(victim.metadata.name, NS, k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name=victim.metadata.name, namespace=NS)))
    # the kubelet stopped its server: the old address answers nothing
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{ip}:8001/health", timeout=2)
    now = pods(cluster, "app=k3-b300")
    assert victim.metadata.name not in [p.metadata.name for p in now] and len(now) == 2
    repl = next(p for p in now if p.spec.node_name is None)
    assert repl.status.phase == "Pending" and "1 node(s) were unschedulable" in repl.status.conditions[0].message
    dep = cluster.apps.read_namespaced_deployment("k3-b300", NS)
    assert (dep.status.replicas, dep.status.ready_replicas) == (2, 1)
    cluster.core.patch_node("gpu-b01", {"spec": {"unschedulable": False}})
    back = wait_for(lambda: [p for p in pods(cluster, "app=k3-b300") if p.spec.node_name == "gpu-b01"
                             and p.status.container_statuses and p.status.container_statuses[0].ready])
    assert back and back[0].metadata.name == repl.metadata.name
    assert cluster.apps.read_namespaced_deployment("k3-b300", NS).status.ready_replicas == 2


def test_evicting_one_pod_of_a_leaderworkerset_group_recreates_the_whole_group(cluster):
    group = {p.metadata.name: p for p in pods(cluster, "leaderworkerset.sigs.k8s.io/name=k3-h200")}
    assert sorted(group) == ["k3-h200-0", "k3-h200-0-1"]
    worker = group["k3-h200-0-1"]
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["LWS_LEADER_ADDRESS"] == "k3-h200-0.k3-h200.inference"
    assert (env["LWS_GROUP_SIZE"], env["LWS_WORKER_INDEX"]) == ("2", "1")
    assert worker.metadata.labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
    lws = cluster.custom.get_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets",
                                                      "k3-h200")
    assert lws["status"]["readyReplicas"] == 1
    cluster.core.create_namespaced_pod_eviction("k3-h200-0-1", NS, k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name="k3-h200-0-1", namespace=NS)))
    again = {p.metadata.name: p for p in pods(cluster, "leaderworkerset.sigs.k8s.io/name=k3-h200")}
    assert sorted(again) == ["k3-h200-0", "k3-h200-0-1"]
    # the leader was not evicted, yet it is a new pod: the group was recreated whole
    assert again["k3-h200-0"].metadata.uid != group["k3-h200-0"].metadata.uid
    assert again["k3-h200-0-1"].metadata.uid != worker.metadata.uid


def test_a_leaderworkerset_is_created_through_the_api_and_serves_across_two_nodes(tmp_path):
    root = tmp_path / "sim"
    for n in ("gpu-c01", "gpu-c02"):
        st.init_host(root / n, n, dict(CONTAINERD))
    args = ["moonshotai/Kimi-K2-Thinking", "--tensor-parallel-size", "16", "--nnodes", "$(LWS_GROUP_SIZE)",
            "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)", "--port", "8000"]
    tmpl = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve"],
                                     "args": args, "ports": [{"containerPort": 8000}],
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    worker = json.loads(json.dumps(tmpl))
    worker["spec"]["containers"][0]["args"].append("--headless")
    body = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "test-lws"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": tmpl,
                                                             "workerTemplate": worker}}}
    try:
        with KubeApiServer(root) as api:
            c = httpx.Client(base_url=api.url, timeout=60)
            base = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets"
            r = c.post(base, json=body)
            assert r.status_code == 201 and r.json()["spec"]["leaderWorkerTemplate"]["restartPolicy"] == \
                "RecreateGroupOnPodRestart"
            assert c.post(base, json=body).status_code == 409
            ready = wait_for(lambda: c.get(f"{base}/test-lws").json()["status"]["readyReplicas"] == 1)
            assert ready
            r = c.get("/api/v1/namespaces/default/pods/test-lws-0/proxy/v1/models")
            assert r.status_code == 200 and r.json()["data"][0]["id"] == "moonshotai/Kimi-K2-Thinking"
            assert c.get(f"{base}").json()["items"][0]["metadata"]["name"] == "test-lws"
            assert c.delete(f"{base}/test-lws").status_code == 200
            assert c.get("/api/v1/namespaces/default/pods").json()["items"] == []
            assert c.get(f"{base}/test-lws").status_code == 404
    finally:
        netd.shutdown(root)


def test_without_the_lws_crd_discovery_omits_the_group_and_its_paths_are_not_found(tmp_path):
    root = tmp_path / "sim"
    st.init_host(root / "gpu-c01", "gpu-c01", dict(CONTAINERD))
    with KubeApiServer(root, lws_crd=False) as api:
        groups = [g["name"] for g in httpx.get(f"{api.url}/apis").json()["groups"]]
        assert "leaderworkerset.x-k8s.io" not in groups and "apps" in groups
        r = httpx.get(f"{api.url}/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets")
        assert r.status_code == 404
        api.cluster.set_lws_crd(True)
        groups = [g["name"] for g in httpx.get(f"{api.url}/apis").json()["groups"]]
        assert "leaderworkerset.x-k8s.io" in groups


def test_a_denied_right_is_refused_by_access_review_and_by_the_request(tmp_path):
    root = tmp_path / "sim"
    st.init_host(root / "gpu-c01", "gpu-c01", dict(CONTAINERD))
    with KubeApiServer(root, deny=["create pods/proxy", "get pods/log"]) as api:
        c = httpx.Client(base_url=api.url, headers={"Authorization": "Bearer sim-admin-token"})

        def can(verb: str, resource: str, sub: str = "") -> bool:
            spec = {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": "default",
                                           **({"subresource": sub} if sub else {})}}
            return c.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                          json={"spec": spec}).json()["status"]["allowed"]

        assert can("create", "pods") and can("get", "pods", "proxy") and can("list", "leaderworkersets")
        assert not can("create", "pods", "proxy") and not can("get", "pods", "log")
        c.post("/api/v1/namespaces/default/pods", json=probe_pod("p", "gpu-c01", ["nvidia-smi", "-L"], gpus=0))
        viewer = httpx.Client(base_url=api.url, headers={"Authorization": "Bearer sim-viewer-token"})

        def viewer_can(verb: str, resource: str, sub: str = "") -> bool:
            spec = {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": "default",
                                           **({"subresource": sub} if sub else {})}}
            return viewer.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               json={"spec": spec}).json()["status"]["allowed"]

        # the view role reads pods/log but may not proxy, create or delete
        api.cluster.set_denied([])
        assert viewer_can("get", "pods", "log") and viewer_can("list", "deployments")
        assert not viewer_can("get", "pods", "proxy") and not viewer_can("delete", "pods")
        api.cluster.set_denied(["create pods/proxy", "get pods/log"])
        r = c.get("/api/v1/namespaces/default/pods/p/log")
        assert r.status_code == 403 and r.json()["reason"] == "Forbidden"
        assert r.json()["message"] == ('pods "p" is forbidden: User "kubernetes-admin" cannot get resource '
                                       '"pods/log" in API group "" in the namespace "default"')
        # a controller without eviction or node rights cannot drain
        api.cluster.set_denied(["create pods/eviction", "patch nodes"])
        r = c.post("/api/v1/namespaces/default/pods/p/eviction", json={"apiVersion": "policy/v1", "kind": "Eviction",
                                                                       "metadata": {"name": "p"}})
        assert r.status_code == 403 and "cannot create resource \"pods/eviction\"" in r.json()["message"]
        r = c.patch("/api/v1/nodes/gpu-c01", json={"spec": {"unschedulable": True}},
                    headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 403 and r.json()["message"] == (
            'nodes "gpu-c01" is forbidden: User "kubernetes-admin" cannot patch resource "nodes" in API group "" '
            "at the cluster scope")


def test_a_containerd_node_has_no_docker_cli_and_crictl_reads_the_kubelets_containers(cluster):
    node = cluster.root / "gpu-b01"
    r = dispatch(node, ["docker", "info"])
    assert (r.rc, r.stdout, r.stderr) == (127, "", "bash: line 1: docker: command not found\n")
    ps = dispatch(node, ["crictl", "ps", "-a"])
    assert ps.rc == 0
    lines = ps.stdout.splitlines()
    assert lines[0].split() == ["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD", "ID", "POD",
                                "NAMESPACE"]
    # the serving container runs as attempt 1; attempt 0 is the K3 try that exited
    rows = {ln.split()[-6]: ln.split()[-4:] for ln in lines[1:]}
    pod = next(p.metadata.name for p in pods(cluster, "app=k3-b300") if p.spec.node_name == "gpu-b01")
    assert rows == {"Running": ["1", rows["Running"][1], pod, NS], "Exited": ["0", rows["Running"][1], pod, NS]}
    assert dispatch(node, ["crictl", "ps", "-q"]).stdout.count("\n") == 1
    pulled = dispatch(node, ["crictl", "pull", "vllm/vllm-openai:kimi-k3"])
    assert pulled.rc == 0 and pulled.stdout == f"Image is up to date for {st.REGISTRY['vllm/vllm-openai:kimi-k3']['id']}\n"
    bad = dispatch(node, ["crictl", "pull", "vllm/vllm-openai:nope"])
    assert bad.rc == 1 and 'failed to resolve reference \\"docker.io/vllm/vllm-openai:nope\\"' in bad.stderr
    info = json.loads(dispatch(node, ["crictl", "inspecti", "vllm/vllm-openai:kimi-k3"]).stdout)
    assert info["status"]["repoDigests"] == ["docker.io/vllm/vllm-openai@" +
                                             st.REGISTRY["vllm/vllm-openai:kimi-k3"]["digest"]]
    assert dispatch(node, ["df", "-B1", "--output=target,avail", "/var/lib/containerd"]).rc == 0
    # a Docker host, for contrast, has no crictl, and its node object says so
    st.init_host(cluster.root / "docker-01", "docker-01", {"sim_container_runtime": "docker"})
    assert dispatch(cluster.root / "docker-01", ["crictl", "ps"]).rc == 127
    assert cluster.core.read_node("docker-01").status.node_info.container_runtime_version == "docker://28.2.2"


def test_the_real_kubectl_reads_pods_logs_and_owners(cluster, tmp_path):
    import os
    import subprocess

    from support import kubectl_exe

    exe = kubectl_exe()
    kc = cluster.kubeconfig(tmp_path / "kc")

    def kubectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, "--kubeconfig", str(kc), *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HOME": str(tmp_path)})

    p = kubectl("get", "pods", "-n", NS, "-o", "wide")
    assert p.returncode == 0, p.stderr
    head, *rows = p.stdout.splitlines()
    assert head.split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    leader = next(r.split() for r in rows if r.startswith("k3-h200-0 "))
    assert leader[1:4] == ["1/1", "Running", "0"] and leader[-3] == "gpu-a01"
    b01 = next(r.split() for r in rows if r.startswith("k3-b300-") and " gpu-b01 " in r)
    assert b01[1:3] == ["1/1", "Running"] and b01[3:5] == ["1", "(4h"]      # restarted once, 4h ago
    p = kubectl("logs", "-n", NS, b01[0], "--previous")
    assert p.returncode == 0 and "Error 35: CUDA driver version is insufficient" in p.stdout, p.stderr
    p = kubectl("logs", "-n", NS, "k3-h200-0", "--tail", "1")
    assert p.stdout == "INFO:     Application startup complete.\n", p.stderr
    p = kubectl("logs", "-n", NS, "k3-h200-0", "--previous")
    assert p.returncode != 0 and 'previous terminated container "vllm" in pod "k3-h200-0" not found' in p.stderr
    p = kubectl("describe", "pod", "-n", NS, "k3-h200-0-1")
    assert p.returncode == 0, p.stderr
    assert "Node:         gpu-a02/" in p.stdout and "Port:          8001/TCP" in p.stdout
    assert "LWS_LEADER_ADDRESS:  k3-h200-0.k3-h200.inference" in p.stdout
    p = kubectl("describe", "pod", "-n", NS, b01[0])
    assert "Last State:     Terminated" in p.stdout and "Exit Code:    1" in p.stdout
    events = p.stdout.split("Events:", 1)[1]
    assert f"Successfully assigned {NS}/{b01[0]} to gpu-b01" in events and "Started container vllm" in events
    p = kubectl("get", "deploy,sts,lws", "-n", NS)
    assert p.returncode == 0, p.stderr
    assert "deployment.apps/k3-b300" in p.stdout and "2/2" in p.stdout
    assert "leaderworkerset.leaderworkerset.x-k8s.io/k3-h200" in p.stdout
    # a drain evicts the serving pod and ignores both DaemonSets' pods; the owner's new pod lands on
    # the only B300 node with 8 GPUs free (it selects its GPU model: the H200 spare gpu-c01 does
    # not take it), then one more has nowhere to go
    st.init_host(cluster.root / "gpu-c02", "gpu-c02", {**CONTAINERD, **B300})
    p = kubectl("drain", "gpu-b01", "--ignore-daemonsets", "--timeout=30s")
    assert p.returncode == 0 and "node/gpu-b01 drained" in p.stdout, p.stderr
    assert "gpu-operator/nvidia-device-plugin-daemonset" in p.stderr
    p = kubectl("get", "pods", "-n", NS, "-l", "app=k3-b300", "-o", "wide")
    assert sorted(r.split()[-3] for r in p.stdout.splitlines()[1:]) == ["gpu-b02", "gpu-c02"]
    p = kubectl("drain", "gpu-b02", "--ignore-daemonsets", "--timeout=30s")
    assert p.returncode == 0, p.stderr
    p = kubectl("get", "pods", "-n", NS, "-l", "app=k3-b300")
    assert sorted(r.split()[1:3] for r in p.stdout.splitlines()[1:]) == [["0/1", "Pending"], ["1/1", "Running"]]
    p = kubectl("delete", "pod", "-n", NS, "k3-h200-0-1")          # waits for the deletion (a watch)
    assert p.returncode == 0 and 'pod "k3-h200-0-1" deleted' in p.stdout, p.stderr


def test_the_default_sim_cluster_on_containerd_serves_k3_from_an_lws_and_a_deployment(tmp_path):
    from k3rollout.model import load_inventory

    inv = load_inventory(str(Path(__file__).parents[2] / "inventories" / "sim" / "hosts.yml"))
    root = tmp_path / "sim"
    for name, host in inv.hosts.items():
        st.init_host(root / name, name, {**host.vars, "sim_container_runtime": "containerd"})
    try:
        with KubeApiServer(root) as api:
            c = httpx.Client(base_url=api.url, timeout=60)
            lws = wait_for(lambda: (x := c.get("/apis/leaderworkerset.x-k8s.io/v1/namespaces/inference/"
                                               "leaderworkersets/k3-h200").json())["status"]["readyReplicas"] == 4
                           and x)
            assert lws and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
            dep = c.get("/apis/apps/v1/namespaces/inference/deployments/k3-b300").json()
            assert (dep["spec"]["replicas"], dep["status"]["readyReplicas"]) == (8, 8)
            pods = c.get("/api/v1/namespaces/inference/pods").json()["items"]
            placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
            assert placed["k3-h200-0"] == "gpu-a01" and placed["k3-h200-0-1"] == "gpu-a02"
            assert placed["k3-h200-3-1"] == "gpu-a08"
            assert sorted(n for p, n in placed.items() if p.startswith("k3-b300-")) == \
                [f"gpu-b0{i}" for i in range(1, 9)]
            # the device plugin's DaemonSet pod beside the dcgm exporter on every node
            gpu_op = c.get("/api/v1/namespaces/gpu-operator/pods", params={"fieldSelector": "spec.nodeName=gpu-a03"})
            assert sorted(p["metadata"]["labels"]["app"] for p in gpu_op.json()["items"]) == \
                ["nvidia", "nvidia-device-plugin-daemonset"]
            b03 = next(p["metadata"]["name"] for p in pods if placed[p["metadata"]["name"]] == "gpu-b03")
            prev = c.get(f"/api/v1/namespaces/inference/pods/{b03}/log", params={"previous": "true"})
            assert prev.status_code == 200 and "Error 35" in prev.text
    finally:
        netd.shutdown(root)


def test_a_pod_watch_streams_added_modified_and_deleted_to_the_official_client(cluster):
    from kubernetes import watch

    cluster.core.create_namespaced_pod("default", probe_pod("srv", "gpu-c01", ["vllm", "serve"], gpus=1,
                                                            policy="Always"))
    w = watch.Watch()
    events = []
    for ev in w.stream(cluster.core.list_namespaced_pod, "default", timeout_seconds=5):
        events.append((ev["type"], ev["object"].metadata.name, ev["object"].status.phase))
        if len(events) == 1:
            cluster.core.delete_namespaced_pod("srv", "default")
        if ev["type"] == "DELETED":
            w.stop()
    assert events[0] == ("ADDED", "srv", "Running")
    assert events[-1][:2] == ("DELETED", "srv")


def test_a_restarted_container_recreates_its_leaderworkerset_group(cluster):
    before = {p.metadata.name: p.metadata.uid for p in pods(cluster, "leaderworkerset.sigs.k8s.io/name=k3-h200")}
    # the worker's process dies (an Xid, the OOM killer): the kubelet restarts it ...
    with st.transaction(cluster.root / "gpu-a02") as s:
        c = next(c for c in s["cri"]["containers"].values() if c["pod"] == "k3-h200-0-1")
        c["status"], c["exit_code"], c["finished"], c["reason"] = "exited", 137, time.time() - 60, "Error"
    # ... and the LWS controller, seeing a restart, recreates the whole group
    def group() -> dict:
        now = {p.metadata.name: p for p in pods(cluster, "leaderworkerset.sigs.k8s.io/name=k3-h200")}
        return now if sorted(now) == sorted(before) and all(now[n].metadata.uid != before[n] for n in before) \
            else {}

    after = wait_for(group)
    assert after
    assert all(cs.restart_count == 0 for p in after.values() for cs in p.status.container_statuses)


def test_the_scheduler_honours_node_affinity_and_a_pinned_pod_runs_on_a_cordoned_node(cluster):
    cluster.core.patch_node("gpu-c01", {"spec": {"unschedulable": True}})
    pinned = probe_pod("pinned", "gpu-c01", ["nvidia-smi", "-L"], gpus=1)
    cluster.core.create_namespaced_pod("default", pinned)
    assert cluster.core.read_namespaced_pod("pinned", "default").status.phase == "Succeeded"
    free = probe_pod("free", None, ["nvidia-smi", "-L"], gpus=0)
    free["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                     "values": ["NVIDIA-B300-SXM6-AC"]}]}]}}}
    cluster.core.create_namespaced_pod("default", free)
    assert cluster.core.read_namespaced_pod("free", "default").spec.node_name == "gpu-b01"
    nowhere = probe_pod("nowhere", None, ["nvidia-smi", "-L"], gpus=0)
    nowhere["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-GB300"}
    cluster.core.create_namespaced_pod("default", nowhere)
    msg = cluster.core.read_namespaced_pod("nowhere", "default").status.conditions[0].message
    ev = cluster.core.list_namespaced_event("default", field_selector="involvedObject.name=nowhere").items
    assert [(e.type, e.reason, e.message, e.source.component) for e in ev] == \
        [("Warning", "FailedScheduling", msg, "default-scheduler")]
    assert msg.startswith("0/5 nodes are available: 1 node(s) were unschedulable, 4 node(s) didn't match Pod's "
                          "node affinity/selector.")


def test_an_unknown_container_runtime_is_bad_input_naming_the_host(tmp_path):
    from k3rollout.errors import InputError
    from k3sim.dispatch import init_cluster

    with pytest.raises(InputError, match="host gpu-01: sim_container_runtime: docker or containerd, got 'cri-o'"):
        init_cluster(tmp_path / "sim", {"gpu-01": {"sim_container_runtime": "cri-o"}})


def test_a_gpu_pod_holds_the_driver_module_and_a_failing_pod_crash_loops_with_back_off(cluster):
    # the serving pod's containers hold /dev/nvidia*: the module cannot be unloaded under it
    node = cluster.root / "gpu-b01"
    for unit in ("nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager"):
        dispatch(node, ["systemctl", "stop", unit])
    r = dispatch(node, ["modprobe", "-r", "nvidia"])
    assert (r.rc, r.stderr) == (1, "modprobe: FATAL: Module nvidia is in use.\n")
    # a server that cannot start (TP 16 on the 8 GPUs it holds) restarts with the kubelet's back-off
    bad = probe_pod("bad", "gpu-c01", ["vllm", "serve"], gpus=8, policy="Always")
    bad["spec"]["containers"][0]["args"] = ["--tensor-parallel-size", "16"]
    cluster.core.create_namespaced_pod("default", bad)

    def restarted_twice():
        p = cluster.core.read_namespaced_pod("bad", "default")
        return p if p.status.container_statuses[0].restart_count >= 2 else None

    pod = wait_for(restarted_twice)
    cs = pod.status.container_statuses[0]
    assert pod.status.phase == "Running" and not cs.ready
    assert cs.last_state.terminated.exit_code == 1
    log = cluster.core.read_namespaced_pod_log("bad", "default", previous=True)
    assert "The number of required GPUs exceeds the total number of available GPUs" in log
    if cs.state.waiting:
        assert cs.state.waiting.reason == "CrashLoopBackOff"
        assert cs.state.waiting.message.startswith("back-off ")


def test_a_statefulset_recreates_its_ordinal_pod_under_the_same_name(cluster):
    body = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "probe"},
            "spec": {"replicas": 1, "serviceName": "probe", "selector": {"matchLabels": {"app": "probe"}},
                     "template": {"metadata": {"labels": {"app": "probe"}},
                                  "spec": {"containers": [{"name": "srv", "image": "vllm/vllm-openai:v0.11.0",
                                                           "command": ["vllm", "serve"],
                                                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    cluster.apps.create_namespaced_stateful_set("default", body)
    first = cluster.core.read_namespaced_pod("probe-0", "default")
    assert first.spec.node_name == "gpu-c01" and first.spec.hostname == "probe-0"
    assert first.metadata.owner_references[0].kind == "StatefulSet"
    assert cluster.apps.read_namespaced_stateful_set("probe", "default").status.ready_replicas == 1
    cluster.core.delete_namespaced_pod("probe-0", "default")
    # the controller makes the ordinal again (seen at the next look at the pods)
    again = wait_for(lambda: [p for p in cluster.core.list_namespaced_pod("default").items
                              if p.metadata.name == "probe-0"])
    assert again and again[0].metadata.uid != first.metadata.uid
    cluster.apps.delete_namespaced_stateful_set("probe", "default")
    with pytest.raises(ApiException) as e:
        cluster.core.read_namespaced_pod("probe-0", "default")
    assert e.value.status == 404


def test_a_watch_from_a_resource_version_sees_what_happened_since_and_nodes_watch_by_name(cluster):
    from kubernetes import watch

    cluster.core.create_namespaced_pod("default", probe_pod("srv", "gpu-c01", ["vllm", "serve"], gpus=1,
                                                            policy="Always"))
    read = cluster.core.read_namespaced_pod("srv", "default")
    # deleted after the read and before the watch: the watch from the read's resourceVersion
    # still gets its DELETED event (list-then-watch loses nothing), at a later resourceVersion
    cluster.core.delete_namespaced_pod("srv", "default")
    w = watch.Watch()
    events = [(ev["type"], ev["raw_object"]) for ev in w.stream(
        cluster.core.list_namespaced_pod, "default", field_selector="metadata.name=srv",
        resource_version=read.metadata.resource_version, timeout_seconds=1)]
    assert [t for t, _ in events] == ["DELETED"]
    assert int(events[0][1]["metadata"]["resourceVersion"]) > int(read.metadata.resource_version)
    # a resourceVersion older than the watch history is 410 Expired, as the watch cache answers
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(cluster.core.list_namespaced_pod, "default", resource_version="1",
                                  timeout_seconds=1))
    assert exc.value.status == 410
    assert "too old resource version" in exc.value.reason
    # a node watched by its name: its current state first, then a change (the cordon) as MODIFIED;
    # heartbeat times alone are no change
    w = watch.Watch()
    seen = []
    for ev in w.stream(cluster.core.list_node, field_selector="metadata.name=gpu-c01", timeout_seconds=3):
        seen.append((ev["type"], ev["object"].metadata.name, bool(ev["object"].spec.unschedulable)))
        if len(seen) == 1:
            cluster.core.patch_node("gpu-c01", {"spec": {"unschedulable": True}})
        else:
            w.stop()
    assert seen == [("ADDED", "gpu-c01", False), ("MODIFIED", "gpu-c01", True)]
    # nodes select on metadata.name and spec.unschedulable (NodeToSelectableFields), nothing else
    assert [n.metadata.name for n in cluster.core.list_node(field_selector="spec.unschedulable=true").items] == \
        ["gpu-c01"]
    r = cluster.http.get("/api/v1/nodes", params={"fieldSelector": "status.phase=Running"})
    assert r.status_code == 400 and r.json()["message"] == "field label not supported: status.phase"


def test_an_owner_watched_by_name_shows_its_ready_replicas_drop_when_a_pod_is_evicted(cluster):
    from kubernetes import watch

    victim = next(p for p in pods(cluster, "app=k3-b300") if p.spec.node_name == "gpu-b01")
    for node in ("gpu-b01", "gpu-c01"):         # no node to reschedule it on: its replacement waits
        cluster.core.patch_node(node, {"spec": {"unschedulable": True}})
    w = watch.Watch()
    ready = []
    for ev in w.stream(cluster.apps.list_namespaced_deployment, NS, field_selector="metadata.name=k3-b300",
                       timeout_seconds=10):
        ready.append((ev["type"], ev["object"].status.ready_replicas or 0))
        if len(ready) == 1:
            cluster.core.create_namespaced_pod_eviction(victim.metadata.name, NS, k8s.V1Eviction(
                metadata=k8s.V1ObjectMeta(name=victim.metadata.name, namespace=NS)))
        elif ready[-1][1] < 2:
            w.stop()
    # its current state first, then its status as the controller posts it: one replica short
    assert ready[0] == ("ADDED", 2)
    assert ready[-1] == ("MODIFIED", 1)


def test_a_node_wait_watches_and_falls_back_to_polling_where_the_watch_right_is_refused(cluster, tmp_path):
    from k3rollout.scheduler import k8s_calls
    from k3rollout.scheduler.k8s_api import KubernetesApi
    from k3rollout.workload import k8s_pods as kp

    pods = kp.PodApi(KubernetesApi(str(cluster.kubeconfig(tmp_path / "kc"))))

    def wait_reboot(seconds: float) -> dict:
        with st.transaction(cluster.root / "gpu-c01") as s:
            s["down_until"] = time.time() + seconds          # rebooting: NotReady, no nvidia.com/gpu
        sent = k8s_calls.totals.copy()
        ok, node = kp.wait_watched(pods, lambda: pods.node("gpu-c01"), pods.node_watch("gpu-c01"),
                                   lambda n: n is not None and kp.node_ready(n) and kp.allocatable_gpus(n) == 8,
                                   60.0, 0.5)
        assert ok and kp.node_ready(node)
        return dict(k8s_calls.totals - sent)

    # one read, then one watch that says when the node is back
    assert wait_reboot(2.0) == {"get nodes": 1, "watch nodes": 1}
    # without the watch right the server answers 403 and the wait polls the node
    cluster.cluster.set_denied(["watch nodes"])
    calls = wait_reboot(2.0)
    assert calls["watch nodes"] == 1 and calls["get nodes"] >= 3
