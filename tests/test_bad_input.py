"""Every malformed playbook or inventory is one clear message naming file and line, exit 2."""

import json

import pytest

from conftest import DATA, PLAYBOOK, SIM_INVENTORY
from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model.inventory import load_inventory

BAD = DATA / "bad"


@pytest.mark.parametrize("playbook,line,fragment", [
    ("pb-yaml-syntax.yml", 6, "invalid YAML"),
    ("pb-unknown-key.yml", 8, "rolback"),
    ("pb-order.yml", 4, "first stage must be `baseline`"),
    ("pb-bad-expr.yml", 9, "invalid expression"),
    ("pb-bad-serial.yml", 3, "lots"),
    ("pb-mapping.yml", 1, "YAML list of plays"),
    ("pb-bad-param.yml", 9, "drain_timeout"),
    ("pb-dup-key.yml", 3, "duplicate key 'hosts'"),
])
def test_malformed_playbook_names_file_and_line(playbook, line, fragment, capsys):
    path = BAD / playbook
    assert main(["validate", str(path), "-i", str(SIM_INVENTORY)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:" in err, err
    assert fragment in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("inventory,where,fragment", [
    ("inv-bad-key/hosts.yml", "inv-bad-key/hosts.yml:4:", "unknown key 'hostz'"),
    ("inv-bad-fault/hosts.yml", "inv-bad-fault/host_vars/gpu-02.yml:2:", "nccl_broke"),
    ("inv-bad-range/hosts.yml", "inv-bad-range/hosts.yml:5:", "start is after its end"),
    ("inv-bad-type/hosts.yml", "inv-bad-type/group_vars/gpu_nodes.yml:2:", "sim_gpu_count"),
])
def test_malformed_inventory_names_file_and_line(inventory, where, fragment, capsys):
    assert main(["validate", str(PLAYBOOK), "-i", str(BAD / inventory)]) == 2
    err = capsys.readouterr().err
    assert where in err, err
    assert fragment in err
    assert "Traceback" not in err


def test_missing_files_and_bad_window_are_bad_input(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yml"), "-i", str(SIM_INVENTORY)]) == 2
    assert "nope.yml: file not found" in capsys.readouterr().err
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--window", "soon"]) == 2
    assert "--window" in capsys.readouterr().err
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--window-end", "2020-01-01T00:00:00Z"]) == 2
    assert "in the past" in capsys.readouterr().err
    assert main(["resume", str(tmp_path)]) == 2
    assert "not a k3rollout run directory" in capsys.readouterr().err


def test_binary_and_empty_files_are_bad_input(tmp_path, capsys):
    binary = tmp_path / "pb.yml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["validate", str(binary), "-i", str(SIM_INVENTORY)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    empty = tmp_path / "inv.yml"
    empty.write_text("")
    assert main(["validate", str(PLAYBOOK), "-i", str(empty)]) == 2
    assert f"{empty}:1: inventory is empty" in capsys.readouterr().err


@pytest.mark.parametrize("var,value", [("api_host", "10.0.0.1/evil?x="), ("api_host", "a b"),
                                       ("sim_token_s", "fast"), ("sim_reboot_s", -1)])
def test_hostile_or_mistyped_network_vars_name_the_host_and_line(tmp_path, var, value):
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  hosts:\n    gpu-01:\n      {var}: {json.dumps(value)}\n")
    with pytest.raises(InputError) as e:
        load_inventory(inv)
    assert f"host gpu-01: {var}" in str(e.value) and e.value.line == 4
