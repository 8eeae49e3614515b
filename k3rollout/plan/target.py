"""Which nodes the play will change: the one rule plan, preflight and run share.

The driver stage installs ``target_driver`` and never downgrades (its pre-assertion in the
shipped play: ``facts.driver_branch < target_branch or facts.driver_version ==
target_driver``). A node whose driver is already the target, or past it (590.44.01 against
580.95.05), is left as it is: nothing is installed, so there is nothing to roll back, and
its packages need not be downloadable. Each caller feeds the driver version it knows: the
plan the inventory's (``driver_version``), the preflight
nvidia-smi's, the run its baseline's: what the play will not change is
planned as such and never blocks the fleet (docs/guide.md, "The driver procedure and preflight").
"""

from __future__ import annotations

from typing import Any

from k3rollout.checks.cuda_table import vtuple
from k3rollout.model.assertions import render
from k3rollout.model.playbook import Playbook


def target_of(playbook: Playbook) -> tuple[str, dict[str, Any]]:
    """The driver the play installs (its driver_upgrade stage's ``target_driver``, rendered
    with the play vars; else the play var), and the play vars."""
    tvars = dict(playbook.play.vars)
    target = str(tvars.get("target_driver", ""))
    for s in playbook.stages:
        if s.stage == "driver_upgrade":
            target = str(render(str(s.typed_params().target_driver), tvars))
    return target, tvars


def changes_driver(playbook: Playbook) -> bool:
    return any(s.stage == "driver_upgrade" for s in playbook.stages)


def no_change_reason(installed: Any, target: str | None) -> str | None:
    """Why the play leaves a node on driver ``installed`` alone, or None when it changes it
    (or either version is unknown: then the node goes through its stages as planned)."""
    if not installed or not target:
        return None
    have, want = vtuple(str(installed)), vtuple(str(target))
    if not have or not want:
        return None
    if have == want:
        return f"already on the target driver {target}: the play does not change it"
    if have > want:
        return f"already on driver {installed}, past the target {target}: the play does not downgrade it"
    return None


def declared_driver(host_vars: dict[str, Any]) -> Any:
    """The driver an inventory says a node runs (what the plan knows without contacting it)."""
    return host_vars.get("driver_version")


def unchanged_hosts(playbook: Playbook, hosts: list[str], host_vars: dict[str, dict[str, Any]]) -> dict[str, str]:
    """host -> why the play will not change it, for the hosts whose inventory names a driver."""
    if not changes_driver(playbook):
        return {}
    target, _ = target_of(playbook)
    out = {}
    for h in hosts:
        why = no_change_reason(declared_driver(host_vars[h]), target)
        if why:
            out[h] = why
    return out
