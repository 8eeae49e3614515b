"""Which walker runs a node's stage: the stage kind's declared scope, asked of its spec."""

from __future__ import annotations

from typing import Any, Protocol

from k3rollout.engine.recorder import run_plan
from k3rollout.engine.states import STATE_STAGE, NodeState
from k3rollout.model.stagekinds import Scope
from k3rollout.runlog.view import RunView
from k3rollout.stages.registry import SPECS


class Scopes:
    """The scope a node's stage runs in, from the run's plan (its replicas)."""

    def __init__(self, view: RunView):
        self.view = view

    def replica_of(self, node: str) -> dict[str, Any] | None:
        return next((r for r in run_plan(self.view).get("replicas") or [] if node in r["nodes"]), None)

    def of(self, node: str, kind: str) -> Scope:
        """The kind's scope (``StageKind.scope``), except that with a model profile the
        serving stages of a replica of more than one node run once for the replica, and a
        one-node replica and a play without a profile run them per node."""
        scope = SPECS[kind].kind.scope
        if scope != "replica":
            return scope
        if not run_plan(self.view).get("replicas"):
            return "node"
        rep = self.replica_of(node)
        return "replica" if rep is not None and len(rep["nodes"]) > 1 else "node"


def waiting_at(view: RunView, nodes: list[str], kind: str) -> list[str]:
    """The nodes of ``nodes`` waiting before stage ``kind``, in their order."""
    return [n for n in nodes if STATE_STAGE.get(NodeState(view.node(n).state)) == kind]


class GroupWalker(Protocol):
    """A walker that runs a stage once for a group of a batch's nodes (its replica's or the
    batch's): ``ReplicaWalker``, ``BatchWalker``."""

    def run(self, nodes: list[str], kind: str) -> None: ...
