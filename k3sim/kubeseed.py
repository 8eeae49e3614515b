"""The serving workloads a simulated Kubernetes cluster starts with, on its containerd nodes.

Each containerd node's host vars say which owner serves on it (``sim_k8s_serving``):
``{kind: LeaderWorkerSet, name: k3-serving, size: 2}`` (multi-node replicas, one group per node
pair in name order) or ``{kind: Deployment, name: k3-serving-b300}`` (one pod per node holding
all its GPUs); all in namespace ``inference`` unless ``namespace`` says otherwise. The pods'
container runs the node's serving launch (``sim_serving_image``, ``sim_serving_args``); an LWS
spreads it over its group with vLLM's multi-node flags (``--nnodes``, ``--node-rank``,
``--master-addr``, ``--headless`` on workers) fed from the LWS environment. A Deployment's
``node_selector`` (e.g. ``{kubernetes.io/hostname: gpu-01}``) becomes its pods' ``nodeSelector``:
an evicted pod then comes back only to that node. The r575 failure the
cluster models is, on a Deployment's pods, the serving container's previous instance: the
operator set the pod's image to the cu130 K3 image (the requirement check bypassed), it failed
CUDA init, and the image was set back; ``kubectl logs --previous`` shows that attempt. An LWS
group whose container restarted is recreated whole by its controller, so its pods start with
no previous instance. The rights the hosts' ``sim_k8s_deny`` lists join the cluster's ``deny``
setting (refused to every user). Runs once, when the API server first meets the nodes.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

from k3sim import controllers as ctl
from k3sim import kubelet, vllm
from k3sim import state as st


def _multinode_args(args: list[str], size: int, worker: bool) -> list[str]:
    opts, _ = vllm.parse_serve_args(args)
    tp = int((opts or {}).get("tensor_parallel_size", 8)) * size
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--tensor-parallel-size", "-tp"):
            skip = True
            continue
        if a.startswith(("--tensor-parallel-size=", "-tp=")):
            continue
        out.append(a)
    out += ["--tensor-parallel-size", str(tp), "--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
            "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    return out + (["--headless"] if worker else [])


def _template(c: dict[str, Any], gpus: int, app: str, args: list[str], product: str,
              node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {kubelet.GPU: str(gpus)}
    # an owner's launch fits one GPU model (TP16 over two H200s, TP8 on one B300): its pods select
    # that model by GPU Feature Discovery's label, so an evicted pod waits for its own kind of node
    # instead of taking a free one of the other kind
    return {"metadata": {"labels": {"app": app}},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": product, **(node_selector or {})},
                     "containers": [{"name": "vllm", "image": c["image"], "command": ["vllm", "serve"], "args": args,
                                     "env": [{"name": k, "value": v} for k, v in c["env"].items()],
                                     "ports": [{"containerPort": int(c.get("port", 8000)), "name": "http"}],
                                     "resources": {"limits": limits, "requests": limits}}]}}


def seed(cluster: Any) -> None:
    """``cluster``: the API server's kubeapi.Cluster (not imported here: kubeapi imports this
    module)."""
    groups: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = {}
    deny = set(cluster.data["settings"].get("deny") or [])
    for name, d in cluster.host_dirs().items():
        s = st.load(d)
        deny.update(s.get("k8s_deny") or [])
        seed_ = s.get("k8s_seed")
        if kubelet.runtime(s) != "containerd" or not seed_ or not seed_.get("workload"):
            continue
        w = seed_["workload"]
        groups.setdefault((str(w.get("kind", "Deployment")), str(w.get("namespace", "inference")),
                           str(w.get("name", "k3-serving"))), []).append((name, s))
    for (kind, ns, name), hosts in sorted(groups.items()):
        hosts.sort()
        first = hosts[0][1]
        serving = first["k8s_seed"]["serving"]
        gpus = int(first["gpu"]["count"])
        product = str(first["gpu"]["model"]).replace(" ", "-")      # the node's label (sim/kubeapi.py)
        size = int(first["k8s_seed"]["workload"].get("size", 2)) if kind == "LeaderWorkerSet" else 1
        if kind == "LeaderWorkerSet":
            body = {"metadata": {"name": name}, "spec": {
                "replicas": len(hosts) // size,
                "leaderWorkerTemplate": {"size": size, "restartPolicy": ctl.RECREATE_GROUP,
                                         "leaderTemplate": _template(serving, gpus, name,
                                                                     _multinode_args(serving["args"], size, False),
                                                                     product),
                                         "workerTemplate": _template(serving, gpus, name,
                                                                     _multinode_args(serving["args"], size, True),
                                                                     product)}}}
        else:
            body = {"metadata": {"name": name}, "spec": {
                "replicas": len(hosts), "selector": {"matchLabels": {"app": name}},
                "template": _template(serving, gpus, name, list(serving["args"]), product,
                                      first["k8s_seed"]["workload"].get("node_selector"))}}
        obj = ctl.new_object(kind, ns, body)
        obj["metadata"] |= {"uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{ns}/{name}")),
                            "resourceVersion": cluster.rv(), "generation": 1,
                            "creationTimestamp": "2026-11-20T08:00:00Z"}
        cluster.data["workloads"][f"{kind}/{ns}/{name}"] = obj
        # the pods, each bound to its node as the scheduler placed them
        for i, (pname, _, body_) in enumerate(ctl.wanted(obj)):
            host, hs = hosts[i] if i < len(hosts) else (None, None)
            if host is None or hs is None:
                break
            if pname is None:
                body_["metadata"]["name"] = f"{body_['metadata']['generateName']}" + \
                    hashlib.sha1(host.encode()).hexdigest()[:5]
            cluster.work.create_owned(ns, body_)
            pod = cluster.data["pods"][f"{ns}/{body_['metadata']['name']}"]
            cluster.work.bind(pod, host)
            # an LWS recreates a group whose container restarted, so only a pod whose owner keeps
            # it through a restart (a Deployment's) still shows that attempt as its previous one
            failed = hs["k8s_seed"].get("failed") if kind != "LeaderWorkerSet" else None
            if failed:
                opts, _ = vllm.parse_serve_args(failed["args"])
                img = st.REGISTRY.get(failed["image"], {})
                logs = vllm.startup_logs(opts or {"model": "?", "tensor_parallel_size": "8"}, img.get("vllm", "?")) \
                    + vllm.cuda_insufficient_logs()
                with st.transaction(cluster.root / host) as s:
                    kubelet.record_exited(s, pod, "vllm", failed["image"], failed["args"], logs, 1,
                                          float(failed.get("started", time.time() - 5 * 3600)))
    cluster.data["settings"]["deny"] = sorted(deny)
    for d in cluster.host_dirs().values():
        with st.transaction(d) as s:
            s.pop("k8s_seed", None)
            s.pop("k8s_deny", None)
