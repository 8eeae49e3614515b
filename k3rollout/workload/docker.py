"""``k3_workload_backend: docker``: a plain Docker host, reached over the node's transport.

Every ``docker`` command k3rollout sends lives here, beside the parser of its output (the
JSON parsers shared with observe and the report are in k3rollout/checks/parsers.py). The
node's serving workloads are its running containers; a test server is a container with
``--gpus all`` on the published port (a replica member on the host network); the gates
reach it at the node's own address. Nothing here decides a stage's outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from k3rollout.checks import parsers
from k3rollout.checks.triage import classify
from k3rollout.transport.base import CommandResult
from k3rollout.workload.base import ApiPreflight, Endpoint, NodeCtx, Pulled, Restored, Run, ServerState, Verdict
from k3rollout.workload.k8s_pods import KubernetesError, PodApi

DOCKER = "docker"
DEFAULT_ROOT = "/var/lib/docker"
TEST_PREFIX = "k3rollout-"            # the test servers' names: never a node's own workload
EXIT_FORMAT = "{{.State.Status}} {{.State.ExitCode}}"
RESTART_FORMAT = "{{.State.Status}} {{.RestartCount}}"


def _docker(*args: str) -> list[str]:
    return [DOCKER, *args]


def _gpu_run(*args: str) -> list[str]:
    return _docker("run", "--rm", "--gpus", "all", *args)


def host_net(env: dict[str, str]) -> list[str]:
    """A replica member: host networking, so the ranks talk over the node's own interfaces
    as the recipe's multi-node launches do (a published port would be ignored)."""
    out = ["--network", "host"]
    for k, v in env.items():
        out += ["-e", f"{k}={v}"]
    return out


def command_missing(res: CommandResult) -> bool:
    """The shell could not find ``docker`` (rc 127, bash's "command not found")."""
    text = res.stdout + res.stderr
    return res.rc == 127 or "command not found" in text or "No such file or directory" in text and "docker" in text


def _args(ins: CommandResult) -> list[str]:
    """A container's ``Args`` from ``docker inspect`` (its serving port is among them)."""
    try:
        got = parsers.parse_json(ins.stdout, "docker inspect") if ins.ok else None
    except parsers.ParseError:
        return []
    data = got[0] if isinstance(got, list) and got and isinstance(got[0], dict) else {}
    return [str(a) for a in data.get("Args") or []]


class Docker:
    kind = "docker"

    # ------------------------------------------------------------ images

    def image_store(self, run: Run, host_vars: dict[str, Any]) -> str:
        return str(host_vars.get("docker_root", DEFAULT_ROOT))

    def image_cached(self, run: Run, image: str) -> bool:
        return run("target-image", _docker("image", "inspect", image)).ok

    def image_facts(self, ctx: NodeCtx, image: str, name: str = "image-inspect") -> dict[str, Any] | None:
        res = ctx.step(name, _docker("image", "inspect", image))
        if not res.ok:
            return None
        return parsers.image_facts(parsers.parse_json(res.stdout, "docker image inspect"))

    def pull(self, ctx: NodeCtx, image: str, name: str = "image-pull", timeout: float = 3600) -> CommandResult:
        return ctx.step(name, _docker("pull", image), timeout=timeout)

    def pull_pinned(self, run: Run, ref: str) -> Pulled:
        res = run("pull-image", _docker("pull", ref))
        if not res.ok:
            return Pulled(False, ref, detail=res.tail(300), logs=res.stderr)
        got = next((ln.split(":", 1)[1].strip() for ln in res.stdout.splitlines() if ln.startswith("Digest:")), None)
        return Pulled(True, ref, got)

    def pull_command(self) -> str:
        return "docker pull"

    # ------------------------------------------------------------ baseline

    def runtime_facts(self, ctx: NodeCtx) -> dict[str, Any]:
        f: dict[str, Any] = {"workload_backend": self.kind}
        info = ctx.step("docker-info", _docker("info", "--format", "{{json .}}"))
        if info.ok:
            f.update(parsers.docker_info_facts(parsers.parse_json(info.stdout, "docker info")))
        else:
            f["nvidia_runtime"] = False
        ps = ctx.step("docker-ps", _docker("ps", "-a", "--format", "{{json .}}"))
        containers = [json.loads(line) for line in ps.stdout.splitlines() if line.strip().startswith("{")]
        f["containers"] = [{"name": c["Names"], "image": c["Image"], "state": c["State"]} for c in containers]
        return f

    def serving_workloads(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        serving = []
        for c in containers:
            if c["state"] != "running" or c["name"].startswith(TEST_PREFIX):
                continue
            img = self.image_facts(ctx, c["image"], f"image-inspect-{c['name']}")
            ins = ctx.step(f"container-inspect-{c['name']}", _docker("inspect", c["name"]))
            serving.append({"name": c["name"], "image": c["image"], "digest": img["digest"] if img else None,
                            "cuda": img["cuda"] if img else None, "inspect_ok": ins.ok, "args": _args(ins)})
        return serving

    def prior_failures(self, ctx: NodeCtx, containers: list[dict[str, Any]],
                       failure_names: list[str]) -> list[dict[str, Any]]:
        names = {c["name"] for c in containers}
        failures = []
        for name in failure_names:
            if name not in names:
                continue
            ins = ctx.step(f"failed-container-inspect-{name}", _docker("inspect", name))
            logs = ctx.step(f"failed-container-logs-{name}", _docker("logs", name))
            tri = classify(logs.stdout + logs.stderr)
            failures.append({"container": name, "triage": tri.category, "evidence": tri.evidence[:3],
                             "inspect_saved": ins.ok})
        return failures

    # ------------------------------------------------------------ after the driver stage

    def after_driver(self, ctx: NodeCtx, timeout_s: float) -> tuple[bool, str, dict[str, Any]]:
        # Docker hands out GPUs by device path (--gpus): nothing to wait for
        return True, "", {}

    def gpu_work_allowed(self, ctx: NodeCtx) -> tuple[bool, str]:
        # observe's checks run on nodes the run upgraded; a serving container's GPUs are
        # shared by --gpus all, as they were before this seam
        return True, ""

    # ------------------------------------------------------------ one-off checks

    def run_check(self, ctx: NodeCtx, name: str, image: str, entrypoint: str, args: list[str],
                  timeout: float = 600.0) -> CommandResult:
        return ctx.step(name, _gpu_run("--entrypoint", entrypoint, image, *args), timeout=timeout)

    # ------------------------------------------------------------ test servers

    def start_server(self, ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
                     env: dict[str, str] | None = None) -> CommandResult:
        net = ["-p", f"{port}:{port}"] if env is None else host_net(env)
        return ctx.step(f"{name}-run", _docker("run", "-d", "--name", name, "--gpus", "all", "--ipc=host",
                                               *net, image, model, *args, "--port", str(port)), timeout=3600)

    def server_state(self, ctx: NodeCtx, name: str, step: str, *, evidence: bool = True) -> ServerState:
        res = ctx.step(step, _docker("inspect", "-f", EXIT_FORMAT, name), evidence=evidence)
        text = res.stdout.strip()
        if not res.ok:
            return ServerState("missing", text=text, found=False, error=res.stderr.strip()[:120])
        state, _, code = text.partition(" ")
        return ServerState(state, code, text)

    def server_restarts(self, ctx: NodeCtx, name: str, step: str) -> tuple[str, int]:
        res = ctx.step(step, _docker("inspect", "-f", RESTART_FORMAT, name))
        status, _, count = res.stdout.strip().partition(" ")
        try:
            return status, int(count)
        except ValueError:
            return status or "unknown", -1

    def server_logs(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        return ctx.step(step, _docker("logs", name))

    def remove_server(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        return ctx.step(step, _docker("rm", "-f", name))

    def removal_plan(self, names: tuple[str, ...]) -> list[list[str]]:
        return [_docker("rm", "-f", n) for n in names]

    def endpoint(self, ctx: NodeCtx, port: int) -> Endpoint:
        # the engine's step runner knows the node's address (api_host or the transport's)
        return Endpoint("")

    # ------------------------------------------------------------ the node's own workloads

    def route_to_serving(self, ctx: NodeCtx, workload: dict[str, Any], port: int) -> str:
        return ""                   # a container publishes its port on the node's address

    def unroute(self, ctx: NodeCtx, port: int) -> None:
        return None

    def release_gpus(self, ctx: NodeCtx) -> list[str]:
        return [c["name"] for c in ctx.baseline.get("serving_containers", [])
                if ctx.step(f"stop-{c['name']}", _docker("stop", c["name"])).ok]

    def restore_serving(self, ctx: NodeCtx, stopped: list[str]) -> Restored:
        """``RestartCount`` of each restarted container is what Docker's restart policy did
        since it was started by hand (a manual ``docker start`` sets it to 0)."""
        out = Restored()
        counts: dict[str, int] = {}
        for name in stopped:
            res = ctx.step(f"start-{name}", _docker("start", name))
            st = ctx.step(f"state-{name}", _docker("inspect", "-f", RESTART_FORMAT, name))
            status, _, count = st.stdout.strip().partition(" ")
            if not res.ok or status != "running":
                out.failed.append(name)
                continue
            out.back.append(name)
            if count.strip().isdigit():
                counts[name] = int(count)
        if counts:
            out.facts["serving_restart_counts"] = counts
        return out

    def prove_serving(self, ctx: NodeCtx) -> Restored:
        # restore_serving started and checked each container before the uncordon
        return Restored()

    def restore_images(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> tuple[bool, str]:
        bad = []
        for c in containers:
            ctx.step(f"start-{c['name']}", _docker("start", c["name"]))
            st = ctx.step(f"state-{c['name']}", _docker("inspect", "-f", "{{.State.Status}} {{.Config.Image}}",
                                                         c["name"]))
            img = self.image_facts(ctx, c["image"], f"image-inspect-{c['name']}")
            if not st.stdout.startswith("running") or (c.get("digest") and (img or {}).get("digest") != c["digest"]):
                bad.append(c["name"])
        if bad:
            return False, f"not running on the original image digest: {', '.join(bad)}"
        return True, "serving containers running on their original images"

    def serving_problems(self, ctx: NodeCtx, names: list[str]) -> list[str]:
        problems = []
        for name in names:
            st = ctx.step(f"health-state-{name}", _docker("inspect", "-f", "{{.State.Status}}", name))
            state = st.stdout.strip() if st.ok else f"unknown ({st.tail(120).strip()})"
            if state != "running":
                problems.append(f"serving container {name} is {state}")
        return problems

    def serving_status(self, ctx: NodeCtx, name: str) -> dict[str, Any]:
        ins = ctx.step(f"serving-inspect-{name}", _docker("inspect", name))
        data = None
        if ins.ok:
            try:
                got = parsers.parse_json(ins.stdout, "docker inspect")
                data = got[0] if isinstance(got, list) and got else None
            except parsers.ParseError:
                data = None
        if not isinstance(data, dict):
            return {"state": "missing", "reason": f"docker inspect {name} failed (rc {ins.rc})"}
        return {"state": (data.get("State") or {}).get("Status"), "restart_count": data.get("RestartCount"),
                "image": (data.get("Config") or {}).get("Image") or data.get("Image"),
                "args": [str(a) for a in data.get("Args") or []]}

    # ------------------------------------------------------------ preflight

    def preflight(self, run: Run, host_vars: dict[str, Any]) -> Verdict:
        """Docker answers on the node. A Kubernetes GPU node runs containerd or CRI-O and
        usually has no ``docker`` CLI (dockershim left in 1.24): every check and test server
        of this backend would fail there, after the node was drained and changed. That is
        the inventory's var not fitting the node (bad input); a daemon that does not answer
        is the node's state."""
        res = run("workload-runtime", _docker("info", "--format", "{{.ServerVersion}}"))
        if command_missing(res):
            return Verdict(False, "k3_workload_backend is docker, but docker is not installed on this node "
                                  f"(rc {res.rc}: {res.tail(120).strip()}). A Kubernetes node runs containerd or "
                                  "CRI-O: set k3_workload_backend: kubernetes (with scheduler: kubernetes) so checks "
                                  "and test servers run as Pods", bad_input=True)
        if not res.ok:
            return Verdict(False, f"the Docker daemon does not answer (rc {res.rc}: {res.tail(200).strip()}); start "
                                  "it, or set k3_workload_backend to the runtime this node uses")
        return Verdict(True, f"Docker {res.stdout.strip()} answers")

    def preflight_api(self, kube: Callable[[], Any] | None, node: str, host_vars: dict[str, Any]) -> ApiPreflight:
        """On a Kubernetes node, the kubelet's runtime (``status.nodeInfo.containerRuntimeVersion``)
        must be Docker (cri-dockerd, ``docker://``): where a docker CLI sits beside containerd or
        CRI-O, the serving pods are not Docker containers, and ``docker run --gpus all`` goes
        around the device plugin (docs/domain.md "Workloads on Kubernetes GPU nodes")."""
        if kube is None:
            return ApiPreflight()
        try:
            pods = PodApi(kube())
            runtime = str((((pods.node(node).get("status") or {}).get("nodeInfo") or {})
                           .get("containerRuntimeVersion")) or "")
        except KubernetesError as exc:
            return ApiPreflight([("workload_runtime", Verdict(
                False, f"cannot read node {node}'s container runtime from the Kubernetes API: {exc}",
                bad_input=exc.status in (401, 403, 404)))])
        if runtime.startswith("docker://"):
            return ApiPreflight([("workload_runtime", Verdict(True, f"the kubelet runs {runtime}"))])
        return ApiPreflight([("workload_runtime", Verdict(
            False, f"k3_workload_backend is docker, but the kubelet on this node runs {runtime or 'an unknown runtime'} "
                   "(node.status.nodeInfo.containerRuntimeVersion): its pods are not Docker containers and docker "
                   "run --gpus all would go around the device plugin. Set k3_workload_backend: kubernetes",
            bad_input=True))])
