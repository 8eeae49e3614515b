"""The journal's fast whole-file parse agrees with the careful line-by-line one, and
falls back to it whenever the file is not perfectly well formed."""

from __future__ import annotations

import json

import pytest

from k3rollout.engine import journal as jr
from k3rollout.errors import InputError


def _write(tmp_path, lines: list[str]) -> object:
    p = tmp_path / "journal.jsonl"
    p.write_text("".join(lines))
    return p


def _recs(n: int) -> list[str]:
    return [json.dumps({"seq": i, "ts": "t", "type": "x", "v": "a\nb" if i == 2 else i}) + "\n" for i in range(1, n + 1)]


def test_fast_and_careful_parse_agree(tmp_path, monkeypatch):
    p = _write(tmp_path, _recs(50))
    fast = jr._parse(p)
    monkeypatch.setattr(jr, "_fast", lambda raw: None)
    assert jr._parse(p) == fast and len(fast[0]) == 50 and fast[2] is None


def test_torn_tail_and_damage_are_still_found(tmp_path):
    lines = _recs(5)
    torn = _write(tmp_path, lines[:4] + [lines[4][:10]])
    recs, good, tail = jr._parse(torn)
    assert len(recs) == 4 and tail == lines[4][:10].encode()
    damaged = _write(tmp_path, lines[:2] + ["{not json\n"] + lines[3:])
    with pytest.raises(InputError) as e:
        jr._parse(damaged)
    assert e.value.line == 3
    two_on_a_line = _write(tmp_path, [lines[0], lines[1].rstrip("\n") + lines[2]] + lines[3:])
    with pytest.raises(InputError):
        jr._parse(two_on_a_line)
    gap = _write(tmp_path, lines[:2] + lines[3:])
    with pytest.raises(InputError, match="jumps from 2 to 4"):
        jr._parse(gap)
