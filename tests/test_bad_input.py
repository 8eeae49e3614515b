"""Every malformed playbook or inventory is one clear message naming file and line, exit 2."""

import json
import shutil
import time

import pytest
from support import DATA, PLAYBOOK, SIM_INVENTORY

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model.assertions import evaluate
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


@pytest.mark.parametrize("text", ["--- !!omap\n- name: upgrade\n- hosts: all\n", "--- !!pairs\n- name: upgrade\n"])
def test_playbook_tagged_as_pairs_is_not_a_list_of_plays(tmp_path, text, capsys):
    """!!omap and !!pairs load as a plain list of pairs, without line marks: still one clear message."""
    path = tmp_path / "pb.yml"
    path.write_text(text)
    assert main(["validate", str(path), "-i", str(SIM_INVENTORY)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: a playbook is a non-empty YAML list of plays" in err, err
    assert "Traceback" not in err


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


def _beside_vendor_tasks(tmp_path):
    shutil.copytree(PLAYBOOK.parent / "vendor", tmp_path / "vendor")
    return tmp_path / "pb.yml"


def _alias_bomb(indent: str, levels: int = 9) -> str:
    """Nine levels of nine aliases: 1 KiB of YAML, 9**9 (387 million) values expanded."""
    lines = [f"{indent}lol0: &l0 [{', '.join(['lol'] * 9)}]"]
    lines += [f"{indent}lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_in_playbook_vars_is_refused_at_validate_with_its_line(tmp_path, capsys):
    text = PLAYBOOK.read_text()
    at = text.index("  vars:\n") + len("  vars:\n")
    pb = _beside_vendor_tasks(tmp_path)
    pb.write_text(text[:at] + _alias_bomb("    ") + text[at:])
    line = text[:at].count("\n") + 1
    t0 = time.monotonic()
    assert main(["validate", str(pb), "-i", str(SIM_INVENTORY)]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    # the first collection that expands too far: lol6 (9**7, 4.8 million values)
    assert f"{pb}:{line + 6}: YAML aliases expand" in err and "alias bomb" in err, err
    # the same aliases, used modestly, still load
    pb.write_text(text[:at] + _alias_bomb("    ", levels=4) + text[at:])
    assert main(["validate", str(pb), "-i", str(SIM_INVENTORY)]) == 0


@pytest.mark.parametrize("expr,at_run_time", [
    ("'x' * 10**10", "'x' * n"),
    ("([0] * 10**9) | length > 0", "([0] * n) | length > 0"),
    ("10 ** (10**6) > 0", "10 ** n > 0"),
    ("'%999999999s' % 'x' != ''", "('%' ~ n ~ 's') % 'x' != ''"),
])
def test_assertions_that_would_exhaust_memory_are_refused(tmp_path, capsys, expr, at_run_time):
    text = PLAYBOOK.read_text()
    anchor = "        that: vllm_image is match('vllm/vllm-openai:') or self_built_source is defined\n"
    assert anchor in text
    pb = _beside_vendor_tasks(tmp_path)
    pb.write_text(text.replace(anchor, f"        that: {json.dumps(expr)}\n"))
    line = text[:text.index(anchor)].count("\n") + 1
    t0 = time.monotonic()
    assert main(["validate", str(pb), "-i", str(SIM_INVENTORY)]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 10
    assert f"{pb}:{line}:" in err and "the sandbox allows" in err, err
    # operands known only at run time: the sandbox refuses the operation, the assertion fails
    res = evaluate(at_run_time, {"n": 10**9})
    assert not res.passed and res.error.startswith("SecurityError") and "the sandbox allows" in res.error


def test_non_utf8_input_names_its_line(tmp_path, capsys):
    pb = tmp_path / "pb.yml"
    pb.write_bytes(PLAYBOOK.read_bytes().replace(b"# CUDA 13.0", b"# CUDA\xe9 13.0", 1))
    line = PLAYBOOK.read_bytes().split(b"# CUDA 13.0")[0].count(b"\n") + 1
    assert main(["validate", str(pb), "-i", str(SIM_INVENTORY)]) == 2
    err = capsys.readouterr().err
    assert f"{pb}:{line}: not UTF-8" in err and "column" in err, err
