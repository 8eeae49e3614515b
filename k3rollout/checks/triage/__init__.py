"""Classify a failure by docs/domain.md's decision tree, before anyone changes anything.

The tree: (1) a host driver below the image's CUDA floor is ``driver_incompatible``; (2) a
driver new enough but CUDA/GPU setup failing is ``container_runtime``; (3) CUDA up, the
process dies loading the model: ``model_load_capacity``; (4) one node works, several fail:
``communication``. Anything else is ``other``.

The classifier scores rather than first-matches. Every line of the log is read against the
signal families of ``signals.py``; each family contributes its strongest match (damped by the
line's log level), families of one category add up, and the live facts (the stage that failed,
driver and image CUDA, whether CUDA init already succeeded, the replica's node count) add or
move score the way the tree orders them. The best category wins when it is both strong enough
and clearly ahead; otherwise the answer is ``other`` with the candidates listed. One live fact
is not weighed but decides: a host driver below the image's CUDA floor (``cuda_table``) is the
tree's first step, whatever the log or a fitted weight scores. Every decision keeps its deciding
lines, its runner-up and a confidence.

Where the signals prove nothing (the best score below ``MIN_SCORE``, or no signal matched) and no
live fact decided, the lexical back-off (``backoff.py``) reads the log's failure lines instead: a
naive Bayes model of the corpus's words that answers a category, ``other``, or abstains. Its
decision says so (``Triage.backoff``, and a reason that starts with "back-off"), names the lines
whose words weighed most, its runner-up and a confidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from k3rollout.checks.cuda_table import compat_verdict
from k3rollout.checks.triage.backoff import Backoff, Guess, shipped
from k3rollout.checks.triage.signals import FAMILIES, SIGNALS, Signal, fold, plain_quotes
from k3rollout.model.playbook import STAGE_TABLES

CATEGORIES = ("driver_incompatible", "container_runtime", "model_load_capacity", "communication", "other")
TREE = CATEGORIES[:4]

# NCCL INFO lines are the transport describing itself; they never decide anything.
_NCCL_INFO = re.compile(r"NCCL INFO")
# Log level of a line, looked for near its start. INFO/DEBUG lines describe, they do not fail:
# a match there counts a quarter (vLLM prints "KV cache usage" and "NVSHMEM enabled" at INFO on
# healthy servers). WARNING lines count 0.6: they are often the warning that comes true, but as
# often a hint printed on every start ("may cause out of memory"). NCCL's own "NCCL WARN" is its
# error level and is not damped. The words before the level word (a timestamp, a host, a logger
# name) are never an error word themselves: in "Error info: NVIDIA driver on your system is too
# old" or "ERROR 05-02 ... WARNING" the line's level is the error word that comes first, and the
# later "info"/"warning" is part of the message. PyTorch's C++ logging (c10/util/Logging.cpp,
# MessageLogger) writes the level as one letter of "FEWIV" in brackets, with the file and line
# and, since 2.2, the date ("[W socket.cpp:601]", "[W1205 10:00:00.123 socket.cpp:752]"), after a
# "[rank0]:" prefix once the process knows its rank: those are read as the levels they are.
_NOT_ERROR_WORD = r"(?!\W*(\w*ERROR|FATAL|CRITICAL|E\d{4})\b)"
_RANK = r"(\[rank\d+\]:\s*)?"
_INFO = re.compile(r"^\W{0,3}(\(\w+ pid=\d+(, ip=[\d.]+)?\)\s*)?" + _RANK + r"(" + _NOT_ERROR_WORD + r"\S+\s+){0,3}?"
                   r"(\[?(INFO|DEBUG|I\d{4})|\[I(?= \S+:\d+\]))\b", re.I)
_WARN = re.compile(r"^\W{0,3}(\(\w+ pid=\d+(, ip=[\d.]+)?\)\s*)?" + _RANK + r"(" + _NOT_ERROR_WORD + r"\S+\s+){0,3}?"
                   r"(\[?(WARNING|WARN|W\d{4})|\[W(?= \S+:\d+\]))\b|UserWarning|FutureWarning|DeprecationWarning",
                   re.I)
LEVEL_FACTOR = {"info": 0.25, "warning": 0.6, "error": 1.0}
# A family that matches on several lines gains a little (0.25 a line, at most 0.5): repetition is
# weak evidence that the mechanism is real, not noise, but never outweighs a second family.
REPEAT_BONUS, REPEAT_CAP = 0.25, 0.5
# Earlier tree steps explain later symptoms (a too-old driver makes CUDA fail, which makes the
# model fail to load), so on equal evidence the earlier step wins. Small: it breaks ties only.
TREE_BONUS = {"driver_incompatible": 0.3, "container_runtime": 0.2, "model_load_capacity": 0.1, "communication": 0.0}
# Below MIN_SCORE nothing was proven (one generic line at most); below MIN_CONFIDENCE the top two
# are too close to call. Either way the answer is `other`, with the candidates.
MIN_SCORE = 1.5
MIN_CONFIDENCE = 0.3
MAX_CONTRIBUTIONS = 20
# Whether `classify` asks the shipped back-off (backoff.json) when the signals prove nothing;
# `classify(..., backoff=True)` always does, `backoff=False` (`k3rollout triage --no-backoff`) never,
# `backoff=<a Backoff>` asks that model. On: measured once on the folders never tuned on, it
# took them from 170/207 to 177/207 and the blind thirteenth folder, which did not exist when it
# was fitted, from 39/60 to 47/60 (docs/domain.md, "The lexical back-off").
BACKOFF_BY_DEFAULT = True

NEXT_STEPS = {
    "driver_incompatible": [
        "Do not look at GPU memory or model flags yet: the host driver cannot run this image's CUDA.",
        "Confirm the image CUDA (docker image inspect: CUDA_VERSION / NVIDIA_REQUIRE_CUDA) and the full driver "
        "version (nvidia-smi).",
        "Upgrade the host driver to r580 or newer on an isolated, drained node (this playbook), or move validation "
        "to a compatible environment; a private cu129 rebuild is a stop-gap only.",
        "If NVML reports a driver/library mismatch, the new packages are installed but the old module is loaded: "
        "reboot (or reload the module) before testing.",
    ],
    "container_runtime": [
        "The driver is new enough; check the container path: `docker info` runtimes (nvidia), nvidia-container-toolkit "
        "version, CDI specs, device permissions.",
        "Run `docker run --rm --gpus all <image> nvidia-smi` to test GPU visibility in a container.",
        "On NVSwitch systems (HGX H100/H200/B200) check `systemctl status nvidia-fabricmanager` matches the driver "
        "version (error 802).",
        "Check the image digest against the official one (integrity) and for a bundled compat libcuda (error 803).",
    ],
    "model_load_capacity": [
        "CUDA works; the process died loading the model. Record real free memory per GPU (nvidia-smi) before retrying.",
        "Check weight format and --load-format, GPU count vs --tensor-parallel-size, and the parallel layout.",
        "Try the ladder one variable at a time: model only, short request, target context, then concurrency.",
    ],
    "communication": [
        "A single node works; several fail: check NCCL/RDMA, interface binding (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), "
        "topology and the all-to-all backend.",
        "Run nccl-tests all_reduce_perf between pairs of nodes to isolate the failing peer or link.",
        "Do not change CUDA or driver versions for this.",
    ],
    "other": [
        "No known signature matched: read the captured logs in the evidence directory and classify by hand.",
        "Keep the node cordoned until the cause is understood.",
    ],
}

# The stage that failed, as evidence: which tree steps it can reach. A cuda_check failure is
# steps 1-2 by construction; the stages that load the model (vllm_smoke, features: declared
# with loads_model in model/playbook.py's STAGE_KINDS) run after CUDA init, so step 3 leads; the
# multinode stage is where step 4 shows. 1.0 is "supports", never "decides" (MIN_SCORE is 1.5).
LOAD_STAGES = STAGE_TABLES.load_stages
# driver_upgrade is not here on purpose: a failed package install is not the tree's step 1 (an
# NVML/kernel mismatch after it is, and its signal says so).
STAGE_PRIOR: dict[str, dict[str, float]] = {
    "cuda_check": {"driver_incompatible": 0.75, "container_runtime": 0.75},
    **{kind: {"model_load_capacity": 0.75} for kind in STAGE_TABLES.order if kind in LOAD_STAGES},
    "multinode": {"communication": 1.0},
}


@dataclass
class Hit:
    """One scored contribution: a log line matched by a signal, or a live fact."""
    category: str
    family: str
    weight: float
    why: str
    line: str | None = None
    lineno: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "family": self.family, "weight": round(self.weight, 2), "why": self.why,
                "line": self.line, "lineno": self.lineno}


@dataclass
class Triage:
    category: str
    evidence: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    confidence: float = 0.0
    runner_up: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    # the node whose failure this one's is (a replica is rolled back whole): its category
    caused_by: str | None = None
    # what the lexical back-off said, where it was asked (the signals proved nothing): its
    # answer, best class, runner-up, probabilities, margin, and whether it abstained
    backoff: dict[str, Any] | None = None

    def to_dict(self, file: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"category": self.category, "evidence": self.evidence, "reasons": self.reasons,
                             "next_steps": self.next_steps, "confidence": self.confidence,
                             "runner_up": self.runner_up, "scores": self.scores}
        if self.candidates:
            d["candidates"] = self.candidates
        if self.caused_by:
            d["caused_by"] = self.caused_by
        if self.backoff is not None:
            d["backoff"] = self.backoff
        # the scoring behind the decision (what `triage --explain` prints), strongest first, capped
        # so that a log repeating one line a thousand times keeps the record small
        d["contributions"] = [h.to_dict() for h in sorted(self.hits, key=lambda h: -abs(h.weight))[:MAX_CONTRIBUTIONS]]
        if file is not None:
            d = {"file": file, **d}
        return d

    def explain(self) -> str:
        """The scoring, as `triage --explain` prints it."""
        out = [f"category: {self.category} (confidence {self.confidence:.2f}, runner-up {self.runner_up or '-'})"]
        if self.candidates:
            out.append("  too weak or too close to call; candidates: " + ", ".join(self.candidates))
        out.extend(f"  {r}" for r in self.reasons if r.startswith(("decided by the live facts", "back-off")))
        out.append("scores (sum of family scores + tree-order tie-break):")
        for cat in CATEGORIES:
            out.append(f"  {cat:<20} {self.scores.get(cat, 0.0):6.2f}")
        out.append("contributions (family: weight x level factor, strongest per family first):")
        for h in sorted(self.hits, key=lambda h: (CATEGORIES.index(h.category), h.family, -h.weight)):
            where = f"line {h.lineno}" if h.lineno is not None else "live fact"
            out.append(f"  {h.category:<20} {h.family:<20} {h.weight:+5.2f}  {h.why} [{where}]")
            if h.line:
                out.append(f"      > {h.line[:200]}")
        return "\n".join(out) + "\n"


def caused_by(peer: Mapping[str, Any], culprit: str, replica: str | None = None) -> Triage:
    """The triage of a node that failed only because another node of its replica did (a
    replica serves whole or not at all, so it is rolled back with that node): the culprit's
    category, evidence and next steps, with a reason naming the culprit. Its own log (the
    replica's refusal to launch) says nothing about the cause; classified alone it reads
    ``other``."""
    category = str(peer.get("category") or "other")
    why = f"caused by {culprit}" + (f": replica {replica} is rolled back whole" if replica else "")
    return Triage(category, evidence=list(peer.get("evidence") or []),
                  reasons=[why, *(r for r in peer.get("reasons") or [] if r != why)],
                  next_steps=list(peer.get("next_steps") or NEXT_STEPS.get(category, NEXT_STEPS["other"])),
                  confidence=float(peer.get("confidence") or 0.0), runner_up=peer.get("runner_up"),
                  scores=dict(peer.get("scores") or {}), candidates=list(peer.get("candidates") or []),
                  caused_by=culprit)


# Go's log/slog TextHandler and logrus (Docker, containerd, the NVIDIA container toolkit, Ollama,
# the device plugin's older releases) write the level as a key before the message, wherever the line
# starts (a journald prefix, a pod name): `time=... level=INFO source=gpu.go:377 msg="..."`,
# `time="..." level=error msg="..."`. The key before `msg=` is the line's level.
_KV_LEVEL = re.compile(r'\blevel="?(trace|debug|info|warn|warning|error|fatal|panic)"?\s.*?\bmsg=', re.I)


def _level(line: str) -> str:
    kv = _KV_LEVEL.search(line)
    if kv:
        word = kv.group(1).lower()
        return "info" if word in ("trace", "debug", "info") else "warning" if word.startswith("warn") else "error"
    if _INFO.search(line[:80]):
        return "info"
    if "NCCL WARN" not in line and _WARN.search(line[:80] if "Warning" not in line else line):
        return "warning"
    return "error"


# Lines that list the environment rather than report a failure: vLLM's collect_env report
# (vllm/collect_env.py) prints every installed package as "[pip3] name==version" or "[conda] name
# version", so nvidia-nccl or nvidia-nvshmem appear in logs whatever failed. Like NCCL INFO, never
# evidence.
_PACKAGE_LIST = re.compile(r"^\s*\[(pip3?|conda)\]\s")
# Quotes escaped once per level of nesting: dockerd logs containerd's error, which quotes the OCI
# runtime's, which quotes exec's ('exec: \\\"nvidia-smi\\\": executable file not found'). The
# signals are written with plain quotes, so every run of backslashes before a quote is dropped for
# matching, after typographic quotes are read as ASCII ones (signals.plain_quotes); the evidence keeps
# the line as it was.
_ESCAPED_QUOTE = re.compile(r'\\+(["\'])')
# argparse's refusal (CPython Lib/argparse.py parse_args: "%(prog)s: error: unrecognized arguments:
# %s" with the arguments joined): what follows is the user's own command line echoed back, not a
# message. An argument naming an all-to-all backend or NCCL is no evidence of a transport failure,
# so only the words up to the refusal are matched on such a line.
_ECHOED_ARGS = re.compile(r"(unrecognized arguments:).*$", re.I)
# A message hard-wrapped over two lines (a terminal or an issue form at a fixed width, a Python
# exception text with a newline in it): the first line stops mid-sentence (it ends in a letter, a
# digit or a comma) and the next carries on: it starts in lower case, with a quote or with a
# closing bracket, as no log record's header, traceback frame or exception line does. Each such
# pair is also read joined, and a family counts there only where neither line matches it alone.
_WRAP_END = re.compile(r"[\w,]$")
_CONTINUES = re.compile(r"^[a-z'\"`)\]}]")


def _match_text(line: str) -> str:
    """The folded text the signals are matched against (see the comments above): typographic quotes
    read as ASCII ones (``plain_quotes``), escaped quotes unescaped, echoed arguments cut."""
    return fold(_ECHOED_ARGS.sub(r"\1", _ESCAPED_QUOTE.sub(r"\1", plain_quotes(line))))


def _best(low: str) -> dict[str, Signal]:
    best: dict[str, Signal] = {}
    for s in SIGNALS:
        if (s.family not in best or s.weight > best[s.family].weight) and s.lower.search(low):
            best[s.family] = s
    return best


def _wraps(line: str, nxt: str) -> bool:
    return bool(_WRAP_END.search(line) and _CONTINUES.match(nxt)) and not (_NCCL_INFO.search(nxt)
                                                                          or _PACKAGE_LIST.match(nxt))


def scan(text: str) -> list[Hit]:
    """Every (line, signal) match with its level-damped weight; NCCL INFO lines and package
    listings are skipped; a hard-wrapped message is also read joined with its continuation."""
    hits: list[Hit] = []
    raw_lines = text.splitlines()
    found: list[dict[str, Signal]] = []
    for raw in raw_lines:
        skip = not raw.strip() or _NCCL_INFO.search(raw) or _PACKAGE_LIST.match(raw)
        found.append({} if skip else _best(_match_text(raw.strip())))
    for i, raw in enumerate(raw_lines):
        line = raw.strip()
        best = found[i]
        if best:
            factor = LEVEL_FACTOR[_level(line)]
            for s in best.values():
                hits.append(Hit(s.category, s.family, s.weight * factor, s.why, line[:500], i + 1))
        if i + 1 < len(raw_lines) and line and not _NCCL_INFO.search(raw) and not _PACKAGE_LIST.match(raw) \
                and _wraps(line, raw_lines[i + 1]):
            nxt = raw_lines[i + 1].strip()
            joined = _best(_match_text(line + " " + nxt))
            new = {f: s for f, s in joined.items() if f not in best and f not in found[i + 1]}
            if new:
                factor = LEVEL_FACTOR[_level(line)]
                # the evidence is the two lines as the log has them, so it stays a substring of it
                shown = raw.lstrip() + "\n" + raw_lines[i + 1].rstrip()
                for s in new.values():
                    hits.append(Hit(s.category, s.family, s.weight * factor, s.why + " (wrapped over two lines)",
                                    shown[:500], i + 1))
    return hits


# The lines the back-off reads: those that say something failed. Not INFO/DEBUG, not NCCL INFO or a
# package listing, and either an error word or an exception's final line ("ValueError: ...",
# "torch.OutOfMemoryError: ..."). A log with no such line (a message quoted alone, in words
# of its own) is read whole, less those skipped lines. Where a signal matched a line, the line
# was weighed by hand (and, below MIN_SCORE, found not to decide alone): the back-off leaves it
# out and reads only the wording no signal knows.
_FAILURE_WORDS = re.compile(
    r"error|fail|exception|cannot|can't|unable|not found|no such|invalid|denied|refused|time[d ]?out|abort|fatal"
    r"|panic|killed|unsupported|not supported|mismatch|insufficient|missing|unknown|could not|couldn't|\boom\b"
    r"|exceed|too (old|new|many|few|large|small|long)|crash|terminat|incompatible|not available|no .{0,20}found"
    r"|unrecogni|unexpected|require", re.I)
_EXCEPTION_LINE = re.compile(r"^\s*(\[rank\d+\]:\s*)?[\w.]*(Error|Exception|Interrupt|Exit)\b:?")


def failure_lines(text: str, matched: frozenset[int] = frozenset()) -> list[tuple[int, str]]:
    """The (line number, line) pairs the back-off reads (see above), less the lines numbered in
    `matched`; each line stripped and cut at 500 characters, as the evidence is."""
    candidates: list[tuple[int, str]] = []
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if not line or _NCCL_INFO.search(line) or _PACKAGE_LIST.match(raw) or _level(line) == "info":
            continue
        candidates.append((i + 1, line[:500]))
    failing = [(n, ln) for n, ln in candidates if _FAILURE_WORDS.search(ln) or _EXCEPTION_LINE.match(ln)]
    return [(n, ln) for n, ln in failing or candidates if n not in matched]


def matched_lines(hits: list[Hit]) -> frozenset[int]:
    """The numbers of the lines a signal matched (both lines of a wrapped message)."""
    out: set[int] = set()
    for h in hits:
        if h.lineno is not None and h.line is not None:
            out.add(h.lineno)
            if "\n" in h.line:
                out.add(h.lineno + 1)
    return frozenset(out)


def family_scores(hits: list[Hit], weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Score per family: its strongest line plus a capped repeat bonus, times the family's
    multiplier in `weights` (1.0 unless fitted, see ``fit.fit_family_weights``)."""
    by_family: dict[str, list[float]] = {}
    for h in hits:
        if h.line is not None:
            by_family.setdefault(h.family, []).append(h.weight)
    return {fam: (max(ws) + min(REPEAT_CAP, REPEAT_BONUS * (len(ws) - 1))) * (weights or {}).get(fam, 1.0)
            for fam, ws in by_family.items()}


def classify(text: str, *, driver: str | None = None, image_cuda: str | None = None,
             single_node_ok: bool | None = None, stage: str | None = None, cuda_init_ok: bool | None = None,
             nnodes: int | None = None, weights: Mapping[str, float] | None = None,
             backoff: Backoff | bool | None = None) -> Triage:
    """Classify `text` (a failure log) with the live facts that are known.

    driver/image_cuda: host driver version and the image's CUDA (both, or neither counts);
    stage: the rollout stage that failed; cuda_init_ok: whether CUDA init already succeeded on
    the node; nnodes: the replica's node count; single_node_ok: whether the same launch works on
    one node alone (False rules communication out, True points at it); weights: per-family
    multipliers (default 1.0: the hand weights of signals.py); backoff: the model asked where the
    signals prove nothing (None: the shipped one if ``BACKOFF_BY_DEFAULT``, True: the shipped
    one, False: none).
    """
    return classify_hits(scan(text), driver=driver, image_cuda=image_cuda, single_node_ok=single_node_ok,
                         stage=stage, cuda_init_ok=cuda_init_ok, nnodes=nnodes, weights=weights, text=text,
                         backoff=backoff)


def classify_hits(hits: list[Hit], *, driver: str | None = None, image_cuda: str | None = None,
                  single_node_ok: bool | None = None, stage: str | None = None, cuda_init_ok: bool | None = None,
                  nnodes: int | None = None, weights: Mapping[str, float] | None = None, text: str | None = None,
                  backoff: Backoff | bool | None = None) -> Triage:
    """`classify` on lines already scanned (the fitting loop scans each log once). Without
    `text` the back-off is not asked (it reads the log's lines, not the hits)."""
    fam = family_scores(hits, weights)
    scores = {c: 0.0 for c in CATEGORIES}
    for f, v in fam.items():
        scores[FAMILIES[f]] += v
    facts: list[Hit] = []
    relabel: dict[str, str] = {}

    # Tree step 1/2 from the live facts: the compat table, not the log, says whether the driver
    # can run the image. Too old: the tree's first step decides, whatever the log scores (a fitted
    # weight or a loud NCCL log must not overrule it); the 6.0 only shows in the scores. New
    # enough: the log's driver-level messages are the container's doing (stale compat libcuda,
    # wrong ldcache), so their score moves to container_runtime.
    decided: str | None = None
    # the same facts as they act on the back-off's probabilities: a factor per category, and the
    # categories whose evidence the facts hand to another (see _ask_backoff)
    odds = {c: 1.0 for c in CATEGORIES}
    hand_over: dict[str, str] = {}
    if driver and image_cuda:
        verdict = compat_verdict(driver, image_cuda)
        if verdict["compatible"]:
            hand_over["driver_incompatible"] = "container_runtime"
        if not verdict["compatible"]:
            decided = "driver_incompatible"
            facts.append(Hit("driver_incompatible", "live_facts", 6.0, "host driver below the image's CUDA floor",
                             f"live facts: {verdict['reason']}"))
        elif scores["driver_incompatible"]:
            moved = scores["driver_incompatible"]
            facts.append(Hit("driver_incompatible", "live_facts", -moved,
                             f"driver {driver} can run CUDA {image_cuda}: driver-level errors are the container's"))
            facts.append(Hit("container_runtime", "live_facts", moved,
                             "driver new enough but CUDA fails (tree step 2)"))
            relabel["driver_incompatible"] = "container_runtime"
    # Tree step 3: CUDA init already succeeded, so steps 1-2 are behind us; what they print now is
    # an echo (scaled to a quarter). Failed init: steps 1-2 lead and step 3-4 evidence is halved.
    if cuda_init_ok is True:
        odds["driver_incompatible"] = odds["container_runtime"] = 0.25
        for cat in ("driver_incompatible", "container_runtime"):
            if scores[cat]:
                facts.append(Hit(cat, "cuda_init_ok", -0.75 * scores[cat], "CUDA init already succeeded"))
    elif cuda_init_ok is False:
        odds["model_load_capacity"] = odds["communication"] = 0.5
        for cat in ("model_load_capacity", "communication"):
            if scores[cat]:
                facts.append(Hit(cat, "cuda_init_failed", -0.5 * scores[cat],
                                 "CUDA init failed: the model never loaded"))
        facts.append(Hit("container_runtime", "cuda_init_failed", 1.0, "CUDA init failed"))
        facts.append(Hit("driver_incompatible", "cuda_init_failed", 1.0, "CUDA init failed"))
    if stage in STAGE_PRIOR:
        for cat, w in STAGE_PRIOR[stage].items():
            facts.append(Hit(cat, "stage", w, f"failed in stage {stage}"))
    # Tree step 4 is about several nodes: a one-node replica has only intra-node NCCL left
    # (still possible: 0.6), and a launch that fails on one node alone is not communication.
    if single_node_ok is False:
        odds["communication"] = 0.0
    if nnodes == 1 and stage in LOAD_STAGES:
        hand_over["communication"] = "model_load_capacity"
    if single_node_ok is False and scores["communication"]:
        facts.append(Hit("communication", "single_node", -scores["communication"], "fails on a single node too"))
    elif single_node_ok is True:
        facts.append(Hit("communication", "single_node", 1.5, "works on one node, fails on several"))
    if nnodes == 1 and scores["communication"] and stage in LOAD_STAGES:
        # one-node replica dying while it loads: the tree's step 3 names "communication during load"
        # as a model-load problem; step 4 needs several nodes
        moved = scores["communication"]
        facts.append(Hit("communication", "nnodes", -moved, "replica is one node: no cross-node step 4"))
        facts.append(Hit("model_load_capacity", "nnodes", moved, "communication during load (tree step 3)"))
        relabel["communication"] = "model_load_capacity"
    elif nnodes == 1 and scores["communication"]:
        facts.append(Hit("communication", "nnodes", -0.4 * scores["communication"], "replica is one node"))
    elif nnodes and nnodes > 1 and stage == "multinode":
        facts.append(Hit("communication", "nnodes", 0.5, f"replica spans {nnodes} nodes"))
    for h in facts:
        scores[h.category] += h.weight
    for cat in TREE:
        if scores[cat] > 0:
            scores[cat] += TREE_BONUS[cat]
    scores = {c: round(max(0.0, v), 2) for c, v in scores.items()}
    triage = _decide(scores, facts + hits, relabel, decided)
    model: Backoff | None = None
    if isinstance(backoff, Backoff):
        model = backoff
    elif backoff is True or (backoff is None and BACKOFF_BY_DEFAULT):
        model = shipped()
    if model is not None and text is not None and not decided and max(scores.values()) < MIN_SCORE:
        return _ask_backoff(triage, model, text, odds, hand_over)
    return triage


# A back-off answer is a guess from words, not a message that names the mechanism: its confidence
# is its probability times how often its answers were right under cross-validation (the model's
# `precision`, measured by scripts/fit_triage_backoff.py), so it never reads as sure as a signal.
def _ask_backoff(signals: Triage, model: Backoff, text: str, odds: Mapping[str, float],
                 hand_over: Mapping[str, str]) -> Triage:
    """The triage where the signals proved nothing: the back-off's answer if it gives one, with
    the live facts applied to its probabilities; otherwise the signals' `other`, saying why."""
    lines = failure_lines(text, matched_lines(signals.hits))
    guess = model.guess(ln for _, ln in lines)
    if guess is None:
        signals.reasons.append("back-off: no word of the failure lines no signal matched is known to it")
        signals.backoff = {"category": "other", "abstained": True, "known": 0}
        return signals
    probs = _apply_facts(guess, odds, hand_over)
    ranked = sorted(probs, key=lambda c: (-probs[c], CATEGORIES.index(c)))
    best, second = ranked[0], ranked[1]
    margin = math.log(probs[best] / probs[second]) if probs[second] > 0 else math.inf
    abstained = margin < model.margin
    answer = "other" if abstained else best
    # the words behind the answer: the model's own class whose probability became it (a driver
    # new enough hands driver_incompatible's to container_runtime), against the runner-up
    source = guess.best if hand_over.get(guess.best, guess.best) == best else best
    info: dict[str, Any] = {"category": answer, "best": best, "runner_up": second, "abstained": abstained,
                            "margin": round(min(margin, 99.0), 2), "known": guess.known,
                            "probabilities": {c: round(probs[c], 4) for c in CATEGORIES},
                            "words": model.deciding_words((ln for _, ln in lines), source, second)}
    signals.backoff = info
    if abstained:
        signals.reasons.append(f"back-off: abstains, best {best} {probs[best]:.2f} is not ahead of {second} "
                               f"by its margin ({margin:.2f} < {model.margin})")
        return signals
    if answer == "other":
        signals.reasons.append(f"back-off: other ({probs[best]:.2f}, runner-up {second} {probs[second]:.2f}), "
                               f"words {', '.join(info['words'])}")
        return signals
    deciding = model.deciding_lines(lines, source, second)
    if not deciding:
        # the words favour it only taken together: no line to show for it, no answer
        info.update(category="other", abstained=True)
        signals.reasons.append(f"back-off: no line carries {best} over {second} on its own")
        return signals
    hits = [Hit(answer, "backoff", w, f"back-off: the words of this line weigh {w:.2f} for {source} over {second}",
                ln, n) for n, ln, w in deciding]
    reasons = [f"back-off: {answer} ({probs[best]:.2f}, runner-up {second} {probs[second]:.2f}), words "
               f"{', '.join(info['words'])}: no signal proved anything (best score below {MIN_SCORE})"]
    confidence = round(probs[best] * float(model.meta.get("precision", 0.5)), 2)
    return Triage(answer, [ln for _, ln, _ in sorted(deciding)], reasons, NEXT_STEPS[answer], confidence, second,
                  signals.scores, [], hits + signals.hits, backoff=info)


def _apply_facts(guess: Guess, odds: Mapping[str, float], hand_over: Mapping[str, str]) -> dict[str, float]:
    """The back-off's probabilities under the live facts, as the facts act on the scores: a
    driver new enough hands driver-level evidence to the container path, a one-node replica at
    load hands communication to step 3, CUDA init that succeeded (or failed) scales steps 1-2
    (or 3-4) down, a launch that fails on one node alone rules communication out."""
    probs = {c: guess.probabilities.get(c, 0.0) for c in CATEGORIES}
    for src, dst in hand_over.items():
        probs[dst] += probs[src]
        probs[src] = 0.0
    probs = {c: p * odds[c] for c, p in probs.items()}
    z = sum(probs.values())
    return {c: p / z for c, p in probs.items()} if z > 0 else {c: float(c == "other") for c in CATEGORIES}


def _decide(scores: dict[str, float], hits: list[Hit], relabel: Mapping[str, str],
            decided: str | None = None) -> Triage:
    """The winner by score, or `decided` (a live fact that settles the tree step) whatever the
    scores; the runner-up is then the best of the rest."""
    ranked = sorted(CATEGORIES, key=lambda c: (-scores[c], CATEGORIES.index(c)))
    if decided:
        ranked.remove(decided)
        ranked.insert(0, decided)
    top, second = ranked[0], ranked[1]
    s1, s2 = scores[top], scores[second]
    # Confidence: the share of the top two that the winner holds (0.5 tie .. 1.0 alone), times
    # how much evidence there is at all (one decisive 4.0 line gives 0.8). A decided fact is
    # read off the compat table, not inferred from the log: 1.0.
    confidence = 0.0 if s1 <= 0 else round(s1 / (s1 + s2) * (1 - math.exp(-s1 / 2.5)), 2)
    if decided:
        confidence = 1.0
    runner_up = second if s2 > 0 else None
    candidates: list[str] = []
    category = top
    if not decided and (s1 < MIN_SCORE or confidence < MIN_CONFIDENCE):
        candidates = [f"{c} ({scores[c]:.2f})" for c in ranked if scores[c] > 0 and c != "other"][:3]
        category = "other"
        if top != "other":
            runner_up = top if s1 > 0 else None
    # the lines that decided: the winner's own, and lines the live facts moved to it
    deciding = [h for h in hits if relabel.get(h.category, h.category) == top and h.weight > 0]
    deciding.sort(key=lambda h: -h.weight)
    evidence: list[str] = []
    reasons: list[str] = []
    for h in deciding:
        if h.line and h.line not in evidence and len(evidence) < 10:
            evidence.append(h.line)
        if h.why not in reasons:
            reasons.append(h.why)
    if category == "other" and top != "other":
        reasons = [f"not decided: best {top} {s1:.2f}, next {second} {s2:.2f}"] + reasons
    if decided and s2 > s1:
        reasons.append(f"decided by the live facts (tree step 1) over the log's {second} {s2:.2f}")
    # evidence is in log order, live facts first
    order = {h.line: (h.lineno or 0) for h in hits if h.line}
    evidence.sort(key=lambda ln: order.get(ln, 0))
    return Triage(category, evidence, reasons, NEXT_STEPS[category], confidence, runner_up, scores, candidates, hits)
