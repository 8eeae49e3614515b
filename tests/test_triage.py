"""Triage by DOMAIN.md's decision tree over real log text (samples in tests/data/logs)."""

import json

import pytest

from conftest import DATA
from k3rollout.checks.cuda_table import compat_verdict, driver_supports, image_cuda
from k3rollout.checks.triage import CATEGORIES, classify
from k3rollout.cli import main

LOGS = DATA / "logs"


def _table() -> list[tuple[str, str, str]]:
    """(file, category, source) rows of tests/data/logs/README.md."""
    rows = []
    for line in (LOGS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].endswith(".log"):
            rows.append((cells[0], cells[1], cells[4]))
    return rows


def test_samples_are_many_cited_and_cover_every_category():
    rows = _table()
    assert len(rows) >= 30
    assert {c for _, c, _ in rows} == set(CATEGORIES)
    assert sorted(f for f, _, _ in rows) == sorted(p.name for p in LOGS.glob("*.log"))
    for f, _, source in rows:
        assert source, f"{f} has no source"
    cited = [f for f, _, source in rows if "https://github.com/" in source]
    assert len(cited) >= 25


@pytest.mark.parametrize("name,category", [(f, c) for f, c, _ in _table()])
def test_triage_categories(name, category):
    t = classify((LOGS / name).read_text())
    assert t.category == category, (t.category, t.evidence)
    if category != "other":
        assert t.evidence and t.next_steps
        # the deciding lines are lines of the sample, never NCCL INFO noise
        text = (LOGS / name).read_text()
        for line in t.evidence:
            assert line in text
            assert "NCCL INFO" not in line


def test_live_facts_decide_before_any_log_is_read():
    t = classify((LOGS / "oom-with-nccl-info.log").read_text(), driver="575.57.08", image_cuda="13.0.1")
    assert t.category == "driver_incompatible"
    assert "575.57.08" in t.evidence[0] and "580" in t.evidence[0]


def test_cuda_table_uses_the_family_floor():
    assert not driver_supports("575.57.08", "13.0.1")
    assert driver_supports("580.65.06", "13.0.1")
    assert driver_supports("580.65.06", "13.2")          # minor-version compatibility
    assert driver_supports("575.57.08", "12.9.1")
    v = compat_verdict("580.65.06", "13.2")
    assert v["compatible"] and "595.45.04" in v["reason"]
    assert image_cuda(["PATH=/usr/bin", "CUDA_VERSION=13.0.1"]) == "13.0.1"
    assert image_cuda(["NVIDIA_REQUIRE_CUDA=cuda>=12.9 brand=tesla,driver>=535"]) == "12.9"


def test_triage_cli_json_contract(capsys):
    files = [str(LOGS / "r575-cu130-error35.log"), str(LOGS / "nccl-ib-failure.log")]
    assert main(["triage", *files, "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["file"] for x in lines] == files
    assert [x["category"] for x in lines] == ["driver_incompatible", "communication"]
    for x in lines:
        assert set(x) >= {"file", "category", "evidence", "next_steps"}
    assert main(["triage", str(LOGS / "missing.log")]) == 2
