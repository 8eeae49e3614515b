"""The simulator as a registered k3rollout transport (``k3rollout.plugins.TransportPlugin``).

pyproject.toml registers ``PLUGIN`` as the ``k3rollout.transports`` entry point ``k3sim``:
k3rollout loads it when an inventory is read (to check the ``sim_*`` host variables, which it
does not know itself) and when a run's hosts have ``ansible_connection: k3sim``. This module
stays light; the executor and the cluster's daemon load only when a run builds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from k3sim import hostvars


class SimTransport:
    state_dir = "sim-hosts"     # <run dir>/sim-hosts/<node>/: each simulated host's state

    def executor(self, root: Path, hosts: dict[str, dict[str, Any]], observation_pass: int | None = None) -> Any:
        from k3sim.transport import SimExecutor  # lazy: the daemon link, for a simulated run only

        return SimExecutor(root, hosts, observation_pass=observation_pass)

    def check_host_vars(self, host_vars: Mapping[str, Any]) -> tuple[str, str] | None:
        return hostvars.check_host_vars(host_vars)

    def out_of_service(self, host_vars: Mapping[str, Any]) -> bool:
        # built cordoned (or drained) before the run: sim_cordoned
        return hostvars.initial_scheduler_state(host_vars) != "schedulable"

    def hardware_class(self, host_vars: Mapping[str, Any]) -> str:
        # the GPU model the simulator builds the node with (its default when none is named)
        return str(hostvars.hardware(host_vars, "gpu_model"))


PLUGIN = SimTransport()
