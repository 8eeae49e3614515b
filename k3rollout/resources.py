"""Where the files k3rollout ships beside its code are: playbooks, the sim inventory, runbooks
and the docs/ pages the runbooks link to.

In a source checkout they are the top-level ``playbooks/``, ``inventories/``, ``runbooks/``
and ``docs/``. A wheel (``pip install .``) carries copies of them inside the package, under
``k3rollout/_shipped/`` (setup.py's build step puts them there), so an installed k3rollout
run from any folder finds the same files. The copy in the package wins when it exists.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SHIPPED_DIRS = ("playbooks", "inventories", "runbooks", "docs")


def shipped(*parts: str) -> Path:
    """Path of a shipped file or folder, e.g. ``shipped("runbooks", "rollback.md")``."""
    if not parts or parts[0] not in SHIPPED_DIRS:
        raise ValueError(f"not a shipped path: {'/'.join(parts)}")
    bundled = PACKAGE / "_shipped"
    base = bundled if bundled.is_dir() else PACKAGE.parent
    return base.joinpath(*parts)
