"""The per-node state machine, as a table.

States are named for what must happen next (after NVIDIA's upgrade controller:
``cordon-required``, ``upgrade-required`` ... ``upgrade-done``). The table is built from
the playbook's stage list, declares every (state, event) pair that may happen, and raises
on any other: an undeclared transition is a bug, never a silent no-op. ``render_table``
prints it for runbooks/ and ``k3rollout states``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class NodeState(str, Enum):
    PENDING = "pending"
    BASELINE_REQUIRED = "baseline-required"
    CORDON_REQUIRED = "cordon-required"
    DRIVER_UPGRADE_REQUIRED = "upgrade-required"
    CUDA_CHECK_REQUIRED = "validation-required"
    VLLM_SMOKE_REQUIRED = "smoke-test-required"
    FEATURES_REQUIRED = "feature-test-required"
    MULTINODE_REQUIRED = "multinode-test-required"
    UNCORDON_REQUIRED = "uncordon-required"
    UPGRADE_DONE = "upgrade-done"
    ROLLBACK_REQUIRED = "rollback-required"
    ROLLED_BACK = "rolled-back"
    ROLLBACK_FAILED = "rollback-failed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Event(str, Enum):
    START = "start"
    PASSED = "passed"
    FAILED = "failed"
    HOLD = "hold"                     # no in-place change: evidence captured, node left alone
    ROLLBACK_DONE = "rollback_done"
    ROLLBACK_FAILED = "rollback_failed"
    ROLLBACK_REQUESTED = "rollback_requested"


STAGE_STATE = {
    "baseline": NodeState.BASELINE_REQUIRED, "cordon": NodeState.CORDON_REQUIRED,
    "driver_upgrade": NodeState.DRIVER_UPGRADE_REQUIRED, "cuda_check": NodeState.CUDA_CHECK_REQUIRED,
    "vllm_smoke": NodeState.VLLM_SMOKE_REQUIRED, "features": NodeState.FEATURES_REQUIRED,
    "multinode": NodeState.MULTINODE_REQUIRED, "uncordon": NodeState.UNCORDON_REQUIRED,
}
STATE_STAGE = {v: k for k, v in STAGE_STATE.items()}


class IllegalTransition(RuntimeError):
    pass


def build_table(stage_kinds: Iterable[str]) -> dict[tuple[NodeState, Event], NodeState]:
    kinds = list(stage_kinds)
    states = [STAGE_STATE[k] for k in kinds]
    t: dict[tuple[NodeState, Event], NodeState] = {(NodeState.PENDING, Event.START): states[0]}
    for i, s in enumerate(states):
        t[(s, Event.PASSED)] = states[i + 1] if i + 1 < len(states) else NodeState.UPGRADE_DONE
        # a failure before anything changed needs no rollback; from cordon on, one is owed
        t[(s, Event.FAILED)] = NodeState.FAILED if kinds[i] == "baseline" else NodeState.ROLLBACK_REQUIRED
    t[(states[0], Event.HOLD)] = NodeState.SKIPPED
    if len(kinds) > 1 and kinds[1] == "cordon":
        # stopped at a gate before anything changed (a rejected pause before cordon)
        t[(states[1], Event.HOLD)] = NodeState.SKIPPED
    t[(NodeState.ROLLBACK_REQUIRED, Event.ROLLBACK_DONE)] = NodeState.ROLLED_BACK
    t[(NodeState.ROLLBACK_REQUIRED, Event.ROLLBACK_FAILED)] = NodeState.ROLLBACK_FAILED
    t[(NodeState.UPGRADE_DONE, Event.ROLLBACK_REQUESTED)] = NodeState.ROLLBACK_REQUIRED
    t[(NodeState.ROLLBACK_FAILED, Event.ROLLBACK_REQUESTED)] = NodeState.ROLLBACK_REQUIRED
    for s in states[1:]:
        # an operator rollback of a batch halted mid-stage (e.g. after a crash)
        t[(s, Event.ROLLBACK_REQUESTED)] = NodeState.ROLLBACK_REQUIRED
    return t


def step(table: dict[tuple[NodeState, Event], NodeState], state: NodeState, event: Event) -> NodeState:
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"no transition from {state.value} on {event.value}") from None


def render_table(table: dict[tuple[NodeState, Event], NodeState]) -> str:
    rows = ["| state | event | next state |", "|---|---|---|"]
    for (s, e), n in table.items():
        rows.append(f"| `{s.value}` | `{e.value}` | `{n.value}` |")
    return "\n".join(rows) + "\n"
