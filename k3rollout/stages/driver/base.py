"""The ``DriverBackend`` protocol: how a node's NVIDIA driver is changed and put back.

One implementation per ``k3_driver_backend`` value, looked up by ``driver_backend_for(vars)``
(stages/driver/__init__.py), as ``scheduler_for`` looks up the scheduler: ``host``
(packages on the node, stages/driver/host.py) and ``gpu-operator`` (the NVIDIA GPU
Operator's driver container, moved between NVIDIADriver pools by a node label,
stages/driver/gpu_operator.py). The stages and the preflight ask the backend and never
branch on its kind:

- the baseline stage asks for the facts a restore needs (``baseline_facts``) and whether
  the backend can change a node with the driver owner the scheduler reports
  (``owner_facts``);
- the driver stage asks it to ``upgrade`` the node;
- the rollback plan, recorded at baseline, holds its ``restore_plan`` step, which names
  the backend when it is not ``host``; the plan's text is ``describe_restore`` and the
  rollback runs ``restore``;
- ``k3rollout preflight`` asks ``preflight_owner`` and ``preflight``; pre-staging asks
  ``prestage``.

A new backend is one module under stages/driver and its line in ``BACKENDS``. This module
is the contract, a leaf: it imports no backend (an import-linter contract holds it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from k3rollout.model.backends import DRIVER_HOST, DRIVER_VAR
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.transport.base import CommandResult

BACKEND_VAR = DRIVER_VAR
DEFAULT = DRIVER_HOST

# a read-only command on the node, as the preflight and pre-staging run them: (name, argv)
Run = Callable[[str, list[str]], CommandResult]
# one preflight check: (its name, passed, what it found)
Check = tuple[str, bool, str]


@dataclass(frozen=True)
class RestoreParams:
    """What the driver stage of the playbook says about putting the driver back (its
    ``with:``; these defaults when the play has no driver stage)."""

    restore: Any = None                 # the restore steps by package manager (DriverParams.restore)
    reboot: bool = True                 # the declared restore_driver action reboots
    reboot_timeout: float = 900.0
    reboot_grace: float = 10.0
    operator_timeout: float = 3600.0


class DriverBackend(Protocol):
    kind: str
    # it acts through the cluster's Kubernetes API (NVIDIADriver resources, node labels):
    # the credentials check asks for those rights too
    uses_kubernetes_api: bool

    def baseline_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> None:
        """Into ``f``, read before any change: what the node runs of the driver and what a
        restore needs to put it back."""
        ...

    def owner_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> str | None:
        """With ``f["driver_owner"]`` (what owns the driver, as the scheduler reports it):
        why this backend cannot change the node (the baseline fails, nothing was changed),
        or None, after adding to ``f`` what a restore needs from the cluster."""
        ...

    def upgrade(self, ctx: NodeCtx) -> StageOutcome:
        """The driver stage on a cordoned, drained node: the target driver, proven loaded."""
        ...

    def restore_plan(self, step: dict[str, Any], node: str, baseline: dict[str, Any], tvars: dict[str, Any],
                     params: RestoreParams) -> None:
        """Complete the rollback plan's ``restore_driver`` step from the baseline, before
        any change; a step that cannot be planned gets an ``error``."""
        ...

    def describe_restore(self, step: dict[str, Any]) -> str:
        """The recorded step as the plan shows it to a change board."""
        ...

    def restore(self, ctx: NodeCtx, step: dict[str, Any], untouched: str | None) -> tuple[bool, str]:
        """Run the recorded step: (proven, what was done or why not). ``untouched``: why the
        journal proves the driver stage changed nothing, when it does (engine/rollback.py)."""
        ...

    def preflight_owner(self, owned_by_operator: bool, hvars: dict[str, Any]) -> tuple[bool, str]:
        """The preflight's ``gpu_operator`` check: whether the GPU Operator's driver
        container runs on the node suits this backend."""
        ...

    def preflight(self, run: Run, hvars: dict[str, Any], target: str, source: str, os_facts: dict[str, Any],
                  info: dict[str, Any], ansible: Callable[[], tuple[bool, str]] | None) -> Iterator[Check]:
        """The preflight's checks of a change and its rollback (after ``gpu_operator`` and
        ``no_change``, before ``disk``), read-only, each as it is made; ``info`` collects
        what they found. ``ansible``: the check that the node runs the vendor task files
        through Ansible, where the play would."""
        ...

    def prestage(self, step: Run, ctx: NodeCtx, os_facts: dict[str, Any], facts: dict[str, Any]
                 ) -> StageOutcome | None:
        """Pre-staging's part for the driver, while the node still serves (nothing is
        installed): a failed outcome, or None after recording into ``facts``."""
        ...
