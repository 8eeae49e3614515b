"""No module of k3rollout (nor of its simulator, k3sim) touches another's private names.

A name with a leading underscore is its module's own: another module neither imports it
(``from k3rollout.engine.lock import _holder_text``) nor reaches it through the module
(``multinode._test(...)``, ``netd._RUNNING = ...``). What one module offers another is public
and documented there. ruff's SLF001 (pyproject.toml) holds the same for attributes of objects
(``api._left_alone(pod)``); this test covers what ruff cannot tell: imports, and modules
bound by an import."""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT

PACKAGES = ("k3rollout", "k3sim")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def reaches(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where ``source`` (the text of module ``module``) touches another k3rollout module's
    private names (or a k3sim module's): ``line: what``."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    modules: dict[str, str] = {}        # a local name bound to a k3rollout module -> that module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in PACKAGES:
                    modules[a.asname or top] = a.name if a.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                if private(a.name) and base != module:
                    found.append(f"{node.lineno}: from {base} import {a.name}")
                # a submodule imported by name (from k3rollout.stages import multinode)
                modules[a.asname or a.name] = f"{base}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name):
            target = modules.get(node.value.id)
            if target is not None and target != module:
                found.append(f"{node.lineno}: {node.value.id}.{node.attr} ({target})")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_module_imports_or_reaches_another_modules_private_names():
    problems = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        name = module_name(path)
        problems += [f"{path.relative_to(ROOT)}:{p}"
                     for p in reaches(path.read_text(), name, is_package=path.name == "__init__.py")]
    assert problems == [], "private names of other modules:\n" + "\n".join(problems)


def test_the_check_finds_each_kind_of_reach():
    source = "\n".join([
        "from k3rollout.engine.lock import _holder_text, live_holders",
        "from k3rollout.stages import multinode",
        "from . import netd",
        "import k3sim.repos as repos",
        "from k3rollout import __version__",
        "from k3rollout.engine.observe import _private_here_is_fine",
        "multinode._test(ctx, [], 'nccl')",
        "netd._RUNNING = None",
        "repos._vt('1.2')",
        "multinode.run(ctx)",
        "self._own(x)",
    ])
    found = reaches(source, "k3sim.gpu")
    assert found == [
        "1: from k3rollout.engine.lock import _holder_text",
        "6: from k3rollout.engine.observe import _private_here_is_fine",
        "7: multinode._test (k3rollout.stages.multinode)",
        "8: netd._RUNNING (k3sim.netd)",
        "9: repos._vt (k3sim.repos)",
    ]
    # a module's own private names are its own
    assert "6: from k3rollout.engine.observe import _private_here_is_fine" not in reaches(
        source, "k3rollout.engine.observe")
