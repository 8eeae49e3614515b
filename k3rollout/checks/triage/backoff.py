"""The lexical back-off: a naive Bayes model over the words of a log's failure lines.

The signal table knows the tools' own messages; a log whose decisive line none of them knows
scores below ``MIN_SCORE`` and would be answered ``other``. Only then does triage ask this
model, which has learned from the labelled corpus which words go with which category ("nvml",
"container", "runtime" with ``container_runtime``, "connection timed out" with
``communication``, "hub", "token", "template" with ``other``) and so reads wording no signal
was written for. It never overrides a signal's decision or the live fact that decides tree
step 1 (``classify_hits`` only asks it when neither decided), and it can answer ``other``
itself: ``other`` is one of its classes, and it abstains when its best class is not ahead of
the next by ``margin`` (natural log of the odds) or when no word of the log is known to it.

What it reads: the lines ``failure_lines`` (in ``triage/__init__.py``) picks, lower-cased, with
URLs, IP addresses, hex numbers and paths replaced by a placeholder word (a path keeps its last
component: ``libnvidia-ml.so.1``, ``nvidia-uvm``), digits by ``0``, camelCase and snake_case
split into words; the features are the set of words (and, if fitted so, adjacent pairs) of the
lines, each counted once per log. The model is multinomial naive Bayes over those binary counts
with add-``alpha`` smoothing. It is stored as integer counts (``backoff.json``), so a fit is
reproducible bit for bit; ``scripts/fit_triage_backoff.py`` writes it from the training folders
and chooses its constants by cross-validation (docs/domain.md, "The lexical back-off").
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

_URL = re.compile(r"\b(?:https?|s3|gs|file|hf)://\S+", re.I)
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\](?::\d+)?")
# 0x-prefixed numbers, and runs of 8+ hex digits with at least one digit and one letter (ids,
# digests, UUIDs, GPU-xxxxxxxx bus ids)
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F-]*\d)(?=[0-9a-fA-F-]*[a-fA-F])[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.@+~-]*[/\\])+([\w.@+-]+)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[a-z][a-z0-9]*")
_DIGITS = re.compile(r"\d+")
STOP = frozenset("a an and are as at be by for from in is it of on or the this to was were with".split())

PACKAGE_FILE = "backoff.json"


def normalise(line: str) -> str:
    """``line`` with URLs, addresses, hex numbers and paths replaced by placeholder words, words
    split at camelCase and underscores, lower-cased, digits as ``0``."""
    s = _URL.sub(" url ", line)
    s = _ADDRESS.sub(" address ", s)
    s = _HEX.sub(" hex ", s)
    s = _PATH.sub(lambda m: " path " + m.group(1) + " ", s)
    s = _CAMEL.sub(" ", s)
    s = s.lower().replace("_", " ")
    return _DIGITS.sub("0", s)


def tokens(line: str) -> list[str]:
    """The words of a line: runs of letters and digits that start with a letter, at least two
    characters long, without a few function words."""
    return [w for w in _WORD.findall(normalise(line)) if len(w) > 1 and w not in STOP]


def line_features(line: str, bigrams: bool) -> set[str]:
    ws = tokens(line)
    out = set(ws)
    if bigrams:
        out.update(f"{a} {b}" for a, b in zip(ws, ws[1:], strict=False))
    return out


def features(lines: Iterable[str], bigrams: bool) -> set[str]:
    """The features of a log: every word (and adjacent pair, with ``bigrams``) of its lines, once."""
    out: set[str] = set()
    for line in lines:
        out |= line_features(line, bigrams)
    return out


@dataclass(frozen=True)
class Guess:
    """What the back-off says of one log."""
    category: str                            # its best class, or "other" where it abstains
    abstained: bool
    best: str                                # its best class, whether or not it abstained
    runner_up: str
    probabilities: dict[str, float]
    margin: float                            # ln(P(best) / P(runner_up))
    known: int                               # features of the log that the model knows


@dataclass(frozen=True)
class Backoff:
    """A fitted model: per-class log priors and per-feature log-likelihoods, from counts."""
    classes: tuple[str, ...]
    counts: Mapping[str, tuple[int, ...]]    # feature -> logs of each class that contain it
    docs: tuple[int, ...]                    # training logs per class
    alpha: float
    bigrams: bool
    prior: str                               # "uniform" or "empirical"
    margin: float
    meta: Mapping[str, Any] = field(default_factory=dict)
    # log P(feature | class) with add-alpha smoothing, from the counts
    loglik: Mapping[str, tuple[float, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        k = len(self.classes)
        total = [sum(c[i] for c in self.counts.values()) for i in range(k)]
        v = len(self.counts)
        denom = [math.log(total[i] + self.alpha * v) for i in range(k)]
        object.__setattr__(self, "loglik", {f: tuple(math.log(c[i] + self.alpha) - denom[i] for i in range(k))
                                            for f, c in self.counts.items()})

    def log_prior(self) -> tuple[float, ...]:
        if self.prior == "uniform":
            return tuple(-math.log(len(self.classes)) for _ in self.classes)
        # the share of training logs of each class, add-one smoothed (a class no log had is
        # unlikely, not impossible)
        n = sum(self.docs) + len(self.docs)
        return tuple(math.log((d + 1) / n) for d in self.docs)

    def guess(self, lines: Iterable[str]) -> Guess | None:
        """The model's answer for a log's failure lines, or None when none of their features
        is known (nothing to go on)."""
        return self.guess_features(features(lines, self.bigrams))

    def guess_features(self, feats: Iterable[str]) -> Guess | None:
        """``guess`` on features already extracted."""
        known = sorted(f for f in set(feats) if f in self.loglik)
        if not known:
            return None
        score = [p + sum(self.loglik[f][i] for f in known) for i, p in enumerate(self.log_prior())]
        top = max(score)
        exp = [math.exp(s - top) for s in score]
        z = sum(exp)
        order = sorted(range(len(self.classes)), key=lambda i: (-score[i], i))
        best, second = order[0], order[1]
        margin = score[best] - score[second]
        abstain = margin < self.margin
        return Guess("other" if abstain else self.classes[best], abstain, self.classes[best], self.classes[second],
                     {c: e / z for c, e in zip(self.classes, exp, strict=True)}, margin, len(known))

    def weigh(self, feats: Iterable[str], for_class: str, against: str) -> float:
        """The log-odds the known features among `feats` give `for_class` over `against`."""
        i, j = self.classes.index(for_class), self.classes.index(against)
        return sum(self.loglik[f][i] - self.loglik[f][j] for f in set(feats) if f in self.loglik)

    def deciding_lines(self, lines: Iterable[tuple[int, str]], for_class: str, against: str,
                       n: int = 3) -> list[tuple[int, str, float]]:
        """The `n` lines ((line number, text) pairs) whose words weigh most for `for_class` over
        `against`, strongest first, with that weight; lines that weigh against it are left out."""
        weighed = [(no, line, round(self.weigh(line_features(line, self.bigrams), for_class, against), 2))
                   for no, line in lines]
        return sorted((t for t in weighed if t[2] > 0), key=lambda t: (-t[2], t[0]))[:n]

    def deciding_words(self, lines: Iterable[str], for_class: str, against: str, n: int = 5) -> list[str]:
        """The `n` known features of `lines` that weigh most for `for_class` over `against`."""
        i, j = self.classes.index(for_class), self.classes.index(against)
        w = {f: self.loglik[f][i] - self.loglik[f][j] for f in features(lines, self.bigrams) if f in self.loglik}
        return [f for f in sorted(w, key=lambda f: (-w[f], f)) if w[f] > 0][:n]

    def to_json(self) -> str:
        """The model as the package stores it: integer counts, sorted, one feature a line."""
        head = {"about": self.meta.get("about", ""), "classes": list(self.classes), "docs": list(self.docs),
                "alpha": self.alpha, "bigrams": self.bigrams, "prior": self.prior, "margin": self.margin,
                **{k: v for k, v in self.meta.items() if k != "about"}}
        lines = [json.dumps(head, sort_keys=True)[:-1] + ', "counts": {']
        items = sorted(self.counts.items())
        lines += [f"  {json.dumps(f)}: {json.dumps(list(c))}" + ("," if i < len(items) - 1 else "")
                  for i, (f, c) in enumerate(items)]
        lines.append("}}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Backoff:
        d = json.loads(text)
        meta = {k: v for k, v in d.items()
                if k not in ("classes", "docs", "alpha", "bigrams", "prior", "margin", "counts")}
        return cls(tuple(d["classes"]), {f: tuple(c) for f, c in d["counts"].items()}, tuple(d["docs"]),
                   float(d["alpha"]), bool(d["bigrams"]), str(d["prior"]), float(d["margin"]), meta)


def train(docs: Sequence[tuple[set[str], str]], classes: Sequence[str], *, alpha: float, min_df: int,
          bigrams: bool, prior: str, margin: float, meta: Mapping[str, Any] | None = None) -> Backoff:
    """Fit on (features, class) pairs: features in at least `min_df` logs are kept, with the
    number of logs of each class that contain them."""
    for _, c in docs:
        if c not in classes:
            raise ValueError(f"unknown category {c!r}")
    if prior not in ("uniform", "empirical"):
        raise ValueError(f"prior is 'uniform' or 'empirical', not {prior!r}")
    df: Counter[str] = Counter()
    for fs, _ in docs:
        df.update(fs)
    index = {c: i for i, c in enumerate(classes)}
    counts: dict[str, list[int]] = {f: [0] * len(classes) for f, n in df.items() if n >= min_df}
    for fs, c in docs:
        for f in fs:
            if f in counts:
                counts[f][index[c]] += 1
    per_class = Counter(c for _, c in docs)
    return Backoff(tuple(classes), {f: tuple(v) for f, v in sorted(counts.items())},
                   tuple(per_class[c] for c in classes), alpha, bigrams, prior, margin, dict(meta or {}))


@cache
def shipped() -> Backoff:
    """The model fitted on the training folders, as the package ships it."""
    return Backoff.from_json(resources.files(__package__).joinpath(PACKAGE_FILE).read_text(encoding="utf-8"))
