"""Hostile input: templates in inventory values, secrets in URLs and container
environments, file modes of a run, and input sized to exhaust the machine."""

from __future__ import annotations

import json
from pathlib import Path

from k3rollout.model import load_inventory


def test_inventory_and_extra_vars_are_never_templated_by_ansible(sshd_cluster, tmp_path):
    """A template in a host var or an extra var reaches Ansible as data: nothing runs on
    the controller (real ansible-runner, real ansible-playbook, real sshd)."""
    from k3rollout.toolpaths import require_tool
    from k3rollout.transport import ansible as ansible_transport
    from k3rollout.transport.ssh import SSHExecutor

    marks = {k: tmp_path / f"pwned-{k}" for k in ("interpreter", "hostvar", "extravar")}

    def evil(k: str) -> str:
        return "{{ lookup('pipe', 'touch " + str(marks[k]) + "') }}"

    tasks = tmp_path / "tasks.yml"
    tasks.write_text("- name: show the values\n  ansible.builtin.debug:\n    msg: \"{{ k3_note }} | {{ k3_x }}\"\n"
                     "- name: a module on the host\n  ansible.builtin.command:\n    argv: [true]\n")
    with sshd_cluster({"gpu-01": {}}) as c:
        inv = load_inventory(c.inventory(tmp_path / "inv" / "hosts.yml", host_vars={"gpu-01": {
            "ansible_python_interpreter": evil("interpreter") + "/usr/bin/python3", "k3_note": evil("hostvar")}}))
        ex = SSHExecutor({n: h.vars for n, h in inv.hosts.items()})
        events: list[dict] = []
        try:
            res = ansible_transport.run_tasks(ex.targets["gpu-01"], inv.hosts["gpu-01"].vars, tasks,
                                              {"k3_x": evil("extravar")}, tmp_path / "private", timeout=120,
                                              on_event=events.append,
                                              binary=require_tool("ansible-playbook", "the vendor tasks"))
        finally:
            ex.close()
    assert [k for k, p in marks.items() if p.exists()] == []
    # the values arrived as the literal characters the inventory holds
    shown = next(e for e in events if e["event"] == "runner_on_ok" and e["task"] == "show the values")
    assert shown["msg"] == f"{evil('hostvar')} | {evil('extravar')}"
    # the literal interpreter does not exist on the host: the module task fails, not the controller
    assert res.rc != 0 and res.failed_task == "a module on the host"
