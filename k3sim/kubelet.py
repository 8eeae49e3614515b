"""The simulated kubelet and its container runtime (containerd's CRI): it runs the Pods the API
server binds to this node, in the node's own container-execution core (sim/containers.py).

The API server (sim/kubeapi.py) keeps the Pod objects; the node keeps what runs: CRI containers in
``state["cri"]["containers"]`` by container id, one record per attempt of a pod's container, and
the CRI image store (containerd's ``k8s.io`` namespace) in ``state["cri"]["images"]``.
``sync_pod`` is the kubelet's pod worker, called under the host's state lock: it starts the
containers a pod lacks, restarts exited ones as ``restartPolicy`` says (with the kubelet's crash
back-off: 10 s doubling to 5 min, pkg/kubelet/kubelet.go ``MaxContainerBackOff``), treats the
containers of an earlier boot as dead, and writes the pod's status as the kubelet posts it. The
device plugin's ``nvidia.com/gpu`` is ``gpu_capacity``; sim/crictl.py reads what this module
keeps. This module never reads or writes the API server's objects other than the one pod it is
handed.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from k3sim import containers as ctr
from k3sim import state as st
from k3sim import vllm_multinode as mn
from k3sim.state import REGISTRY

GPU = "nvidia.com/gpu"
MAX_BACKOFF_S = 300.0     # kubelet's MaxContainerBackOff (pkg/kubelet/kubelet.go)
CONTAINERD_VERSION = "1.7.24"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def runtime(state: dict[str, Any]) -> str:
    """``docker`` (a Docker host: the docker CLI answers) or ``containerd`` (a Kubernetes node
    as they are built since dockershim left: no docker CLI, crictl, the CRI image store)."""
    return str(state.get("container_runtime") or "docker")


def runtime_version(state: dict[str, Any]) -> str:
    """The node's ``status.nodeInfo.containerRuntimeVersion``: ``containerd://1.7.24``, or on a
    Docker host (cri-dockerd) ``docker://`` and the Docker Engine version ``docker info`` reports."""
    return f"containerd://{CONTAINERD_VERSION}" if runtime(state) == "containerd" else "docker://28.2.2"


def cri(state: dict[str, Any]) -> dict[str, Any]:
    return state.setdefault("cri", {"images": {}, "containers": {}})


def gpu_capacity(state: dict[str, Any], now: float) -> int:
    """What the NVIDIA device plugin advertises: every GPU while the host is up with its driver
    loaded and the GPU runtime present; none otherwise. The plugin's pod cannot start NVML then,
    its registration goes, and the kubelet sets the resource's capacity and allocatable to 0
    (pkg/kubelet/nodestatus/setters.go, ``removedDevicePlugins``)."""
    if not st.is_up(state, now) or not state["loaded_driver"] or not state["docker"]["nvidia_runtime"]:
        return 0
    return int(state["gpu"]["count"])


def normalize(ref: str) -> str:
    """containerd's fully qualified reference: ``vllm/x:t`` is ``docker.io/vllm/x:t``."""
    name = ref
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in name:
        name += ":latest"
    return name


def registry_key(ref: str) -> str | None:
    """The simulated registry's entry for a reference in any of its spellings, or by digest
    (``REPO@sha256:...``: the tag whose manifest has that digest; the image keeps its tag's name,
    as the Docker host's pull by digest does)."""
    if "@" in ref:
        repo, _, digest = ref.partition("@")
        want = normalize(repo + ":_").rsplit(":", 1)[0]
        return next((k for k, img in REGISTRY.items()
                     if normalize(k).rsplit(":", 1)[0] == want and img["digest"] == digest), None)
    want = normalize(ref)
    return next((k for k in REGISTRY if normalize(k) == want), None)


def image_id(ref: str, img: dict[str, Any]) -> str:
    """The kubelet's ``imageID``: the repository digest (``docker.io/vllm/vllm-openai@sha256:...``)."""
    return f"{normalize(ref).rsplit(':', 1)[0]}@{img['digest']}"


def pull(state: dict[str, Any], ref: str) -> dict[str, Any] | None:
    images = cri(state)["images"]
    key = registry_key(ref)
    if key is None:
        return None
    images[normalize(key)] = dict(REGISTRY[key])
    return images[normalize(key)]


def local_image(state: dict[str, Any], ref: str) -> dict[str, Any] | None:
    return cri(state)["images"].get(local_name(ref))


def local_name(ref: str) -> str:
    """The name the CRI store keeps an image under (a digest reference finds its tag's)."""
    key = registry_key(ref) if "@" in ref else None
    return normalize(key or ref)


def container_id(uid: str, name: str, attempt: int) -> str:
    return hashlib.sha256(f"{uid}/{name}/{attempt}".encode()).hexdigest()


def _go_duration(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"


def _expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion in command and args (``$$`` escapes)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def dns_names(pod: dict[str, Any]) -> list[str]:
    """The names a pod answers to: its name, its hostname, and with a subdomain (a headless
    service, as an LWS or a StatefulSet sets it) ``HOSTNAME.SUBDOMAIN.NAMESPACE``."""
    spec, meta = pod["spec"], pod["metadata"]
    host = spec.get("hostname") or meta["name"]
    if spec.get("hostNetwork") and spec.get("nodeName"):
        host = spec["nodeName"]          # a hostNetwork pod has the node's hostname
    names = sorted({meta["name"], host})
    if spec.get("subdomain"):
        names.append(f"{host}.{spec['subdomain']}.{meta['namespace']}")
    return names


def gpus_requested(spec: dict[str, Any]) -> int:
    limits = (spec.get("resources") or {}).get("limits") or {}
    try:
        return int(str(limits.get(GPU, 0)))
    except ValueError:
        return 0


def attempts(state: dict[str, Any], uid: str, name: str) -> list[dict[str, Any]]:
    return sorted((c for c in cri(state)["containers"].values() if c["pod_uid"] == uid and c["cname"] == name),
                  key=lambda c: c["attempt"])


def _start(state: dict[str, Any], state_dir: Path, pod: dict[str, Any], spec: dict[str, Any], attempt: int,
           now: float, events: list[Event]) -> dict[str, Any] | None:
    """One attempt of one container; None while its image cannot be had (the pod waits)."""
    meta = pod["metadata"]
    img = local_image(state, spec["image"])
    if img is None:
        img = pull(state, spec["image"])
        if img is None:
            ref = normalize(spec["image"])
            events.append(("Warning", "Failed", f'Failed to pull image "{spec["image"]}": rpc error: code = NotFound '
                                                f'desc = failed to pull and unpack image "{ref}": failed to resolve '
                                                f'reference "{ref}": {ref}: not found'))
            return None
        events.append(("Normal", "Pulled", f'Successfully pulled image "{spec["image"]}"'))
    else:
        events.append(("Normal", "Pulled", f'Container image "{spec["image"]}" already present on machine'))
    events.append(("Normal", "Created", f"Created container {spec['name']}"))
    env = dict(e.split("=", 1) for e in ctr.image_env(img))
    for e in spec.get("env") or []:
        env[str(e.get("name"))] = _expand(str(e.get("value", "")), env)
    command = [_expand(str(a), env) for a in spec.get("command") or []]
    args = [_expand(str(a), env) for a in spec.get("args") or []]
    gpus = gpus_requested(spec)
    cid = container_id(meta["uid"], spec["name"], attempt)
    rec: dict[str, Any] = {
        "id": cid, "pod_uid": meta["uid"], "pod": meta["name"], "namespace": meta["namespace"],
        "cname": spec["name"], "attempt": attempt, "image": spec["image"], "status": "created", "exit_code": 0,
        "args": args, "command": command, "env": env, "created": now, "started": now, "logs": [], "port": 8000,
        "gpus": gpus > 0, "gpu_count": gpus, "boot_id": state["boot_id"], "address": pod["status"].get("podIP"),
        "aliases": dns_names(pod),
    }
    cri(state)["containers"][cid] = rec
    refusal = ctr.gpu_refusal(state, img, env) if gpus else None
    if refusal is not None:
        # containerd's CRI plugin wraps the OCI runtime's failure (containerd
        # internal/cri/server/container_start.go: "failed to create containerd task: %w"); the
        # kubelet reports it as StartError with exit code 128
        _finish(rec, 128, now, "StartError", "failed to create containerd task: " +
                ("no GPU runtime" if refusal == ctr.NO_GPU_RUNTIME else refusal.strip()))
        events.append(("Warning", "Failed", f"Error: {rec['message']}"))
        return rec
    if command and command[:2] != ["vllm", "serve"]:
        rc, out, err = ctr.oneshot(state, img, command[0], command[1:] + args, gpus > 0)
        if rc == 127:
            _finish(rec, 128, now, "StartError", "failed to create containerd task: failed to create shim task: OCI "
                    "runtime create failed: runc create failed: unable to start container process: " + err.strip())
            events.append(("Warning", "Failed", f"Error: {rec['message']}"))
            return rec
        events.append(("Normal", "Started", f"Started container {spec['name']}"))
        rec["logs"] = (out + err).splitlines()
        _finish(rec, rc, now)
        return rec
    rec["args"] = command[2:] + args
    rec["vllm"] = True
    events.append(("Normal", "Started", f"Started container {spec['name']}"))
    ctr.launch(state, cid, rec, img, state_dir)
    if rec["status"] == "exited":
        _finish(rec, rec["exit_code"], now)
    return rec


def _finish(rec: dict[str, Any], code: int, now: float, reason: str | None = None, message: str | None = None) -> None:
    rec["status"], rec["exit_code"], rec["finished"] = "exited", code, now
    rec["reason"] = reason or ("Completed" if code == 0 else "Error")
    if message:
        rec["message"] = message


def record_exited(state: dict[str, Any], pod: dict[str, Any], name: str, image: str, args: list[str],
                  log: list[str], code: int, started: float) -> None:
    """An instance of the pod's container that ran and exited before (the seeded history)."""
    uid = pod["metadata"]["uid"]
    n = len(attempts(state, uid, name))
    cid = container_id(uid, name, n)
    cri(state)["containers"][cid] = {
        "id": cid, "pod_uid": uid, "pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
        "cname": name, "attempt": n, "image": image, "status": "exited", "exit_code": code, "args": args,
        "command": ["vllm", "serve"], "env": {}, "created": started, "started": started, "finished": started + 60,
        "reason": "Completed" if code == 0 else "Error", "logs": log, "port": 8000, "gpus": True,
        "boot_id": state["boot_id"]}


def kill_pod(state: dict[str, Any], uid: str, now: float, remove: bool = False) -> None:
    """The kubelet stops a pod's containers (SIGTERM: vLLM's server shuts down cleanly, exit 0);
    with ``remove``, the pod is gone and its containers are removed with it."""
    cs = cri(state)["containers"]
    for cid, c in list(cs.items()):
        if c["pod_uid"] != uid:
            continue
        if c["status"] == "running":
            ctr.stop_servers(state, cid)
            _finish(c, 0, now)
        if remove:
            del cs[cid]


def _terminated(c: dict[str, Any]) -> dict[str, Any]:
    t = {"exitCode": c["exit_code"], "reason": c.get("reason", "Error"), "startedAt": iso(c["started"]),
         "finishedAt": iso(c.get("finished", c["started"])), "containerID": f"containerd://{c['id']}"}
    if c.get("message"):
        t["message"] = c["message"]
    return t


def _listening(state: dict[str, Any], cid: str) -> bool:
    return any(s["container"] == cid for s in state["servers"].values())


Event = tuple[str, str, str]          # (type, reason, message) the kubelet records on the pod


def sync_pod(state: dict[str, Any], state_dir: Path, pod: dict[str, Any], now: float,
             events: list[Event] | None = None) -> None:
    """The kubelet's pod worker for one pod bound here: run what should run, post the status
    (``pod["status"]``, in place) and say what it did in ``events`` (the kubelet's event reasons,
    pkg/kubelet/events/event.go: Pulled, Created, Started, Failed, BackOff). A node that is down
    posts nothing (its pods keep their last status, Ready turns False as the node controller
    marks them)."""
    events = [] if events is None else events
    status = pod["status"]
    if not st.is_up(state, now):
        for cond in status.get("conditions", []):
            if cond["type"] in ("Ready", "ContainersReady"):
                cond["status"] = "False"
        return
    if status.get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return
    policy = pod["spec"].get("restartPolicy", "Always")
    base = float(state.get("crash_backoff_s", 10.0))
    mn.settle_all(state, state_dir)          # a multi-node head waiting for its workers looks again
    statuses = []
    for spec in pod["spec"]["containers"]:
        runs = attempts(state, pod["metadata"]["uid"], spec["name"])
        latest = runs[-1] if runs else None
        if latest is not None and latest["status"] == "running" and latest.get("boot_id") != state["boot_id"]:
            # the node rebooted under it: containerd's record of a container it lost
            ctr.stop_servers(state, latest["id"])
            _finish(latest, 255, now, "Unknown")
        if latest is None:
            latest = _start(state, state_dir, pod, spec, 0, now, events)
        elif latest["status"] == "exited":
            again = policy == "Always" or (policy == "OnFailure" and latest["exit_code"] != 0)
            wait = 0.0 if latest.get("reason") == "Unknown" else min(base * 2 ** latest["attempt"], MAX_BACKOFF_S)
            if again and now - latest.get("finished", now) >= wait:
                latest = _start(state, state_dir, pod, spec, latest["attempt"] + 1, now, events) or latest
            elif again:
                meta = pod["metadata"]
                events.append(("Warning", "BackOff", f"Back-off restarting failed container {spec['name']} in pod "
                                                     f"{meta['name']}_{meta['namespace']}({meta['uid']})"))
        runs = attempts(state, pod["metadata"]["uid"], spec["name"])
        # the kubelet keeps one dead container per pod container besides the latest (MaxPerPodContainer)
        for old in runs[:-2]:
            del cri(state)["containers"][old["id"]]
        statuses.append(_container_status(state, pod, spec, runs[-2:], policy, base))
    status["containerStatuses"] = statuses
    status["hostIP"] = state.get("address") or "127.0.0.1"
    ready = all(s["ready"] for s in statuses)
    running = any("running" in s["state"] for s in statuses)
    ever = all(s.get("containerID") or s.get("lastState") for s in statuses)
    if policy == "Always" or running or not ever:
        phase = "Running" if ever and statuses else "Pending"
    elif all("terminated" in s["state"] for s in statuses):
        phase = "Succeeded" if all(s["state"]["terminated"]["exitCode"] == 0 for s in statuses) else "Failed"
    else:
        phase = "Running"
    status["phase"] = phase
    status.setdefault("startTime", iso(now))
    cond = "True" if ready and phase == "Running" else "False"
    status["conditions"] = [{"type": "PodReadyToStartContainers", "status": "True"},
                            {"type": "Initialized", "status": "True"},
                            {"type": "Ready", "status": cond, **({} if cond == "True" else {"reason": "ContainersNotReady"})},
                            {"type": "ContainersReady", "status": cond},
                            {"type": "PodScheduled", "status": "True"}]


def _container_status(state: dict[str, Any], pod: dict[str, Any], spec: dict[str, Any], runs: list[dict[str, Any]],
                      policy: str, base: float) -> dict[str, Any]:
    img = local_image(state, spec["image"])
    out: dict[str, Any] = {"name": spec["name"], "image": spec["image"], "imageID": "", "ready": False,
                           "restartCount": 0, "started": False, "state": {}, "lastState": {}}
    if not runs:
        reason = "ErrImagePull" if img is None else "ContainerCreating"
        out["state"] = {"waiting": {"reason": reason}}
        if img is None:
            ref = normalize(spec["image"])
            # containerd's resolver on a tag the registry does not have (rpc NotFound)
            out["state"]["waiting"]["message"] = (
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
                f'reference "{ref}": {ref}: not found')
        return out
    latest = runs[-1]
    prev = runs[-2] if len(runs) > 1 else None
    out["restartCount"] = latest["attempt"]
    out["containerID"] = f"containerd://{latest['id']}"
    if img is not None:
        out["imageID"] = image_id(spec["image"], img)
    if latest["status"] == "running":
        out["state"] = {"running": {"startedAt": iso(latest["started"])}}
        out["started"] = True
        topo = mn.topology(_opts(latest)) if latest.get("vllm") else None
        # a server is ready once it listens; a headless rank once it runs (it serves nothing)
        out["ready"] = not latest.get("vllm") or bool(topo and topo["headless"]) or _listening(state, latest["id"])
        if prev is not None:
            out["lastState"] = {"terminated": _terminated(prev)}
        return out
    again = policy == "Always" or (policy == "OnFailure" and latest["exit_code"] != 0)
    if again:
        wait = min(base * 2 ** latest["attempt"], MAX_BACKOFF_S)
        out["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": (
            f"back-off {_go_duration(wait)} restarting failed container={spec['name']} "
            f"pod={pod['metadata']['name']}_{pod['metadata']['namespace']}({pod['metadata']['uid']})")}}
        out["lastState"] = {"terminated": _terminated(latest)}
    else:
        out["state"] = {"terminated": _terminated(latest)}
        if prev is not None:
            out["lastState"] = {"terminated": _terminated(prev)}
    return out


def _opts(c: dict[str, Any]) -> dict[str, Any]:
    from k3sim.vllm import parse_serve_args

    opts, _ = parse_serve_args(c["args"])
    return opts or {}


def log_lines(state: dict[str, Any], pod: dict[str, Any], name: str, previous: bool) -> list[str] | str:
    """A container's log as the kubelet picks it from the posted status (pkg/kubelet/kubelet_pods.go
    ``validateContainerLogStatus``): the previous terminated instance, or the running one, the
    terminated one, the last terminated one; else the kubelet's words why there is none."""
    cs = next((c for c in pod["status"].get("containerStatuses") or [] if c["name"] == name), None)
    pname = pod["metadata"]["name"]
    if cs is None:
        return f'container "{name}" in pod "{pname}" is waiting to start: ContainerCreating'
    last = (cs.get("lastState") or {}).get("terminated")
    state_ = cs.get("state") or {}
    if previous:
        if not last:
            return f'previous terminated container "{name}" in pod "{pname}" not found'
        cid = last["containerID"]
    elif "running" in state_:
        cid = cs["containerID"]
    elif "terminated" in state_:
        cid = state_["terminated"]["containerID"]
    elif last:
        cid = last["containerID"]
    else:
        reason = (state_.get("waiting") or {}).get("reason", "ContainerCreating")
        return f'container "{name}" in pod "{pname}" is waiting to start: {reason}'
    rec = cri(state)["containers"].get(cid.removeprefix("containerd://"))
    return list(rec["logs"] or []) if rec else []
