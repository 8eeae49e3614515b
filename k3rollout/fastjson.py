"""JSON on the hot paths (journal records, simulated host state, gate requests), via orjson.

orjson is several times faster than the standard library here, which matters at a
thousand nodes: every command and request is a journal record or two. Output is compact,
UTF-8 JSON. Anything orjson refuses (an integer over 64 bits, a lone surrogate, a key
that is not a string or number) falls back to the standard library, so no value that
used to serialise is lost; ``default=str`` keeps unknown objects readable, as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_OPTS = orjson.OPT_NON_STR_KEYS


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj, default=str, option=_OPTS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(obj, default=str, separators=(",", ":")).encode("utf-8")


def dumps_line(obj: Any) -> bytes:
    """One JSONL line (no newline inside: strings are escaped)."""
    try:
        return orjson.dumps(obj, default=str, option=_OPTS | orjson.OPT_APPEND_NEWLINE)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(obj, default=str, separators=(",", ":")) + "\n").encode("utf-8")


def dumps_str(obj: Any) -> str:
    return dumps(obj).decode("utf-8")


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ValueError (orjson's error is one) on bad input. NaN and
    Infinity, which orjson rejects, are still read through the standard library."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps_pretty(obj: Any, indent: int = 2) -> str:
    """Indented JSON, as ``json.dumps(obj, indent=indent, default=str)`` lays it out (the
    standard library's indented encoder is pure Python: milliseconds per evidence file).
    JSON strings hold no raw newline, so a line's leading spaces are only indentation."""
    try:
        out = orjson.dumps(obj, default=str, option=_OPTS | orjson.OPT_INDENT_2).decode("utf-8")
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(obj, indent=indent, default=str)
    if indent != 2:
        out = _LEAD.sub(lambda m: " " * (len(m.group(0)) // 2 * indent), out)
    return out


_LEAD = re.compile(r"(?m)^ +")
