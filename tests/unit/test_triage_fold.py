"""Triage matches each signal's lower-case pattern against the folded line instead of the
pattern under re.I: the same matches at the same places, checked against re.I itself."""

from __future__ import annotations

import dataclasses
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from support import DATA

from k3rollout.checks import triage
from k3rollout.checks.triage.signals import FOLD, SIGNALS, fold, folded

LETTERS = "abcdefghijklmnopqrstuvwxyz"
OTHERS = "\u0130\u0131\u017f\u212a\u00e9\u00df\u0131\u03a3\u00b5"


def test_fold_is_what_re_ignorecase_takes_for_each_ascii_letter():
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    want = {}
    for ch in set(re.findall(f"[{LETTERS}]", every, re.I)):
        [letter] = [x for x in LETTERS if re.fullmatch(x, ch, re.I)]
        if ch != letter:
            want[ord(ch)] = ord(letter)
    assert FOLD == want


def test_folded_keeps_escapes_and_refuses_what_it_cannot_keep_exact():
    assert folded(r"NET/IB|\bQP\b.*(ERROR|Failed)|\S+ [\w.]*X") == r"net/ib|\bqp\b.*(error|failed)|\S+ [\w.]*x"
    for rx in (r"(?i)x", r"(?P<n>x)\1", r"\x41", "caf\u00e9"):
        try:
            folded(rx)
        except ValueError:
            continue
        raise AssertionError(f"folded accepted {rx!r}")


def test_every_pattern_is_printable_ascii():
    # a "\\b" written as "\b" in a plain string is a backspace: ASCII, so folded() keeps it,
    # and the word boundary silently never matches
    for s in SIGNALS:
        assert s.pattern.pattern.isascii() and s.pattern.pattern.isprintable(), (s.family, s.pattern.pattern)


def _same(line: str) -> None:
    low = fold(line)
    for s in SIGNALS:
        a, b = s.pattern.search(line), s.lower.search(low)
        assert (a and a.span()) == (b and b.span()), (s.family, line)


def _words() -> list[str]:
    """The literal words of the signals' patterns: what a generated line is made of, so
    the patterns match often and in part."""
    return sorted({w for s in SIGNALS for w in re.findall(r"[A-Za-z_]{2,}", s.pattern.pattern)})


WORDS = _words()


def _cased(word: str, flips: list[int]) -> str:
    subst = {"i": "\u0130\u0131", "s": "\u017f", "k": "\u212a"}
    out = []
    for ch, f in zip(word, flips + [0] * len(word), strict=False):
        if f == 1:
            ch = ch.swapcase()
        elif f == 2 and ch.lower() in subst:
            ch = subst[ch.lower()][0]
        elif f == 3 and ch.lower() == "i":
            ch = "\u0131"
        out.append(ch)
    return "".join(out)


PIECE = st.one_of(
    st.builds(_cased, st.sampled_from(WORDS), st.lists(st.integers(0, 3), max_size=12)),
    st.sampled_from([" ", " ", ": ", "/", ".", "(", ")", "[", "]", "'", "-", "_", "=", "0", "12", "\t"]),
    st.text(alphabet=LETTERS + LETTERS.upper() + OTHERS + " _.", max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECE, max_size=24))
def test_every_signal_matches_the_folded_line_where_it_matches_under_re_i(pieces):
    _same("".join(pieces))


def test_every_corpus_line_matches_the_same(tmp_path):
    n = 0
    for f in sorted((DATA / "logs").rglob("*.log")):
        for line in f.read_text(errors="replace").splitlines():
            _same(line.strip())
            _same(line.strip().upper())
            n += 1
    assert n > 500


def test_scan_finds_what_the_re_i_scan_finds_on_every_corpus_log(monkeypatch):
    texts = {str(f.relative_to(DATA)): f.read_text(errors="replace") for f in sorted((DATA / "logs").rglob("*.log"))}
    got = {name: triage.scan(text) for name, text in texts.items()}
    # the scan as it was before the fold: every signal's pattern under re.I on the line itself
    monkeypatch.setattr(triage, "SIGNALS", tuple(dataclasses.replace(s, lower=s.pattern) for s in SIGNALS))
    monkeypatch.setattr(triage, "fold", lambda line: line)
    for name, text in texts.items():
        assert got[name] == triage.scan(text), name
    assert sum(map(len, got.values())) > 150
