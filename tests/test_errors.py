"""The exception tree drawn in errors.py is the tree the code has: every K3RolloutError
subclass anywhere in the package is drawn, under its real parent, and nothing drawn is
missing or unused."""

from __future__ import annotations

import importlib
import pkgutil
import re

import k3rollout
from k3rollout import errors


def _all_modules():
    for m in pkgutil.walk_packages(k3rollout.__path__, "k3rollout."):
        if m.name.startswith("k3rollout._shipped") or m.name.endswith("__main__"):
            continue
        yield importlib.import_module(m.name)


def test_the_drawn_tree_is_the_real_one():
    real = {}
    for mod in _all_modules():
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, errors.K3RolloutError) and obj.__module__ == mod.__name__:
                real[obj.__name__] = obj.__mro__[1].__name__
    drawn, stack = {}, []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^([\s│]*)(?:[├└]── )?([A-Z]\w+)\s{2,}", line)   # │: a parent's later siblings
        if not m or not line.startswith("    "):
            continue
        depth = (len(m.group(1)) - 4) // 4 + (1 if "──" in line else 0)
        stack = stack[:depth] + [m.group(2)]
        drawn[m.group(2)] = stack[-2] if depth else "Exception"
    assert len(drawn) == 15 and drawn == real


def test_every_class_in_the_tree_is_raised_somewhere():
    src = "\n".join(open(m.__file__, encoding="utf-8").read() for m in _all_modules() if m.__file__)
    for name in ("InputError", "LockHeld", "RunNeverStarted", "JournalWriteError", "KubernetesError",
                 "HostUnreachable", "ConnectionLost", "CommandTimeout", "HostKeyError", "AuthError"):
        assert re.search(rf"raise {name}\(|= {name}\(|return {name}\(", src), name
