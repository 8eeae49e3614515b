"""What a stage kind is, as data, and every table that lists stages, derived from it.

Each stage kind is declared once, as a ``StageKind`` in ``model/playbook.py``'s
``STAGE_KINDS`` (next to its parameters model, in docs/domain.md's order); its behaviour is
declared once, as a ``StageSpec`` in its own module under ``k3rollout/stages`` that names
this declaration. ``derive`` turns the declarations into the tables the rest of the code
reads: the order a play must follow, the default estimates, the destructive, batch- and
replica-scoped sets, the stages that run the serving image and those that load the model
(triage's step 3), the parameters model per kind, the node state per kind, the runbook per
kind, which rollback action undoes which stage, and which kind plays each role. The engine's state machine
(``engine/states.py``) and the stage registry (``stages/registry.py``) derive theirs from
the same declarations.

This module is pure data (model imports no other layer: ``.importlinter``), so model can
validate a playbook against the stage kinds without importing a stage's code, and the
planner can read what each kind's rollback action is (its ``Undo``) without importing one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

Scope = Literal["node", "replica", "batch"]
SCOPES: tuple[Scope, ...] = ("node", "replica", "batch")

# The part a stage kind plays in a node's change, that the engine, the window, the planner
# and the run view ask for instead of a kind's name: the stage that takes the node out of
# service (from its start the node counts against the capacity floor and the window's
# slots), the one that returns it to service, and the one that records its baseline (the
# prior state a rollback restores). At most one kind plays each role.
Role = Literal["takes_out_of_service", "returns_to_service", "records_baseline"]
TAKES_OUT_OF_SERVICE: Role = "takes_out_of_service"
RETURNS_TO_SERVICE: Role = "returns_to_service"
RECORDS_BASELINE: Role = "records_baseline"
ROLES: tuple[Role, ...] = (TAKES_OUT_OF_SERVICE, RETURNS_TO_SERVICE, RECORDS_BASELINE)


@dataclass(frozen=True)
class Undo:
    """A rollback action a stage kind declares (``StageKind.undone_by``): what undoes its
    run on a node, as data. How it is planned from the baseline, shown and run is the
    stage module's (its ``StageSpec.undo``, stages/spec.py); where several run, they run
    in ``ROLLBACK_ORDER`` (model/playbook.py)."""

    action: str
    # the line ``plan`` shows a change board for a node, before baseline has read it;
    # ``{expected}`` is the driver the inventory says the node runs (or "the version
    # baseline records")
    plan_text: str = ""
    plan_text_reboot: str = ""      # added when the playbook's declaration of it reboots
    # the line instead, for a node whose backend (model/backends.py ``backend_keys``:
    # "driver:gpu-operator", "workload:kubernetes" ...) does it another way; the first match wins
    plan_text_for: tuple[tuple[str, str], ...] = ()
    # the action the play's ``on_node_failure: quarantine`` puts this one in place of
    instead_of_under_quarantine: str = ""
    # the rollback reserve a node needs for it (the plan's rollback estimate); None: the
    # estimate of the stage it undoes
    estimate_s: float | None = 60.0
    # also owed when one of these stages started, though the stage it undoes did not
    also_after: tuple[str, ...] = ()
    # when it fails, the rest of the node's rollback is skipped for this reason (the node
    # stays out of service), except what needs only the scheduler
    failure_stops_rest: str = ""
    # needs only the node's scheduler: run for a node the rollback cannot reach, and after
    # a failure that stopped the rest
    scheduler_only: bool = False
    # after it, whatever its result, the node's upgrade progress is published as failed
    then_publish_failed: bool = False

    def plan_line(self, reboot: bool, expected: str, backends: frozenset[str] = frozenset()) -> str:
        """The plan's line for it on a node of these ``backends`` (``plan_text``, or the
        backend's own from ``plan_text_for``)."""
        own = next((text for key, text in self.plan_text_for if key in backends), None)
        if own is not None:
            return f"{self.action}: {own.format(expected=expected)}"
        return (f"{self.action}: {self.plan_text.format(expected=expected)}"
                + (self.plan_text_reboot if reboot else ""))


@dataclass(frozen=True)
class StageKind:
    """One stage kind: everything about it that is data."""

    name: str                   # the `stage:` a playbook names
    # node: run on each node of a batch; replica: once per multi-node replica of a model
    # profile (on its head, for all its nodes), per node otherwise; batch: once per batch
    scope: Scope
    params: type[BaseModel]     # the model of its `with:` block
    # its run takes the node out of service or changes it (the scheduler's state, the
    # driver, what runs on the GPUs): from the first destructive stage of a play on, a
    # failure owes the node a rollback (engine/states.py)
    destructive: bool
    # the node's state while this stage is the next to run (named for what must happen
    # next, after NVIDIA's upgrade controller); the state machine's member is NAME_REQUIRED
    state: str
    runbook: str                # its page under runbooks/
    estimate_s: float           # its default estimate, when the playbook gives none
    # the rollback actions that undo what its run changed (a node is rolled back only for
    # what actually ran on it)
    undone_by: tuple[Undo, ...] = ()
    # its run starts the serving image on the node's GPUs (triage reads the image's CUDA
    # version against the driver when it fails)
    runs_image: bool = False
    # its run loads the model into a vLLM server (after CUDA init): a failure there is the
    # triage tree's step 3, model load / capacity, unless the log proves otherwise
    loads_model: bool = False
    # the part it plays in the node's change (``Role`` above), or None
    role: Role | None = None


@dataclass(frozen=True)
class StageTables:
    """Every table that lists stages, derived from the declarations by ``derive``."""

    kinds: tuple[StageKind, ...]
    order: tuple[str, ...]
    estimates: dict[str, float]
    destructive: frozenset[str]
    batch_scoped: frozenset[str]
    replica_scoped: frozenset[str]
    image_stages: frozenset[str]
    load_stages: frozenset[str]
    params: dict[str, type[BaseModel]]
    states: dict[str, str]
    runbooks: dict[str, str]
    rollback_undoes: dict[str, str]
    # rollback action -> its declaration
    undos: dict[str, Undo]
    # stages reached only after a destructive stage has run: a node waiting before one of
    # them (a halted or interrupted batch) is held out of service by the run
    after_change: frozenset[str]
    # role -> the kind that plays it
    roles: dict[Role, str]

    def kind(self, name: str) -> StageKind:
        return self.kinds[self.order.index(name)]

    def with_role(self, role: Role) -> str:
        """The kind that plays ``role``."""
        return self.roles[role]

    def plays(self, kind: str | None, role: Role) -> bool:
        """Whether the stage kind ``kind`` plays ``role``."""
        return kind is not None and self.roles.get(role) == kind

    def index(self, kinds: Sequence[str], role: Role) -> int | None:
        """Where in ``kinds`` (a play's stage kinds, in order) the kind playing ``role``
        is, or None when the play has none."""
        for i, k in enumerate(kinds):
            if self.plays(k, role):
                return i
        return None


def derive(kinds: Sequence[StageKind]) -> StageTables:
    """The tables, from the declarations in their order; a declaration that collides with
    another (a name, a state or a rollback action twice) or has no valid scope raises."""
    kinds = tuple(kinds)
    order = tuple(k.name for k in kinds)
    for what, values in (("name", order), ("state", tuple(k.state for k in kinds)),
                         ("rollback action", tuple(u.action for k in kinds for u in k.undone_by)),
                         ("role", tuple(k.role for k in kinds if k.role is not None))):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"stage kinds: {what} declared twice: {', '.join(twice)}")
    bad = [k.name for k in kinds if k.role is not None and k.role not in ROLES]
    if bad:
        raise ValueError(f"stage kinds: {', '.join(bad)}: role must be one of {', '.join(ROLES)}")
    bad = [k.name for k in kinds if k.scope not in SCOPES]
    if bad:
        raise ValueError(f"stage kinds: {', '.join(bad)}: scope must be one of {', '.join(SCOPES)}")
    return StageTables(
        kinds=kinds,
        order=order,
        estimates={k.name: k.estimate_s for k in kinds},
        destructive=frozenset(k.name for k in kinds if k.destructive),
        batch_scoped=frozenset(k.name for k in kinds if k.scope == "batch"),
        replica_scoped=frozenset(k.name for k in kinds if k.scope == "replica"),
        image_stages=frozenset(k.name for k in kinds if k.runs_image),
        load_stages=frozenset(k.name for k in kinds if k.loads_model),
        params={k.name: k.params for k in kinds},
        states={k.name: k.state for k in kinds},
        runbooks={k.name: k.runbook for k in kinds},
        rollback_undoes={u.action: k.name for k in kinds for u in k.undone_by},
        undos={u.action: u for k in kinds for u in k.undone_by},
        after_change=frozenset(k.name for i, k in enumerate(kinds) if any(p.destructive for p in kinds[:i])),
        roles={k.role: k.name for k in kinds if k.role is not None},
    )
