"""Triage matches each signal's lower-case pattern against the folded line instead of the
pattern under re.I: the same matches at the same places, checked against re.I itself. Before the
fold, typographic quotes are read as ASCII ones, a step of its own that the fold's guarantee does
not cover."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import DATA

from k3rollout.checks import triage
from k3rollout.checks.triage.signals import FOLD, QUOTES, SIGNALS, fold, folded, plain_quotes

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


def test_plain_quotes_reads_typographic_quotes_as_ascii_and_is_no_part_of_fold():
    assert plain_quotes("\u201cx\u201d \u201ey\u201c \u2018z\u2019 \u201aw\u2018") == "\"x\" \"y\" 'z' 'w'"
    assert set(QUOTES) == {0x201C, 0x201D, 0x201E, 0x2018, 0x2019, 0x201A}
    # none of them is a letter to re.I, so fold leaves them and the fold's guarantee stays as it was
    assert not set(QUOTES) & set(FOLD)
    assert all(fold(chr(c)) == chr(c) for c in QUOTES)
    line = "could not select device driver \u201c\u201d with capabilities: [[gpu]]"
    assert len(plain_quotes(line)) == len(line)
    # a line without those quotes is the same line
    for line in ('could not select device driver "" with capabilities: [[gpu]]',
                 "unknown model architecture: 'qwen3'", "CUDA out of memory. Tried to allocate 20.00 MiB"):
        assert plain_quotes(line) == line


QUOTED = [
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     "container_runtime"),
    ("llama_model_load: error loading model architecture: unknown model architecture: 'qwen3'", "other"),
    ('E0101 00:00:00.000000 1 kuberuntime_manager.go:1166] err="runtimeclass.node.k8s.io "nvidia" not found"',
     "container_runtime"),
]


def _typographic(line: str) -> str:
    """``line`` with its ASCII quotes as a word processor writes them: opening and closing."""
    out, opened = [], {'"': False, "'": False}
    for ch in line:
        if ch in opened:
            out.append({'"': "\u201d", "'": "\u2019"}[ch] if opened[ch] else {'"': "\u201c", "'": "\u2018"}[ch])
            opened[ch] = not opened[ch]
        else:
            out.append(ch)
    return "".join(out)


@pytest.mark.parametrize("line,category", QUOTED)
def test_a_quoted_text_scores_the_same_in_typographic_quotes_and_is_shown_as_written(line, category):
    curly = _typographic(line)
    assert curly != line and plain_quotes(curly) == line
    plain, typo = triage.classify(line + "\n", backoff=False), triage.classify(curly + "\n", backoff=False)
    assert plain.category == typo.category == category, (plain.scores, typo.scores)
    assert plain.scores == typo.scores
    # the evidence is the line as the log has it, not the line as it was read
    assert typo.evidence == [curly] and all(h.line == curly for h in typo.hits if h.line)


def test_lines_without_typographic_quotes_scan_as_before(monkeypatch):
    texts = [line + "\n" for line, _ in QUOTED] + [
        "lxc c1 20240101000000.000 ERROR    start - start.c:lxc_init:865 - Failed to run mount hooks\n",
        "RuntimeError: CUDA error: out of memory\nnvidia-container-cli: initialization error: load library failed\n"]
    got = [triage.scan(text) for text in texts]
    monkeypatch.setattr(triage, "plain_quotes", lambda line: line)
    assert got == [triage.scan(text) for text in texts]
    assert all(got)
