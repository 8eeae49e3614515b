"""Run a vendor task file on one host through ansible-runner (real ``ansible-playbook``).

The host is reached with the same settings as the SSH transport (an ssh_config written from
them: the same address, hops and known_hosts files), and host-key checking stays strict:
ansible-runner sets ``ANSIBLE_HOST_KEY_CHECKING=False`` unless it is already set, so it is
set to ``True`` here, and every hop's block says ``StrictHostKeyChecking yes``. Each run gets a fresh
ControlPath directory (ControlPersist sockets outlive the process). The event stream is
handed to the caller (the engine journals it); artifacts stay in the private data dir.

Every string k3rollout hands to Ansible (host vars, extra vars) is data, never a template:
it is written with Ansible's ``!unsafe`` tag, so ``{{ lookup('pipe', ...) }}`` in an
inventory value reaches the host as those literal characters instead of running on the
controller. Extra vars go in ``env/extravars`` (YAML, tagged) rather than on the command
line, where ansible-runner would pass them as JSON that Ansible templates.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from k3rollout.errors import InputError
from k3rollout.transport.ssh import SSHTarget
from k3rollout.transport.sshconf import render_openssh_config

EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped", "playbook_on_task_start",
          "playbook_on_stats")


class _Unsafe(str):
    """A string Ansible must never template (written as ``!unsafe``)."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(_Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v), style="'"))


def unsafe(value: Any) -> Any:
    """``value`` with every string in it (keys excepted) marked unsafe for Ansible."""
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, dict):
        return {k: unsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unsafe(v) for v in value]
    return value


def dump_unsafe(data: Any) -> str:
    return yaml.dump(unsafe(data), Dumper=_UnsafeDumper, sort_keys=False, allow_unicode=True)


def available() -> bool:
    try:
        import ansible_runner  # noqa: F401 - only whether it imports (so not at the top)
    except ImportError:
        return False
    return True


@dataclass
class AnsibleResult:
    rc: int
    status: str
    stdout: str
    events: list[dict[str, Any]]
    failed_task: str | None
    unreachable: bool
    artifacts: str


def _event_summary(ev: dict[str, Any]) -> dict[str, Any]:
    data = ev.get("event_data") or {}
    res = data.get("res") or {}
    out = {"event": ev.get("event"), "task": data.get("task"), "host": data.get("host")}
    for k in ("rc", "msg", "changed", "elapsed"):
        if k in res:
            out[k] = res[k] if not isinstance(res[k], str) else res[k][-500:]
    if res.get("stderr"):
        out["stderr"] = res["stderr"][-500:]
    return out


def run_tasks(target: SSHTarget, host_vars: dict[str, Any], tasks_file: Path, extravars: dict[str, Any],
              private_dir: Path, *, timeout: float, on_event: Callable[[dict[str, Any]], None],
              binary: str) -> AnsibleResult:
    """``binary`` is the absolute path of ``ansible-playbook`` (``toolpaths.require_tool``).
    ansible-runner spawns ``ansible-playbook`` by name, looked up on the PATH of the
    environment it is given (its ``binary`` option would drop the playbook argument), so
    that PATH starts with the directory the tool was found in: an unactivated venv's
    ``bin/`` is on no one's PATH."""
    if not tasks_file.is_file():
        raise InputError("vendor task file not found", path=str(tasks_file))
    return _run_play(target, host_vars, f"k3rollout vendor steps: {tasks_file.name}",
                     [{"name": "vendor steps", "ansible.builtin.import_tasks": str(tasks_file.resolve())}],
                     extravars, private_dir, timeout=timeout, on_event=on_event, binary=binary)


PING_TASK = "Ansible reaches the node and runs a module there"


def ping(target: SSHTarget, host_vars: dict[str, Any], private_dir: Path, *, timeout: float,
         binary: str) -> AnsibleResult:
    """A read-only play (``ansible.builtin.ping``: it logs in as the vendor tasks would,
    becomes root where they would, and runs a Python module with the host's interpreter) over
    the very connection the driver stage's vendor task files use: the preflight's proof of
    the Ansible path."""
    return _run_play(target, host_vars, "k3rollout preflight: the Ansible path",
                     [{"name": PING_TASK, "ansible.builtin.ping": {}}], {}, private_dir,
                     timeout=timeout, on_event=lambda ev: None, binary=binary)


def _run_play(target: SSHTarget, host_vars: dict[str, Any], name: str, tasks: list[dict[str, Any]],
              extravars: dict[str, Any], private_dir: Path, *, timeout: float,
              on_event: Callable[[dict[str, Any]], None], binary: str) -> AnsibleResult:
    import ansible_runner  # lazy: only a play that runs (available() says whether it imports)

    private_dir.mkdir(parents=True, exist_ok=True)
    (private_dir / "project").mkdir(exist_ok=True)
    play = [{"name": name, "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (private_dir / "project" / "k3-vendor.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    # ControlPath is a unix socket (108-byte limit): keep it short, fresh per run, and removed after
    control = Path(tempfile.mkdtemp(prefix="k3cp-"))
    # OpenSSH gets the very settings the paramiko transport resolved (address, port, user,
    # keys, jump hosts or ProxyCommand, known_hosts, strict checking on every hop) as an
    # ssh_config of its own, so both transports reach the host the same way and decide its
    # key the same way; the inventory's, environment's and ansible.cfg's ssh arguments are
    # overridden here by host variables, which Ansible ranks above them all
    text, alias = render_openssh_config(target.resolved)
    ssh_config = private_dir / "ssh_config"
    ssh_config.write_text(text)
    hv: dict[str, Any] = {"ansible_host": alias, "ansible_port": target.port, "ansible_user": target.user,
                          "ansible_connection": "ssh", "ansible_host_key_checking": True,
                          "ansible_ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s",
                          "ansible_ssh_common_args": f"-F {shlex.quote(str(ssh_config))}",
                          "ansible_ssh_extra_args": ""}
    if target.hop.key_files:
        hv["ansible_ssh_private_key_file"] = target.hop.key_files[0]
    envvars: dict[str, str] = {}

    def secret_file(name: str, value: str) -> str:
        # never in the inventory or extravars ansible-runner writes to disk: a 0600 file
        # outside the run directory, removed with the control dir
        f = control / name
        f.touch(mode=0o600)
        f.write_text(value)
        return str(f)

    if target.resolved.password:
        envvars["ANSIBLE_CONNECTION_PASSWORD_FILE"] = secret_file("password", target.resolved.password)
    if target.become:
        hv["ansible_become"] = True
        hv["ansible_become_method"] = "sudo"
        if target.resolved.become_user:
            hv["ansible_become_user"] = target.resolved.become_user
        if target.become_password:
            envvars["ANSIBLE_BECOME_PASSWORD_FILE"] = secret_file("become", target.become_password)
    for k, v in host_vars.items():
        if k.startswith("k3_") or k in ("ansible_python_interpreter",):
            hv[k] = v
    inventory = {"all": {"hosts": {target.name: hv}}}
    (private_dir / "inventory").mkdir(exist_ok=True)
    (private_dir / "inventory" / "hosts.yml").write_text(dump_unsafe(inventory))
    (private_dir / "env").mkdir(exist_ok=True)
    (private_dir / "env" / "extravars").write_text(dump_unsafe(dict(extravars)))
    # the interpreter, when set, is the (unsafe) host var above: a config value from the
    # environment would be templated
    envvars |= {"ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control), "ANSIBLE_RETRY_FILES_ENABLED": "False",
               "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
               "PATH": os.pathsep.join([str(Path(binary).parent), os.environ.get("PATH", os.defpath)])}
    events: list[dict[str, Any]] = []

    def handler(ev: dict[str, Any]) -> bool:
        if ev.get("event") in EVENTS:
            s = _event_summary(ev)
            events.append(s)
            on_event(s)
        return True

    try:
        r = ansible_runner.run(private_data_dir=str(private_dir), playbook="k3-vendor.yml",
                               envvars=envvars, event_handler=handler, quiet=True, timeout=int(timeout),
                               limit=target.name)
    finally:
        shutil.rmtree(control, ignore_errors=True)
    stdout = r.stdout.read() if hasattr(r.stdout, "read") else str(r.stdout)
    failed = next((e.get("task") for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")), None)
    unreachable = any(e["event"] == "runner_on_unreachable" for e in events)
    (private_dir / "k3-events.json").write_text(json.dumps(events, indent=1))
    return AnsibleResult(rc=int(r.rc if r.rc is not None else 1), status=str(r.status), stdout=stdout, events=events,
                         failed_task=failed, unreachable=unreachable, artifacts=str(private_dir / "artifacts"))
