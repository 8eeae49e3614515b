"""Durations as people write them in a change plan: ``90s``, ``15m``, ``2h``, ``1h30m``."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(h|m|s)")


def parse_duration(value: object) -> float:
    """Seconds from an int/float (seconds) or a string like ``1h30m``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    text = value.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not text or not re.fullmatch(r"(\d+(\.\d+)?(h|m|s))+", text):
        raise ValueError(f"not a duration: {value!r} (use e.g. 90s, 15m, 2h, 1h30m)")
    return float(sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in _PART.findall(text)))


def format_duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{sec:02d}s" if sec else f"{m}m"
    return f"{sec}s"
