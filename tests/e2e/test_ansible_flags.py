"""Ansible's command-line flags with Ansible's meaning: host patterns and --limit (compared
with `ansible-playbook --list-hosts`), -e, -f, -v, --list-hosts, --check, --start-at-task, and
the retry file a failed run leaves for `--limit @FILE`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from support import DATA, PLAYBOOK, SIM_INVENTORY, result, write_inventory, write_playbook
from support import ansible_tool as _tool

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model import load_inventory, load_playbook
from k3rollout.model.inputs import apply_overrides, parse_extra_vars

RANGES = DATA / "inventories" / "ranges" / "hosts.yml"
PATTERNS = ["all", "*", "gpu_nodes", "rack_a:rack_b", "rack_a,gpu-b0*", "gpu_nodes:!rack_b", "gpu_nodes:&rack_b",
            "rack_a:&gpu-a0?", "~gpu-(a0[1-3]|b08)", "*:!~.*[13]$", "gpu-a*[2]", "rack_b[1:3]", "rack_a[-1]",
            "!rack_a", "&rack_b", "gpu-a01:gpu-b08:gpu-a01", "gpu-a01,~gpu-b0[45],!gpu-b05", "nothing:rack_b",
            "hgx:legacy:!extra", "hgx[0]", "node?,db*", "nothing[0]", "rack_a[2:0]", "hgx[1:]"]


def list_hosts(inventories: list[Path], patterns: list[str], tmp_path: Path, limit: str | None = None) -> list[list[str]]:
    """For each pattern, the hosts `ansible-playbook --list-hosts` gives a play with it (one
    play per pattern, one ansible-playbook for all)."""
    pb = tmp_path / "patterns.yml"
    pb.write_text(yaml.safe_dump([{"name": f"p{i}", "hosts": p, "gather_facts": False, "tasks": []}
                                  for i, p in enumerate(patterns)]))
    argv = [_tool("ansible-playbook"), str(pb), "--list-hosts"]
    for inv in inventories:
        argv += ["-i", str(inv)]
    if limit:
        argv += ["--limit", limit]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_PATTERN_MISMATCH": "ignore"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    plays = re.split(r"\n\s*play #\d+ ", out)[1:]
    assert len(plays) == len(patterns), out
    res = []
    for body in plays:
        n = int(re.search(r"hosts \((\d+)\):", body).group(1))
        hosts = [ln.strip() for ln in body.split("hosts (", 1)[1].splitlines()[1:] if ln.strip()]
        assert len(hosts) == n, body
        res.append(hosts)
    return res


def _both(tmp_path: Path) -> Path:
    """The simulated cluster and the ranges inventory, as one YAML file."""
    sim = yaml.safe_load(SIM_INVENTORY.read_text())
    rng = yaml.safe_load(RANGES.read_text())
    sim["all"]["children"]["gpu_nodes"]["children"].update(rng["all"]["children"]["gpu_nodes"]["children"])
    sim["all"]["children"]["extra"] = rng["all"]["children"]["extra"]
    f = tmp_path / "both" / "hosts.yml"
    f.parent.mkdir()
    f.write_text(yaml.safe_dump(sim, sort_keys=False))
    return f


def test_host_patterns_select_what_ansible_playbook_selects(tmp_path):
    inv_path = _both(tmp_path)
    inv = load_inventory(inv_path)
    want = list_hosts([inv_path], PATTERNS, tmp_path)
    # ansible-playbook --list-hosts prints a set (its order changes from run to run)
    for pattern, hosts in zip(PATTERNS, want, strict=True):
        assert sorted(inv.select(pattern)) == sorted(hosts), pattern
    # subscripts take positions in Ansible's order, which for one group is its own order
    assert inv.select("rack_b[1:3]") == ["gpu-b02", "gpu-b03", "gpu-b04"]
    assert inv.select("rack_a[-1]") == ["gpu-a08"]


@pytest.mark.parametrize("limit", ["rack_a:!gpu-a0[1:5]", "~gpu-b0[12]:hgx", "@retry"])
def test_limit_narrows_like_ansible_playbook(tmp_path, limit):
    inv_path = _both(tmp_path)
    if limit == "@retry":
        retry = tmp_path / "k3.retry"
        retry.write_text("gpu-a03\ngpu-b07\nh200-13\n\n")
        limit = f"@{retry}"
    plays = ["all", "gpu_nodes:!rack_b", "rack_b"]
    want = list_hosts([inv_path], plays, tmp_path, limit=limit)
    inv = load_inventory(inv_path)
    for pattern, hosts in zip(plays, want, strict=True):
        assert sorted(inv.select(pattern, limit)) == sorted(hosts), (pattern, limit)
        assert sorted(inv.limited(limit).select(pattern)) == sorted(hosts), (pattern, limit)


def test_list_hosts_and_limit_on_plan_and_run(tmp_path, capsys):
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--limit", "rack_b:!~gpu-b0[3-7]",
                 "--list-hosts"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"hosts \(3\):\n\s+gpu-b01\n\s+gpu-b02\n\s+gpu-b08\n", out), out
    assert f"playbook: {PLAYBOOK}" in out and "pattern: ['gpu_nodes']" in out
    # run --list-hosts changes nothing: no run directory
    assert main(["run", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--list-hosts", "--run-dir",
                 str(tmp_path / "r")]) == 0
    assert "hosts (16):" in capsys.readouterr().out and not (tmp_path / "r").exists()
    # the plan covers only the limited hosts
    # (two whole K3 replicas: with one, min_serving 50% would leave none to take out)
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "-l", "rack_a[0:3]", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["hosts"] == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]
    assert [r["nodes"] for r in plan["replicas"]] == [["gpu-a01", "gpu-a02"], ["gpu-a03", "gpu-a04"]]
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--limit", "no_such_group"]) == 2
    assert "matches no host" in capsys.readouterr().err
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--limit", f"@{tmp_path / 'absent'}"]) == 2
    assert "limit file not found" in capsys.readouterr().err


def test_extra_vars_forms_and_precedence(tmp_path):
    f = tmp_path / "ev.yml"
    f.write_text("from_file: 1\nshared: file\nnested: {a: [1, 2]}\n")
    ev = parse_extra_vars(["a=1 b='two words'", '{"shared": "json", "n": 5}', f"@{f}", "shared=last"])
    assert ev == {"a": "1", "b": "two words", "n": 5, "from_file": 1, "shared": "last", "nested": {"a": [1, 2]}}
    for bad in ("novalue", "[1, 2]", "node=x", "1x=2"):
        with pytest.raises(InputError):
            parse_extra_vars([bad])
    # over host_vars/ (the highest inventory level) and over play vars
    pb = load_playbook(PLAYBOOK)
    inv = load_inventory(SIM_INVENTORY)
    assert inv.hosts["gpu-a08"].vars["sim_faults"] == ["cuda_init_fails"]     # from its host_vars/ file
    key = next(iter(pb.play.vars))
    pb2, inv2 = apply_overrides(pb, inv, {"extra_vars": {"sim_faults": [], key: "from -e"}, "forks": 3})
    assert inv2.hosts["gpu-a08"].vars["sim_faults"] == [] and inv2.hosts["gpu-a01"].vars[key] == "from -e"
    assert pb2.play.vars[key] == "from -e" and pb2.play.forks == 3
    assert pb.play.vars[key] != "from -e"          # the loaded playbook itself is unchanged


def test_check_start_at_task_forks_and_verbosity(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["run", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--check", "--run-dir", str(run_dir)]) == 0
    cap = capsys.readouterr()
    assert "Plan:" in cap.out and "--check" in cap.err and not run_dir.exists()
    assert main(["run", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "--start-at-task", "cordon", "--yes",
                 "--run-dir", str(run_dir)]) == 2
    assert "k3rollout resume RUN_DIR" in capsys.readouterr().err and not run_dir.exists()
    assert main(["plan", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "-f", "0"]) == 2
    capsys.readouterr()
    assert main(["validate", str(PLAYBOOK), "-i", str(SIM_INVENTORY), "-vv", "-e", "x=1", "-f", "4"]) == 0
    err = capsys.readouterr().err
    assert "16 hosts" in err and "k3rollout's YAML reader" in err and '"forks": 4' in err


def test_failed_run_writes_an_ansible_retry_file_for_limit(tmp_path, capsys):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 4)}
    hosts["gpu-02"] = {"sim_faults": ["driver_install_fails"]}
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", serial=1)
    run_dir = tmp_path / "run"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "-e", "unused=1"]) == 1
    r = result(run_dir)
    assert r["status"] == "halted" and r["nodes"]["gpu-02"]["failed_stage"] == "driver_upgrade"
    retry = run_dir / "pb.retry"
    assert retry.read_text() == "gpu-02\n"
    capsys.readouterr()
    assert main(["plan", str(pb), "-i", str(inv), "--limit", f"@{retry}", "--list-hosts"]) == 0
    assert re.search(r"hosts \(1\):\n\s+gpu-02\n", capsys.readouterr().out)
    inputs = json.loads((run_dir / "inputs.json").read_text())
    assert inputs["overrides"] == {"extra_vars": {"unused": "1"}}


def test_completed_run_writes_no_retry_file(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}})
    run_dir = tmp_path / "run"
    pb = write_playbook(tmp_path / "pb.yml")          # node-level: single nodes hold no K3 replica
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert not list(run_dir.glob("*.retry"))


def test_extra_vars_win_in_the_run_and_resume_sees_them_again(tmp_path):
    from k3rollout.engine.session import Session

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["vllm_oom"]}})
    run_dir = tmp_path / "run"
    pb = write_playbook(tmp_path / "pb.yml")          # node-level: single nodes hold no K3 replica
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                 "-e", '{"sim_faults": []}', "-e", "marker=yes", "-f", "3"]) == 0
    r = result(run_dir)
    assert r["nodes"]["gpu-02"]["failed_stage"] is None          # -e over the host's own sim_faults
    playbook, inventory, journal, _ = Session(run_dir).reopen()
    journal.close()
    assert inventory.hosts["gpu-02"].vars["sim_faults"] == [] and inventory.hosts["gpu-01"].vars["marker"] == "yes"
    assert playbook.play.vars["marker"] == "yes" and playbook.play.forks == 3


def test_a_limited_run_resumes_with_the_same_hosts(tmp_path):
    from k3rollout.engine.session import Session

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}, "gpu-03": {}})
    retry = tmp_path / "pb.retry"
    retry.write_text("gpu-02\ngpu-03\n")
    run_dir = tmp_path / "run"
    pb = write_playbook(tmp_path / "pb.yml")          # node-level: single nodes hold no K3 replica
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "-l", f"@{retry}"]) == 0
    assert set(result(run_dir)["nodes"]) == {"gpu-02", "gpu-03"}
    retry.write_text("gpu-01\n")             # the limit file changes; the run's hosts do not
    playbook, inventory, journal, _ = Session(run_dir).reopen()
    journal.close()
    assert list(inventory.hosts) == ["gpu-02", "gpu-03"]
    assert main(["resume", str(run_dir)]) == 0      # same inputs: no "inputs changed" refusal
