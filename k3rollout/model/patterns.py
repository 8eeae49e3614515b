"""Ansible's host patterns, as a play's ``hosts:`` and ``--limit`` use them.

The grammar and its evaluation follow ansible-core's ``InventoryManager`` (docs: "Patterns:
targeting hosts and groups"):

- ``a,b`` or ``a:b`` is a union; ``&g`` intersects; ``!g`` excludes. Unions are taken first,
  then intersections, then exclusions, whatever the order written; a pattern of only
  ``&``/``!`` parts starts from ``all``.
- A term names a group (all its hosts) or a host; ``*``, ``?`` and ``[...]`` are shell
  wildcards, matched against group names and host names; ``~RE`` is a regular expression
  matched at the start of group and host names.
- ``term[0]``, ``term[-1]``, ``term[1:3]`` (inclusive) take hosts by position.
- In ``--limit``, ``@FILE`` reads one pattern per line (a retry file).

The tests compare every form with ``ansible-playbook --list-hosts`` on the same inventory.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from k3rollout.errors import InputError


class Inventory(Protocol):
    """What a pattern is matched against (model/inventory.py's ``Inventory`` is one),
    declared here so this module does not import the inventory that imports it."""

    @property
    def hosts(self) -> Mapping[str, object]: ...

    @property
    def groups(self) -> Mapping[str, object]: ...

    def group_hosts(self, name: str) -> list[str]: ...

_COLON_SPLIT = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]+)?)\]$")


def split_pattern(pattern: str) -> list[str]:
    """Ansible's ``split_host_pattern``: commas split; without one, colons outside
    brackets split (an IPv6 address stays whole)."""
    pattern = pattern.strip()
    if "," in pattern:
        parts = pattern.split(",")
    else:
        try:
            ipaddress.IPv6Address(pattern)
            parts = [pattern]
        except ValueError:
            parts = _COLON_SPLIT.findall(pattern) if ":" in pattern else [pattern]
    return [p.strip() for p in parts if p.strip()]


def order_patterns(parts: list[str]) -> list[str]:
    regular = [p for p in parts if p[0] not in "!&"]
    inter = [p for p in parts if p[0] == "&"]
    exclude = [p for p in parts if p[0] == "!"]
    return (regular or ["all"]) + inter + exclude


def _compile(term: str) -> re.Pattern[str]:
    try:
        return re.compile(term[1:] if term.startswith("~") else fnmatch.translate(term))
    except re.error as exc:
        raise InputError(f"invalid host pattern {term!r}: {exc}") from None


class _Matcher:
    def __init__(self, inv: Inventory):
        self.inv = inv
        self.cache: dict[str, list[str]] = {}

    def enumerate(self, term: str) -> list[str]:
        rx = _compile(term)
        out: list[str] = []
        groups = [g for g in self.inv.groups if rx.match(g)]
        for g in groups:
            out += self.inv.group_hosts(g)
        if not groups or term[0] == "~" or any(c in term for c in ".?*["):
            out += [h for h in self.inv.hosts if rx.match(h)]
        return out

    def one(self, pattern: str) -> list[str]:
        if pattern[0] in "&!":
            pattern = pattern[1:]
        if pattern in self.cache:
            return self.cache[pattern]
        sub = None
        expr = pattern
        if pattern[0] != "~":
            m = _SUBSCRIPT.match(pattern)
            if m:
                expr, idx, start, _sep, end = m.groups()
                sub = (int(idx), None) if idx else (int(start), int(end) if end else -1)
        hosts = self.enumerate(expr)
        if sub and hosts:
            start_i, end_i = sub
            try:
                if not end_i:               # [n], and (as in Ansible) [n:0]
                    hosts = [hosts[start_i]]
                else:
                    if end_i == -1:
                        end_i = len(hosts) - 1
                    hosts = hosts[start_i:end_i + 1]
            except IndexError:
                raise InputError(f"no hosts match the subscripted pattern {pattern!r}") from None
        self.cache[pattern] = hosts
        return hosts

    def evaluate(self, parts: list[str]) -> list[str]:
        hosts: list[str] = []
        for p in order_patterns(parts):
            if p in self.inv.hosts:
                hosts.append(p)
                continue
            that = self.one(p)
            if p[0] == "!":
                drop = set(that)
                hosts = [h for h in hosts if h not in drop]
            elif p[0] == "&":
                keep = set(that)
                hosts = [h for h in hosts if h in keep]
            else:
                have = set(hosts)
                hosts += [h for h in that if h not in have]
        return hosts


def limit_parts(limit: str) -> list[str]:
    """``--limit``'s parts, ``@FILE`` replaced by its lines (Ansible's ``subset``)."""
    out: list[str] = []
    for part in split_pattern(limit):
        if part[0] == "@":
            f = Path(part[1:])
            if not f.exists():
                raise InputError("limit file not found", path=str(f))
            if not f.is_file():
                raise InputError("a limit starting with '@' must name a file", path=str(f))
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"cannot read the limit file ({exc})", path=str(f)) from None
            out += [ln.strip() for ln in text.split("\n") if ln.strip()]
        else:
            out.append(part)
    return out


def select(inv: Inventory, pattern: str, limit: str | None = None) -> list[str]:
    """Ansible's ``InventoryManager.get_hosts(pattern)`` with ``subset(limit)`` applied."""
    parts = split_pattern(pattern)
    if not parts:
        raise InputError(f"empty host pattern {pattern!r}")
    m = _Matcher(inv)
    hosts = m.evaluate(parts)
    if limit is not None:
        lparts = limit_parts(limit)
        allowed = set(m.evaluate(lparts)) if lparts else set()
        hosts = [h for h in hosts if h in allowed]
    return list(dict.fromkeys(hosts))
