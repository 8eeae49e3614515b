"""Every parser against real command output, one data case per file.

``tests/unit/parsers/<parser>/<case>.json`` (the layout of pyinfra's
``tests/facts/<Fact>/<case>.json``) holds the ``command`` k3rollout runs, its real
``output`` (``source`` says where it was taken from), and either the ``expected`` parse
or the ``error`` (a substring of the ``ParseError`` message) the parser must raise.
A new case is a new file; a new parser needs one line in ``PARSERS`` and a directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3rollout.checks import parsers as p
from k3rollout.stages.driver_node import parse_repoquery

CASES = Path(__file__).resolve().parent / "parsers"

# directory name -> the function that turns the command's stdout into the fact, exactly
# as the stage composes it (JSON outputs go through parse_json first, as the stages do)
PARSERS = {
    "gpu_query": p.parse_gpu_query,
    "gpu_facts": lambda out: p.gpu_facts(p.parse_gpu_query(out)),
    "smi_table": p.parse_smi_table,
    "proc_version": p.parse_proc_version,
    "packages": p.parse_packages,
    "repoquery": parse_repoquery,
    "scontrol_node_state": p.scontrol_node_state,
    "kubectl_unschedulable": p.kubectl_unschedulable,
    "docker_info_facts": lambda out: p.docker_info_facts(p.parse_json(out, "docker info")),
    "image_facts": lambda out: p.image_facts(p.parse_json(out, "docker image inspect")),
    "apt_madison": p.parse_apt_madison,
    "apt_policy": p.parse_apt_policy,
    "apt_showhold": p.parse_apt_showhold,
    "dnf_list": p.parse_dnf_list,
    "dnf_module_list": p.parse_dnf_module_list,
    "mokutil_sb_state": p.parse_mokutil_sb_state,
    "nvidia_params": p.parse_nvidia_params,
    "modprobe_d": p.parse_modprobe_d,
    "nvidia_options_files": p.nvidia_options_files,
    "nccl_tests": p.parse_nccl_tests,
    "vllm_metrics": p.parse_vllm_metrics,         # the reply to GET /metrics from the node's server
}


def _cases() -> list:
    out = []
    for f in sorted(CASES.glob("*/*.json")):
        out.append(pytest.param(f.parent.name, f, id=f"{f.parent.name}/{f.stem}"))
    return out


def test_every_parser_has_cases_and_every_case_a_parser():
    dirs = {d.name for d in CASES.iterdir() if d.is_dir()}
    assert dirs == set(PARSERS), f"case directories without a parser: {sorted(dirs - set(PARSERS))}; " \
                                 f"parsers without cases: {sorted(set(PARSERS) - dirs)}"
    for d in dirs:
        assert list((CASES / d).glob("*.json")), f"{d}: no cases"


@pytest.mark.parametrize("parser,path", _cases())
def test_parser_case(parser: str, path: Path):
    case = json.loads(path.read_text(encoding="utf-8"))
    assert set(case) in ({"command", "source", "output", "expected"}, {"command", "source", "output", "error"}), \
        f"{path}: keys {sorted(case)}"
    assert isinstance(case["command"], list) and all(isinstance(a, str) for a in case["command"]), path
    assert case["source"].strip(), f"{path}: no source"
    parse = PARSERS[parser]
    if "error" in case:
        with pytest.raises(p.ParseError) as err:
            parse(case["output"])
        assert case["error"] in str(err.value)
    else:
        got = parse(case["output"])
        assert got == case["expected"], f"{path}: parsed\n{json.dumps(got, indent=1)}"


def test_commands_in_cases_are_the_ones_k3rollout_sends():
    """A case's command is the argv the stage really runs, so a changed command and a
    stale sample cannot pass together."""
    sent = {"gpu_query": p.GPU_QUERY_ARGV, "gpu_facts": p.GPU_QUERY_ARGV}
    for parser, argv in sent.items():
        for f in (CASES / parser).glob("*.json"):
            assert json.loads(f.read_text())["command"] == argv, f
    for f in (CASES / "packages").glob("*.json"):
        cmd = json.loads(f.read_text())["command"]
        assert cmd in (p.DPKG_ARGV, p.RPM_ARGV), f
