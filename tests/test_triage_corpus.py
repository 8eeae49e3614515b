"""The triage classifier measured on the real-log corpus (tests/data/logs, README tables).

Cross-validation: the main folder is split into stratified folds; for each fold the per-family
multipliers are fitted on the other folds only (``fit.fit_family_weights``) and the fold is
classified with them, with and without the lexical back-off, which is fitted for each fold on the
other folds and the held-out folders already tuned on (``fit.fit_backoff``; the shipped model has
seen every main-folder log, so it is not used here). The signal table itself is fixed by hand.
Per-category precision and recall are printed (run with -s to see them); the test fails below 90%
accuracy overall or 80% recall in any category, either way. The back-off is fitted on the main
folder and the folders tuned on alone (``TUNED_ON``; scripts/fit_triage_backoff.py refuses the
others), and classify asks it by default (``BACKOFF_BY_DEFAULT``): the figures of the folders never
tuned on are the signals' and the back-off's on logs neither has seen; those of the tuned-on folders
are no measure (the back-off was fitted on them), their floors only catch a regression. The held-out
folders are reported separately, each with a floor that catches a regression: `heldout/` (no rule
written against it), and `heldout2/` to `heldout6/`, each collected after the signals of its time
and labelled before triage ran. A folder whose misses were known when later signals were chosen no
longer measures unseen logs (`heldout2/` to `heldout4/`, and `heldout6/` since the toolkit,
driver-build and rendezvous signals, `heldout7/` since the cudarc, crun, CDI-name, DKMS-trigger,
bare-KeyError and Ray node-info signals, `heldout8/` since the device-plugin, CUDA 46/209, ggml,
LXD, Gloo connect and raylet signals and the wrapped-line, nested-quote, package-list and
echoed-argument reading, `heldout9/` since the docker-compose GPU reservation, LXC mount-hook,
cuInit CUDA_ERROR_UNKNOWN, slurmd MIG, TensorFlow libcuda, Ray driver-node, invalid-device-ordinal
and etcd rendezvous-store signals); `heldout10/` was collected and labelled after those, and
`heldout11/` while the tools' own message strings were swept into the signal table (without reading
it or the other folders never tuned on), and `heldout12/` during a second such sweep, and
`heldout13/` after that (measured at 39/60 by the signals alone and 47/60 with the back-off, its
misses were then tuned on: the NGC entrypoint, PTX-version, DKMS, enroot, Apptainer, TensorRT OOM,
FP8/FP4 and TensorRT-LLM peer-access signals were chosen knowing them, and the back-off is fitted on
it, so it is a tuned-on folder since), and `heldout14/` while that was done (measured at 39/54 by
the signals alone and 41/54 with the back-off, its misses were then tuned on the same way: the CUDA
error 200, dnf kernel-headers, Slurm NVML, LLVM/ptxas/XLA architecture, TensorRT-LLM tactic, old
cuDNN and PTX-provider signals, and the back-off is fitted on it), and `heldout15/` while that was
done (measured at 47/52 both ways, its misses were then tuned on: the nvidia-container-cli NVML
mismatch reading, RPM Fusion's nouveau fallback, Ollama's runner exit, Triton's fp8e4nv assertion
and NCCL's own allocation failure as a family of its own, and the back-off is fitted on it), and
`heldout16/` while that was done (measured at 34/40 with the back-off and 30/40 by the signals
alone, its misses were then tuned on: the CUDAnative.jl/CUDA.jl toolkit-above-driver, accelerate
device-map, JAX CUDA-library and TensorRT-LLM unsupported-architecture signals, and the back-off is
fitted on it), and `heldout17/` while that was done (measured at 38/46 with the back-off and 36/46
by the signals alone, its misses were then tuned on: the cuda-python libcuda dlopen, sinfo's cut
Slurm GPU-count reason, SGLang sm75 floor, llama-cpp-python CPU-build and ONNX Runtime
provider-library signals, and the back-off is fitted on it), and `heldout18/` while that was done
(measured at 39/53 with the back-off and 35/53 by the signals alone, its misses were then tuned on:
the CTranslate2, PyTorch cudaMallocAsync (ComfyUI), Whisperer, TGI shard-size and Unsloth
torch-version signals, beside a sweep of other stacks' out-of-memory texts, and the back-off is
fitted on it), and `heldout19/` while that was done (measured at 40/48 with the back-off and 36/48
by the signals alone, its misses were then tuned on: the cut TensorFlow DSO mismatch, XLA's older
"Resource exhausted" status and candle-vllm KV-head division signals, beside a sweep of driver,
installer and daemon texts, and the back-off is fitted on it), and `heldout20/` while that was done
(measured at 45/53 with the back-off and 38/53 by the signals alone, its misses were then tuned on:
the kernel driver's refusal of a GPU it does not drive, DCGM's host engine failing NVML and TGI's
max_new_tokens limit signals, and the back-off is fitted on it), and `heldout21/` while that was
done (measured at 49/58 with the back-off and 47/58 by the signals alone, its misses were then tuned
on: the TGI warmup, bitsandbytes cuBLASLt and Warp stub-libcuda signals, beside a sweep of
model-loading texts, and the back-off is fitted on it), and `heldout22/` while that was done
(measured at 38/43 with the back-off and 33/43 by the signals alone, its misses were then tuned on:
the dockershim handler, TurboMind out-of-memory, TensorRT-LLM engine, XLA clique and git signals,
beside a sweep of Kubernetes and Slurm node-side container texts, and the back-off is fitted on it),
and `heldout23/` while that was done (measured at 47/51 with the back-off and 42/51 by the signals
alone, its misses were then tuned on: the typographic-quote reading and the LXC hook and device-mount,
TensorRT and Caffe2 out-of-memory, TGI shard, Ray raylet and jaxlib signals, and the back-off is
fitted on it), and `heldout24/` while that was done (measured once at 43/50 with the back-off and
41/50 by the signals alone). The 90% target of issue #35 is asserted on the folders never tuned on
(`heldout/`, `heldout5/`, `heldout10/`, `heldout11/`, `heldout12/` and `heldout24/`) taken together:
232/257 = 90.3% (217/257 by the signals alone), with no log to spare. The five older ones alone had
reached it when the back-off was refitted with
`heldout15/` (187/207) and with each later tuned-on folder (188/207, 187/207, 189/207, 188/207,
188/207, 188/207, 188/207), and fell below it each time a blind folder joined them (with `heldout16/`
221/247, `heldout17/` 225/253, `heldout18/` 227/260, `heldout19/` 227/255, `heldout21/` 237/265),
except `heldout20/` (234/260, with no log to spare), `heldout22/` (226/250), `heldout23/` (235/258)
and `heldout24/` (232/257, with no log to spare).
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest
from support import DATA, ROOT

from k3rollout.checks.triage import CATEGORIES, classify, scan
from k3rollout.checks.triage.fit import fit_backoff, fit_family_weights

LOGS = DATA / "logs"
HELDOUT = LOGS / "heldout"
# collected after the vLLM/NVML signals were written, labelled before triage ran on them
FRESH = LOGS / "heldout2"
# collected after the Gloo/NVRM/device-node signals, by symptom searches, labelled before triage ran
THIRD = LOGS / "heldout3"
# collected after the Ray/Gloo-family/bfloat16/forked-CUDA signals, the same way
FOURTH = LOGS / "heldout4"
# collected after the ggml-OOM/flash-attention/torchrun/Open MPI signals, the same way
FIFTH = LOGS / "heldout5"
# collected after the vLLM 0.33 raise-site and NVML-text signals, the same way
SIXTH = LOGS / "heldout6"
# collected after the toolkit, driver-build and rendezvous signals (chosen knowing heldout6's
# misses), the same way, at most three logs a search; its own misses were then tuned on
SEVENTH = LOGS / "heldout7"
# collected after the cudarc, crun, CDI-name, DKMS-trigger and Ray node-info signals (chosen knowing
# heldout7's misses), the same way, at most three logs a search; its own misses were then tuned on
EIGHTH = LOGS / "heldout8"
# collected after the device-plugin, CUDA 46/209, ggml, LXD, Gloo connect and raylet signals and the
# wrapped-line, nested-quote, package-list and echoed-argument reading (chosen knowing heldout8's
# misses), the same way, at most three logs a search; its own misses were then tuned on
NINTH = LOGS / "heldout9"
# collected after the docker-compose, LXC, MIG, Ray driver-node and etcd signals (chosen knowing
# heldout9's misses), the same way, at most three logs a search
TENTH = LOGS / "heldout10"
# collected after the signals heldout10 was measured with, by symptom searches fixed before any
# result was read, at most three logs a search, labelled before triage ran
ELEVENTH = LOGS / "heldout11"
# collected after heldout11 was measured (the Slurm/Apptainer sweep), by symptom searches fixed
# before any result was read, at most three logs a search, labelled before triage ran
TWELFTH = LOGS / "heldout12"
# collected after heldout12 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran
THIRTEENTH = LOGS / "heldout13"
# collected after heldout13 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
FOURTEENTH = LOGS / "heldout14"
# collected after heldout14 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
FIFTEENTH = LOGS / "heldout15"
# collected after heldout15 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
SIXTEENTH = LOGS / "heldout16"
# collected after heldout16 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
SEVENTEENTH = LOGS / "heldout17"
# collected after heldout17 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
EIGHTEENTH = LOGS / "heldout18"
# collected after heldout18 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
NINETEENTH = LOGS / "heldout19"
# collected after heldout19 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
TWENTIETH = LOGS / "heldout20"
# collected after heldout20 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
TWENTY_FIRST = LOGS / "heldout21"
# collected after heldout21 was measured, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
TWENTY_SECOND = LOGS / "heldout22"
# collected after heldout22 was collected, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran; its misses were tuned on after
TWENTY_THIRD = LOGS / "heldout23"
# collected after heldout23 was collected, by symptom searches fixed before any result was read, at
# most three logs a search, labelled before triage ran
TWENTY_FOURTH = LOGS / "heldout24"
FOLDS = 5
# the held-out folders whose misses were known when signals were chosen: with the main folder,
# what the lexical back-off is fitted on (scripts/fit_triage_backoff.py); the others measure
# triage on logs nothing was tuned or fitted to
TUNED_ON = [FRESH, THIRD, FOURTH, SIXTH, SEVENTH, EIGHTH, NINTH, THIRTEENTH, FOURTEENTH, FIFTEENTH, SIXTEENTH,
            SEVENTEENTH, EIGHTEENTH, NINETEENTH, TWENTIETH, TWENTY_FIRST, TWENTY_SECOND, TWENTY_THIRD]
NEVER_TUNED_ON = [HELDOUT, FIFTH, TENTH, ELEVENTH, TWELFTH, TWENTY_FOURTH]


def table(folder: Path) -> list[dict[str, str]]:
    """Rows (file, category, noise, decisive, source) of a folder's README table."""
    rows = []
    for line in (folder / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].endswith(".log"):
            rows.append(dict(zip(("file", "category", "noise", "decisive", "source"), cells, strict=True)))
    return rows


def corpus(folder: Path) -> list[tuple[str, str, str]]:
    return [(r["file"], r["category"], (folder / r["file"]).read_text(errors="replace")) for r in table(folder)]


def stratified_folds(items: list[tuple[str, str, str]], k: int) -> list[list[int]]:
    """Deterministic stratified folds: each category's files, sorted by name, dealt round-robin."""
    folds: list[list[int]] = [[] for _ in range(k)]
    by_cat: dict[str, list[int]] = {}
    for i, (_name, cat, _) in enumerate(items):
        by_cat.setdefault(cat, []).append(i)
    n = 0
    for cat in sorted(by_cat):
        for i in sorted(by_cat[cat], key=lambda j: items[j][0]):
            folds[n % k].append(i)
            n += 1
    return folds


def report(pairs: list[tuple[str, str]], title: str) -> tuple[float, dict[str, float]]:
    """Print per-category precision/recall for (true, predicted) pairs; return accuracy, recalls."""
    acc = sum(t == p for t, p in pairs) / len(pairs)
    recalls = {}
    print(f"\n{title}: {sum(t == p for t, p in pairs)}/{len(pairs)} = {acc:.1%}")
    print(f"  {'category':<20} {'n':>4} {'precision':>10} {'recall':>8}")
    for cat in CATEGORIES:
        tp = sum(t == p == cat for t, p in pairs)
        n_true = sum(t == cat for t, _ in pairs)
        n_pred = sum(p == cat for _, p in pairs)
        prec = tp / n_pred if n_pred else float("nan")
        rec = tp / n_true if n_true else float("nan")
        recalls[cat] = rec
        print(f"  {cat:<20} {n_true:>4} {prec:>10.1%} {rec:>8.1%}")
    return acc, recalls


def test_corpus_is_large_real_cited_and_misleading():
    main, held = table(LOGS), table(HELDOUT)
    rows = main + held
    assert len(rows) >= 120
    assert len(held) == 30
    counts = Counter(r["category"] for r in rows)
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 15, counts
    assert set(Counter(r["category"] for r in held)) == set(CATEGORIES)
    for folder, t in ((LOGS, main), (HELDOUT, held)):
        assert sorted(r["file"] for r in t) == sorted(p.name for p in folder.glob("*.log")), folder
    assert len({r["file"] for r in rows}) == len(rows), "a file name is used twice"
    for r in rows:
        assert r["source"] and r["decisive"], r["file"]
    cited = [r for r in rows if "https://" in r["source"]]
    assert len(cited) >= len(rows) - 5
    # misleading: another category's signal matches some line, NCCL INFO lines in a log that is not
    # a communication failure, or noise the README names
    misleading = 0
    for folder, t in ((LOGS, main), (HELDOUT, held)):
        for r in t:
            text = (folder / r["file"]).read_text(errors="replace")
            cross = {h.category for h in scan(text)} - {r["category"]}
            info_noise = "NCCL INFO" in text and r["category"] != "communication"
            misleading += bool(cross or info_noise or r["noise"] != "-")
    assert misleading * 3 >= len(rows), f"{misleading} of {len(rows)} misleading"


def test_cross_validated_accuracy_and_recall():
    items = corpus(LOGS)
    folds = stratified_folds(items, FOLDS)
    assert sorted(i for f in folds for i in f) == list(range(len(items)))
    # the back-off learns from the training folds and the held-out folders already tuned on,
    # never from the fold it is judged on (the shipped model has seen every main-folder log)
    tuned = [(text, cat) for folder in TUNED_ON for _, cat, text in corpus(folder)]
    fitted, backed, hand = [], [], []
    for k, test_idx in enumerate(folds):
        train = [(items[i][2], items[i][1]) for j, f in enumerate(folds) if j != k for i in f]
        weights = fit_family_weights(train)
        model = fit_backoff(train + tuned)
        for i in test_idx:
            name, cat, text = items[i]
            fitted.append((cat, classify(text, weights=weights, backoff=False).category))
            backed.append((cat, classify(text, weights=weights, backoff=model).category))
            hand.append((cat, classify(text, backoff=False).category))
    report(hand, f"hand weights, {len(items)} logs")
    for pairs, title in ((fitted, "family weights fitted on training folds"),
                         (backed, "family weights and back-off fitted on training folds")):
        acc, recalls = report(pairs, f"{FOLDS}-fold cross-validation ({title})")
        assert acc >= 0.90
        for cat, rec in recalls.items():
            assert rec >= 0.80, (cat, rec)


def test_the_backoff_is_fitted_on_the_training_folders_only():
    # scripts/fit_triage_backoff.py reads the main folder and the folders tuned on, and refuses the
    # rest (tests/unit/test_triage_backoff.py); a new folder must be put on one side explicitly
    spec = importlib.util.spec_from_file_location("fit_triage_backoff", ROOT / "scripts" / "fit_triage_backoff.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert [LOGS / f for f in script.TRAINING] == [LOGS / ".", *TUNED_ON]
    assert [LOGS / f for f in script.NEVER_TUNED] == NEVER_TUNED_ON
    assert {p for p in LOGS.iterdir() if p.is_dir()} == set(TUNED_ON) | set(NEVER_TUNED_ON)


def test_heldout_accuracy_is_reported_separately():
    items = corpus(HELDOUT)
    pairs = []
    for name, cat, text in items:
        got = classify(text).category
        pairs.append((cat, got))
        if got != cat:
            print(f"  held-out miss: {name}: {cat} -> {got}")
    acc, _ = report(pairs, "held-out folder (no rule written against it)")
    # reported, not tuned against; the floor only catches a classifier that has stopped working
    assert acc >= 0.5


def test_fresh_heldout_is_real_cited_and_new():
    rows = table(FRESH)
    assert sorted(r["file"] for r in rows) == sorted(p.name for p in FRESH.glob("*.log"))
    assert len(rows) >= 50 and {r["category"] for r in rows} == set(CATEGORIES)
    assert all(r["source"].startswith("https://github.com/") and r["decisive"] for r in rows)
    seen = {r["source"] for r in table(LOGS) + table(HELDOUT)}
    assert not seen & {r["source"] for r in rows}, "a fresh log comes from a thread already in the corpus"


def fresh_accuracy() -> float:
    return folder_accuracy(FRESH, "fresh held-out folder (collected after the rules, labelled before triage ran)")


def test_fresh_heldout_accuracy_is_reported_and_does_not_regress():
    # 50/57 = 87.7% when the folder was closed. Its seven misses were then known when the Gloo,
    # NVRM and device-node signals were written (from the tools' sources, not from these logs),
    # so the folder no longer measures logs nobody has seen: 54/57 after them (55/57 after the vLLM
    # 0.33 and NVML-text signals) is reported, and the floor only catches a regression. The 90%
    # target is measured on the folders never tuned on.
    assert fresh_accuracy() >= 0.85


# a left-out thread that an earlier folder's README names as another thread's report, in its
# "owner/repo#N (the same report as ..." or "(a second thread of the report ..." words
SAME_REPORT = re.compile(r"([\w.-]+/[\w.-]+)#(\d+) \((?:the same report as|a second thread of the report)")
# taken before the check above existed: heldout23's kubeflow log (heldout21 cites its first thread);
# it was found after heldout23's run, so it stays and is counted, as that folder's README says
TAKEN_BEFORE_THE_CHECK = {"https://github.com/kubeflow/kubeflow/issues/1262"}


def check_new_heldout(folder: Path, earlier: list[Path]) -> None:
    """A held-out folder's rows match its files, cover every category, cite GitHub threads, and
    share no thread and no file name with the main folder or an earlier held-out folder, nor take a
    thread an earlier folder left out as a second thread of a report it cites."""
    rows = table(folder)
    assert sorted(r["file"] for r in rows) == sorted(p.name for p in folder.glob("*.log"))
    assert len(rows) >= 40 and {r["category"] for r in rows} == set(CATEGORIES)
    assert all(r["source"].startswith("https://github.com/") and r["decisive"] for r in rows)
    before = [r for f in [LOGS, *earlier] for r in table(f)]
    assert not {r["source"] for r in before} & {r["source"] for r in rows}, \
        "a held-out log comes from a thread already in the corpus"
    assert not {r["file"] for r in before} & {r["file"] for r in rows}, "a file name is used twice"
    seconds = {f"https://github.com/{repo}/{kind}/{n}" for f in [LOGS, *earlier]
               for repo, n in SAME_REPORT.findall((f / "README.md").read_text()) for kind in ("issues", "pull")}
    taken = {r["source"] for r in rows} & seconds - TAKEN_BEFORE_THE_CHECK
    assert not taken, f"{folder.name} takes a second thread of a report already in the corpus: {sorted(taken)}"


def folder_accuracy(folder: Path, title: str) -> float:
    pairs = []
    for name, cat, text in corpus(folder):
        got = classify(text).category
        pairs.append((cat, got))
        if got != cat:
            print(f"  {folder.name} miss: {name}: {cat} -> {got}")
    acc, _ = report(pairs, title)
    return acc


# the held-out folders in the order they were collected: each is checked against those before it
ORDER = [HELDOUT, FRESH, THIRD, FOURTH, FIFTH, SIXTH, SEVENTH, EIGHTH, NINTH, TENTH, ELEVENTH, TWELFTH, THIRTEENTH,
         FOURTEENTH, FIFTEENTH, SIXTEENTH, SEVENTEENTH, EIGHTEENTH, NINETEENTH, TWENTIETH, TWENTY_FIRST,
         TWENTY_SECOND, TWENTY_THIRD, TWENTY_FOURTH]


@pytest.mark.parametrize("folder", ORDER[2:], ids=lambda f: f.name)
def test_heldout_folder_is_real_cited_and_new(folder: Path) -> None:
    check_new_heldout(folder, ORDER[:ORDER.index(folder)])


# Each held-out folder's floor, two logs or so below its figure: it catches a regression, it is not
# the target (the target is asserted on the folders never tuned on, below). Above each, the
# folder's figure when it was closed and after its misses were tuned on; each folder's README
# lists its misses.
FLOORS: dict[Path, float] = {
    # 32/41 = 78.0% when the folder was closed (the same before and after the Gloo/NVRM/device-node
    # signals). Its misses were then known when the Ray, Gloo address-family, bfloat16, forked-CUDA
    # and exec-format signals were chosen: 35/41 after them (36/41 after the vLLM 0.33 and NVML-text
    # signals, 37/41 after the source-harvested ones, whose undefined-symbol family was chosen knowing
    # nvidia-docker-undefined-nvmlinit-v2-driver-304.log's miss), no longer a figure for unseen logs.
    # The floor catches a regression, it is not the target
    THIRD: 0.75,
    # 24/40 = 60.0% when the folder was closed (the same with the signals of every earlier
    # commit). Its misses were then known when the ggml OOM, flash-attention, torchrun rendezvous
    # and Open MPI signals were chosen: 28/40 after them (31/40 after the source-harvested signals:
    # NCCL's socket close, and Slurm's PMIx fence timeout, looked up knowing
    # deepops-srun-two-nodes-pmix-collective-timeout.log's miss), no longer a figure for unseen logs.
    # The floor catches a regression, it is not the target
    FOURTH: 0.55,
    # 37/41 = 90.2% when the folder was closed; 41 logs put a wide margin on that figure.
    # The floor catches a regression, it is not the target
    FIFTH: 0.85,
    # 36/51 = 70.6% when the folder was closed, run once on the signals it was collected after.
    # Its misses were then known when the level-parser fix and the container toolkit, crun,
    # Docker --gpus, CUDA unknown error, driver build, NCCL internal error, Gloo, c10d store and
    # Ray Redis signals were chosen: 48/51 after them, no longer a figure for unseen logs.
    # The floor catches a regression, it is not the target
    SIXTH: 0.9,
    # 34/42 = 81.0% when the folder was closed, run once on the signals it was collected after
    # (33/42 with the signals before them). Its eight misses were then known when the cudarc,
    # crun, CDI-name, DKMS-trigger, nvidia-docker 1.0, CUDA initialization-error, bare-KeyError and
    # Ray node-info signals were chosen: 42/42 after them, no longer a figure for unseen logs.
    # The floor (two logs below) catches a regression, it is not the target
    SEVENTH: 0.95,
    # 35/54 = 64.8% when the folder was closed, run once on the signals it was collected after.
    # Its nineteen misses were then known when the device-plugin resource-manager, CUDA error 46
    # and 209, ggml OOM, vLLM no-parameter, cudarc symbol, LXD device, Gloo connect and raylet
    # signals were chosen, with the reading of wrapped lines, nested quotes, package listings and
    # echoed arguments: 51/54 after them, no longer a figure for unseen logs.
    # The floor (two logs below) catches a regression, it is not the target
    EIGHTH: 0.9,
    # 34/51 = 66.7% when the folder was closed, run once on the signals it was collected after
    # (tests/data/logs/heldout9/README.md lists the seventeen misses). They were then known when
    # the docker-compose GPU reservation, LXC mount-hook, cuInit CUDA_ERROR_UNKNOWN, slurmd MIG,
    # TensorFlow libcuda, Ray driver-node, invalid-device-ordinal and etcd rendezvous-store signals
    # were chosen: 45/51 after them, no longer a figure for unseen logs.
    # The floor (two logs below) catches a regression, it is not the target
    NINTH: 0.84,
    # 28/44 = 63.6% when the folder was closed, run once on the signals it was collected after
    # (tests/data/logs/heldout10/README.md lists the sixteen misses).
    # The floor (two logs below) catches a regression, it is not the target
    TENTH: 0.59,
    # 36/41 = 87.8% when the folder was closed, run once on the signals swept from the tools' own
    # sources (tests/data/logs/heldout11/README.md lists the five misses); 34/41 with the signals
    # before that sweep. The floor (two logs below) catches a regression, it is not the target
    ELEVENTH: 0.82,
    # 42/51 = 82.4% when the folder was closed, run once on the signals of the second sweep of the
    # tools' own strings (also 42/51 on the first sweep's, 40/51 before either;
    # tests/data/logs/heldout12/README.md lists the nine misses).
    # The floor (two logs below) catches a regression, it is not the target
    TWELFTH: 0.78,
    # 39/60 = 65.0% when the folder was closed, run once on the signals of "Triage: transformers
    # missing flash-attn or accelerate" (tests/data/logs/heldout13/README.md lists the 21 misses);
    # 47/60 = 78.3% with the lexical back-off, fitted without it and run on it once when frozen.
    # Its misses were then tuned on (the NGC entrypoint, PTX-version, DKMS, enroot, Apptainer,
    # TensorRT OOM, FP8/FP4 and peer-access signals, and the back-off refitted with it): 54/60 by
    # the signals alone and 59/60 with the back-off after them, no longer a figure for unseen logs.
    # The floor (two logs below) catches a regression, it is not the target
    THIRTEENTH: 0.75,
    # 41/54 = 75.9% when the folder was closed, run once on the signals and the back-off of the
    # heldout13 round (39/54 = 72.2% by the signals alone; tests/data/logs/heldout14/README.md
    # lists the misses). Its misses were then tuned on (the CUDA error 200, dnf kernel-headers,
    # Slurm NVML, LLVM/ptxas/XLA architecture, TensorRT-LLM tactic, old cuDNN and PTX-provider
    # signals, and the back-off refitted with it): 47/54 by the signals alone and 53/54 with the
    # back-off after them, no longer a figure for unseen logs (48/54 by the signals alone since the
    # heldout18 round's ggml compute-buffer signal).
    # The floor (two logs below) catches a regression, it is not the target
    FOURTEENTH: 0.72,
    # 47/52 = 90.4% when the folder was closed, run once on the signals and the back-off of the
    # heldout14 round, the same by the signals alone (tests/data/logs/heldout15/README.md lists the
    # misses). Its misses were then tuned on (the nvidia-container-cli NVML mismatch reading, RPM
    # Fusion's nouveau fallback, Ollama's runner exit, Triton's fp8e4nv assertion and NCCL's
    # allocation family, and the back-off refitted with it): 52/52 by the signals alone and 52/52
    # with the back-off after them, no longer a figure for unseen logs.
    # The floor (two logs below) catches a regression, it is not the target
    FIFTEENTH: 0.86,
    # 34/40 = 85.0% when the folder was closed, run once on the signals and the back-off of the
    # heldout15 round (30/40 = 75.0% by the signals alone; tests/data/logs/heldout16/README.md
    # lists the misses). Its misses were then tuned on (the CUDAnative.jl/CUDA.jl, accelerate
    # device-map, JAX CUDA-library and TensorRT-LLM architecture signals, and the back-off refitted
    # with it): 34/40 by the signals alone and 39/40 with the back-off after them, no longer a
    # figure for unseen logs. The floor (two logs below) catches a regression, it is not the target
    SIXTEENTH: 0.92,
    # 38/46 = 82.6% when the folder was closed, run once on the signals and the back-off of the
    # heldout16 round (36/46 = 78.3% by the signals alone; tests/data/logs/heldout17/README.md
    # lists the misses). Its misses were then tuned on (the cuda-python libcuda dlopen, sinfo's cut
    # GPU-count reason, SGLang sm75, llama-cpp-python CPU-build and ONNX Runtime provider-library
    # signals, and the back-off refitted with it): 39/46 by the signals alone and 43/46 with the
    # back-off after them, no longer a figure for unseen logs (40/46 by the signals alone since the
    # heldout18 round's ExLlamaV2 signal). The floor (two logs below) catches a regression, it is not
    # the target
    SEVENTEENTH: 0.89,
    # 39/53 = 73.6% when the folder was closed, run once on the signals and the back-off of the
    # heldout17 round (35/53 = 66.0% by the signals alone; tests/data/logs/heldout18/README.md
    # lists the misses). Its misses were then tuned on (the CTranslate2, PyTorch cudaMallocAsync
    # (ComfyUI), Whisperer, TGI shard-size and Unsloth torch-version signals, and the back-off
    # refitted with it): 41/53 by the signals alone and 47/53 with the back-off after them (48/53
    # with the back-off refitted in the heldout23 round), no longer a figure for unseen logs. The
    # floor (two logs below) catches a regression, it is not the target
    EIGHTEENTH: 0.84,
    # 40/48 = 83.3% when the folder was closed, run once on the signals and the back-off of the
    # heldout18 round (36/48 = 75.0% by the signals alone; tests/data/logs/heldout19/README.md
    # lists the misses). Its misses were then tuned on (the cut TensorFlow DSO mismatch, XLA's older
    # "Resource exhausted" status and candle-vllm KV-head division signals, and the back-off refitted
    # with it): 40/48 by the signals alone and 46/48 with the back-off after them (45/48 with the
    # back-off refitted in the heldout21 round, 46/48 again with the one refitted in the heldout22
    # round), no longer a figure for unseen logs. The floor (two logs below) catches a regression, it
    # is not the target
    NINETEENTH: 0.91,
    # 45/53 = 84.9% when the folder was closed, run once on the signals and the back-off of the
    # heldout19 round (38/53 = 71.7% by the signals alone; tests/data/logs/heldout20/README.md
    # lists the misses). Its misses were then tuned on (the kernel driver's refusal of a GPU it does
    # not drive, DCGM's host engine failing NVML and TGI's max_new_tokens limit signals, and the
    # back-off refitted with it): 40/53 by the signals alone and 49/53 with the back-off after them,
    # no longer a figure for unseen logs. The floor (two logs below) catches a regression, it is not
    # the target
    TWENTIETH: 0.88,
    # 49/58 = 84.5% when the folder was closed, run once on the signals and the back-off of the
    # heldout20 round (47/58 = 81.0% by the signals alone; tests/data/logs/heldout21/README.md
    # lists the misses). Its misses were then tuned on (the TGI warmup, bitsandbytes cuBLASLt and
    # Warp stub-libcuda signals, and the back-off refitted with it): 50/58 by the signals alone and
    # 54/58 with the back-off after them, no longer a figure for unseen logs. The floor (two logs
    # below) catches a regression, it is not the target
    TWENTY_FIRST: 0.89,
    # 38/43 = 88.4% when the folder was closed, run once on the signals and the back-off of the
    # heldout21 round (33/43 = 76.7% by the signals alone; tests/data/logs/heldout22/README.md
    # lists the misses). Its misses were then tuned on (the dockershim handler, TurboMind
    # out-of-memory, TensorRT-LLM engine, XLA clique and git signals, and the back-off refitted with
    # it): 40/43 by the signals alone and 41/43 with the back-off after them, no longer a figure for
    # unseen logs. The floor (two logs below) catches a regression, it is not the target
    TWENTY_SECOND: 0.9,
    # 47/51 = 92.2% when the folder was closed, run once on the signals and the back-off of the
    # heldout22 round (42/51 = 82.4% by the signals alone; tests/data/logs/heldout23/README.md
    # lists the misses). Its misses were then tuned on (the typographic-quote reading and the LXC
    # hook and device-mount, TensorRT and Caffe2 out-of-memory, TGI shard, Ray raylet and jaxlib
    # signals, and the back-off refitted with it): 50/51 by the signals alone and 50/51 with the
    # back-off after them, no longer a figure for unseen logs. The floor (two logs below) catches a
    # regression, it is not the target
    TWENTY_THIRD: 0.94,
    # 43/50 = 86.0% when the folder was closed, run once on the signals and the back-off of the
    # heldout23 round (41/50 = 82.0% by the signals alone; tests/data/logs/heldout24/README.md
    # lists the misses). The floor (two logs below) catches a regression, it is not the target
    TWENTY_FOURTH: 0.82,
}


@pytest.mark.parametrize("folder", list(FLOORS), ids=lambda f: f.name)
def test_heldout_folder_accuracy_is_reported_and_does_not_regress(folder: Path) -> None:
    assert folder_accuracy(folder, f"held-out folder {folder.name}") >= FLOORS[folder]


def never_tuned_on_accuracy() -> float:
    """Accuracy on `heldout/`, `heldout5/`, `heldout10/`, `heldout11/` and `heldout12/` together: no
    signal was chosen knowing their misses (the vLLM 0.33 signals left heldout5's figure as it was, the
    toolkit, driver-build and rendezvous signals too, and those chosen on heldout7's, heldout8's
    and heldout9's misses; the wrapped-line reading, written for heldout8's, also reads one of
    heldout5's; heldout10 was collected after them; the sweep of the tools' own message strings
    was written without reading these four folders, and heldout11 was collected and labelled
    while it was written, by symptom searches fixed before any result was read; heldout12 the same
    way during the second sweep, which was written without reading any of the five; heldout13, collected
    after heldout12 was measured, left them when its misses were tuned on; heldout14, collected
    while that was done, left them the same way; heldout15, collected while heldout14's round was
    written, left them when its misses were tuned on; heldout16, collected while heldout15's round
    was written, left them the same way; heldout17, collected blind while heldout16's round was
    written, left them when its misses were tuned on; heldout18, collected blind while heldout17's
    round was written, left them the same way; heldout19, collected blind while heldout18's round
    was written, left them the same way; heldout20, collected blind while heldout19's round was
    written, left them the same way; heldout21, collected blind while heldout20's round was written,
    left them the same way; heldout22, collected blind while heldout21's round was written, left
    them the same way; heldout23, collected blind while heldout22's round was written, left them the
    same way), and `heldout24/`, collected blind while heldout23's round was written and run once
    after it."""
    pairs = [(cat, classify(text).category) for folder in NEVER_TUNED_ON for _, cat, text in corpus(folder)]
    acc, _ = report(pairs, "held-out folders never tuned on (heldout, heldout5, heldout10, heldout11, heldout12, "
                    "heldout24)")
    return acc


def test_unseen_heldout_reaches_the_90_percent_target():
    # issue #35 asks for 90% on logs triage has never seen. On heldout, heldout5, heldout10, heldout11,
    # heldout12 and heldout24 it is 232/257 = 90.3% with the lexical back-off (217/257 = 84.4% by the
    # signals alone), with no log to spare (231/257 would be 89.9%); heldout24, collected blind during
    # the heldout23 round and run once after it, 43/50 = 86.0%, the five others 189/207 = 91.3%;
    # docs/domain.md. heldout23, on this side while it was unseen, had taken the six folders to
    # 235/258 = 91.1%; heldout22 before it to 226/250 = 90.4%; heldout21 to 237/265 = 89.4%, an
    # expected failure.
    assert never_tuned_on_accuracy() >= 0.90


@pytest.mark.parametrize("name,category,text", corpus(LOGS), ids=lambda v: v if isinstance(v, str) and
                         v.endswith(".log") else "")
def test_every_decision_names_lines_runner_up_and_confidence(name, category, text):
    t = classify(text)
    assert 0.0 <= t.confidence <= 1.0
    assert t.runner_up is None or t.runner_up in CATEGORIES and t.runner_up != t.category
    assert set(t.scores) == set(CATEGORIES)
    if t.category != "other":
        assert t.evidence, name
        for line in t.evidence:
            assert line in text and "NCCL INFO" not in line
    elif t.candidates:
        assert t.reasons[0].startswith("not decided")


def test_fitting_moves_family_weights_toward_the_labels_and_stays_bounded():
    # hand weights call this OOM; if the training folds say such logs are communication failures,
    # the fit must trust gpu_memory less and the NCCL families more, within its bounds
    text = "x:1:2 [0] NCCL WARN Cuda failure 'invalid resource handle'\nRuntimeError: CUDA error: out of memory\n"
    assert classify(text).category == "model_load_capacity"
    w = fit_family_weights([(text, "communication")] * 3)
    assert w["gpu_memory"] < 1.0 and w["nccl_error"] > 1.0
    assert classify(text, weights=w).category == "communication"
    assert all(0.5 <= v <= 2.0 for v in w.values())
    with pytest.raises(ValueError):
        fit_family_weights([(text, "no_such_category")])
