"""Ansible's ``serial`` semantics, reproduced exactly.

Source: ansible-core ``PlaybookExecutor._get_serialized_batches`` and
``ansible.utils.helpers.pct_to_int``. A percentage is taken of *all* hosts of the play,
rounded down, but never below 1; a list walks its values and repeats the last one; 0 or a
negative value means "all remaining hosts in one batch".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def pct_to_int(value: int | str, num_items: int, min_value: int = 1) -> int:
    if isinstance(value, str) and value.strip().endswith("%"):
        pct = int(value.strip()[:-1])
        return int((pct / 100.0) * num_items) or min_value
    return int(value)


def serial_batches(hosts: Sequence[T], serial: Sequence[int | str] | int | str | None) -> list[list[T]]:
    remaining = list(hosts)
    total = len(remaining)
    items = [serial] if isinstance(serial, (int, str)) else list(serial or [])
    if not items:
        items = [0]
    batches: list[list[T]] = []
    cur = 0
    while remaining:
        size = pct_to_int(items[cur], total)
        if size <= 0:
            batches.append(remaining)
            break
        batches.append(remaining[:size])
        remaining = remaining[size:]
        cur = min(cur + 1, len(items) - 1)
    return batches
