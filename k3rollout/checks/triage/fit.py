"""Fit the per-family multipliers on labelled logs (used by the cross-validation test).

The signal weights in ``signals.py`` are set by hand, each with its reason. What a corpus can
teach is how far to trust a family relative to the others; this is a perceptron over one
multiplier per family, starting from 1.0 (the hand weights) and bounded to [0.5, 2.0] so that
no family is switched off or allowed to dominate. It is meant to be fitted on training folds
only and judged on the fold it did not see.
"""

from __future__ import annotations

from collections.abc import Iterable

from k3rollout.checks.triage import CATEGORIES, classify_hits, scan
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
