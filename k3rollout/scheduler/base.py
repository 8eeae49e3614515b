"""The ``Scheduler`` protocol: what a stage asks of the cluster's workload scheduler.

One implementation per ``scheduler:`` value (``kubernetes``, ``slurm``, ``none``), looked
up once by ``scheduler_for(vars)``; stages never branch on the kind. Every operation is a
step of the node it concerns (journaled, with evidence, ``once`` where it changes the
cluster), run where the implementation says: ``where(ctx)`` is ``None`` for the node's own
transport, ``"controller"`` for a subprocess on the machine running k3rollout, or the name
of an inventory host (``k3_scheduler_host``) reached through its transport. The journal's
``step_started`` record carries that place as ``ran_on``.

States, as ``read_state`` returns them:
  schedulable  takes new work
  draining     takes no new work, but work is still running on it (Slurm DRAINING)
  cordoned     takes no new work and runs none (Slurm DRAINED or DOWN, Kubernetes cordoned)
  drained      Kubernetes only: cordoned and its pods evicted
  unmanaged    no scheduler
  unknown      the scheduler could not be asked
"""

from __future__ import annotations

from typing import Any, Protocol

from k3rollout.transport.base import CommandResult

OUT_OF_SERVICE = ("cordoned", "drained")       # nothing runs there and nothing new is placed


class NodeCtx(Protocol):
    """What a scheduler uses of a stage's node context (``stages.base.NodeCtx`` is one): the
    node, its vars, baseline and stage parameters, its steps, and ``runner`` for the
    controller's own calls (``runner.call``, ``runner.kube``, ``runner.prior_meta``).
    Declared here, as workload/base.py declares its own, so the scheduler imports no stage."""
    node: str
    run_id: str
    vars: dict[str, Any]
    baseline: dict[str, Any]
    params: Any
    runner: Any

    def step(self, name: str, argv: list[str], **kw: Any) -> CommandResult: ...


class Scheduler(Protocol):
    kind: str

    def where(self, ctx: NodeCtx) -> str | None:
        """Where this node's scheduler operations run (see the module docstring)."""
        ...

    def read_state(self, ctx: NodeCtx) -> str:
        """The node's state as the scheduler sees it now."""
        ...

    def idle(self, ctx: NodeCtx) -> tuple[bool, str]:
        """Whether the scheduler shows nothing running on the node now (read-only): Slurm
        state IDLE (no jobs, none completing or planned there: never MIXED, ALLOCATED or
        DRAINING), Kubernetes no pod bound there that requests ``nvidia.com/gpu`` and has
        not ended. (idle, what the scheduler showed or why not.)"""
        ...

    def cordon(self, ctx: NodeCtx) -> tuple[bool, str, str]:
        """Take the node out of service: mark it unschedulable and wait until no work runs
        there, bounded by the cordon stage's ``drain_timeout``. (ok, why not, output tail
        for triage)."""
        ...

    def uncordon(self, ctx: NodeCtx, name: str) -> tuple[bool, str]:
        """Make the node schedulable again (the caller has checked it was before the run)."""
        ...

    def label(self, ctx: NodeCtx, name: str, key: str, value: str) -> tuple[bool, str]:
        """Publish ``key=value`` on the node where the scheduler keeps such marks."""
        ...

    def quarantine(self, ctx: NodeCtx, label: str) -> tuple[bool, str]:
        """Keep the node out of service, marked for investigation."""
        ...

    def describe_quarantine(self, label: str) -> str:
        """What ``quarantine`` will do, for the printed rollback plan."""
        ...
