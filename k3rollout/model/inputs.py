"""What a run was started with besides its files, and Ansible's conventions for it.

- ``-e/--extra-vars`` as ``ansible-playbook`` reads them (``key=value``, YAML/JSON text,
  ``@FILE``), later ones over earlier ones, and over every other variable (Ansible's
  precedence: extra vars always win), play vars included.
- ``-f/--forks``: the play's ``forks``.
- ``--limit``: the hosts it selected when the run started (a retry file may change later).
- What ``resume`` needs to rebuild the same inventory and playbook: the sources ``-i``
  named, the playbook directory, vault password files, the extra vars and forks. Kept in
  ``inputs.json`` beside the journal.
- The retry file Ansible writes for ``--limit @FILE``: the failed hosts, sorted, one per line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from k3rollout.errors import InputError
from k3rollout.model.ansible_inventory import VaultOptions
from k3rollout.model.inventory import load_inventory
from k3rollout.model.yamlsrc import load_yaml, load_yaml_text, plain

if TYPE_CHECKING:
    from k3rollout.model.inventory import Inventory
    from k3rollout.model.playbook import Playbook

_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = ("facts", "baseline", "vars", "node")


def _check_names(data: dict[Any, Any], where: str) -> None:
    for k in data:
        if not isinstance(k, str) or not _VAR.match(k):
            raise InputError(f"{where}: invalid variable name {k!r}: use letters, digits and '_'")
        if k in _RESERVED:
            raise InputError(f"{where}: {k!r} is a name k3rollout gives its own meaning; pick another")


def parse_extra_vars(values: list[str] | None) -> dict[str, Any]:
    """Ansible's ``load_extra_vars``: each ``-e`` merged over the ones before it."""
    out: dict[str, Any] = {}
    for raw in values or []:
        text = raw.strip()
        if not text:
            continue
        if text.startswith("@"):
            path = Path(text[1:])
            data = load_yaml(path)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InputError("an --extra-vars file must hold a mapping of variable names",
                                 path=str(path), line=getattr(data, "line", None))
            where = str(path)
        elif text[0] in "[{":
            data = load_yaml_text(text, "--extra-vars")
            if not isinstance(data, dict):
                raise InputError(f"--extra-vars {raw!r}: YAML/JSON extra vars must be a mapping")
            where = "--extra-vars"
        else:
            try:
                tokens = shlex.split(text)
            except ValueError as exc:
                raise InputError(f"--extra-vars {raw!r}: {exc}") from None
            data = {}
            for tok in tokens:
                if "=" not in tok:
                    raise InputError(f"--extra-vars {raw!r}: {tok!r} is not key=value")
                k, v = tok.split("=", 1)
                data[k] = v           # Ansible keeps key=value values as strings
            where = "--extra-vars"
        _check_names(data, where)
        out.update(plain(data))
    return out


def apply_overrides(playbook: Playbook, inventory: Inventory,
                    overrides: dict[str, Any] | None) -> tuple[Playbook, Inventory]:
    """(playbook, inventory) with ``-e`` over every host's and the play's variables and
    ``-f`` as the play's forks."""
    overrides = overrides or {}
    extra = overrides.get("extra_vars") or {}
    forks = overrides.get("forks")
    if extra:
        inventory = inventory.with_extra_vars(extra)
    if overrides.get("limit_hosts") is not None:      # what --limit selected when the run started
        inventory = inventory.only(overrides["limit_hosts"])
    if extra or forks:
        update: dict[str, Any] = {}
        if extra:
            update["vars"] = {**dict(playbook.play.vars), **extra}
        if forks:
            update["forks"] = int(forks)
        playbook = playbook.model_copy(update={"play": playbook.play.model_copy(update=update)})
    return playbook, inventory


def inventory_inputs(inventory: Inventory, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The inputs.json entries that let ``resume`` resolve the same inventory again."""
    return {"inventory_sources": [str(Path(s).resolve()) if os.path.lexists(s) else s for s in inventory.sources],
            "inventory_resolver": inventory.resolver,
            "playbook_dir": inventory.playbook_dir,
            "vault_password_files": list(inventory.vault_password_files),
            "overrides": overrides or {}}


def reload_inputs(playbook: Playbook, inputs: dict[str, Any]) -> tuple[Playbook, Inventory]:
    """The inventory (and the playbook with its overrides) as the run was started with."""
    sources = inputs.get("inventory_sources") or [inputs["inventory"]]
    vault = VaultOptions(password_files=list(inputs.get("vault_password_files") or []))
    env_pw = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    if env_pw and env_pw not in vault.password_files:
        vault.password_files.append(env_pw)
    inventory = load_inventory(sources, playbook_dir=inputs.get("playbook_dir"), vault=vault)
    return apply_overrides(playbook, inventory, inputs.get("overrides"))


FAILED_STATES = ("failed", "rolled-back", "rollback-failed", "rollback-required")


class _NodeOutcome(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def failed_stage(self) -> str | None: ...


class RunOutcome(Protocol):
    """What the retry file is written from: the run's state as its journal folds
    (``runlog.view.RunView``)."""

    @property
    def status(self) -> str: ...
    @property
    def plan(self) -> dict[str, Any] | None: ...
    @property
    def nodes(self) -> Mapping[str, _NodeOutcome]: ...


def write_retry_file(retry_path: Callable[[str], Path], view: RunOutcome) -> Path | None:
    """After a run with failed hosts (halted, or gone on within max_fail_percentage):
    RUN_DIR/<playbook>.retry, Ansible's retry file (the failed hosts, sorted, one per
    line), for ``--limit @RUN_DIR/<playbook>.retry``. ``retry_path`` names it from the
    playbook's path (``RunDir.retry``, runlog/rundir.py)."""
    if view.status == "running" or not view.plan:
        return None
    failed = sorted(n.name for n in view.nodes.values() if n.failed_stage or n.state in FAILED_STATES)
    if not failed:
        return None
    path = retry_path(str(view.plan.get("playbook") or "playbook"))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{h}\n" for h in failed), encoding="utf-8")
    os.replace(tmp, path)
    return path


def dumps(data: Any) -> str:
    return json.dumps(data, indent=4, sort_keys=True, ensure_ascii=False, default=str)
