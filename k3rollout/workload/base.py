"""The ``Workload`` protocol: how a check or a test server runs on a node, and how the
node's own workloads are seen, stopped, restored and proven.

One implementation per ``k3_workload_backend`` value (``docker``, ``kubernetes``), picked
per node by ``workload_for(vars)`` (k3rollout/workload/__init__.py); stages never branch
on the runtime and never spell a runtime's command. Each backend owns its commands and the
parsers of their output (pyinfra's ``facts/docker.py``). Every operation is a step of the
node it concerns (``ctx.step`` over the node's transport, or ``ctx.runner.call`` for a
Kubernetes API request from the controller), journaled and kept as evidence; none opens
a socket of its own. This module is the leaf contract: it imports no backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from k3rollout.transport.base import CommandResult

# a read-only step outside a stage (preflight, pre-staging): (step name, argv) -> result
Run = Callable[[str, list[str]], CommandResult]


class NodeCtx(Protocol):
    """What a backend uses of a stage's node context (``stages.base.NodeCtx`` is one): the
    node, its vars and recorded facts, its steps and evidence, and ``runner`` for the
    controller's own calls (``runner.call``, ``runner.kube``). Declared here so the
    contract imports no stage."""
    node: str
    run_id: str
    stage: str
    vars: dict[str, Any]
    facts: dict[str, Any]
    baseline: dict[str, Any]
    params: Any
    runner: Any

    def step(self, name: str, argv: list[str], **kw: Any) -> CommandResult: ...

    def evidence(self, name: str, content: str) -> dict[str, Any]: ...


class Verdict(NamedTuple):
    """A preflight check's answer. ``bad_input``: the failure is the input's (an inventory
    var that does not fit the node, the controller's credentials, the playbook), so the
    refusal is exit 2 and the fix is in ``detail``; else the node's own state fails it (exit 1)."""
    ok: bool
    detail: str
    bad_input: bool = False


@dataclass(frozen=True)
class ServerState:
    """A test server's state as its runtime shows it: ``state`` is ``running`` while it
    runs (Docker's ``State.Status``, a Pod's phase in lower case); ``text`` is what the
    runtime said, for a reason; ``found`` is False when there is no such server."""
    state: str
    exit_code: str = ""
    text: str = ""
    found: bool = True
    error: str = ""                 # why it could not be read (found False)

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class Pulled:
    """An image pulled into the store the node's runtime reads: the digest it resolved to."""
    ok: bool
    ref: str
    digest: str | None = None
    detail: str = ""                # why not, for the reason
    logs: str = ""                  # for triage


@dataclass(frozen=True)
class Endpoint:
    """Where the controller sends a gate's HTTP request for a server on ``port`` of a node:
    ``base`` is the URL the request path is appended to. ``auth`` names the client to send
    it with (None: the plain client, straight to the node; else a key the step runner asks
    the backend's ``http_client`` for, e.g. the API server's credentials)."""
    base: str
    auth: str | None = None


@dataclass
class Restored:
    """What a node's own workloads are after they were brought back (the uncordon stage):
    the ones that are not back, and facts for the journal (restart counts, readiness)."""
    failed: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    back: list[str] = field(default_factory=list)   # the ones brought back: to be proven again


@dataclass
class ApiPreflight:
    """``checks``: (check name, verdict); ``serving``: the names of the node's serving
    workloads and of their owners (what a playbook's ``workload_probes`` may match), None
    where the backend cannot list them before the run."""
    checks: list[tuple[str, Verdict]] = field(default_factory=list)
    serving: list[str] | None = None


class Workload(Protocol):
    kind: str

    # ---- images: the runtime's own store
    def image_store(self, run: Run, host_vars: dict[str, Any]) -> str:
        """The directory the runtime keeps images in (preflight and pre-staging measure it);
        ``run`` may ask the node which runtime it has (read-only)."""
        ...

    def image_cached(self, run: Run, image: str) -> bool:
        """Whether ``image`` is already in the runtime's store (read-only, for preflight)."""
        ...

    def image_facts(self, ctx: NodeCtx, image: str, name: str = "image-inspect") -> dict[str, Any] | None:
        """Digest, CUDA version and vLLM version of ``image`` in the store; None when absent."""
        ...

    def pull(self, ctx: NodeCtx, image: str, name: str = "image-pull", timeout: float = 3600) -> CommandResult:
        """Pull ``image`` into the store the runtime starts containers from."""
        ...

    def pull_pinned(self, run: Run, ref: str) -> Pulled:
        """Pre-staging: pull ``ref`` (``image@digest`` or a tag); the digest it resolved to."""
        ...

    def pull_command(self) -> str:
        """The command a reason names for a failed pull (``docker pull``, ``crictl pull``)."""
        ...

    # ---- what the node runs, before anything changes (read-only)
    def runtime_facts(self, ctx: NodeCtx) -> dict[str, Any]:
        """The runtime (version, the NVIDIA runtime) and ``containers``: every container or
        pod on the node as ``{name, image, state}``."""
        ...

    def serving_workloads(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The node's running serving workloads among ``containers`` (never a test server):
        name, image, digest, CUDA, and what owns it where an owner brings it back."""
        ...

    def prior_failures(self, ctx: NodeCtx, containers: list[dict[str, Any]],
                       failure_names: list[str]) -> list[dict[str, Any]]:
        """The failed K3 attempt's logs (``failure_names`` that exist), triaged."""
        ...

    # ---- after the driver stage
    def after_driver(self, ctx: NodeCtx, timeout_s: float) -> tuple[bool, str, dict[str, Any]]:
        """Wait, at most ``timeout_s``, until the runtime can hand the node's GPUs out again
        (Kubernetes: node Ready, allocatable ``nvidia.com/gpu`` back); (ok, why not, facts)."""
        ...

    def gpu_work_allowed(self, ctx: NodeCtx) -> tuple[bool, str]:
        """Whether a check may start GPU work on the node now (never on GPUs that serve)."""
        ...

    # ---- a one-off check with the node's GPUs (cuda_check, observe on an idle node)
    def run_check(self, ctx: NodeCtx, name: str, image: str, entrypoint: str, args: list[str],
                  timeout: float = 600.0) -> CommandResult:
        """Run ``entrypoint args`` in ``image`` with every GPU of the node, to completion;
        its output and exit status."""
        ...

    # ---- a test vLLM server (smoke, features; each member of a multi-node replica)
    def start_server(self, ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
                     env: dict[str, str] | None = None) -> CommandResult:
        """Start ``vllm serve`` with every GPU of the node; ``env`` set means a member of a
        multi-node replica (host network, that environment), else the port is published."""
        ...

    def server_state(self, ctx: NodeCtx, name: str, step: str, *, evidence: bool = True) -> ServerState:
        ...

    def server_restarts(self, ctx: NodeCtx, name: str, step: str) -> tuple[str, int]:
        """(state, how many times its runtime restarted it; -1 when it cannot say)."""
        ...

    def server_logs(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        ...

    def remove_server(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        """Remove the server (gone already is fine)."""
        ...

    def removal_plan(self, names: tuple[str, ...]) -> list[list[str]]:
        """What removing the test servers ``names`` runs, as the rollback plan prints it."""
        ...

    def endpoint(self, ctx: NodeCtx, port: int) -> Endpoint:
        """Where a gate's request to the server on ``port`` of the node goes."""
        ...

    # ---- the node's own (serving) workloads
    def route_to_serving(self, ctx: NodeCtx, workload: dict[str, Any], port: int) -> str:
        """Send the gates' requests for ``port`` of the node to a live instance of the serving
        ``workload`` (a baseline entry) until ``unroute``; "" or why there is none."""
        ...

    def unroute(self, ctx: NodeCtx, port: int) -> None:
        ...

    def release_gpus(self, ctx: NodeCtx) -> list[str]:
        """Make the node's GPUs free for a test server: the serving workloads stopped (names)."""
        ...

    def restore_serving(self, ctx: NodeCtx, stopped: list[str]) -> Restored:
        """Before the uncordon: bring back what ``release_gpus`` stopped."""
        ...

    def prove_serving(self, ctx: NodeCtx) -> Restored:
        """After the uncordon: the node's own workloads are back in service as baseline saw
        them (waited for where their owners bring them back)."""
        ...

    def restore_images(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> tuple[bool, str]:
        """Rollback: the serving workloads running again on their baseline image digests."""
        ...

    def serving_problems(self, ctx: NodeCtx, names: list[str]) -> list[str]:
        """Rollback's health bar: each named serving workload that does not run, and why."""
        ...

    def serving_status(self, ctx: NodeCtx, name: str) -> dict[str, Any]:
        """Observe (read-only): a serving workload's ``state``, ``restart_count``, ``image``
        and ``args``; ``state`` ``missing`` with a ``reason`` when it cannot be read."""
        ...

    # ---- preflight: can this backend work on the node at all?
    def preflight(self, run: Run, host_vars: dict[str, Any]) -> Verdict:
        """On the node (read-only): the runtime this backend drives is there."""
        ...

    def preflight_api(self, kube: Callable[[], Any] | None, node: str, host_vars: dict[str, Any]) -> ApiPreflight:
        """From the controller (read-only): what the backend needs of the node's cluster.
        ``kube()`` gives the ``KubernetesApi`` of a node under ``scheduler: kubernetes``
        (None for any other node), asked only by a backend that needs it."""
        ...
