"""Find the controller-side programs k3rollout drives (``ansible-playbook``, ``ansible-inventory``).

A tool installed with k3rollout lives beside the interpreter that runs it (a venv's ``bin/``),
and that directory is often not on ``PATH``: ``.venv/bin/k3rollout`` run without activating
the venv, a systemd unit, cron. So the interpreter's own script directories are searched
first, then ``PATH``. What is found is an absolute path; nothing here runs it.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from k3rollout.errors import InputError


def _own_dirs() -> list[Path]:
    dirs = [Path(sys.executable).parent]          # not resolved: a venv's python is a symlink
    scripts = sysconfig.get_path("scripts")
    if scripts:
        dirs.append(Path(scripts))
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def find_tool(name: str) -> str | None:
    """The absolute path of ``name``: the interpreter's own bin directory first, then PATH."""
    for d in _own_dirs():
        p = d / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


def require_tool(name: str, why: str) -> str:
    """``find_tool`` or an input error (exit 2) that says where it looked and how to fix it."""
    found = find_tool(name)
    if found is None:
        where = ", ".join(str(d) for d in _own_dirs())
        raise InputError(f"`{name}` is needed on the controller ({why}) but was found neither beside the "
                         f"interpreter ({where}) nor on PATH. Install ansible-core into the environment that "
                         "runs k3rollout (`pip install ansible-core ansible-runner`); nothing was changed.")
    return found
