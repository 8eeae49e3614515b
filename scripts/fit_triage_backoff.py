"""Fit triage's lexical back-off on the training folders and write the shipped model.

    .venv/bin/python scripts/fit_triage_backoff.py            # write k3rollout/checks/triage/backoff.json
    .venv/bin/python scripts/fit_triage_backoff.py --check    # exit 1 if the shipped file is not a fresh fit
    .venv/bin/python scripts/fit_triage_backoff.py --cv       # the cross-validation the constants came from

The training folders are the main folder of tests/data/logs and the held-out folders whose
misses were already known when signals were chosen (heldout2-4, heldout6-9, heldout13-23). The
folders never tuned on (heldout, heldout5, heldout10-12, heldout24) measure triage on logs nobody has fitted
anything to: this script refuses to read them, so that neither the model nor its constants can have
seen them. The fit is deterministic (integer counts, sorted), so the shipped file is exactly
what this script writes; tests/unit/test_triage_backoff.py holds the two equal.

Cross-validation (--cv): the groups are the main folder's five stratified folds (as
tests/test_triage_corpus.py deals them) and each training held-out folder; every figure is
leave-one-group-out, fitted on the other groups only. The back-off is asked only where the
signals prove nothing (their best score below MIN_SCORE), and then reads the failure lines no
signal matched, so the end-to-end figure is the signals' decision elsewhere and the back-off's
there. The procedure: the model's constants
(line features, smoothing, feature floor, prior) are those with the best accuracy of the
back-off alone over every log; its margin is the one with the best end-to-end accuracy; its
precision is the share of its category answers that were right. The nested figure reruns that
whole procedure inside each group's training groups, so that no choice saw the group judged.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k3rollout.checks.triage import CATEGORIES, MIN_SCORE, classify  # noqa: E402
from k3rollout.checks.triage.backoff import PACKAGE_FILE, Backoff, train  # noqa: E402
from k3rollout.checks.triage.fit import BACKOFF, BACKOFF_PRECISION, backoff_features, fit_backoff  # noqa: E402

LOGS = ROOT / "tests" / "data" / "logs"
SHIPPED = ROOT / "k3rollout" / "checks" / "triage" / PACKAGE_FILE
# "." is the main folder
TRAINING = (".", "heldout2", "heldout3", "heldout4", "heldout6", "heldout7", "heldout8", "heldout9", "heldout13",
            "heldout14", "heldout15", "heldout16", "heldout17", "heldout18", "heldout19",
            "heldout20", "heldout21", "heldout22", "heldout23")
NEVER_TUNED = ("heldout", "heldout5", "heldout10", "heldout11", "heldout12", "heldout24")
MAIN_FOLDS = 5

ABOUT = ("triage's lexical back-off (k3rollout/checks/triage/backoff.py): naive Bayes counts of failure-line "
         "features per category, written by scripts/fit_triage_backoff.py from the training folders; do not edit")


class NeverTuned(ValueError):
    """A folder that is not a training folder was asked for."""


def table(folder: str) -> list[tuple[str, str]]:
    """(file, category) rows of a training folder's README table; any other folder is refused
    before anything in it is opened."""
    if folder not in TRAINING:
        raise NeverTuned(f"{folder!r} is not a training folder ({', '.join(TRAINING)}): the back-off is "
                         f"fitted and cross-validated on those alone")
    rows = []
    for line in (LOGS / folder / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].endswith(".log"):
            rows.append((cells[0], cells[1]))
    return rows


def read_folder(folder: str) -> list[tuple[str, str, str]]:
    """(file, category, text) of a training folder's logs, in its table's order."""
    return [(name, cat, (LOGS / folder / name).read_text(errors="replace")) for name, cat in table(folder)]


def training_samples() -> list[tuple[str, str]]:
    """(text, category) of every training log, folder by folder."""
    return [(text, cat) for folder in TRAINING for _, cat, text in read_folder(folder)]


def fit() -> Backoff:
    """The shipped model: fitted on every training log with the chosen constants."""
    samples = training_samples()
    return fit_backoff(samples, meta={"about": ABOUT, "training": {"folders": list(TRAINING), "logs": len(samples)}})


# ---- cross-validation ------------------------------------------------------------------------

GRID = {"bigrams": (False, True), "alpha": (0.1, 0.3, 1.0), "min_df": (1, 2), "prior": ("uniform", "empirical")}
MARGINS = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def stratified_groups(items: Sequence[tuple[str, str, str]], k: int) -> list[int]:
    """The fold of each main-folder log: each category's files, sorted by name, dealt round-robin
    (tests/test_triage_corpus.py's stratified_folds)."""
    fold = [0] * len(items)
    by_cat: dict[str, list[int]] = {}
    for i, (_, cat, _) in enumerate(items):
        by_cat.setdefault(cat, []).append(i)
    n = 0
    for cat in sorted(by_cat):
        for i in sorted(by_cat[cat], key=lambda j: items[j][0]):
            fold[i] = n % k
            n += 1
    return fold


class Corpus:
    """Every training log with its group, category, signal decision and back-off features."""

    def __init__(self) -> None:
        self.group: list[str] = []
        self.cat: list[str] = []
        self.signals: list[str] = []
        self.asks: list[bool] = []           # the signals prove nothing: the back-off is asked
        self.feats: dict[bool, list[set[str]]] = {False: [], True: []}
        # what it reads where it is asked: the failure lines no signal matched
        self.reads: dict[bool, dict[int, set[str]]] = {False: {}, True: {}}
        for folder in TRAINING:
            items = read_folder(folder)
            folds = stratified_groups(items, MAIN_FOLDS) if folder == "." else [0] * len(items)
            for (_, cat, text), k in zip(items, folds, strict=True):
                t = classify(text, backoff=False)
                self.group.append(f"main{k}" if folder == "." else folder)
                self.cat.append(cat)
                self.signals.append(t.category)
                self.asks.append(max(t.scores.values()) < MIN_SCORE)
                for b in (False, True):
                    self.feats[b].append(backoff_features(text, b))
                    if self.asks[-1]:
                        self.reads[b][len(self.cat) - 1] = backoff_features(text, b, unmatched=True)
        self.groups = sorted(set(self.group))


Config = tuple[bool, float, int, str]


def lofo(corpus: Corpus, groups: Sequence[str], configs: Sequence[Config]
         ) -> dict[Config, tuple[int, dict[int, tuple[str, float] | None]]]:
    """Per config, leave-one-group-out over `groups`: the back-off's correct answers alone over
    every log (no abstention), and its (best class, margin) on each log where it is asked."""
    out: dict[Config, tuple[int, dict[int, tuple[str, float] | None]]] = {}
    members = [i for i, g in enumerate(corpus.group) if g in groups]
    for cfg in configs:
        bigrams, alpha, min_df, prior = cfg
        right, asked = 0, {}
        for g in groups:
            docs = [(corpus.feats[bigrams][i], corpus.cat[i]) for i in members if corpus.group[i] != g]
            m = train(docs, CATEGORIES, alpha=alpha, min_df=min_df, bigrams=bigrams, prior=prior, margin=0.0)
            for i in members:
                if corpus.group[i] != g:
                    continue
                guess = m.guess_features(corpus.feats[bigrams][i])
                right += (guess.best if guess else "other") == corpus.cat[i]
                if corpus.asks[i]:
                    guess = m.guess_features(corpus.reads[bigrams][i])
                    asked[i] = (guess.best, guess.margin) if guess else None
        out[cfg] = (right, asked)
    return out


def answer(guess: tuple[str, float] | None, margin: float) -> str:
    return guess[0] if guess and guess[1] >= margin else "other"


def end_to_end(corpus: Corpus, asked: dict[int, tuple[str, float] | None], margin: float) -> int:
    """Right answers on the logs where the back-off is asked (elsewhere the signals decide, the
    same with or without it)."""
    return sum(answer(g, margin) == corpus.cat[i] for i, g in asked.items())


def choose(corpus: Corpus, groups: Sequence[str]) -> tuple[Config, float, float, dict[Config, tuple[int, int]]]:
    """The procedure: constants by the back-off alone, margin end to end, precision at both."""
    configs = list(itertools.product(*GRID.values()))
    table_ = lofo(corpus, groups, configs)
    best = max(configs, key=lambda c: (table_[c][0], -configs.index(c)))
    asked = table_[best][1]
    margin = max(MARGINS, key=lambda m: (end_to_end(corpus, asked, m), m))
    answered = [(i, answer(g, margin)) for i, g in asked.items() if answer(g, margin) != "other"]
    precision = sum(a == corpus.cat[i] for i, a in answered) / len(answered) if answered else 0.0
    summary = {c: (table_[c][0], max(end_to_end(corpus, table_[c][1], m) for m in MARGINS)) for c in configs}
    return best, margin, precision, summary


def cv() -> None:
    corpus = Corpus()
    n = len(corpus.cat)
    asked = [i for i in range(n) if corpus.asks[i]]
    base = sum(s == c for s, c in zip(corpus.signals, corpus.cat, strict=True))
    print(f"training logs: {n}; the signals alone: {base}/{n} = {base / n:.1%}")
    print(f"asked (best signal score below {MIN_SCORE}): {len(asked)}, of which truly other "
          f"{sum(corpus.cat[i] == 'other' for i in asked)}")
    best, margin, precision, summary = choose(corpus, corpus.groups)
    print("\nconstants (bigrams, alpha, min_df, prior): back-off alone right / n, best end-to-end right on the asked")
    for cfg, (alone, e2e) in summary.items():
        print(f"  {cfg!s:<36} {alone:>4}/{n}  {e2e:>3}/{len(asked)}")
    table_ = lofo(corpus, corpus.groups, [best])
    print(f"\nchosen: {best}, margin {margin}, precision {precision:.2f}")
    print("  margin: right on the asked (the signals alone: "
          f"{sum(corpus.signals[i] == corpus.cat[i] for i in asked)})")
    for m in MARGINS:
        print(f"  {m:>5}: {end_to_end(corpus, table_[best][1], m)}/{len(asked)}")
    picked = {i: answer(g, margin) for i, g in table_[best][1].items()}
    report(corpus, picked, "leave-one-group-out, chosen constants")
    # nested: the whole procedure inside each group's training groups
    nested: dict[int, str] = {}
    for g in corpus.groups:
        inner = [h for h in corpus.groups if h != g]
        cfg, m, _, _ = choose(corpus, inner)
        bigrams, alpha, min_df, prior = cfg
        docs = [(corpus.feats[bigrams][i], corpus.cat[i]) for i in range(n) if corpus.group[i] != g]
        model = train(docs, CATEGORIES, alpha=alpha, min_df=min_df, bigrams=bigrams, prior=prior, margin=m)
        for i in asked:
            if corpus.group[i] == g:
                guess = model.guess_features(corpus.reads[bigrams][i])
                nested[i] = guess.category if guess else "other"
        print(f"  nested, {g}: chose {cfg}, margin {m}")
    report(corpus, nested, "nested (constants chosen without the group judged)")


def report(corpus: Corpus, backoff: dict[int, str], title: str) -> None:
    n = len(corpus.cat)
    final = [backoff.get(i, corpus.signals[i]) for i in range(n)]
    print(f"\n{title}:")
    for g in [*corpus.groups, "all held-out", "all"]:
        idx = [i for i in range(n) if corpus.group[i] == g or g == "all"
               or (g == "all held-out" and not corpus.group[i].startswith("main"))]
        s = sum(corpus.signals[i] == corpus.cat[i] for i in idx)
        b = sum(final[i] == corpus.cat[i] for i in idx)
        print(f"  {g:<14} signals {s:>3}/{len(idx):<3} = {s / len(idx):6.1%}   with back-off {b:>3}/{len(idx):<3} "
              f"= {b / len(idx):6.1%}")
    answered = [i for i, a in backoff.items() if a != "other"]
    right = sum(backoff[i] == corpus.cat[i] for i in answered)
    print(f"  category answers of the back-off: {len(answered)}, right {right}; "
          f"logs it turned from right to wrong: {sum(corpus.signals[i] == corpus.cat[i] != backoff[i] for i in backoff)}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the shipped model is not a fresh fit")
    p.add_argument("--cv", action="store_true", help="print the cross-validation the constants came from")
    args = p.parse_args(argv)
    if args.cv:
        print(f"current constants: {BACKOFF}, precision {BACKOFF_PRECISION}")
        cv()
        return 0
    text = fit().to_json()
    if args.check:
        same = SHIPPED.read_text(encoding="utf-8") == text
        print(f"{SHIPPED.relative_to(ROOT)}: {'a fresh fit' if same else 'differs from a fresh fit'}")
        return 0 if same else 1
    SHIPPED.write_text(text, encoding="utf-8")
    print(f"wrote {SHIPPED.relative_to(ROOT)}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
