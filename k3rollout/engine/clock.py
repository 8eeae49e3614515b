"""Time, passed in: the engine asks a Clock, so tests can run a window without waiting."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone


class Clock:
    def now(self) -> float:
        return time.time()

    def iso(self, t: float | None = None) -> str:
        return iso_utc(self.now() if t is None else t)


_last_second: tuple[int, str] = (-1, "")


def iso_utc(t: float) -> str:
    """``datetime.fromtimestamp(t, utc).isoformat(timespec="milliseconds")``, the same
    string, without building a datetime for every journal record (the whole-second part
    is reused while the second lasts)."""
    global _last_second
    sec = math.floor(t)
    us = round((t - sec) * 1_000_000)
    if us >= 1_000_000:
        sec, us = sec + 1, us - 1_000_000
    last = _last_second
    if last[0] == sec:
        head = last[1]
    else:
        head = datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (sec, head)
    return f"{head}.{us // 1000:03d}+00:00"


def parse_iso(text: str) -> float:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write e.g. 2026-12-03T04:00:00Z")
    return dt.timestamp()
