"""``k3_workload_backend: kubernetes``: checks and test servers are Pods, the node's own
workloads are Pods whose owners bring them back.

A Kubernetes GPU node has no docker CLI (containerd or CRI-O), its GPUs belong to the
device plugin, and its serving workloads are Pods owned by Deployments, StatefulSets or
LeaderWorkerSets (docs/domain.md "Workloads on Kubernetes GPU nodes"). So, from the controller,
through the API server (k3rollout/workload/k8s_pods.py, every call journaled with
``ctx.runner.call``):

- a check (nvidia-smi -L, torch.cuda.init) is a Pod pinned with ``spec.nodeName`` (the
  scheduler is bypassed, so a cordoned node runs it), tolerating every taint
  (``operator: Exists``, as the GPU Operator's validator pods do), asking for the node's
  GPUs through ``resources.limits["nvidia.com/gpu"]``, ``restartPolicy: Never``, waited for
  until Succeeded or Failed; its log is the evidence; it is deleted after;
- a test server is such a Pod running ``vllm serve``, reached through the API server's pod
  proxy (``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH``); a member of a multi-node
  replica runs on the host network with its launch environment;
- a Pod is created by a ``once`` call whose probe finds it by name, and names are
  deterministic (run id, node, purpose), so a crash never creates one twice;
- the node's own workloads are never started or stopped here: the drain evicted them, and
  after the uncordon the stage waits, bounded by ``serving_ready_timeout``, until each
  owner baseline saw is back to its baseline ``readyReplicas`` on the same image digest.

Images are read and pulled on the node with ``crictl`` (over the node's transport), in the
store the kubelet reads; ``docker pull`` would land in another one.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Any

from k3rollout.checks import parsers
from k3rollout.checks.triage import classify
from k3rollout.transport.base import CommandResult
from k3rollout.workload import k8s_pods as kp
from k3rollout.workload.base import ApiPreflight, Endpoint, NodeCtx, Pulled, Restored, Run, ServerState, Verdict
from k3rollout.workload.k8s_pods import GPU, KubernetesError, PodApi

DEFAULT_NAMESPACE = "k3rollout"
NAMESPACE_VAR = "k3_workload_namespace"
MANAGED = {"app.kubernetes.io/managed-by": "k3rollout"}
TOLERATE_ALL = [{"operator": "Exists"}]       # the GPU Operator validator's approach
STORES = {"containerd": "/var/lib/containerd", "cri-o": "/var/lib/containers"}
POLL_S = 2.0
CHECK_TIMEOUT_S = 600.0
GONE_TIMEOUT_S = 120.0          # a deleted pod's grace period is 30 s
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def namespace(host_vars: dict[str, Any]) -> str:
    return str(host_vars.get(NAMESPACE_VAR) or DEFAULT_NAMESPACE)


def _label(value: str) -> str:
    v = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.")
    return v or "x"


def pod_name(run_id: str, node: str, purpose: str) -> str:
    """Deterministic from the run, the node and the purpose: a Pod created before a crash is
    found by this name after it, never created twice. A DNS-1123 label (63 characters)."""
    digest = hashlib.sha256(f"{run_id}\0{node}\0{purpose}".encode()).hexdigest()[:10]
    base = re.sub(r"[^a-z0-9-]+", "-", f"{purpose}-{node}".lower()).strip("-")[:52].strip("-")
    return f"{base}-{digest}"


def crictl_image(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``crictl inspecti -o json`` in the shape of ``docker image inspect`` (the parser's)."""
    status = doc.get("status") or {}
    spec = (doc.get("info") or {}).get("imageSpec") or {}
    cfg = spec.get("config") or {}
    return [{"Id": status.get("id"), "RepoTags": status.get("repoTags") or [],
             "RepoDigests": status.get("repoDigests") or [], "Created": spec.get("created"),
             "Config": {"Env": cfg.get("Env") or [], "Labels": cfg.get("Labels") or {}}}]


def _sha(digest: str | None) -> str | None:
    return kp.digest_of(digest) if digest and "@" in digest else digest


def _alive(got: dict[str, Any]) -> bool:
    """A pod still starting or serving: Pending or Running, its container not terminated."""
    return kp.phase(got) in ("Pending", "Running") and not kp.terminated(got)


def _reusable(got: dict[str, Any], body: dict[str, Any]) -> bool:
    """A test server's pod made before a crash that a relaunch can use: still starting or
    serving, and running the image and arguments the launch would give it."""
    if not _alive(got):
        return False
    have = ((got.get("spec") or {}).get("containers") or [{}])[0]
    want = body["spec"]["containers"][0]
    return bool(have.get("image") == want["image"] and have.get("args") == want["args"])


def _unschedulable(pod: dict[str, Any]) -> str:
    """The scheduler's message for a Pending pod it cannot place ("" when it is placed or
    has not said): ``PodScheduled`` False with reason ``Unschedulable``."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "Unschedulable")
    return ""


def owner_of(pods: PodApi, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The controller that brings the pod back: a ReplicaSet resolved to its Deployment; a
    ReplicaSet with no Deployment (none named, or the one named is gone) is that controller
    itself: it recreates the pods it lacks (docs/domain.md, "Workloads on Kubernetes GPU
    nodes")."""
    meta = pod.get("metadata") or {}
    ref = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if ref is None:
        return None
    ns, kind, name = str(meta.get("namespace")), str(ref.get("kind")), str(ref.get("name"))
    obj: dict[str, Any] | None = None
    if kind == "ReplicaSet":
        obj = pods.owner(ns, "ReplicaSet", name) or {}
        up = next((o for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("controller")), None)
        if up and up.get("kind") == "Deployment":
            deployment = pods.owner(ns, "Deployment", str(up.get("name")))
            if deployment is not None:
                kind, name, obj = "Deployment", str(up.get("name")), deployment
    elif kind not in ("StatefulSet", "LeaderWorkerSet"):
        # a LeaderWorkerSet's pods are owned by its StatefulSets; the label names the set
        lws = (meta.get("labels") or {}).get(LWS_NAME_LABEL)
        if not lws:
            return {"kind": kind, "name": name, "namespace": ns}
        kind, name = "LeaderWorkerSet", lws
    if kind == "StatefulSet" and (meta.get("labels") or {}).get(LWS_NAME_LABEL):
        kind, name = "LeaderWorkerSet", meta["labels"][LWS_NAME_LABEL]
    if obj is None:
        obj = pods.owner(ns, kind, name) or {}
    return {"kind": kind, "name": name, "namespace": ns,
            "ready_replicas": int((obj.get("status") or {}).get("readyReplicas") or 0),
            "selector": dict(((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})}


def _selector(owner: dict[str, Any]) -> str:
    if owner["kind"] == "LeaderWorkerSet":
        return f"{LWS_NAME_LABEL}={owner['name']}"
    return ",".join(f"{k}={v}" for k, v in sorted((owner.get("selector") or {}).items()))


def _container_ports(pod: dict[str, Any]) -> set[int]:
    return {int(p.get("containerPort")) for c in (pod.get("spec") or {}).get("containers") or []
            for p in c.get("ports") or [] if p.get("containerPort")}


def _full_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _serving(pod: dict[str, Any], phases: tuple[str, ...] = ("Running",)) -> bool:
    """A node's own serving pod: Running (or in ``phases``), asking for GPUs, not one of
    k3rollout's."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return kp.phase(pod) in phases and kp.gpu_request(pod) > 0 and \
        labels.get("app.kubernetes.io/managed-by") != "k3rollout"


def missing_owner(pods: PodApi, pod: dict[str, Any]) -> str:
    """The owner a serving pod names that does not exist ("" when all do, or when it names
    none): its controller reference, a ReplicaSet's Deployment, a LeaderWorkerSet's set, as
    ``owner_of`` resolves them. A pod whose owner is gone is brought back by nothing after
    the drain, and the uncordon stage would wait for it in vain."""
    meta = pod.get("metadata") or {}
    ref = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if ref is None:
        return ""
    ns, kind, name = str(meta.get("namespace")), str(ref.get("kind")), str(ref.get("name"))
    chain = []
    if kind in kp.OWNERS:
        obj = pods.owner(ns, kind, name)
        if obj is None:
            return f"{kind} {ns}/{name}"
        chain.append(f"{kind} {name}")
        up = next((o for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("controller")), None)
        if kind == "ReplicaSet" and up and up.get("kind") == "Deployment" and \
                pods.owner(ns, "Deployment", str(up.get("name"))) is None:
            return f"Deployment {ns}/{up.get('name')} (through {chain[0]})"
    lws = (meta.get("labels") or {}).get(LWS_NAME_LABEL)
    if lws and kind != "LeaderWorkerSet" and pods.owner(ns, "LeaderWorkerSet", str(lws)) is None:
        return f"LeaderWorkerSet {ns}/{lws}" + (f" (through {chain[0]})" if chain else "")
    return ""


def _serves_api(pod: dict[str, Any]) -> bool:
    """Whether the pod answers vLLM's API: not a LeaderWorkerSet's worker (worker-index above
    0) and no container started ``--headless`` (a multi-node replica's worker rank); see
    docs/domain.md, "Workloads on Kubernetes GPU nodes" and "Multi-node launches"."""
    index = ((pod.get("metadata") or {}).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL, "0")
    argv = [str(a) for c in (pod.get("spec") or {}).get("containers") or []
            for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    return index == "0" and "--headless" not in argv


class Kubernetes:
    kind = "kubernetes"

    def __init__(self) -> None:
        # (run id, node, port) -> the test server Pod started there: where a gate's request goes
        self._servers: dict[tuple[str, str, int], tuple[str, str]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ plumbing

    def _call(self, ctx: NodeCtx, name: str, what: list[str], fn: Callable[[PodApi], Any], **kw: Any) -> Any:
        pods = PodApi(ctx.runner.kube(ctx))
        return ctx.runner.call(ctx, name, what, lambda: fn(pods), ran_on=pods.server, **kw)

    def _gpus(self, ctx: NodeCtx) -> int:
        b = ctx.baseline
        return int(b.get("gpu_allocatable") or b.get("gpu_count") or ctx.vars.get("expected_gpu_count") or 8)

    def _labels(self, ctx: NodeCtx, purpose: str, port: int | None = None) -> dict[str, str]:
        out = {**MANAGED, "k3rollout.io/run-id": _label(ctx.run_id), "k3rollout.io/node": _label(ctx.node),
               "k3rollout.io/purpose": _label(purpose)}
        if port is not None:
            out["k3rollout.io/port"] = str(port)
        return out

    def _pod(self, ctx: NodeCtx, name: str, purpose: str, container: dict[str, Any], *, port: int | None = None,
             host_network: bool = False) -> dict[str, Any]:
        """A Pod pinned to the node (``spec.nodeName``: the scheduler, and so the cordon, is
        bypassed), tolerating every taint, with every GPU of the node and a memory-backed
        /dev/shm (Docker's ``--ipc=host`` for NCCL)."""
        gpus = str(self._gpus(ctx))
        container = {**container, "resources": {"limits": {GPU: gpus}, "requests": {GPU: gpus}},
                     "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
        spec: dict[str, Any] = {"nodeName": ctx.node, "restartPolicy": "Never", "tolerations": TOLERATE_ALL,
                                "containers": [container],
                                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}
        if host_network:
            spec.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace(ctx.vars), "labels": self._labels(ctx, purpose, port)},
                "spec": spec}

    def _create(self, ctx: NodeCtx, step: str, body: dict[str, Any]) -> Any:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]

        def exists(c: Any, _meta: dict[str, Any]) -> bool:
            return PodApi(c.runner.kube(c)).pod(ns, name) is not None

        return self._call(ctx, step, ["POST", f"/api/v1/namespaces/{ns}/pods", name],
                          lambda p: {"created": (p.create_pod(ns, body).get("metadata") or {}).get("name")},
                          once=True, probe=exists)

    @staticmethod
    def _result(ctx: NodeCtx, what: list[str], rc: int, out: str = "", err: str = "") -> CommandResult:
        return CommandResult(ctx.node, tuple(what), rc, out, err, 0.0)

    # ------------------------------------------------------------ images (crictl on the node)

    def image_store(self, run: Run, host_vars: dict[str, Any]) -> str:
        if host_vars.get("k3_image_store"):
            return str(host_vars["k3_image_store"])
        res = run("container-runtime", ["crictl", "version"])
        name = next((ln.split(":", 1)[1].strip().lower() for ln in res.stdout.splitlines()
                     if ln.startswith("RuntimeName")), "containerd")
        return STORES.get(name, STORES["containerd"])

    def image_cached(self, run: Run, image: str) -> bool:
        return run("target-image", ["crictl", "inspecti", "-o", "json", image]).ok

    def image_facts(self, ctx: NodeCtx, image: str, name: str = "image-inspect") -> dict[str, Any] | None:
        res = ctx.step(name, ["crictl", "inspecti", "-o", "json", image])
        if not res.ok:
            return None
        return parsers.image_facts(crictl_image(parsers.parse_json(res.stdout, "crictl inspecti")))

    def pull(self, ctx: NodeCtx, image: str, name: str = "image-pull", timeout: float = 3600) -> CommandResult:
        return ctx.step(name, ["crictl", "pull", image], timeout=timeout)

    def pull_pinned(self, run: Run, ref: str) -> Pulled:
        res = run("pull-image", ["crictl", "pull", ref])
        if not res.ok:
            return Pulled(False, ref, detail=res.tail(300), logs=res.stderr)
        ins = run("pulled-image", ["crictl", "inspecti", "-o", "json", ref])
        try:
            digests = (parsers.parse_json(ins.stdout, "crictl inspecti").get("status") or {}).get("repoDigests") or []
        except parsers.ParseError:
            digests = []
        return Pulled(True, ref, kp.digest_of(digests[0]) if digests else None)

    def pull_command(self) -> str:
        return "crictl pull"

    # ------------------------------------------------------------ baseline

    def runtime_facts(self, ctx: NodeCtx) -> dict[str, Any]:
        f: dict[str, Any] = {"workload_backend": self.kind}

        def read(p: PodApi) -> dict[str, Any]:
            node = p.node(ctx.node)
            info = (node.get("status") or {}).get("nodeInfo") or {}
            return {"container_runtime": info.get("containerRuntimeVersion"), "kubelet": info.get("kubeletVersion"),
                    "gpu_allocatable": kp.allocatable_gpus(node),
                    "pods": [{"name": f"{(q.get('metadata') or {}).get('namespace')}/{(q.get('metadata') or {}).get('name')}",
                              "image": ((q.get("spec") or {}).get("containers") or [{}])[0].get("image"),
                              "state": kp.phase(q).lower(), "restarts": kp.restarts(q), "gpus": kp.gpu_request(q)}
                             for q in p.pods_on(ctx.node)]}

        res = self._call(ctx, "workload-node", ["GET", f"/api/v1/nodes/{ctx.node}",
                                                f"/api/v1/pods?fieldSelector=spec.nodeName={ctx.node}"], read)
        if not res.ok:
            raise KubernetesError(f"cannot read {ctx.node} and its pods: {res.error}")
        a = res.answer
        f.update(container_runtime=a["container_runtime"], kubelet=a["kubelet"], gpu_allocatable=a["gpu_allocatable"],
                 nvidia_runtime=a["gpu_allocatable"] > 0)
        f["containers"] = [{"name": q["name"], "image": q["image"], "state": q["state"]} for q in a["pods"]]
        f["pod_gpu_requests"] = {q["name"]: q["gpus"] for q in a["pods"] if q["gpus"]}
        f["pod_restart_counts"] = {q["name"]: q["restarts"] for q in a["pods"]}
        return f

    def serving_workloads(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Running pods on the node that request GPUs and are not k3rollout's: owner (a
        ReplicaSet resolved to its Deployment, where it has one), image and imageID digest,
        restarts."""
        def read(p: PodApi) -> list[dict[str, Any]]:
            out = []
            for q in p.pods_on(ctx.node):
                meta = q.get("metadata") or {}
                if not _serving(q):
                    continue
                st = ((q.get("status") or {}).get("containerStatuses") or [{}])[0]
                c0 = ((q.get("spec") or {}).get("containers") or [{}])[0]
                out.append({"name": f"{meta.get('namespace')}/{meta.get('name')}", "image": c0.get("image"),
                            "digest": st.get("imageID"), "restarts": kp.restarts(q), "gpus": kp.gpu_request(q),
                            "ports": sorted(_container_ports(q)), "args": list(c0.get("args") or []),
                            "owner": owner_of(p, q)})
            return out

        res = self._call(ctx, "serving-pods", ["GET", f"/api/v1/pods?fieldSelector=spec.nodeName={ctx.node}",
                                               "GET owners (apps/v1, leaderworkerset.x-k8s.io/v1)"], read)
        if not res.ok:
            raise KubernetesError(f"cannot read the serving pods on {ctx.node}: {res.error}")
        return [{**s, "cuda": None, "inspect_ok": True} for s in res.answer]

    def prior_failures(self, ctx: NodeCtx, containers: list[dict[str, Any]],
                       failure_names: list[str]) -> list[dict[str, Any]]:
        """The failed K3 attempt's pods (named ``NAME`` or ``NAME-...``): their logs, the
        previous container's too (``previous=true``: a crash-looping pod's real failure)."""
        failures = []
        for c in containers:
            ns, _, pod = c["name"].partition("/")
            if not any(pod == n or pod.startswith(f"{n}-") for n in failure_names):
                continue

            def logs(p: PodApi, ns: str = ns, pod: str = pod) -> dict[str, str]:
                out = {"log": p.log(ns, pod)}
                try:
                    out["previous"] = p.log(ns, pod, previous=True)
                except KubernetesError as exc:       # no previous container: a 400 says so
                    out["previous"] = ""
                    out["previous_error"] = str(exc)
                return out

            res = self._call(ctx, f"failed-pod-logs-{pod}", ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log",
                                                              "previous=true"], logs)
            text = ((res.answer or {}).get("previous") or "") + ((res.answer or {}).get("log") or "")
            tri = classify(text)
            failures.append({"container": c["name"], "triage": tri.category, "evidence": tri.evidence[:3],
                             "inspect_saved": res.ok})
        return failures

    # ------------------------------------------------------------ after the driver stage

    def after_driver(self, ctx: NodeCtx, timeout_s: float) -> tuple[bool, str, dict[str, Any]]:
        """The node Ready again and the device plugin advertising the expected GPUs (the GPU
        Operator's plugin-validation waits for ``nvidia.com/gpu`` the same way)."""
        want = self._gpus(ctx)

        def wait(p: PodApi) -> dict[str, Any]:
            start = p.now()

            def back(n: dict[str, Any] | None) -> bool:
                return n is not None and kp.node_ready(n) and kp.allocatable_gpus(n) >= want

            ok, n = kp.wait_watched(p, lambda: p.node(ctx.node), p.node_watch(ctx.node), back, timeout_s, POLL_S)
            seen = {"ready": kp.node_ready(n or {}), "gpu_allocatable": kp.allocatable_gpus(n or {})}
            return {**seen, "expected": want, "ok": ok, "waited_s": round(p.now() - start, 3)}

        res = self._call(ctx, "node-gpus-ready", ["GET", f"/api/v1/nodes/{ctx.node}",
                                                  f"WATCH /api/v1/nodes?fieldSelector=metadata.name={ctx.node}",
                                                  f"until Ready and allocatable {GPU}={want}"], wait)
        if not res.ok:
            return False, f"cannot read node {ctx.node}: {res.error}", {}
        a = res.answer or {}
        facts = {"node_ready": a.get("ready"), "gpu_allocatable": a.get("gpu_allocatable")}
        if a.get("ok", res.replayed):
            return True, "", facts
        return False, (f"{ctx.node} is {'Ready' if a.get('ready') else 'not Ready'} with {a.get('gpu_allocatable')} "
                       f"allocatable {GPU} of {want} after {timeout_s:.0f}s: the device plugin does not advertise the "
                       "GPUs on the new driver"), facts

    def gpu_work_allowed(self, ctx: NodeCtx) -> tuple[bool, str]:
        res = self._call(ctx, "gpu-pods", ["GET", f"/api/v1/pods?fieldSelector=spec.nodeName={ctx.node}"],
                         lambda p: [f"{(q.get('metadata') or {}).get('namespace')}/{(q.get('metadata') or {}).get('name')}"
                                    for q in p.pods_on(ctx.node)
                                    if kp.phase(q) in ("Pending", "Running") and kp.gpu_request(q) > 0])
        if not res.ok:
            return False, f"cannot list the node's pods: {res.error}"
        if res.answer:
            return False, f"its GPUs are allocated to pods ({', '.join(res.answer[:3])}): no GPU work is started there"
        return True, ""

    # ------------------------------------------------------------ one-off checks

    def run_check(self, ctx: NodeCtx, name: str, image: str, entrypoint: str, args: list[str],
                  timeout: float = CHECK_TIMEOUT_S) -> CommandResult:
        pod = pod_name(ctx.run_id, ctx.node, name)
        ns = namespace(ctx.vars)
        body = self._pod(ctx, pod, name, {"name": "check", "image": image, "command": [entrypoint], "args": list(args)})
        what = ["pod", f"{ns}/{pod}", image, entrypoint, *args]
        made = self._create(ctx, f"{name}-pod", body)
        if not made.ok:
            return self._result(ctx, what, 1, err=made.error)
        done = self._wait_ended(ctx, name, ns, pod, timeout)
        if done.get("phase") == "Missing" and made.replayed:
            # created and cleaned up before a crash: the check runs again, under the same name
            again = self._call(ctx, f"{name}-pod-again", ["POST", f"/api/v1/namespaces/{ns}/pods", pod],
                               lambda p: {"created": (p.create_pod(ns, body).get("metadata") or {}).get("name")})
            if not again.ok:
                return self._result(ctx, what, 1, err=again.error)
            done = self._wait_ended(ctx, name, ns, pod, timeout)
        logs = self._call(ctx, name, ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log"],
                          lambda p: {"log": p.log(ns, pod)})
        self._call(ctx, f"{name}-pod-delete", ["DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}"],
                   lambda p: {"deleted": p.delete_pod(ns, pod)})
        text = (logs.answer or {}).get("log", "") if logs.ok else ""
        if done.get("phase") == "Succeeded":
            return self._result(ctx, what, 0, text)
        code = done.get("exit_code")
        rc = int(code) if isinstance(code, int) and code else 1
        return self._result(ctx, what, rc, text, f"pod {ns}/{pod} {done.get('phase')}: {done.get('reason', '')}")

    def _wait_ended(self, ctx: NodeCtx, name: str, ns: str, pod: str, timeout: float) -> dict[str, Any]:
        def wait(p: PodApi) -> dict[str, Any]:
            _, last = kp.wait_watched(p, lambda: p.pod(ns, pod), p.pod_watch(ns, pod),
                                      lambda got: got is None or kp.phase(got) in ("Succeeded", "Failed"),
                                      timeout, POLL_S)
            if last is None:
                return {"phase": "Missing"}
            t = kp.terminated(last)
            waiting = next(((s.get("state") or {}).get("waiting") for s in
                            (last.get("status") or {}).get("containerStatuses") or [] if (s.get("state") or {}).get("waiting")),
                           None) or {}
            return {"phase": kp.phase(last), "exit_code": t.get("exitCode"),
                    "reason": t.get("reason") or waiting.get("reason") or (last.get("status") or {}).get("reason")
                    or f"not ended after {timeout:.0f}s",
                    "message": (t.get("message") or waiting.get("message") or "")[:300]}

        res = self._call(ctx, f"{name}-pod-wait", ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}",
                                                   f"WATCH /api/v1/namespaces/{ns}/pods?fieldSelector=metadata.name={pod}",
                                                   "until Succeeded or Failed"], wait)
        answer: dict[str, Any] = res.answer if res.ok and res.answer else {"phase": "Unknown", "reason": res.error}
        return answer

    # ------------------------------------------------------------ test servers

    def start_server(self, ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
                     env: dict[str, str] | None = None) -> CommandResult:
        pod = pod_name(ctx.run_id, ctx.node, name)
        ns = namespace(ctx.vars)
        container: dict[str, Any] = {"name": "vllm", "image": image, "args": [model, *args, "--port", str(port)],
                                     "ports": [{"containerPort": port}]}
        if env:
            container["env"] = [{"name": k, "value": v} for k, v in env.items()]
        body = self._pod(ctx, pod, name, container, port=port, host_network=env is not None)
        made = self._create(ctx, f"{name}-run", body)
        if made.ok and made.replayed:
            # created before a crash (the create is settled): the relaunch's cleanup kept a pod
            # still starting or serving, which this launch uses, found and not created twice;
            # one that ended or runs other arguments is replaced with a plain call
            def look(p: PodApi) -> dict[str, Any]:
                got = p.pod(ns, pod)
                return {"present": got is not None, "reusable": got is not None and _reusable(got, body)}

            there = self._call(ctx, f"{name}-run-present", ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}"], look)
            if there.ok and there.answer["present"] and not there.answer["reusable"]:
                self.remove_server(ctx, name, f"{name}-run-stale")
            if there.ok and not there.answer["reusable"]:
                made = self._call(ctx, f"{name}-run-again", ["POST", f"/api/v1/namespaces/{ns}/pods", pod],
                                  lambda p: {"created": (p.create_pod(ns, body).get("metadata") or {}).get("name")})
        with self._lock:
            self._servers[(ctx.run_id, ctx.node, port)] = (ns, pod)
        return self._result(ctx, ["pod", f"{ns}/{pod}", image, model, *args], made.rc, err=made.error)

    def _server_pod(self, ctx: NodeCtx, name: str) -> tuple[str, str]:
        return namespace(ctx.vars), pod_name(ctx.run_id, ctx.node, name)

    def server_state(self, ctx: NodeCtx, name: str, step: str, *, evidence: bool = True) -> ServerState:
        ns, pod = self._server_pod(ctx, name)
        res = self._call(ctx, step, ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}"], lambda p: p.pod(ns, pod))
        if not res.ok or res.answer is None:
            return ServerState("missing", found=False, error=res.error or f"no pod {ns}/{pod}")
        got, t = res.answer, kp.terminated(res.answer)
        ph = kp.phase(got)
        # Pending (pulling the image, the device plugin allocating) has not ended: it is starting
        state = "running" if ph in ("Pending", "Running") and not t else "exited" if t else ph.lower()
        return ServerState(state, str(t.get("exitCode", "")), f"{ph} {t.get('reason') or ''}".strip())

    def server_restarts(self, ctx: NodeCtx, name: str, step: str) -> tuple[str, int]:
        ns, pod = self._server_pod(ctx, name)
        res = self._call(ctx, step, ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}"], lambda p: p.pod(ns, pod))
        if not res.ok or res.answer is None:
            return "unknown", -1
        return kp.phase(res.answer).lower(), kp.restarts(res.answer)

    def server_logs(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        ns, pod = self._server_pod(ctx, name)
        if "/" in name:                 # a serving pod baseline saw (observe), not a test server
            ns, _, pod = name.partition("/")

        def read(p: PodApi) -> dict[str, str]:
            out = {"log": p.log(ns, pod)}
            got = p.pod(ns, pod)
            if got and kp.restarts(got):
                out["previous"] = p.log(ns, pod, previous=True)
            return out

        res = self._call(ctx, step, ["GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log"], read)
        a = res.answer or {}
        return self._result(ctx, ["log", f"{ns}/{pod}"], res.rc, (a.get("previous") or "") + (a.get("log") or ""),
                            res.error)

    def remove_server(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        """Delete the pod and wait until it is gone (a Pod terminates for up to its grace
        period, and a relaunch under the same name would be refused until then)."""
        ns, pod = self._server_pod(ctx, name)
        # the cleanup before a launch: a pod of this name is this run's (the name hashes the run
        # id), left by a launch a crash or a signal interrupted; one still starting or serving
        # is kept for start_server to use
        keep_alive = step.endswith("-cleanup")

        def delete(p: PodApi) -> dict[str, Any]:
            if keep_alive:
                got = p.pod(ns, pod)
                if got is not None and _alive(got):
                    return {"kept": pod}
            deleted = p.delete_pod(ns, pod)
            gone, _ = kp.wait_watched(p, lambda: p.pod(ns, pod), p.pod_watch(ns, pod), lambda q: q is None,
                                      GONE_TIMEOUT_S, POLL_S) if deleted else (True, None)
            if not gone:
                raise KubernetesError(f"pod {ns}/{pod} is still there {GONE_TIMEOUT_S:.0f}s after its deletion")
            return {"deleted": deleted}

        keep = [f"GET /api/v1/namespaces/{ns}/pods/{pod}", "kept if still starting or serving"] if keep_alive else []
        res = self._call(ctx, step, [*keep, "DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}",
                                     f"WATCH /api/v1/namespaces/{ns}/pods?fieldSelector=metadata.name={pod}",
                                     "until gone"], delete)
        if res.ok and (res.answer or {}).get("kept"):
            return self._result(ctx, ["KEEP", f"{ns}/{pod}"], res.rc)
        with self._lock:
            for key, where in list(self._servers.items()):
                if where == (ns, pod):
                    del self._servers[key]
        return self._result(ctx, ["DELETE", f"{ns}/{pod}"], res.rc, err=res.error)

    def removal_plan(self, names: tuple[str, ...]) -> list[list[str]]:
        return [["DELETE", f"/api/v1/namespaces/NS/pods/{pod_name('RUN', 'NODE', n).rsplit('-', 1)[0]}-<run,node>"]
                for n in names]

    def endpoint(self, ctx: NodeCtx, port: int) -> Endpoint:
        """The API server's pod proxy to the test server started on ``port``, else to the pod
        on the node that serves ``port`` (a serving workload, for observe)."""
        with self._lock:
            where = self._servers.get((ctx.run_id, ctx.node, port))
        server = ctx.runner.kube(ctx).server.rstrip("/")
        if where is None:
            def find(p: PodApi) -> list[str] | None:
                for q in p.pods_on(ctx.node):
                    if kp.phase(q) == "Running" and port in _container_ports(q):
                        meta = q.get("metadata") or {}
                        return [str(meta.get("namespace")), str(meta.get("name"))]
                return None

            res = self._call(ctx, f"endpoint-{port}", ["GET", f"/api/v1/pods?fieldSelector=spec.nodeName={ctx.node}",
                                                       f"containerPort {port}"], find)
            if not res.ok or not res.answer:
                return Endpoint(f"k3rollout-no-pod://{ctx.node}:{port}", auth=server)
            where = (res.answer[0], res.answer[1])
        return Endpoint(f"{server}/api/v1/namespaces/{where[0]}/pods/{where[1]}:{port}/proxy", auth=server)

    # ------------------------------------------------------------ the node's own workloads

    def route_to_serving(self, ctx: NodeCtx, workload: dict[str, Any], port: int) -> str:
        """A Running pod of the workload's owner (this node's first, wherever it runs: the
        workload is proven, not the node), else the very pod baseline saw."""
        ns, _, pod = workload["name"].partition("/")
        o = workload.get("owner")
        if o and o.get("kind") in kp.OWNERS:
            res = self._call(ctx, f"route-{pod}", ["GET", f"{o['kind']} {o['namespace']}/{o['name']}", "its pods"],
                             lambda p: self._owner_now(p, o)["pods"])
            # only a pod that serves the API: a LeaderWorkerSet's group comes back with its
            # leader wherever the scheduler put it, and a worker rank (--headless) answers nothing
            running = [q for q in (res.answer or []) if q["phase"] == "Running" and q["serves_api"]] if res.ok else []
            if not running:
                return f"no Running pod of {o['kind']} {o['namespace']}/{o['name']}" + (f": {res.error}" if res.error
                                                                                         else "")
            best = next((q for q in running if q["node"] == ctx.node), running[0])
            ns, _, pod = best["name"].partition("/")
        with self._lock:
            self._servers[(ctx.run_id, ctx.node, port)] = (ns, pod)
        return ""

    def unroute(self, ctx: NodeCtx, port: int) -> None:
        with self._lock:
            self._servers.pop((ctx.run_id, ctx.node, port), None)

    def release_gpus(self, ctx: NodeCtx) -> list[str]:
        # the cordon stage's drain evicted the serving pods; their owners' pods are never
        # stopped or started here
        return []

    def restore_serving(self, ctx: NodeCtx, stopped: list[str]) -> Restored:
        return Restored()

    def _owners(self, ctx: NodeCtx) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Baseline's serving pods grouped by owner (``Kind/ns/name``): the readyReplicas and
        digests to come back to; and the serving pods nobody owns (nothing brings them back)."""
        owners: dict[str, dict[str, Any]] = {}
        bare = []
        for s in ctx.baseline.get("serving_containers", []):
            o = s.get("owner")
            if not o or o.get("kind") not in kp.OWNERS:
                bare.append(s["name"])
                continue
            key = f"{o['kind']}/{o['namespace']}/{o['name']}"
            e = owners.setdefault(key, {**o, "digests": set(), "here": 0})
            e["here"] += 1
            if s.get("digest"):
                e["digests"].add(_sha(s["digest"]))
        return owners, bare

    @staticmethod
    def _owner_now(p: PodApi, o: dict[str, Any]) -> dict[str, Any]:
        obj = p.owner(o["namespace"], o["kind"], o["name"])
        if obj is None:
            return {"exists": False, "ready": 0, "digests": [], "restarts": 0, "pods": []}
        pods = p.pods(o["namespace"], _selector(o)) if _selector(o) else []
        running = [q for q in pods if kp.phase(q) == "Running"]
        digests = sorted({_sha(s.get("imageID")) or "" for q in running
                          for s in (q.get("status") or {}).get("containerStatuses") or []})
        return {"exists": True, "ready": kp.ready_replicas(obj), "digests": digests,
                "restarts": sum(kp.restarts(q) for q in pods),
                "pods": [{"name": f"{o['namespace']}/{(q.get('metadata') or {}).get('name')}",
                          "node": (q.get("spec") or {}).get("nodeName"), "phase": kp.phase(q),
                          "serves_api": _serves_api(q), "unschedulable": _unschedulable(q)} for q in pods]}

    @staticmethod
    def _owner_reader(p: PodApi, o: dict[str, Any]) -> Callable[[], dict[str, Any] | None]:
        return lambda: p.owner(o["namespace"], o["kind"], o["name"])

    @staticmethod
    def _owner_ready(want: int, now: int) -> Callable[[dict[str, Any] | None], bool]:
        # back to ``want``, gone, or any change of readyReplicas (everything is looked at again)
        return lambda obj: obj is None or kp.ready_replicas(obj) >= want or kp.ready_replicas(obj) != now

    @staticmethod
    def _short_elsewhere(o: dict[str, Any], now: dict[str, Any], node: str) -> str:
        """When an owner is short of its baseline readyReplicas only by pods the scheduler
        cannot place (``PodScheduled`` False, ``Unschedulable``: their GPUs are on nodes still
        out of service, say another node of the batch that is being rolled back), and this
        node runs as many of its pods, Running, as baseline saw on it, the shortfall is not
        this node's: the note that says so ("" otherwise)."""
        want = int(o.get("ready_replicas") or 0)
        unplaced = [q for q in now["pods"] if q.get("unschedulable")]
        here = sum(1 for q in now["pods"] if q.get("node") == node and q.get("phase") == "Running")
        if not unplaced or now["ready"] + len(unplaced) < want or here < int(o.get("here") or 0):
            return ""
        return (f"{o['kind']} {o['namespace']}/{o['name']} has {now['ready']} ready replicas of {want}: "
                f"{len(unplaced)} pod(s) wait for GPUs on nodes out of service "
                f"({unplaced[0]['unschedulable']}); this node runs its {here}")

    @classmethod
    def _back(cls, o: dict[str, Any], now: dict[str, Any], node: str) -> str:
        """Why the owner is not back as baseline saw it ("" when it is)."""
        if not now["exists"]:
            return f"{o['kind']} {o['namespace']}/{o['name']} no longer exists"
        if now["ready"] < int(o.get("ready_replicas") or 0) and not cls._short_elsewhere(o, now, node):
            return f"{o['kind']} {o['namespace']}/{o['name']} has {now['ready']} ready replicas of {o['ready_replicas']}"
        strange = [d for d in now["digests"] if d not in o["digests"]] if o["digests"] else []
        if strange:
            return (f"{o['kind']} {o['namespace']}/{o['name']} runs {', '.join(strange)}, not baseline's "
                    f"{', '.join(sorted(o['digests']))}")
        return ""

    def prove_serving(self, ctx: NodeCtx) -> Restored:
        owners, bare = self._owners(ctx)
        out = Restored()
        if bare:
            out.failed += bare
            out.reason = (f"serving pods without an owner that brings them back were evicted: {', '.join(bare)}; "
                          "recreate them by hand")
        if not owners:
            return out
        timeout = float(getattr(ctx.params, "serving_ready_timeout", 3600.0))

        def wait(p: PodApi) -> dict[str, Any]:
            start = p.now()
            while True:
                seen = {k: self._owner_now(p, o) for k, o in owners.items()}
                behind = [k for k, o in owners.items() if self._back(o, seen[k], ctx.node)]
                left = timeout - (p.now() - start)
                if not behind or left <= 0:
                    return seen
                o = owners[behind[0]]
                want = int(o.get("ready_replicas") or 0)
                if seen[behind[0]]["exists"] and seen[behind[0]]["ready"] >= want:
                    # ready on another image digest: only a rollout of the owner changes that
                    p.sleep(min(POLL_S * 5, left))
                    continue
                # its readyReplicas back (or the owner gone): watched, then everything looked at again
                kp.wait_watched(p, self._owner_reader(p, o), p.owner_watch(o["namespace"], o["kind"], o["name"]),
                                self._owner_ready(want, seen[behind[0]]["ready"]), left, POLL_S * 5)

        res = self._call(ctx, "serving-back", ["GET owners' readyReplicas and pods' imageID",
                                               "WATCH each owner behind (fieldSelector metadata.name) until ready",
                                               *sorted(owners), f"until back, at most {timeout:.0f}s"], wait)
        if not res.ok:
            out.failed += sorted(owners)
            out.reason = f"cannot read the owners of the serving pods: {res.error}"
            return out
        seen = res.answer or {}
        why = {k: self._back(o, seen[k], ctx.node) for k, o in owners.items() if k in seen}
        short = [n for k, o in owners.items() if k in seen and not why[k]
                 for n in [self._short_elsewhere(o, seen[k], ctx.node)] if n]
        if short:
            out.facts["serving_short_elsewhere"] = short
        out.facts["serving_owners"] = {k: {"ready": seen[k]["ready"], "baseline_ready": o.get("ready_replicas"),
                                           "digests": seen[k]["digests"], "pods": seen[k]["pods"]}
                                       for k, o in owners.items() if k in seen}
        out.facts["serving_restart_counts"] = {k: seen[k]["restarts"] for k in seen}
        out.back = [s["name"] for s in ctx.baseline.get("serving_containers", [])
                    if s.get("owner") and s["name"] not in bare]
        bad = [k for k, w in why.items() if w]
        if bad:
            out.failed += bad
            out.reason = "existing workloads are not back in service after " + f"{timeout:.0f}s: " + \
                "; ".join(why[k] for k in bad)
        return out

    def restore_images(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> tuple[bool, str]:
        """Rollback (the node still cordoned): nothing is started here; the owners' pods,
        wherever they run, must still be on baseline's image digests."""
        owners, _ = self._owners(ctx)
        if not owners:
            return True, "no owned serving pods to check"
        res = self._call(ctx, "serving-images", ["GET owners' pods' imageID", *sorted(owners)],
                         lambda p: {k: self._owner_now(p, o)["digests"] for k, o in owners.items()})
        if not res.ok:
            return False, f"cannot read the serving pods' images: {res.error}"
        bad = [k for k, o in owners.items() if o["digests"] and any(d not in o["digests"] for d in res.answer[k])]
        if bad:
            return False, f"not running on the original image digest: {', '.join(bad)}"
        return True, "serving pods' owners run their original images (they come back to the node after the uncordon)"

    def serving_problems(self, ctx: NodeCtx, names: list[str]) -> list[str]:
        # a cordoned node runs none of its owners' pods until it is uncordoned: the bar is
        # checked after the uncordon (prove_serving), not before it
        return []

    def serving_status(self, ctx: NodeCtx, name: str) -> dict[str, Any]:
        base = next((s for s in ctx.baseline.get("serving_containers", []) if s["name"] == name), None)
        o = (base or {}).get("owner")
        if not o or o.get("kind") not in kp.OWNERS:
            return {"state": "missing", "reason": f"{name} has no owner that brings it back"}
        res = self._call(ctx, f"serving-inspect-{name.replace('/', '-')}",
                         ["GET", f"{o['kind']} {o['namespace']}/{o['name']}", "its pods"],
                         lambda p: self._owner_now(p, o))
        if not res.ok or not res.answer["exists"]:
            return {"state": "missing", "reason": res.error or f"{o['kind']} {o['namespace']}/{o['name']} is gone"}
        a = res.answer
        state = "running" if a["ready"] >= int(o.get("ready_replicas") or 0) else "degraded"
        was = (base or {}).get("digest")
        # baseline's imageID when the owner's pods still run it, else what they run now
        digest = was if was and _sha(was) in a["digests"] else (a["digests"][0] if a["digests"] else None)
        return {"state": state, "restart_count": a["restarts"], "image": base.get("image") if base else None,
                "args": list((base or {}).get("args") or []), "digest": digest}

    # ------------------------------------------------------------ preflight

    def preflight(self, run: Run, host_vars: dict[str, Any]) -> Verdict:
        """crictl on the node (pre-staging pulls into the kubelet's store with it); checks and
        servers need no tool on the node. The API rights are the credentials check's."""
        res = run("workload-runtime", ["crictl", "version"])
        if not res.ok:
            return Verdict(True, f"crictl does not answer (rc {res.rc}): pre-staging cannot pull into the kubelet's "
                                 "image store; checks and test servers run as Pods through the API server")
        name = next((ln.split(":", 1)[1].strip() for ln in res.stdout.splitlines() if ln.startswith("RuntimeName")),
                    "unknown")
        return Verdict(True, f"Pods through the API server; crictl answers ({name})")

    def preflight_api(self, kube: Callable[[], Any] | None, node: str, host_vars: dict[str, Any]) -> ApiPreflight:
        """Read-only, from the controller, before any change: the API server knows the node
        (else it is not a node of this cluster: the backend does not fit it); the namespace
        the check and test-server Pods go to exists (the API server refuses a Pod in a missing
        one, and k3rollout does not create it: a cluster-scoped write, made by whoever grants
        the controller its Role there; docs/domain.md "Workloads on Kubernetes GPU nodes");
        each serving pod's owner exists. Each refusal is the input's (an inventory var, the
        credentials, a missing owner) and names its fix."""
        out = ApiPreflight()
        ns = namespace(host_vars)
        if kube is None:
            out.checks.append(("workload_node", Verdict(
                False, f"k3_workload_backend is kubernetes, but the node's scheduler is {host_vars.get('scheduler')}: "
                       "its checks and test servers run as Pods through the node's API server. Set scheduler: "
                       "kubernetes (and k3_kubeconfig), or k3_workload_backend to the runtime the node runs (docker)",
                bad_input=True)))
            return out
        try:
            pods = PodApi(kube())
        except KubernetesError as exc:
            out.checks.append(("workload_api", Verdict(False, f"cannot reach the Kubernetes API: {exc}")))
            return out

        def failed(check: str, exc: KubernetesError, what: str) -> ApiPreflight:
            # a 403 is the controller's credentials (named by the credentials check too)
            out.checks.append((check, Verdict(False, f"cannot {what} on {pods.server}: {exc}",
                                              bad_input=exc.status in (401, 403))))
            return out

        try:
            info = (pods.node(node).get("status") or {}).get("nodeInfo") or {}
        except KubernetesError as exc:
            if exc.status != 404:
                return failed("workload_node", exc, f"read node {node}")
            out.checks.append(("workload_node", Verdict(
                False, f"k3_workload_backend is kubernetes, but the API server {pods.server} has no node {node}: check "
                       "k3_kubeconfig and k3_kube_context (this node's cluster), or set k3_workload_backend to the "
                       "runtime the node runs (docker)", bad_input=True)))
            return out
        out.checks.append(("workload_node", Verdict(True, f"node {node}: kubelet {info.get('kubeletVersion')}, "
                                                          f"{info.get('containerRuntimeVersion')}")))
        try:
            there = pods.namespace(ns) is not None
        except KubernetesError as exc:
            return failed("workload_namespace", exc, f"read namespace {ns}")
        out.checks.append(("workload_namespace", Verdict(True, f"namespace {ns} exists") if there else Verdict(
            False, f"{NAMESPACE_VAR} is {ns}, but no namespace {ns} exists on {pods.server}: the check and "
                   f"test-server Pods go there, and the API server refuses them (404 namespaces \"{ns}\" not "
                   f"found). Create it (kubectl create namespace {ns}), or set {NAMESPACE_VAR} to an existing "
                   "namespace", bad_input=True)))
        try:
            # a pod still starting counts: the drain evicts it as well
            serving = {_full_name(q): q for q in pods.pods_on(node) if _serving(q, ("Pending", "Running"))}
            gone = {k: why for k, q in serving.items() if (why := missing_owner(pods, q))}
            owners = [owner_of(pods, q) or {} for q in serving.values()]
        except KubernetesError as exc:
            return failed("workload_owners", exc, f"read the serving pods on {node} and their owners")
        # what a playbook's workload_probes match: the pod (ns/name, name) or its owner's name
        out.serving = sorted({*serving, *(k.rpartition("/")[2] for k in serving),
                              *(str(o["name"]) for o in owners if o.get("name"))})
        out.checks.append(("workload_owners", Verdict(True, f"{len(serving)} serving pod(s), every owner exists")
                           if not gone else Verdict(
            False, "; ".join(f"serving pod {k} names its owner {v}, which does not exist" for k, v in gone.items())
            + ": after the drain nothing brings such a pod back, and the uncordon stage would wait for it in vain. "
              "Recreate the owner (or delete the stray pod), or leave the node out with --skip-node", bad_input=True)))
        return out

__all__ = ["Kubernetes", "crictl_image", "namespace", "pod_name"]
