"""The journal's record types, and the check every record passes as it is read.

Each record type is a ``TypedDict``: the keys the engine, the fold (runlog/view.py) and
the reports read from it, and their JSON types. ``check(record)`` returns what is wrong
with a record (``None`` when nothing is), so a damaged key (``"nodf"`` for ``"node"``) or a
value of the wrong type is refused where it is read, with its line, instead of failing
later as an internal error. The checks are compiled once from the TypedDicts below, so
the declarations are the one place a record's shape is written down.

Every record also carries ``seq``, ``ts``, ``type`` and the hash-chain link ``h`` (see
runlog/journal.py). Keys a type does not declare are allowed (a record may carry more
detail than the readers need); a type the reader does not know is accepted with its
common keys checked, and the hash chain still covers it.
"""

import sys
import typing
from collections.abc import Callable
from types import UnionType
from typing import Any

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:   # typing gained NotRequired in 3.11; its 3.10 TypedDict would count every key as required
    from typing_extensions import NotRequired, TypedDict

Num = int | float
OptStr = str | None
OptInt = int | None


class RunStarted(TypedDict):
    run_id: str
    plan: dict[str, Any]
    plan_sha256: NotRequired[OptStr]
    approved_plan: NotRequired[OptStr]
    window_end: NotRequired[Num | None]
    window_end_iso: NotRequired[OptStr]
    playbook_evidence: NotRequired[OptStr]
    playbook_evidence_sha256: NotRequired[OptStr]
    # the read-only preflight before the run: {ran, ok, failed_nodes, skipped_nodes,
    # evidence...}, or {ran: false, reason} under --no-preflight
    preflight: NotRequired[dict[str, Any]]
    # the machine the run's process (pid) is on: `watch` elsewhere cannot ask it whether it lives
    host: NotRequired[str]


class RunResumed(TypedDict):
    pid: int
    host: NotRequired[str]


class InventoryChanged(TypedDict):
    inventory: str
    sha256: str


class InputsChanged(TypedDict):
    changes: dict[str, Any]
    accepted: NotRequired[bool]
    playbook_sha256: NotRequired[OptStr]
    inventory_sha256: NotRequired[OptStr]
    inventory_content_sha256: NotRequired[OptStr]


class BatchStarted(TypedDict):
    batch: int
    nodes: list[Any]


class BatchDone(TypedDict):
    batch: int
    status: str
    failed: list[Any]


class BatchRolledBack(TypedDict):
    batch: int
    ok: bool
    nodes: list[Any]


class NodeStateRec(TypedDict):
    node: str
    to: str
    stage: NotRequired[OptStr]
    batch: NotRequired[OptInt]
    event: NotRequired[str]


class StageStarted(TypedDict):
    node: str
    stage: str
    name: NotRequired[OptStr]


class StageDone(TypedDict):
    node: str
    stage: str
    passed: bool
    reason: NotRequired[OptStr]


class Assertions(TypedDict):
    node: str
    stage: str
    phase: str
    passed: bool
    results: list[Any]


class Facts(TypedDict):
    node: str
    stage: str
    facts: dict[str, Any]


class Triage(TypedDict):
    node: str
    stage: str
    category: str


class StepStarted(TypedDict):
    node: str
    stage: str
    step: str
    key: str
    argv: list[Any]
    once: NotRequired[bool]
    meta: NotRequired[dict[str, Any]]


class StepDone(TypedDict):
    node: str
    stage: str
    step: str
    key: str
    rc: NotRequired[int]
    once: NotRequired[bool]
    evidence: NotRequired[OptStr]
    sha256: NotRequired[OptStr]


class StepSettled(TypedDict):
    node: str
    stage: str
    step: str
    key: str
    took_effect: bool


class StepError(TypedDict):
    node: str
    stage: str
    step: str
    error: str


class AnsibleEvent(TypedDict):
    node: str
    stage: str
    step: str
    key: str


class Evidence(TypedDict):
    node: str
    stage: str
    path: str
    sha256: str
    name: NotRequired[OptStr]


class RollbackPlan(TypedDict):
    node: str
    steps: list[dict[str, Any]]
    described: NotRequired[list[str]]


class RollbackStarted(TypedDict):
    node: str
    attempt: int
    reason: NotRequired[str]


class RollbackDone(TypedDict):
    node: str
    attempt: int
    ok: bool
    results: list[dict[str, Any]]


class RunHalted(TypedDict):
    kind: str
    reason: str
    batch: NotRequired[OptInt]


class RunFinished(TypedDict):
    status: str


class JournalRepaired(TypedDict):
    torn_bytes_file: str


class PauseStarted(TypedDict):
    pause: str
    reason: NotRequired[str]


class PauseResolved(TypedDict):
    pause: str
    decision: str
    evidence: NotRequired[OptStr]
    sha256: NotRequired[OptStr]


class HookStarted(TypedDict):
    hook: str
    name: str


class HookDone(TypedDict):
    hook: str
    name: str
    ok: bool
    evidence: NotRequired[OptStr]
    sha256: NotRequired[OptStr]


class OperatorRollback(TypedDict):
    batches: list[Any]
    min_serving: int
    evidence: str
    sha256: str


class OperatorRollbackResumed(TypedDict):
    batches: list[Any]


class OperatorRollbackHalted(TypedDict):
    batch: int
    reason: str
    remaining: list[Any]


class OperatorRollbackFinished(TypedDict):
    ok: bool
    halted: NotRequired[bool]


class PrestageStarted(TypedDict):
    node: str


class PrestageDone(TypedDict):
    node: str
    ok: bool
    reason: NotRequired[OptStr]


class ObservationStarted(TypedDict):
    index: int
    nodes: list[Any]
    pid: int


class Observation(TypedDict):
    """One pass of ``k3rollout observe`` (after the run): per node what the read-only checks
    found, the four pieces of evidence compared with the run's, the rules and the decision."""
    index: int
    nodes: dict[str, Any]
    evidence: dict[str, Any]
    obs: dict[str, Any]
    rules: dict[str, Any]
    decision: str
    recommendation: dict[str, Any]


class ObservationStopped(TypedDict):
    index: int
    reason: str


RECORD_TYPES: dict[str, type] = {
    "run_started": RunStarted, "run_resumed": RunResumed, "inventory_changed": InventoryChanged,
    "inputs_changed": InputsChanged,
    "batch_started": BatchStarted, "batch_done": BatchDone, "batch_rolled_back": BatchRolledBack,
    "node_state": NodeStateRec, "stage_started": StageStarted, "stage_done": StageDone,
    "assertions": Assertions, "facts": Facts, "triage": Triage,
    "step_started": StepStarted, "step_done": StepDone, "step_settled": StepSettled, "step_error": StepError,
    "ansible_event": AnsibleEvent, "evidence": Evidence,
    "rollback_plan": RollbackPlan, "rollback_started": RollbackStarted, "rollback_done": RollbackDone,
    "run_halted": RunHalted, "run_finished": RunFinished, "journal_repaired": JournalRepaired,
    "pause_started": PauseStarted, "pause_resolved": PauseResolved,
    "hook_started": HookStarted, "hook_done": HookDone,
    "operator_rollback": OperatorRollback, "operator_rollback_resumed": OperatorRollbackResumed,
    "operator_rollback_halted": OperatorRollbackHalted, "operator_rollback_finished": OperatorRollbackFinished,
    "prestage_started": PrestageStarted, "prestage_done": PrestageDone,
    "observation_started": ObservationStarted, "observation": Observation, "observation_stopped": ObservationStopped,
}
# ``node_state`` also needs "from", a Python keyword: added below
_EXTRA_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {"node_state": {"from": (str,)}}

Spec = tuple[tuple[str, tuple[type, ...]], ...]     # (key, the JSON types it may hold) per key


def _json_types(tp: Any) -> tuple[type, ...]:
    if tp is Any:
        return (object,)
    origin = typing.get_origin(tp)
    if origin is NotRequired:
        return _json_types(typing.get_args(tp)[0])
    if origin is typing.Union or origin is UnionType:   # Optional[...] and X | Y
        return tuple(t for a in typing.get_args(tp) for t in _json_types(a))
    if tp is type(None):
        return (type(None),)
    if tp is float:
        return (int, float)
    return (origin or tp,)


def _compile(td: type) -> tuple[Spec, Spec]:
    hints = typing.get_type_hints(td, include_extras=True)
    # typing has no type for "a TypedDict class" that declares these two attributes
    required: frozenset[str] = td.__required_keys__     # type: ignore[attr-defined]
    optional: frozenset[str] = td.__optional_keys__     # type: ignore[attr-defined]
    req = tuple((k, _json_types(hints[k])) for k in sorted(required))
    opt = tuple((k, _json_types(hints[k])) for k in sorted(optional))
    return req, opt


_CHECKS = {name: _compile(td) for name, td in RECORD_TYPES.items()}
for _name, _extra in _EXTRA_REQUIRED.items():
    _req, _opt = _CHECKS[_name]
    _CHECKS[_name] = (_req + tuple(_extra.items()), _opt)


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _is(v: Any, types: tuple[type, ...]) -> bool:
    # JSON has no separate boolean and number: True must not pass as an int, nor 1 as a bool
    if isinstance(v, bool):
        return bool in types or object in types
    return isinstance(v, types)


def _fast_check(req: Spec, opt: Spec) -> Callable[[Any], bool]:
    """One compiled predicate per type for the common case (every record well formed):
    exact type tests, so JSON booleans and numbers are not mistaken for each other."""
    env: dict[str, Any] = {}
    parts = ["type(r.get('seq')) is int", "type(r.get('ts')) is str"]
    for i, (k, types) in enumerate(req):
        if object in types:
            parts.append(f"{k!r} in r")
            continue
        env[f"t{i}"] = frozenset(types)
        parts.append(f"type(r.get({k!r}, _MISSING)) in t{i}")
        if k == "node":
            parts.append("r['node'] != ''")
    for j, (k, types) in enumerate(opt):
        if object in types:
            continue
        env[f"o{j}"] = frozenset(types)
        parts.append(f"({k!r} not in r or type(r[{k!r}]) in o{j})")
    env["_MISSING"] = object()
    fast: Callable[[Any], bool] = eval("lambda r: " + " and ".join(parts), env)  # built from the TypedDicts above
    return fast


_FAST = {name: _fast_check(*spec) for name, spec in _CHECKS.items()}


def check(r: Any) -> str | None:
    """What is wrong with one journal record, or None."""
    try:
        fast = _FAST.get(r["type"])
        if fast is not None and fast(r) and r["type"] != "run_started":
            return None
    except (TypeError, KeyError):
        pass
    return _explain(r)


def _explain(r: Any) -> str | None:
    if not isinstance(r, dict):
        return "not a JSON object"
    seq, ts, t = r.get("seq"), r.get("ts"), r.get("type")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return "no valid 'seq'"
    if not isinstance(t, str):
        return "no valid 'type'"
    if not isinstance(ts, str):
        return f"{t} record has no valid 'ts'"
    spec = _CHECKS.get(t)
    if spec is None:
        return None
    req, opt = spec
    for k, types in req:
        if k not in r:
            return f"{t} record lacks {k!r}"
        if not _is(r[k], types):
            return f"{t} record's {k!r} is {_type_name(r[k])}"
        if k == "node" and r[k] == "":
            return f"{t} record's 'node' is empty"     # the fold (runlog/view.py) needs the node it names
    for k, types in opt:
        if k in r and not _is(r[k], types):
            return f"{t} record's {k!r} is {_type_name(r[k])}"
    if t == "run_started":
        plan = r["plan"]
        if not isinstance(plan.get("batches"), list) or not isinstance(plan.get("hosts"), list):
            return "run_started record's plan has no batches or hosts list"
    return None
