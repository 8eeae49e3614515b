"""Stage kind -> its ``StageSpec``, derived from the declared kinds.

For each kind of model/playbook.py's ``STAGE_KINDS``, in order, the spec is the ``SPEC``
of the stage module of the same name (``k3rollout.stages.<name>``). A kind without one, or
a spec that names another kind, fails at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from k3rollout.model.playbook import STAGE_TABLES
from k3rollout.model.stagekinds import StageTables
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec


def registry(tables: StageTables) -> dict[str, StageSpec]:
    specs: dict[str, StageSpec] = {}
    for k in tables.kinds:
        module = importlib.import_module(f"k3rollout.stages.{k.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, StageSpec):
            raise ImportError(f"{module.__name__} declares no SPEC = StageSpec(...) for stage kind {k.name}")
        if spec.kind != k:
            raise ImportError(f"{module.__name__}.SPEC is declared for {spec.kind.name}, not {k.name}")
        specs[k.name] = spec
    return specs


SPECS = registry(STAGE_TABLES)
# the stages as callables: a spec runs its stage (and publishes its state on pass)
STAGES: dict[str, Callable[[NodeCtx], StageOutcome]] = {name: spec for name, spec in SPECS.items()}
