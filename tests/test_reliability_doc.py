"""RELIABILITY.md names the test behind each guarantee; every one of them must exist."""

import ast
import re

from support import ROOT


def test_every_test_named_in_reliability_md_exists():
    text = (ROOT / "RELIABILITY.md").read_text()
    named = set(re.findall(r"(tests/(?:\w+/)*test_\w+\.py)::(test_\w+)", text))
    assert len(named) >= 25
    missing = []
    for path, name in sorted(named):
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if name not in defined:
            missing.append(f"{path}::{name}")
    assert missing == []
