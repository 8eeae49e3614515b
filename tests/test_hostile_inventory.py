"""Inventories that would exhaust the machine or break a later step are refused at validate,
exit 2, naming the file and line (or the host): alias bombs, huge host ranges, FIFOs,
text that is not UTF-8, host names and addresses that are not hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from support import PLAYBOOK, ROOT

from k3rollout.cli import main

BOMB = "lol0: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(1, 9))


def validate(inv, capsys) -> tuple[int, str]:
    t = time.monotonic()
    code = main(["validate", str(PLAYBOOK), "-i", str(inv)])
    assert time.monotonic() - t < 30
    return code, capsys.readouterr().err


@pytest.mark.parametrize("form", ["yml", "ini"])
def test_huge_host_range_is_refused_with_file_and_line(tmp_path, capsys, form):
    if form == "yml":
        inv = tmp_path / "hosts.yml"
        inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-[0000000:9999999]:\n")
        line = 5
    else:
        inv = tmp_path / "hosts.ini"
        inv.write_text("[all:vars]\nansible_connection=k3sim\n\n[gpu_nodes]\ngpu-[0000000:9999999]\n")
        line = 5
    code, err = validate(inv, capsys)
    assert code == 2
    assert f"{inv}:{line}:" in err and "10,000,000 hosts" in err, err


@pytest.mark.parametrize("form", ["yml", "ini"])
def test_alias_bomb_in_group_vars_is_refused_with_file_and_line(tmp_path, capsys, form):
    (tmp_path / "group_vars").mkdir()
    bomb = tmp_path / "group_vars" / "gpu_nodes.yml"
    bomb.write_text(BOMB)
    if form == "yml":
        inv = tmp_path / "hosts.yml"
        inv.write_text("all:\n  vars:\n    ansible_connection: k3sim\n  children:\n    gpu_nodes:\n      hosts:\n"
                       "        gpu-01:\n        gpu-02:\n")
    else:
        inv = tmp_path / "hosts.ini"
        inv.write_text("[gpu_nodes]\ngpu-01 ansible_connection=k3sim\ngpu-02 ansible_connection=k3sim\n")
    code, err = validate(inv, capsys)
    assert code == 2
    assert f"{bomb}:" in err and "alias" in err, err


def test_alias_bomb_in_the_inventory_itself(tmp_path, capsys):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars:\n" + "".join(f"    {ln}\n" for ln in BOMB.splitlines())
                   + "  hosts:\n    gpu-01:\n")
    code, err = validate(inv, capsys)
    assert code == 2 and f"{inv}:" in err and "alias" in err


def test_fifo_as_inventory_or_vars_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "hosts.yml"
    os.mkfifo(fifo)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    p = subprocess.run([sys.executable, "-m", "k3rollout", "validate", str(PLAYBOOK), "-i", str(fifo)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert p.returncode == 2 and "not a regular file" in p.stderr and str(fifo) in p.stderr
    d = tmp_path / "dir"
    (d / "group_vars").mkdir(parents=True)
    (d / "hosts.yml").write_text("all:\n  hosts:\n    gpu-01:\n      ansible_connection: k3sim\n")
    os.mkfifo(d / "group_vars" / "all.yml")
    p = subprocess.run([sys.executable, "-m", "k3rollout", "validate", str(PLAYBOOK), "-i", str(d / "hosts.yml")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert p.returncode == 2 and "not a regular file" in p.stderr and "all.yml" in p.stderr


@pytest.mark.parametrize("form", ["yml", "ini"])
def test_non_utf8_names_the_line(tmp_path, capsys, form):
    inv = tmp_path / f"hosts.{form}"
    if form == "yml":
        inv.write_bytes(b"all:\n  hosts:\n    gpu-01:\n      note: caf\xe9\n")
    else:
        inv.write_bytes(b"[gpu_nodes]\ngpu-01\ngpu-02 note=caf\xe9\n")
    code, err = validate(inv, capsys)
    assert code == 2
    assert f"{inv}:{4 if form == 'yml' else 3}:" in err and "not UTF-8" in err, err


@pytest.mark.parametrize("name", [".", "..", "-n", "--help", "a/b", "gpu..01", "-oProxyCommand=x"])
def test_host_names_that_are_not_hosts_are_refused(tmp_path, capsys, name):
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  vars:\n    ansible_connection: k3sim\n  hosts:\n    gpu-01:\n    '{name}':\n")
    code, err = validate(inv, capsys)
    assert code == 2 and repr(name) in err and "Traceback" not in err, err


@pytest.mark.parametrize("addr", ["-oProxyCommand=touch /tmp/x", "--help", "host name", "a..b", "", "-n"])
def test_ansible_host_that_is_not_an_address_is_refused(tmp_path, capsys, addr):
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  vars:\n    ansible_connection: ssh\n  hosts:\n    gpu-01:\n      ansible_host: '{addr}'\n")
    code, err = validate(inv, capsys)
    assert code == 2 and "host gpu-01: ansible_host" in err and f"{inv}:6:" in err, err


def test_ini_host_names_are_checked_too(tmp_path, capsys):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\ngpu-01 ansible_connection=ssh ansible_host=-oProxyCommand=x\n")
    code, err = validate(inv, capsys)
    assert code == 2 and "host gpu-01: ansible_host" in err, err


def test_real_names_and_addresses_pass(tmp_path, capsys):
    inv = tmp_path / "hosts.yml"
    known = tmp_path / "known_hosts"
    known.write_text("")
    # the GPUs, which the shipped play's K3 replica plan reads from the inventory before any node is reached
    inv.write_text(f"all:\n  vars:\n    ansible_connection: ssh\n    k3_known_hosts_file: {known}\n"
                   "    k3_gpu_model: NVIDIA B300 SXM6 AC\n    k3_gpu_count: 8\n    k3_gpu_mem_gib: 268\n"
                   "  children:\n    gpu_nodes:\n      hosts:\n"
                   "        gpu-01.dc1.example.com:\n        gpu_alias_02:\n          ansible_host: 10.0.0.2\n"
                   "        n3:\n          ansible_host: 'fe80::1'\n        '10.0.0.4':\n")
    code, err = validate(inv, capsys)
    assert code == 0, err
