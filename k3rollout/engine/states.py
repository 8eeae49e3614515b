"""The per-node state machine, as a table.

States are named for what must happen next (after NVIDIA's upgrade controller:
``cordon-required``, ``upgrade-required`` ... ``upgrade-done``). The table is built from
the playbook's stage list (each stage kind's state and destructiveness are declared
once, in model/playbook.py's ``STAGE_KINDS``), declares every (state, event) pair that
may happen, and raises on any other: an undeclared transition is a bug, never a silent no-op. ``render_table``
prints it for runbooks/ and ``k3rollout states``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum, EnumMeta
from typing import Any

from k3rollout.model.playbook import STAGE_KINDS, STAGE_TABLES
from k3rollout.model.stagekinds import TAKES_OUT_OF_SERVICE, StageKind, StageTables


def node_states(kinds: Sequence[StageKind]) -> type[Enum]:
    """The node states: pending, one ``NAME_REQUIRED`` per stage kind (its declared state,
    in the declared order), then the end and rollback states."""
    # Enum's functional API, called through its metaclass: mypy takes a direct ``Enum(...)``
    # call for a member lookup, and types this one as the class it makes
    functional: EnumMeta = Enum
    return functional("NodeState", [
        ("PENDING", "pending"),
        *((f"{k.name.upper()}_REQUIRED", k.state) for k in kinds),
        ("UPGRADE_DONE", "upgrade-done"),
        ("ROLLBACK_REQUIRED", "rollback-required"),
        ("ROLLED_BACK", "rolled-back"),
        ("ROLLBACK_FAILED", "rollback-failed"),
        ("FAILED", "failed"),
        ("SKIPPED", "skipped"),
    ], type=str, module=__name__, qualname="NodeState")


# a str Enum: BASELINE_REQUIRED = "baseline-required", CORDON_REQUIRED = "cordon-required",
# DRIVER_UPGRADE_REQUIRED = "upgrade-required" ... from the stage kinds (model/playbook.py)
NodeState: Any = node_states(STAGE_KINDS)


class Event(str, Enum):
    START = "start"
    PASSED = "passed"
    FAILED = "failed"
    HOLD = "hold"                     # no in-place change: evidence captured, node left alone
    ROLLBACK_DONE = "rollback_done"
    ROLLBACK_FAILED = "rollback_failed"
    ROLLBACK_REQUESTED = "rollback_requested"


STAGE_STATE = {k: NodeState(state) for k, state in STAGE_TABLES.states.items()}
STATE_STAGE = {v: k for k, v in STAGE_STATE.items()}
# states of nodes a destructive stage has already changed (held out of service by the run)
AFTER_CHANGE_STATES = frozenset(STAGE_STATE[k] for k in STAGE_TABLES.after_change)


class IllegalTransition(RuntimeError):
    pass


def build_table(stage_kinds: Iterable[str], *, tables: StageTables = STAGE_TABLES,
                node_state: Any = NodeState) -> dict[tuple[Any, Event], Any]:
    """The table for a play's stage kinds (``tables`` and ``node_state``: the declarations'
    own, unless a test derives its own)."""
    kinds = list(stage_kinds)
    ns = node_state
    states = [ns(tables.states[k]) for k in kinds]
    t: dict[tuple[Any, Event], Any] = {(ns.PENDING, Event.START): states[0]}
    for i, s in enumerate(states):
        t[(s, Event.PASSED)] = states[i + 1] if i + 1 < len(states) else ns.UPGRADE_DONE
        # a failure before anything changed needs no rollback; from the first destructive
        # stage on (cordon), one is owed
        owed = any(k in tables.destructive for k in kinds[:i + 1])
        t[(s, Event.FAILED)] = ns.ROLLBACK_REQUIRED if owed else ns.FAILED
    t[(states[0], Event.HOLD)] = ns.SKIPPED
    if len(kinds) > 1 and tables.plays(kinds[1], TAKES_OUT_OF_SERVICE):
        # stopped at a gate before anything changed (a rejected pause before the cordon)
        t[(states[1], Event.HOLD)] = ns.SKIPPED
    t[(ns.ROLLBACK_REQUIRED, Event.ROLLBACK_DONE)] = ns.ROLLED_BACK
    t[(ns.ROLLBACK_REQUIRED, Event.ROLLBACK_FAILED)] = ns.ROLLBACK_FAILED
    t[(ns.UPGRADE_DONE, Event.ROLLBACK_REQUESTED)] = ns.ROLLBACK_REQUIRED
    t[(ns.ROLLBACK_FAILED, Event.ROLLBACK_REQUESTED)] = ns.ROLLBACK_REQUIRED
    for s in states[1:]:
        # an operator rollback of a batch halted mid-stage (e.g. after a crash)
        t[(s, Event.ROLLBACK_REQUESTED)] = ns.ROLLBACK_REQUIRED
    return t


def step(table: dict[tuple[Any, Event], Any], state: Any, event: Event) -> Any:
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"no transition from {state.value} on {event.value}") from None


def render_table(table: dict[tuple[Any, Event], Any]) -> str:
    rows = ["| state | event | next state |", "|---|---|---|"]
    for (s, e), n in table.items():
        rows.append(f"| `{s.value}` | `{e.value}` | `{n.value}` |")
    return "\n".join(rows) + "\n"
