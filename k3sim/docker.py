"""Container-side commands of the simulated node: docker, and curl to local servers.

``docker run`` applies the checks the NVIDIA container stack applies, in the same order:
GPU device driver present (``could not select device driver``), kernel driver loaded,
the image's ``NVIDIA_REQUIRE_CUDA`` against the driver's CUDA version, then the process
itself (CUDA init, model load) with vLLM's and PyTorch's own error lines.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from k3rollout import fastjson
from k3sim import containers as ctr
from k3sim import netd, vllm
from k3sim import vllm_multinode as mn
from k3sim.containers import image_env
from k3sim.state import REGISTRY

Out = tuple[int, str, str]


def _inspect_image(ref: str, img: dict[str, Any]) -> dict[str, Any]:
    repo = ref.split(":")[0]
    return {
        "Id": img["id"], "RepoTags": [ref], "RepoDigests": [f"{repo}@{img['digest']}"], "Parent": "",
        "Created": img["created"], "DockerVersion": "", "Architecture": "amd64", "Os": "linux",
        "Size": 21474836480 if "k3" in ref else 18253611008,
        "Config": {"Env": image_env(img), "Entrypoint": ["vllm", "serve"], "Cmd": None,
                   "Labels": {"maintainer": "vLLM", "org.opencontainers.image.source": "https://github.com/vllm-project/vllm",
                              "org.opencontainers.image.version": img["vllm"],
                              "org.opencontainers.image.ref.name": "ubuntu"}},
        "RootFS": {"Type": "layers", "Layers": [f"sha256:{hashlib.sha256((ref + str(i)).encode()).hexdigest()}"
                                                for i in range(3)]},
    }


def _go_template(fmt: str, obj: Any) -> str:
    def repl(m: re.Match) -> str:
        expr = m.group(1).strip()
        as_json = expr.startswith("json ")
        path = expr[5:].strip() if as_json else expr
        cur = obj
        for part in [p for p in path.split(".") if p]:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if as_json:
            return json.dumps(cur, separators=(",", ":"))
        return "<no value>" if cur is None else str(cur)

    return re.sub(r"\{\{(.*?)\}\}", repl, fmt)


def _container_json(name: str, c: dict[str, Any]) -> dict[str, Any]:
    return {"Name": "/" + name, "Config": {"Image": c["image"], "Env": [f"{k}={v}" for k, v in c["env"].items()]},
            "Image": c["image"], "State": {"Status": c["status"], "Running": c["status"] == "running",
                                           "ExitCode": c["exit_code"]},
            "Args": c["args"], "RestartCount": c.get("restart_count", 0),
            "HostConfig": {"RestartPolicy": {"Name": c.get("restart", "no")}}}


def docker(state: dict[str, Any], args: list[str], state_dir: Path | None = None) -> Out:
    if not args:
        return 1, "", "Usage:  docker [OPTIONS] COMMAND\n"
    d = state["docker"]
    if state_dir is not None:
        mn.settle_all(state, state_dir)     # a multi-node head waiting for its workers looks again
    cmd, rest = args[0], args[1:]
    fmt = None
    if "--format" in rest:
        fmt = rest[rest.index("--format") + 1]
        rest = [a for i, a in enumerate(rest) if a != "--format" and (i == 0 or rest[i - 1] != "--format")]
    elif "-f" in rest and cmd in ("inspect", "info"):
        fmt = rest[rest.index("-f") + 1]
        rest = [a for i, a in enumerate(rest) if a != "-f" and (i == 0 or rest[i - 1] != "-f")]
    if cmd == "info":
        runtimes = {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}}
        if d["nvidia_runtime"]:
            runtimes["nvidia"] = {"path": "nvidia-container-runtime"}
        info = {"ServerVersion": "28.2.2", "Driver": "overlay2", "CgroupDriver": "systemd", "CgroupVersion": "2",
                "Runtimes": runtimes, "DefaultRuntime": "runc", "OperatingSystem": "Ubuntu 22.04.5 LTS",
                "KernelVersion": state["kernel"], "NCPU": 224, "MemTotal": 2164154613760, "Name": state["name"],
                "Containers": len(d["containers"]),
                "ContainersRunning": sum(1 for c in d["containers"].values() if c["status"] == "running"),
                "Images": len(d["images"]), "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
        return 0, (_go_template(fmt, info) if fmt else json.dumps(info)) + "\n", ""
    if cmd == "image" and rest[:1] == ["inspect"] or cmd == "inspect" and rest and rest[-1] in d["images"]:
        refs = [a for a in (rest[1:] if cmd == "image" else rest) if not a.startswith("-")]
        found, missing = [], []
        for r in refs:
            (found.append(_inspect_image(r, d["images"][r])) if r in d["images"] else missing.append(r))
        if fmt:
            out = "".join(_go_template(fmt, o) + "\n" for o in found)
        else:
            out = fastjson.dumps_pretty(found, 4) + "\n"
        err = "".join(f"Error response from daemon: No such image: {m}\n" for m in missing)
        return (1 if missing else 0), out, err
    if cmd == "inspect":
        names = [a for a in rest if not a.startswith("-")]
        out, err = [], ""
        for n in names:
            if n in d["containers"]:
                o = _container_json(n, d["containers"][n])
                out.append(_go_template(fmt, o) if fmt else fastjson.dumps_pretty([o], 4))
            else:
                err += f"Error: No such object: {n}\n"
        return (1 if err else 0), "".join(x + "\n" for x in out), err
    if cmd == "ps":
        lines = []
        for n, c in d["containers"].items():
            if c["status"] != "running" and "-a" not in rest:
                continue
            row = {"Command": '"vllm serve"', "ID": hashlib.sha1(n.encode()).hexdigest()[:12], "Image": c["image"],
                   "Names": n, "State": c["status"],
                   "Status": "Up 2 hours" if c["status"] == "running" else f"Exited ({c['exit_code']}) 1 hour ago",
                   "Ports": f"0.0.0.0:{c.get('port', 8000)}->{c.get('port', 8000)}/tcp"}
            lines.append(_go_template(fmt, row) if fmt else f"{row['ID']}   {row['Image']}   {row['Status']}   {n}")
        return 0, "".join(x + "\n" for x in lines), ""
    if cmd == "logs":
        names = [a for a in rest if not a.startswith("-")]
        if not names or names[0] not in d["containers"]:
            return 1, "", f"Error response from daemon: No such container: {names[0] if names else ''}\n"
        c = d["containers"][names[0]]
        logs = c["logs"] if c["logs"] is not None else _late_logs(c)
        return 0, "", "\n".join(logs) + "\n"  # vLLM logs to stderr, so docker logs shows them there
    if cmd == "pull":
        return _pull(state, rest[-1] if rest else "")
    if cmd in ("rm", "stop"):
        names = [a for a in rest if not a.startswith("-")]
        err = ""
        for n in names:
            c = d["containers"].get(n)
            if c is None:
                if cmd == "stop" or "-f" not in rest:
                    err += f"Error response from daemon: No such container: {n}\n"
                continue
            if cmd == "rm" and c["status"] == "running" and "-f" not in rest:
                err += (f"Error response from daemon: cannot remove container \"/{n}\": container is running: "
                        "stop the container before removing or force remove\n")
                continue
            _stop(state, n)
            c["stopped_by_user"] = True        # unless-stopped: not restarted at the next boot
            if cmd == "rm":
                del d["containers"][n]
        return (1 if err else 0), "".join(n + "\n" for n in names), err
    if cmd == "start":
        names = [a for a in rest if not a.startswith("-")]
        for n in names:
            if n not in d["containers"]:
                return 1, "", f"Error response from daemon: No such container: {n}\nError: failed to start containers: {n}\n"
            d["containers"][n].pop("stopped_by_user", None)
            # a start by hand resets the restart manager and its count (moby daemon/start.go:
            # containerStart(..., resetRestartManager=true) -> ResetRestartManager(true))
            d["containers"][n]["restart_count"] = 0
            rc, out, err = _start(state, n, state_dir)
            if rc:
                return rc, out, err
        return 0, "".join(n + "\n" for n in names), ""
    if cmd == "run":
        return _run(state, rest, state_dir)
    return 1, "", f"docker: '{cmd}' is not a docker command.\n"


def _late_logs(c: dict[str, Any]) -> list[str]:
    opts, _ = vllm.parse_serve_args(c["args"])
    return vllm.startup_logs(opts or {"model": "?", "tensor_parallel_size": "8"}, "0.23.1") + vllm.cuda_insufficient_logs()


def _pull(state: dict[str, Any], ref: str) -> Out:
    if "@" in ref:
        # by digest: the registry's manifest with that digest (the image keeps its tag's name)
        repo, digest = ref.split("@", 1)
        hit = next((r for r, img in REGISTRY.items() if r.rsplit(":", 1)[0] == repo and img["digest"] == digest), None)
        if hit is None:
            return 1, "", f"Error response from daemon: manifest for {ref} not found: manifest unknown: manifest unknown\n"
        state["docker"]["images"][hit] = dict(REGISTRY[hit])
        return 0, (f"{digest}: Pulling from {repo}\nDigest: {digest}\n"
                   f"Status: Downloaded newer image for {ref}\ndocker.io/{ref}\n"), ""
    if ref not in REGISTRY:
        return 1, "", (f"Error response from daemon: manifest for {ref} not found: manifest unknown: "
                       "manifest unknown\n")
    img = REGISTRY[ref]
    state["docker"]["images"][ref] = dict(img)
    tag = ref.split(":")[-1]
    return 0, (f"{tag}: Pulling from {ref.split(':')[0]}\nDigest: {img['digest']}\n"
               f"Status: Downloaded newer image for {ref}\ndocker.io/{ref}\n"), ""


def _stop(state: dict[str, Any], name: str) -> None:
    c = state["docker"]["containers"][name]
    if c["status"] == "running":
        c["status"], c["exit_code"] = "exited", 0
    ctr.stop_servers(state, name)


def _gpu_checks(state: dict[str, Any], img: dict[str, Any], env: dict[str, str]) -> Out | None:
    refusal = ctr.gpu_refusal(state, img, env)
    if refusal is None:
        return None
    if refusal == ctr.NO_GPU_RUNTIME:
        return 125, "", ('docker: Error response from daemon: could not select device driver "" with '
                         "capabilities: [[gpu]].\n\nRun 'docker run --help' for more information\n")
    return 125, "", "docker: Error response from daemon: failed to create task for container: " + refusal


def _parse_run(args: list[str]) -> tuple[dict[str, Any], str | None, list[str]]:
    opts: dict[str, Any] = {"env": {}, "detach": False, "rm": False, "gpus": None, "name": None,
                            "entrypoint": None, "restart": "no", "publish": []}
    with_val = {"--name", "-e", "--env", "--gpus", "--entrypoint", "-p", "--publish", "--ipc", "--shm-size",
                "--network", "--net", "-v", "--volume", "--runtime", "--restart", "--ulimit", "-u", "--user"}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            return opts, a, args[i + 1:]
        key, eq, val = a.partition("=")
        if key in with_val:
            if not eq:
                i += 1
                val = args[i] if i < len(args) else ""
            if key in ("-e", "--env"):
                k, _, v = val.partition("=")
                opts["env"][k] = v
            elif key in ("-p", "--publish"):
                opts["publish"].append(val)
            elif key in ("--name", "--gpus", "--entrypoint", "--restart"):
                opts[key.lstrip("-")] = val
        elif a in ("-d", "--detach"):
            opts["detach"] = True
        elif a == "--rm":
            opts["rm"] = True
        elif a in ("-it", "-i", "-t", "--init", "--privileged"):
            pass
        i += 1
    return opts, None, []


def _run(state: dict[str, Any], args: list[str], state_dir: Path | None = None) -> Out:
    d = state["docker"]
    opts, ref, cargs = _parse_run(args)
    if not ref:
        return 125, "", '"docker run" requires at least 1 argument.\n'
    pulled = ""
    if ref not in d["images"]:
        rc, out, err = _pull(state, ref)
        if rc:
            return 125, "", f"Unable to find image '{ref}' locally\ndocker: {err}"
        pulled = f"Unable to find image '{ref}' locally\n" + out
    img = d["images"][ref]
    name = opts["name"] or f"sim_{hashlib.sha1(repr(args).encode()).hexdigest()[:8]}"
    if name in d["containers"]:
        return 125, pulled, (f'docker: Error response from daemon: Conflict. The container name "/{name}" is '
                             f"already in use by container \"{hashlib.sha1(name.encode()).hexdigest()}\". You have "
                             "to remove (or rename) that container to be able to reuse that name.\n")
    if opts["gpus"]:
        bad = _gpu_checks(state, img, opts["env"])
        if bad:
            return bad[0], pulled + bad[1], bad[2]
    entry = opts["entrypoint"]
    if entry:
        rc, out, err = _oneshot(state, img, entry, cargs, gpus=bool(opts["gpus"]))
        return rc, pulled + out, err
    c = {"image": ref, "status": "created", "exit_code": 0, "restart": opts["restart"], "args": cargs,
         "env": opts["env"], "started": time.time(), "logs": [], "port": 8000, "gpus": bool(opts["gpus"])}
    d["containers"][name] = c
    rc, out, err = _start(state, name, state_dir)
    if rc == 0 and not opts["detach"]:
        out = out + "\n".join(c["logs"]) + "\n"
    if opts["rm"] and c["status"] != "running":
        del d["containers"][name]
    cid = hashlib.sha256(name.encode()).hexdigest()
    return rc, pulled + (cid + "\n" if opts["detach"] and rc == 0 else out), err


def _start(state: dict[str, Any], name: str, state_dir: Path | None = None) -> Out:
    """Start (or restart) a vLLM container; the process outcome lands in its status and logs."""
    c = state["docker"]["containers"][name]
    img = state["docker"]["images"].get(c["image"])
    if img is None:
        return 125, "", f"Error response from daemon: No such image: {c['image']}\n"
    if c.get("gpus", True):
        bad = _gpu_checks(state, img, c["env"])
        if bad:
            c["status"], c["exit_code"] = "created", 128
            return bad
    ctr.launch(state, name, c, img, state_dir)
    return 0, "", ""


def _oneshot(state: dict[str, Any], img: dict[str, Any], entry: str, args: list[str], gpus: bool) -> Out:
    rc, out, err = ctr.oneshot(state, img, entry, args, gpus)
    if rc == 127:
        return 127, "", f"docker: Error response from daemon: failed to create task: {err}"
    return rc, out, err


def on_boot(state: dict[str, Any]) -> None:
    """The Docker daemon starting at boot: it starts every container whose restart policy
    says so. ``always`` and ``unless-stopped`` restart a container that exited on an error
    too (Docker kept restarting it; a failed start is not a stop), ``unless-stopped`` not
    one a person stopped with ``docker stop`` (docs.docker.com, "Start containers
    automatically"); ``on-failure`` one that exited non-zero. The daemon's restore starts
    them as a start by hand does, resetting ``RestartCount`` to 0 (moby daemon/daemon.go:
    ``containerStart(..., true)``)."""
    for name, c in state["docker"]["containers"].items():
        was_running = c["status"] == "running"
        c["status"] = "exited"
        c["exit_code"] = 137 if was_running else c.get("exit_code", 0)
        policy = c.get("restart")
        again = policy == "always" or (policy == "unless-stopped" and not c.get("stopped_by_user")) or \
            (policy == "on-failure" and c["exit_code"] != 0)
        if again:
            c["restart_count"] = 0
            _start(state, name)


def crash(state: dict[str, Any], name: str, state_dir: Path | None = None) -> None:
    """The container's process is killed while the daemon runs (an Xid error, the kernel's
    OOM killer: exit 137). Docker's restart manager restarts it as its policy says and
    counts the restart in ``RestartCount`` (moby daemon/monitor.go: the restart after an
    exit keeps the count and adds one); with ``no`` (or ``on-failure`` after a clean exit)
    it stays exited."""
    c = state["docker"]["containers"][name]
    if c["status"] != "running":
        return
    _stop(state, name)
    c["exit_code"] = 137
    policy = c.get("restart")
    if policy in ("always", "unless-stopped", "on-failure"):
        c["restart_count"] = c.get("restart_count", 0) + 1
        _start(state, name, state_dir)


# ---------------------------------------------------------------- curl


def curl(state_dir: Path, state: dict[str, Any], args: list[str], stdin: bytes | None) -> Out:
    """curl on the node: a real HTTP request to the node's own address (its loopback)."""
    method, data, fail, url, write_out, max_time = None, None, False, None, None, 30.0
    headers: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-X", "--request"):
            i += 1
            method = args[i]
        elif a in ("-d", "--data", "--data-binary", "--data-raw"):
            i += 1
            data = args[i]
        elif a in ("-H", "--header"):
            i += 1
            k, _, v = args[i].partition(":")
            headers[k.strip()] = v.strip()
        elif a in ("-m", "--max-time"):
            i += 1
            max_time = float(args[i])
        elif a in ("--connect-timeout", "-o", "--output"):
            i += 1
        elif a in ("-w", "--write-out"):
            i += 1
            write_out = args[i]
        elif a in ("-f", "--fail"):
            fail = True
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            fail |= "f" in a
        elif not a.startswith("-"):
            url = a
        i += 1
    if url is None:
        return 2, "", "curl: no URL specified\n"
    payload = (stdin or b"") if data == "@-" else (data.encode() if data is not None else None)
    u = urlparse(url)
    port = u.port or 80
    host = u.hostname or ""
    # the node's own loopback is its address in the simulated network
    target = state["address"] if host in ("127.0.0.1", "localhost", "::1", state["name"]) else host
    real = u._replace(netloc=f"{target}:{port}").geturl()
    import urllib.error  # here, not at the top: every simulated command imports this module
    import urllib.request

    req = urllib.request.Request(real, data=payload, method=method or ("POST" if payload is not None else "GET"),
                                 headers=headers)
    for attempt in (1, 2):
        try:
            with urllib.request.urlopen(req, timeout=max_time) as resp:
                code, text = resp.status, resp.read().decode(errors="replace")
            break
        except urllib.error.HTTPError as exc:
            code, text = exc.code, exc.read().decode(errors="replace")
            break
        except (urllib.error.URLError, OSError) as exc:
            if attempt == 1 and str(port) in state["servers"] and target == state["address"]:
                netd.ensure(state_dir.parent)       # the network daemon was stopped: bring it back
                continue
            return 7, "", (f"curl: (7) Failed to connect to {host} port {port} after 0 ms: "
                           f"Couldn't connect to server ({getattr(exc, 'reason', exc)})\n")
    if write_out:
        text += write_out.replace("%{http_code}", str(code))
    if fail and code >= 400:
        return 22, "", f"curl: (22) The requested URL returned error: {code}\n"
    return 0, text, ""
