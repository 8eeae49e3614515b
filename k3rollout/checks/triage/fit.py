"""Fit on labelled logs: the per-family multipliers, and the lexical back-off.

The signal weights in ``signals.py`` are set by hand, each with its reason. What a corpus can
teach is how far to trust a family relative to the others; this is a perceptron over one
multiplier per family, starting from 1.0 (the hand weights) and bounded to [0.5, 2.0] so that
no family is switched off or allowed to dominate. It is meant to be fitted on training folds
only and judged on the fold it did not see.

``fit_backoff`` fits the back-off (``backoff.py``) on the same kind of (log, category) pairs;
``scripts/fit_triage_backoff.py`` runs it on the training folders to write the shipped
``backoff.json``, and the cross-validation test runs it on each fold's training folds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from k3rollout.checks.triage import CATEGORIES, classify_hits, failure_lines, matched_lines, scan
from k3rollout.checks.triage.backoff import Backoff, features, train
from k3rollout.checks.triage.signals import FAMILIES

STEP = 0.1
BOUNDS = (0.5, 2.0)
EPOCHS = 10


def fit_family_weights(samples: Iterable[tuple[str, str]]) -> dict[str, float]:
    """Multipliers per family from (log text, true category) pairs."""
    data = [(scan(text), cat) for text, cat in samples]
    for _, cat in data:
        if cat not in CATEGORIES:
            raise ValueError(f"unknown category {cat!r}")
    w = {f: 1.0 for f in FAMILIES}
    lo, hi = BOUNDS
    for _ in range(EPOCHS):
        wrong = 0
        for hits, cat in data:
            got = classify_hits(hits, weights=w).category
            if got == cat:
                continue
            wrong += 1
            seen = {h.family for h in hits if h.line is not None}
            for f in seen:
                if FAMILIES[f] == cat:
                    w[f] = min(hi, w[f] + STEP)
                elif FAMILIES[f] == got or (got == "other" and FAMILIES[f] != cat):
                    w[f] = max(lo, w[f] - STEP)
        if not wrong:
            break
    return {f: round(v, 2) for f, v in w.items()}


# The back-off's constants, chosen by leave-one-folder-out cross-validation on the training
# folders only (scripts/fit_triage_backoff.py --cv prints the tables they were read from):
# smoothing, the fewest training logs a feature must occur in, word pairs or words alone, the
# class prior, the margin (ln of the odds of its best class over the next) below which it
# abstains, and the share of its category answers that were right under that cross-validation.
BACKOFF = {"alpha": 0.1, "min_df": 1, "bigrams": False, "prior": "empirical", "margin": 5.0}
BACKOFF_PRECISION = 0.7


def backoff_features(text: str, bigrams: bool, unmatched: bool = False) -> set[str]:
    """The features of a log's failure lines: all of them (what the back-off learns from), or
    with `unmatched` those of the lines no signal matched (what it reads when it is asked)."""
    lines = failure_lines(text, matched_lines(scan(text)) if unmatched else frozenset())
    return features((ln for _, ln in lines), bigrams)


def fit_backoff(samples: Iterable[tuple[str, str]], constants: Mapping[str, Any] | None = None,
                precision: float | None = None, meta: Mapping[str, Any] | None = None) -> Backoff:
    """The back-off fitted on (log text, true category) pairs, with `constants` (default
    ``BACKOFF``) and the cross-validated `precision` (default ``BACKOFF_PRECISION``)."""
    c = {**BACKOFF, **(constants or {})}
    docs = [(backoff_features(text, bool(c["bigrams"])), cat) for text, cat in samples]
    return train(docs, CATEGORIES, alpha=float(c["alpha"]), min_df=int(c["min_df"]), bigrams=bool(c["bigrams"]),
                 prior=str(c["prior"]), margin=float(c["margin"]),
                 meta={"precision": BACKOFF_PRECISION if precision is None else precision, **(meta or {})})
