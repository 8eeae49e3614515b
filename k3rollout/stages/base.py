"""What a stage gets and returns: ``NodeCtx`` in, ``StageOutcome`` out.

``ctx.step(name, argv, once=...)`` is the only way a stage touches a host. The engine
behind it journals the step before and after, stores the output as evidence, and, for a
``once`` step (cordon, driver install, reboot, uncordon), never runs it a second time
after a crash: a completed one is replayed from the journal, an interrupted one is
settled by its ``probe(ctx, meta)`` (did it take effect on the host?), where ``meta`` is
what the step journaled when it started (e.g. the boot id before a reboot).
``ctx.api(...)`` is the same for HTTP requests from the controller to the node's server.
A step runs on the node unless ``on=`` names another place: ``"controller"`` (a subprocess
where k3rollout runs) or an inventory host; the scheduler's operations use that
(``ctx.scheduler``, k3rollout/scheduler). ``runner.call(...)`` journals a call the
controller makes itself (a Kubernetes API request), with ``ran_on`` the server's URL.
``ctx.runner`` is a ``StageContext``: the engine's step runner, as far as a stage may use it.

This module is the stage contract, a leaf: it imports no stage, no engine and no scheduler
or workload implementation module beyond ``workload_for`` (an import-linter contract
holds it). The scheduler and the workload runtimes declare what they use of a ``NodeCtx``
as protocols of their own (scheduler/base.py, workload/base.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from k3rollout.checks import parsers
from k3rollout.scheduler.base import Scheduler
from k3rollout.transport.base import CommandResult
from k3rollout.workload import Workload, workload_for


class StageClock(Protocol):
    """Wall-clock time as the run sees it (``engine/clock.py``; a test may pass its own)."""

    def now(self) -> float: ...

    def iso(self, t: float | None = None) -> str: ...


@runtime_checkable
class StageContext(Protocol):
    """Everything a stage may ask of the engine, as ``ctx.runner``: each way it reaches the
    node, the node's server, the controller or the Kubernetes API, every one journaled and
    kept as evidence. The engine's step runner implements it (``engine/steps.py``'s
    ``StepRunner``, which the engine holds, for a run; ``ReadOnlyRunner`` for read-only
    observation); mypy checks the stages against it, so a stage
    cannot reach for the rest of the engine."""

    # ---- run a step (on the node, ``on=`` the controller or an inventory host)
    def step(self, ctx: NodeCtx, name: str, argv: list[str], *, once: bool = False,
             probe: Callable[[NodeCtx, dict[str, Any]], bool] | None = None, stdin: bytes | None = None,
             timeout: float = 600.0, evidence: bool = True, meta: dict[str, Any] | None = None,
             on: str | None = None) -> CommandResult: ...

    # a call the controller makes itself (a Kubernetes API request), journaled as a step
    def call(self, ctx: NodeCtx, name: str, what: list[str], fn: Callable[[], Any], *, ran_on: str,
             once: bool = False, probe: Callable[[NodeCtx, dict[str, Any]], bool] | None = None,
             meta: dict[str, Any] | None = None) -> Any: ...

    # vendor task files through ansible-runner (only where the transport is SSH and
    # ansible-playbook is installed), as one ``once`` step
    @property
    def can_run_ansible(self) -> bool: ...

    def ansible_step(self, ctx: NodeCtx, name: str, tasks_file: Path, extravars: dict[str, Any], *,
                     probe: Callable[[NodeCtx, dict[str, Any]], bool], timeout: float) -> CommandResult: ...

    # ---- the prior step's metadata: what a ``once`` step journaled when it started
    # before a crash (e.g. the boot id before a reboot), or None
    def prior_meta(self, ctx: NodeCtx, name: str) -> dict[str, Any] | None: ...

    # ---- the HTTP client, from the controller to the node's server
    def http(self, ctx: NodeCtx, name: str, method: str, port: int, path: str, body: Any = None, *,
             stream: bool = False, timeout: float = 120.0, evidence: bool = True) -> Any: ...

    def http_many(self, ctx: NodeCtx, name: str, port: int, path: str, bodies: list[Any], *, stream: bool = True,
                  timeout: float = 300.0) -> list[Any]: ...

    # ---- the Kubernetes API of the node's cluster (a ``KubernetesApi``)
    def kube(self, ctx: NodeCtx) -> Any: ...

    # ---- evidence: a file under the stage's folder, journaled with its sha256
    def record_evidence(self, ctx: NodeCtx, name: str, content: str) -> dict[str, Any]: ...

    # ---- waiting: until the node answers again (after a reboot), the seconds waited
    def wait_for_host(self, ctx: NodeCtx, timeout: float) -> float: ...

    # ---- the clock, and the node's scheduler (k3rollout/scheduler)
    @property
    def clock(self) -> StageClock: ...

    def scheduler(self, ctx: NodeCtx) -> Scheduler: ...


@dataclass
class StageOutcome:
    passed: bool
    reason: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    logs: str = ""                 # text the triage classifier reads on failure
    # the gate could not decide (e.g. the server exports no counter to judge by): the
    # engine pauses for a person, whose approval passes the stage and rejection fails it
    inconclusive: bool = False


@dataclass
class NodeCtx:
    node: str
    run_id: str
    stage: str                      # stage kind, or "rollback"
    folder: str                     # evidence folder, e.g. "03-driver_upgrade"
    params: Any
    vars: dict[str, Any]
    facts: dict[str, Any]
    baseline: dict[str, Any]
    runner: StageContext             # the engine's step runner, as far as a stage may use it
    peers: list[str] = field(default_factory=list)
    # a serving stage of a multi-node replica runs once, on its head's context: the replica
    # as planned (nodes, layout, per-node launch), with each member's baseline and the
    # profile's engine-ready timeout (stages/replica_serve.py)
    replica: dict[str, Any] | None = None

    def step(self, name: str, argv: list[str], **kw: Any) -> CommandResult:
        return self.runner.step(self, name, argv, **kw)

    def evidence(self, name: str, content: str) -> dict[str, Any]:
        return self.runner.record_evidence(self, name, content)

    # ---- shared fact readers (command + parser pairs) ----

    def read_gpu(self) -> dict[str, Any]:
        res = self.step("nvidia-smi-query", parsers.GPU_QUERY_ARGV)
        if not res.ok:
            return {"gpu_error": res.tail(300), "driver_version": None}
        return parsers.gpu_facts(parsers.parse_gpu_query(res.stdout))

    def read_packages(self) -> list[dict[str, str]]:
        family = self.facts.get("os_family") or self.baseline.get("os_family") or "Debian"
        argv = parsers.RPM_ARGV if family == "RedHat" else parsers.DPKG_ARGV
        res = self.step("driver-packages", argv)
        return parsers.parse_packages(res.stdout) if res.ok else []

    @property
    def scheduler(self) -> Scheduler:
        return self.runner.scheduler(self)

    def read_scheduler(self) -> str:
        return self.scheduler.read_state(self)

    def publish_progress(self, state: str) -> None:
        """The node's upgrade state where its scheduler shows it (the Kubernetes label
        ``k3rollout.io/upgrade-state``; schedulers without labels keep it in the journal)."""
        progress = getattr(self.scheduler, "progress", None)
        if progress is not None:
            progress(self, state)

    def read_boot_id(self) -> str:
        res = self.step("boot-id", ["cat", "/proc/sys/kernel/random/boot_id"])
        return res.stdout.strip() if res.ok else ""

    @property
    def workload(self) -> Workload:
        """The node's workload runtime (``k3_workload_backend``, k3rollout/workload)."""
        return workload_for(self.vars)

    def image_facts(self, image: str, name: str = "image-inspect") -> dict[str, Any] | None:
        return self.workload.image_facts(self, image, name)

    def api(self, name: str, method: str, port: int, path: str, body: Any = None, *, stream: bool = False,
            timeout: float = 120.0, evidence: bool = True) -> Any:
        """An HTTP request from the controller to the node's server (an ``HttpResult``)."""
        return self.runner.http(self, name, method, port, path, body, stream=stream, timeout=timeout,
                                evidence=evidence)

    def api_many(self, name: str, port: int, path: str, bodies: list[Any], *, stream: bool = True,
                 timeout: float = 300.0) -> list[Any]:
        """Requests sent concurrently, one per body (a load-ladder step)."""
        return self.runner.http_many(self, name, port, path, bodies, stream=stream, timeout=timeout)


Stage = Callable[[NodeCtx], StageOutcome]
