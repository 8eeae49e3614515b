"""Hostile input: any playbook or inventory is either a valid model or one clear error
naming the file (exit 2), never a traceback; host data is never executed or templated."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import PLAYBOOK, journal, write_inventory, write_playbook

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model import load_inventory, load_playbook

KEYS = ["name", "hosts", "serial", "max_fail_percentage", "min_serving", "forks", "vars", "stages", "stage",
        "estimate", "pre", "post", "rollback", "with", "that", "fail_msg", "action", "install", "restore", "apt",
        "all", "children", "gpu_nodes", "gpu-[01:03]", "sim_faults", "sim_gpu_count", "ansible_port", "x-y"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["25%", "baseline", "cordon", "driver_upgrade", "uncordon", "facts.gpu_count == 8", "{{ x }}",
                     "{% for %}", "1h30m", "gpu-[09:01]", "restore_driver", "nccl_broken", "a\nb", "$(id)"]))
TREES = st.recursive(SCALARS, lambda ch: st.one_of(st.lists(ch, max_size=4),
                                                   st.dictionaries(st.sampled_from(KEYS), ch, max_size=6)),
                     max_leaves=30)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(loader, text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "input.yml"
        path.write_text(text)
        try:
            loader(path)
        except InputError as exc:
            assert str(path) in str(exc)


@FUZZ
@given(TREES)
def test_playbook_loader_returns_a_model_or_one_clear_error(tree):
    _check(load_playbook, yaml.safe_dump([tree] if not isinstance(tree, list) else tree))


@FUZZ
@given(TREES)
def test_inventory_loader_returns_a_model_or_one_clear_error(tree):
    _check(load_inventory, yaml.safe_dump({"all": tree} if not isinstance(tree, dict) else tree))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes_the_playbook_loader(text):
    _check(load_playbook, text)


# Text that is no YAML inventory is handed to the real ansible-inventory (its other plugins
# may parse it): one process an example, about 0.6 CPU-s, so this half is end to end and takes
# 50 examples (the loader's own reading of YAML inventories is fuzzed with 150 above).
ANSIBLE_FUZZ = settings(FUZZ, max_examples=50)


@pytest.mark.e2e
@pytest.mark.long
@ANSIBLE_FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes_the_inventory_loader(text):
    _check(load_inventory, text)


@pytest.mark.parametrize("name", ["gpu;reboot", "gpu$(id)", "gpu 01", "`id`", "gpu\n01"])
def test_hostile_host_names_are_rejected_with_their_line(tmp_path, name, capsys):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: None}}}))
    assert main(["validate", str(PLAYBOOK), "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert f"{inv}:" in err and "invalid host name" in err


@pytest.mark.e2e          # a whole rollout on the simulated cluster
def test_hostile_vars_reach_commands_as_single_literal_arguments(tmp_path):
    evil = "x; touch /tmp/k3-pwned $(id) {{ 7*7 }}\nsecond-line"
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"evil": evil}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    data = yaml.safe_load(pb.read_text())
    up = next(s for s in data[0]["stages"] if s["stage"] == "driver_upgrade")
    up["with"]["install"]["apt"][0] = ["apt-get", "-o", "Debug::Note={{ evil }}", "update"]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "run"
    main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    argvs = [r["argv"] for r in journal(run_dir) if r["type"] == "step_started" and r["key"].endswith("vendor-step-1")]
    assert argvs == [["apt-get", "-o", f"Debug::Note={evil}", "update"]]
    assert not Path("/tmp/k3-pwned").exists()


def test_playbook_cannot_read_files_or_environment(tmp_path):
    from k3rollout.model.assertions import evaluate

    for expr in ("lookup('env', 'HOME')", "lookup('file', '/etc/passwd')", "range.__globals__",
                 "cycler.__init__.__globals__.os.environ", "self._TemplateReference__context"):
        assert not evaluate(expr, {}).passed, expr
