"""The report templates' compiled code is kept between processes; a cache that is damaged
or cannot be written costs a compile, never a report."""

from __future__ import annotations

from pathlib import Path

import pytest
from jinja2 import DictLoader, Environment

from k3rollout.report import render

TEMPLATES = {"t": "{% for n in nodes %}{{ n }}:{{ n|upper }} {% endfor %}"}
WANT = "a:A b:B "


def env(cache: render._CompiledTemplates) -> Environment:
    return Environment(loader=DictLoader(TEMPLATES), bytecode_cache=cache)


def test_the_report_environments_use_the_cache():
    assert render._CACHE is not None
    assert render._HTML.bytecode_cache is render._CACHE and render._MD.bytecode_cache is render._CACHE


def test_a_second_process_loads_the_compiled_code(tmp_path, monkeypatch):
    cache = render._CompiledTemplates(str(tmp_path))
    assert env(cache).get_template("t").render(nodes=["a", "b"]) == WANT
    [entry] = list(tmp_path.iterdir())
    second = env(cache)
    monkeypatch.setattr(second, "compile", lambda *a, **k: pytest.fail("compiled again despite the cache"))
    assert second.get_template("t").render(nodes=["a", "b"]) == WANT
    assert entry.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_entry_is_compiled_again(tmp_path, damage):
    cache = render._CompiledTemplates(str(tmp_path))
    env(cache).get_template("t")
    [entry] = list(tmp_path.iterdir())
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[:len(data) // 2], "garbage": data[:60] + b"\x00\xff" * 40,
                       "empty": b""}[damage])
    assert env(cache).get_template("t").render(nodes=["a", "b"]) == WANT


def test_a_cache_that_cannot_be_written_or_read_only_costs_the_compile(tmp_path: Path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    cache = render._CompiledTemplates(str(not_a_folder))
    assert env(cache).get_template("t").render(nodes=["a", "b"]) == WANT
    assert env(cache).get_template("t").render(nodes=["a", "b"]) == WANT
