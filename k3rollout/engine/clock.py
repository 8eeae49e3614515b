"""Time, passed in: the engine asks a Clock, so tests can run a window without waiting."""

from __future__ import annotations

import time
from datetime import datetime, timezone


class Clock:
    def now(self) -> float:
        return time.time()

    def iso(self, t: float | None = None) -> str:
        return iso_utc(self.now() if t is None else t)


def iso_utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(text: str) -> float:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write e.g. 2026-12-03T04:00:00Z")
    return dt.timestamp()
