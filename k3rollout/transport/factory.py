"""Pick the transport for a run from the inventory's ``ansible_connection``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k3rollout.errors import InputError
from k3rollout.model.inventory import connection_of
from k3rollout.plugins import registered, transport_plugin
from k3rollout.runlog.rundir import RunDir
from k3rollout.toolpaths import find_tool, require_tool
from k3rollout.transport import local

SSH_KINDS = ("ssh", "paramiko")


def connection_kind(hosts: dict[str, Any]) -> str:
    kinds = {connection_of(h.vars) for h in hosts.values()}
    if len(kinds) > 1:
        raise InputError(f"the play mixes connections {sorted(kinds)}; one run uses one transport")
    return kinds.pop() if kinds else "ssh"


def vendor_task_files(playbook: Any) -> list[str]:
    """The Ansible task files the playbook's driver stages name (``with.tasks.apt/dnf``)."""
    out = []
    for s in playbook.stages:
        if s.stage == "driver_upgrade":
            tasks = s.typed_params().tasks
            out += [t for t in (tasks.apt, tasks.dnf) if t]
    return out


def check_controller_tools(playbook: Any, hosts: dict[str, Any]) -> dict[str, str]:
    """Prove, before any node is touched, that the controller has what this run will execute,
    and that every host's SSH settings resolve with strict host-key checking.

    Over SSH, a driver stage that names vendor task files runs them with ansible-runner and
    ``ansible-playbook``; a missing one is the controller's fault, never the node's, so it is
    refused here (exit 2) rather than found at the first node's driver stage (where it would
    fail the node and roll it back). Returns the tools found, by name."""
    if connection_kind(hosts) not in SSH_KINDS:
        return {}
    found = {}
    if vendor_task_files(playbook):
        why = f"the driver stage runs {', '.join(vendor_task_files(playbook))} with ansible-runner"
        try:
            import ansible_runner  # noqa: F401 - only whether it imports (so not at the top)
        except ImportError:
            raise InputError(f"the Python package ansible-runner is needed on the controller ({why}) but cannot "
                             "be imported; install k3rollout with its dependencies. Nothing was changed.") from None
        found["ansible-playbook"] = require_tool("ansible-playbook", why)

        ssh = find_tool("ssh")
        if ssh is None:
            raise InputError(f"`ssh`, the OpenSSH client, is needed on the controller ({why}, whose ssh connection "
                             "runs it) but is not on PATH; install openssh-client. Nothing was changed.")
        found["ssh"] = ssh
    on_controller = sorted(h for h, v in hosts.items() if v.vars.get("scheduler") == "slurm"
                           and not v.vars.get("k3_scheduler_host"))
    if on_controller:
        scontrol = local.resolve("scontrol")
        if scontrol is None:
            raise InputError(f"`scontrol` is needed on the controller (Slurm operations for {', '.join(on_controller)} "
                             "run there, never on the node being changed) but it is not installed; install "
                             "slurm-client with this cluster's slurm.conf, or name the slurmctld host with "
                             "k3_scheduler_host. Nothing was changed.")
        found["scontrol"] = scontrol
    check_ssh_settings(hosts)
    return found


def check_ssh_settings(hosts: dict[str, Any]) -> None:
    """Resolve every host's SSH settings (Ansible's variables, ansible.cfg, ~/.ssh/config)
    without connecting: a setting that would lower host-key checking, a missing key or
    known_hosts file, or an unreadable config is refused here (exit 2), naming the host,
    before any node is touched."""
    from k3rollout.transport.sshconf import Resolver  # lazy: paramiko, for SSH runs only

    resolver = Resolver()
    for name, h in hosts.items():
        resolver.resolve(name, h.vars)


def make_executor(hosts: dict[str, Any], run_dir: Path, observation_pass: int | None = None) -> Any:
    """The run's transport. ``observation_pass``: the ``k3rollout observe`` pass it serves,
    which only a simulated cluster is told (its late faults may start at a pass)."""
    kind = connection_kind(hosts)
    if kind in SSH_KINDS:
        from k3rollout.transport.ssh import SSHExecutor  # lazy: paramiko, for SSH runs only

        # the Ansible path runs OpenSSH: where it can, it checks each host key too, first
        return SSHExecutor({n: h.vars for n, h in hosts.items()}, openssh=find_tool("ssh"))
    # any other connection is a registered transport's (k3rollout/plugins.py), loaded only
    # when a run uses it: the simulated cluster's is ``k3sim``
    plugin = transport_plugin(kind)
    if plugin is None:
        others = ", ".join(registered()) or "none installed"
        raise InputError(f"ansible_connection {kind!r} is not supported: use ssh or paramiko, or a registered "
                         f"transport ({others})")
    return plugin.executor(RunDir(run_dir).transport_state(plugin.state_dir), {n: h.vars for n, h in hosts.items()},
                           observation_pass=observation_pass)
