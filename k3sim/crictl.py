"""``crictl`` on a simulated containerd node: the read-only looks at the kubelet's containers and
the CRI image store (containerd's ``k8s.io`` namespace), and ``crictl pull`` into that store, in
the formats of kubernetes-sigs/cri-tools cmd/crictl (container.go, image.go, info.go,
display.go). It changes nothing but the image store.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from k3sim import containers as ctr
from k3sim.kubelet import CONTAINERD_VERSION, cri, image_id, iso, local_image, local_name, normalize, pull


def _ago(t: float, now: float) -> str:
    """docker/go-units ``HumanDuration`` + " ago", as crictl prints CREATED."""
    s = max(0.0, now - t)
    if s < 1:
        return "Less than a second ago"
    if s < 60:
        return f"{int(s)} seconds ago"
    m = s / 60
    if m < 60:
        return f"{int(m)} minutes ago" if int(m) != 1 else "About a minute ago"
    h = m / 60
    if h < 48:
        return f"{round(h)} hours ago" if round(h) != 1 else "About an hour ago"
    return f"{int(h / 24)} days ago"


def _table(rows: list[list[str]]) -> str:
    """Go's tabwriter as crictl sets it (minwidth 20, tabwidth 1, padding 3, cmd/crictl/display.go)."""
    widths = [max(20, max(len(r[i]) for r in rows) + 3) for i in range(len(rows[0]) - 1)]
    return "".join("".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + r[-1] + "\n" for r in rows)


def _human_size(n: float) -> str:
    """docker/go-units ``HumanSizeWithPrecision(n, 3)`` (decimal units)."""
    units = ["B", "kB", "MB", "GB", "TB"]
    i = 0
    while n >= 1000 and i < len(units) - 1:
        n /= 1000
        i += 1
    return f"{n:.3g}{units[i]}"


def crictl(state: dict[str, Any], args: list[str]) -> ctr.Out:
    """``crictl ps [-a] [-q]``, ``crictl images [-q] [--digests]``, ``crictl inspecti REF``,
    ``crictl info``, ``crictl pull REF``, ``crictl version`` (cmd/crictl/{container,image,info,
    version}.go of kubernetes-sigs/cri-tools): the kubelet's containers and the CRI image store."""
    now = time.time()
    c = cri(state)
    cmd = args[0] if args else ""
    rest = args[1:]
    if cmd == "version":
        # the runtime's CRI Version answer, one fmt.Println per field (hence the two spaces)
        return 0, (f"Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  v{CONTAINERD_VERSION}\n"
                   "RuntimeApiVersion:  v1\n"), ""
    if cmd == "ps":
        rows = [["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID", "POD", "NAMESPACE"]]
        out = []
        for rec in sorted(c["containers"].values(), key=lambda r: -r["created"]):
            if rec["status"] != "running" and not ({"-a", "--all"} & set(rest)):
                continue
            if "-q" in rest or "--quiet" in rest:
                out.append(rec["id"] + "\n")
                continue
            img = local_image(state, rec["image"])
            # the kubelet creates containers by image id, which crictl prints truncated
            shown = (img["id"].removeprefix("sha256:")[:13]) if img else rec["image"]
            pod_id = hashlib.sha256(rec["pod_uid"].encode()).hexdigest()
            rows.append([rec["id"][:13], shown, _ago(rec["created"], now),
                         {"running": "Running", "exited": "Exited"}.get(rec["status"], "Created"), rec["cname"],
                         str(rec["attempt"]), pod_id[:13], rec["pod"], rec["namespace"]])
        return 0, "".join(out) if out or len(rows) == 1 and ("-q" in rest) else _table(rows), ""
    if cmd == "images":
        digests = "--digests" in rest
        if "-q" in rest or "--quiet" in rest:
            return 0, "".join(img["id"] + "\n" for img in c["images"].values()), ""
        head = ["IMAGE", "TAG"] + (["DIGEST"] if digests else []) + ["IMAGE ID", "SIZE"]
        rows = [head]
        for ref, img in sorted(c["images"].items()):
            repo, tag = ref.rsplit(":", 1)
            size = 21474836480 if "k3" in ref else 18253611008
            rows.append([repo, tag] + ([img["digest"].removeprefix("sha256:")[:13]] if digests else [])
                        + [img["id"].removeprefix("sha256:")[:13], _human_size(size)])
        return 0, _table(rows), ""
    if cmd == "inspecti":
        # cmd/crictl/image.go inspecti: --output/-o (json, the default, yaml, go-template) and
        # --template take a value
        refs, skip = [], False
        for a in rest:
            if skip:
                skip = False
            elif a in ("-o", "--output", "--template"):
                skip = True
            elif not a.startswith("-"):
                refs.append(a)
        if not refs:
            return 1, "", f"time=\"{iso(now)}\" level=fatal msg=\"image ID cannot be empty\"\n"
        found = []
        for ref in refs:
            img = local_image(state, ref)
            if img is None:
                return 1, "", f'time="{iso(now)}" level=fatal msg="no such image \\"{ref}\\" present"\n'
            key = local_name(ref)
            found.append({"status": {
                "id": img["id"], "repoTags": [key], "repoDigests": [image_id(key, img)],
                "size": str(21474836480 if "k3" in key else 18253611008), "uid": None, "username": "", "spec": None,
                "pinned": False},
                "info": {"imageSpec": {"created": img["created"], "architecture": "amd64", "os": "linux",
                                       "config": {"Env": ctr.image_env(img), "Entrypoint": ["vllm", "serve"]}}}})
        return 0, json.dumps(found[0] if len(found) == 1 else found, indent=2) + "\n", ""
    if cmd == "info":
        info = {"status": {"conditions": [{"type": "RuntimeReady", "status": True, "reason": "", "message": ""},
                                          {"type": "NetworkReady", "status": True, "reason": "", "message": ""}]},
                "config": {"containerd": {"snapshotter": "overlayfs", "defaultRuntimeName": "nvidia"
                                          if state["docker"]["nvidia_runtime"] else "runc",
                                          "runtimes": {"runc": {"runtimeType": "io.containerd.runc.v2"},
                                                       **({"nvidia": {"runtimeType": "io.containerd.runc.v2",
                                                                      "options": {"BinaryName":
                                                                                  "/usr/bin/nvidia-container-runtime"}}}
                                                          if state["docker"]["nvidia_runtime"] else {})}},
                           "containerdRootDir": "/var/lib/containerd", "containerdEndpoint":
                           "/run/containerd/containerd.sock", "rootDir": "/var/lib/containerd/io.containerd.grpc.v1.cri",
                           "stateDir": "/run/containerd/io.containerd.grpc.v1.cri"}}
        return 0, json.dumps(info, indent=2) + "\n", ""
    if cmd == "pull":
        refs = [a for a in rest if not a.startswith("-")]
        if not refs:
            return 1, "", f'time="{iso(now)}" level=fatal msg="image name cannot be empty"\n'
        img = pull(state, refs[-1])
        if img is None:
            ref = normalize(refs[-1])
            return 1, "", (f'time="{iso(now)}" level=fatal msg="pulling image: rpc error: code = NotFound desc = '
                           f'failed to pull and unpack image \\"{ref}\\": failed to resolve reference \\"{ref}\\": '
                           f'{ref}: not found"\n')
        # cmd/crictl/image.go: "Image is up to date for %s" with the pulled image's ref (its id)
        return 0, f"Image is up to date for {img['id']}\n", ""
    return 1, "", f'No help topic for \'{cmd}\'\n'
