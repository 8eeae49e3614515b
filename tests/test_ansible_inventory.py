"""The inventory loader resolves the same hosts, groups and host vars as `ansible-inventory --list`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT, SIM_INVENTORY
from k3rollout.model import load_inventory

INVENTORIES = [SIM_INVENTORY, ROOT / "inventories" / "example-ssh" / "hosts.yml",
               DATA / "inventories" / "precedence" / "hosts.yml", DATA / "inventories" / "ranges" / "hosts.yml"]


def ansible_inventory() -> str:
    exe = Path(sys.executable).parent / "ansible-inventory"
    found = str(exe) if exe.exists() else shutil.which("ansible-inventory")
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail("ansible-inventory missing: scripts/test.sh installs ansible-core (the test extra)")
        pytest.skip("ansible-core not installed")
    return found


def reference(path: Path) -> dict:
    env = {**os.environ, "ANSIBLE_INVENTORY_ENABLED": "yaml", "ANSIBLE_NOCOLOR": "1"}
    p = subprocess.run([ansible_inventory(), "-i", str(path), "--list"], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(p.stdout)


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_loader_matches_ansible_inventory(path):
    ref = reference(path)
    inv = load_inventory(path)
    hostvars = ref.pop("_meta")["hostvars"]      # hosts without vars are left out of it
    assert set(inv.hosts) == {h for g in ref.values() for h in g.get("hosts", [])}
    for name, host in inv.hosts.items():
        ours = {k: v for k, v in host.vars.items() if k != "inventory_hostname"}
        assert ours == hostvars.get(name, {}), name
    for group, data in ref.items():
        g = inv.groups[group]
        assert g.hosts == data.get("hosts", []), group
        assert sorted(g.children) == sorted(data.get("children", [])), group
    for group, g in inv.groups.items():
        if g.hosts or g.children:
            assert group in ref, group


def test_every_inventory_in_the_repo_is_compared():
    shipped = sorted(p for p in (ROOT / "inventories").rglob("*.yml") if p.parent.name not in ("group_vars",
                                                                                             "host_vars"))
    assert set(shipped) <= set(INVENTORIES)
