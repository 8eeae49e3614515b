"""Inventories resolve exactly as `ansible-inventory --list` resolves them.

- YAML files: k3rollout's own reader (line numbers in its errors) gives the same JSON as
  ansible-inventory, for every inventory in the repository and generated ones.
- Everything else goes through ansible-inventory: the INI form of each inventory, a
  directory of mixed sources with a `constructed` plugin, several -i, vault.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import DATA, PLAYBOOK, ROOT, SIM_INVENTORY
from support import ansible_tool as _tool

from k3rollout.cli import main
from k3rollout.model import load_inventory
from k3rollout.model.ansible_inventory import VaultOptions

INVENTORIES = [SIM_INVENTORY, ROOT / "inventories" / "example-ssh" / "hosts.yml",
               DATA / "inventories" / "precedence" / "hosts.yml", DATA / "inventories" / "ranges" / "hosts.yml"]
INI_FORMS = {SIM_INVENTORY: "sim.ini", INVENTORIES[1]: "example-ssh.ini", INVENTORIES[2]: "precedence.ini",
             INVENTORIES[3]: "ranges.ini"}


ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True"}


def reference(*sources: Path, extra: list[str] = ()) -> dict:
    argv = [_tool("ansible-inventory")]
    for s in sources:
        argv += ["-i", str(s)]
    p = subprocess.run([*argv, "--list", *extra], capture_output=True, text=True, env=ENV, check=True)
    return json.loads(p.stdout)


def norm(data: dict) -> dict:
    """ansible-inventory's JSON without what carries no meaning: the profile name and the
    order of child groups (Ansible lists them in the order its plugins made them)."""
    out = json.loads(json.dumps(data))
    out["_meta"].pop("profile", None)
    for body in out.values():
        if isinstance(body, dict) and "children" in body:
            body["children"] = sorted(body["children"])
    return out


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_loader_matches_ansible_inventory(path):
    inv = load_inventory(path)
    assert inv.resolver == "native"
    assert norm(inv.to_ansible_json()) == norm(reference(path))


def test_every_inventory_in_the_repo_is_compared():
    shipped = sorted(p for p in (ROOT / "inventories").rglob("*.yml") if p.parent.name not in ("group_vars",
                                                                                             "host_vars"))
    assert set(shipped) <= set(INVENTORIES)
    assert set(INI_FORMS) == set(INVENTORIES)


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ini_form_resolves_like_the_yaml_form(tmp_path, path):
    """The INI form, beside the same group_vars/ and host_vars/, through ansible-inventory."""
    where = tmp_path / "inv"
    shutil.copytree(path.parent, where)
    (where / path.name).unlink()
    shutil.copy(DATA / "inventories" / "ini" / INI_FORMS[path], where / "hosts.ini")
    ini = load_inventory(where / "hosts.ini")
    yml = load_inventory(path)
    assert ini.resolver == "ansible"
    assert norm(ini.to_ansible_json()) == norm(yml.to_ansible_json())
    assert set(ini.hosts) == set(yml.hosts)
    for name, host in yml.hosts.items():
        assert ini.hosts[name].vars == host.vars, name
        assert set(ini.hosts[name].groups) == set(host.groups), name
    # (the order of groups, and so of hosts, depends on the order Ansible's plugins made them)
    for pattern in ("all", "gpu_nodes:!rack_b", "*[0-9]", "~.*0[24]$"):
        assert sorted(ini.select(pattern)) == sorted(yml.select(pattern)), pattern


def _generated(seed: int, where: Path) -> Path:
    """A random YAML inventory: nested groups (some hosts in several), ranges, ports, vars
    of every YAML type at every level, group priorities, group_vars/ and host_vars/ files."""
    rnd = random.Random(seed)
    values = [1, 0, -3, 2.5, True, False, None, "x", "575.57.08", "01", [1, "a"], {"k": {"n": [True]}}, ""]
    groups = [f"g{i}" for i in range(rnd.randint(2, 6))]
    hosts = [f"n{i:02d}" for i in range(rnd.randint(2, 9))]

    def some_vars() -> dict:
        return {f"v{rnd.randint(0, 5)}": rnd.choice(values) for _ in range(rnd.randint(0, 4))}

    body: dict = {"all": {"vars": some_vars(), "children": {}}}
    if rnd.random() < 0.5:
        body["all"]["hosts"] = {rnd.choice(hosts): some_vars() or None}
    made: dict[str, dict] = {}
    for g in groups:
        spec: dict = {}
        if rnd.random() < 0.7:
            spec["hosts"] = {h: (some_vars() or None) for h in rnd.sample(hosts, rnd.randint(1, len(hosts)))}
        if rnd.random() < 0.3:
            spec.setdefault("hosts", {})[f"r{seed}-[{rnd.randint(1, 3):02d}:{rnd.randint(4, 7):02d}]"] = None
        v = some_vars()
        if rnd.random() < 0.3:
            v["ansible_group_priority"] = rnd.randint(1, 9)
        if v:
            spec["vars"] = v
        made[g] = spec
    for g in groups:                      # each group a child of 'all' or of an earlier group
        parents = [p for p in groups if p < g]
        if parents and rnd.random() < 0.6:
            made[rnd.choice(parents)].setdefault("children", {})[g] = made[g]
        else:
            body["all"]["children"][g] = made[g]
    where.mkdir(parents=True)
    inv = where / "hosts.yml"
    inv.write_text(yaml.safe_dump(body, sort_keys=False))
    for kind, names in (("group_vars", ["all", *groups]), ("host_vars", hosts)):
        for n in rnd.sample(names, min(len(names), 2)):
            (where / kind).mkdir(exist_ok=True)
            (where / kind / f"{n}.yml").write_text(yaml.safe_dump(some_vars() or {"v9": seed}))
    return inv


@pytest.mark.parametrize("seed", range(3))
def test_yaml_reader_matches_ansible_inventory_on_generated_inventories(tmp_path, seed):
    path = _generated(seed, tmp_path / f"gen{seed}")
    ours = load_inventory(path)
    assert ours.resolver == "native"
    assert norm(ours.to_ansible_json()) == norm(reference(path)), path.read_text()


def test_host_in_all_and_in_a_child_group_is_not_ungrouped(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    a:\n    b:\n  children:\n    g:\n      hosts:\n        b:\n"
                   "    ungrouped:\n      hosts:\n        c:\n    h:\n      hosts:\n        c:\n")
    ours = load_inventory(inv)
    assert ours.groups["ungrouped"].hosts == ["a"]
    assert norm(ours.to_ansible_json()) == norm(reference(inv))


def _mixed_dir(tmp_path: Path) -> tuple[Path, Path]:
    d = tmp_path / "inventory"
    (d / "group_vars").mkdir(parents=True)
    (d / "01-racks.ini").write_text("[rack_a]\ngpu-a[01:02] gpus=8\n\n[rack_a:vars]\nrack=a\n\n"
                                    "[gpu_nodes:children]\nrack_a\n")
    (d / "02-more.yml").write_text("all:\n  children:\n    rack_b:\n      hosts:\n        gpu-b01:\n"
                                   "          gpus: 4\n          rack: b\n    gpu_nodes:\n      children:\n"
                                   "        rack_b:\n")
    (d / "03-constructed.yml").write_text("plugin: ansible.builtin.constructed\nstrict: true\ngroups:\n"
                                          "  eight_gpu: gpus == 8\nkeyed_groups:\n  - key: rack\n    prefix: in\n")
    (d / "group_vars" / "gpu_nodes.yml").write_text("ansible_connection: k3sim\nscheduler: kubernetes\n")
    script = d / "00-script.sh"          # an executable inventory script (Ansible runs it with --list)
    script.write_text("#!/bin/sh\necho '{\"rack_b\": {\"hosts\": [\"gpu-b02\"]}, \"_meta\": {\"hostvars\": "
                      "{\"gpu-b02\": {\"gpus\": 8, \"rack\": \"b\"}}}}'\n")
    script.chmod(0o755)
    (d / "README.md").write_text("ignored, as Ansible ignores it\n")
    other = tmp_path / "extra.yml"
    other.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-c01:\n          gpus: 8\n")
    return d, other


def test_directory_of_mixed_sources_and_several_i(tmp_path, capsys):
    d, other = _mixed_dir(tmp_path)
    inv = load_inventory([d, other])
    assert inv.resolver == "ansible"
    assert set(inv.hosts) == {"gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02", "gpu-c01"}
    assert inv.hosts["gpu-a02"].vars["rack"] == "a" and inv.hosts["gpu-a02"].vars["gpus"] == 8
    assert inv.hosts["gpu-b01"].vars["scheduler"] == "kubernetes"          # group_vars/ inside the directory
    assert sorted(inv.select("eight_gpu")) == ["gpu-a01", "gpu-a02", "gpu-b02"]   # the constructed plugin's group
    assert sorted(inv.select("in_a:in_b")) == ["gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02"]
    assert inv.hosts["gpu-b02"].vars["scheduler"] == "kubernetes"          # the script's host, in gpu_nodes
    assert "gpu-c01" in inv.select("gpu_nodes")                            # the second -i
    ref = reference(d, other)
    assert inv.to_ansible_json() == ref
    assert main(["inventory", "-i", str(d), "-i", str(other), "--list"]) == 0
    assert json.loads(capsys.readouterr().out) == ref
    assert main(["inventory", "-i", str(d), "-i", str(other), "--host", "gpu-b01"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(subprocess.run(
        [_tool("ansible-inventory"), "-i", str(d), "-i", str(other), "--host", "gpu-b01"], capture_output=True,
        text=True, env=ENV, check=True).stdout)
    # a run over it knows every host (the playbook targets gpu_nodes)
    assert main(["plan", str(PLAYBOOK), "-i", str(d), "-i", str(other), "--list-hosts"]) == 0
    out = capsys.readouterr().out
    assert "hosts (5):" in out and "gpu-c01" in out


def test_group_vars_beside_the_playbook_apply(tmp_path, capsys):
    pbdir = tmp_path / "play"
    (pbdir / "group_vars").mkdir(parents=True)
    shutil.copy(PLAYBOOK, pbdir / "pb.yml")
    (pbdir / "group_vars" / "rack_b.yml").write_text("k3_gpu_count: 4\n")
    inv = load_inventory(SIM_INVENTORY, playbook_dir=pbdir)
    assert inv.resolver == "ansible"
    assert inv.hosts["gpu-b02"].vars["k3_gpu_count"] == 4
    assert inv.hosts["gpu-a02"].vars.get("k3_gpu_count") != 4
    assert inv.to_ansible_json() == reference(SIM_INVENTORY, extra=["--playbook-dir", str(pbdir)])
    # and the CLI looks beside the playbook it is given
    assert main(["inventory", "-i", str(SIM_INVENTORY), "--playbook-dir", str(pbdir), "--host", "gpu-b02"]) == 0
    assert json.loads(capsys.readouterr().out)["k3_gpu_count"] == 4


def _vaulted(tmp_path: Path) -> tuple[Path, Path]:
    from ansible.parsing.vault import VaultLib, VaultSecret

    lib = VaultLib([("default", VaultSecret(b"correct horse"))])
    ct = lib.encrypt("s3cret-token").decode()
    d = tmp_path / "vaulted"
    (d / "group_vars").mkdir(parents=True)
    (d / "hosts.yml").write_text("all:\n  vars:\n    ansible_connection: k3sim\n  children:\n    gpu_nodes:\n"
                                 "      hosts:\n        gpu-01:\n          api_token: !vault |\n"
                                 + "".join(f"            {ln}\n" for ln in ct.splitlines()) + "        gpu-02:\n")
    # a whole group_vars file encrypted too
    (d / "group_vars" / "gpu_nodes.yml").write_text(lib.encrypt("scheduler: slurm\n").decode())
    pw = tmp_path / "vault-pass"
    pw.write_text("correct horse\n")
    return d / "hosts.yml", pw


def test_vaulted_variable_and_file(tmp_path, capsys, monkeypatch):
    inv_path, pw = _vaulted(tmp_path)
    inv = load_inventory(inv_path, vault=VaultOptions(password_files=[str(pw)]))
    assert inv.resolver == "ansible"
    assert inv.hosts["gpu-01"].vars["api_token"] == "s3cret-token"
    assert inv.vault_values == ("s3cret-token",)          # masked wherever the engine writes
    assert inv.hosts["gpu-01"].vars["scheduler"] == "slurm"
    # without the password: exit 2, and the message says what is missing
    assert main(["validate", str(PLAYBOOK), "-i", str(inv_path)]) == 2
    err = capsys.readouterr().err
    assert "vault" in err.lower() and "Traceback" not in err
    # --ask-vault-pass: typed once, handed to ansible-inventory through a pipe (the group_vars
    # file it decrypts) and used here for the !vault value
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "correct horse")
    assert main(["inventory", "-i", str(inv_path), "--ask-vault-pass", "--host", "gpu-01"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ansible_connection": "k3sim", "api_token": "s3cret-token",
                                                   "scheduler": "slurm"}
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    assert main(["validate", str(PLAYBOOK), "-i", str(inv_path), "--vault-password-file", str(wrong)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_ansible_inventory_errors_pass_through_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "hosts.ini"
    bad.write_text("[gpu]\ngpu-01 not_a_pair\n")
    assert main(["validate", str(PLAYBOOK), "-i", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "key=value" in err and "Traceback" not in err
    broken = tmp_path / "plugin.yml"
    broken.write_text("plugin: ansible.builtin.constructed\nstrict: true\ngroups:\n  x: undefined_var > 1\n")
    assert main(["validate", str(PLAYBOOK), "-i", str(broken)]) == 2
    assert str(broken) in capsys.readouterr().err
    # where Ansible names a line (YAML in a directory source), so does the message
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.ini").write_text("[gpu_nodes]\ngpu-01 ansible_connection=k3sim\n")
    (d / "b.yml").write_text("all:\n  hosts:\n    gpu-02:\n      x: [\n")
    assert main(["validate", str(PLAYBOOK), "-i", str(d)]) == 2
    err = capsys.readouterr().err
    assert f"error: {d / 'b.yml'}:5:" in err, err


def test_missing_ansible_inventory_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import k3rollout.model.ansible_inventory as ai

    monkeypatch.setattr(ai, "find_tool", lambda name: None)
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\ngpu-01\n")
    assert main(["validate", str(PLAYBOOK), "-i", str(ini)]) == 2
    assert "ansible-inventory" in capsys.readouterr().err
    # a YAML inventory needs no Ansible at all
    assert main(["validate", str(PLAYBOOK), "-i", str(SIM_INVENTORY)]) == 0


def test_find_tool_prefers_the_interpreters_own_bin(tmp_path, monkeypatch):
    from k3rollout.toolpaths import find_tool

    assert find_tool("ansible-inventory") == str(Path(sys.executable).parent / "ansible-inventory")
    monkeypatch.setenv("PATH", str(tmp_path))
    tool = tmp_path / "only-on-path"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert find_tool("only-on-path") == str(tool)
    assert find_tool("no-such-tool-anywhere") is None


@pytest.mark.parametrize("name", ["hosts.yaml", "inventory.yml"])
def test_ini_text_in_a_yaml_named_file_resolves_as_ansible_inventory_does(tmp_path, capsys, name):
    """issue #33 item 2: Ansible tries its plugins in turn, so a `.yaml` file holding INI text
    (DeepOps' Slurm inventory, here) is read by its ini plugin; k3rollout resolves it the same way."""
    path = tmp_path / name
    shutil.copy(DATA / "inventories" / "real" / "deepops.ini", path)
    inv = load_inventory(path)
    assert inv.resolver == "ansible"
    assert norm(inv.to_ansible_json()) == norm(reference(path))
    assert main(["inventory", "-i", str(path), "--list"]) == 0
    assert norm(json.loads(capsys.readouterr().out)) == norm(reference(path))


def test_a_file_neither_reader_parses_names_its_file_and_line(tmp_path, capsys):
    path = tmp_path / "hosts.yaml"
    path.write_text("all:\n  hosts:\n    gpu-01: {x: [1, 2}\n")
    with pytest.raises(subprocess.CalledProcessError):
        reference(path)                       # Ansible refuses it too
    assert main(["validate", str(PLAYBOOK), "-i", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:" in err and "invalid YAML" in err and "ansible-inventory" in err, err
    assert "Traceback" not in err
