"""Triage's lexical back-off (k3rollout/checks/triage/backoff.py): how it reads a line, that it is
asked only where the signals prove nothing and no live fact decides, that it can abstain, and
that its decision names its lines, a runner-up and a confidence. The shipped model is a fresh
fit of the training folders, and the fitting script refuses the folders never tuned on."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from support import DATA, ROOT

from k3rollout.checks.triage import (
    CATEGORIES,
    MIN_SCORE,
    classify,
    failure_lines,
    matched_lines,
    scan,
)
from k3rollout.checks.triage.backoff import Backoff, features, normalise, shipped, tokens, train
from k3rollout.checks.triage.fit import fit_backoff

LOGS = DATA / "logs"

# words no signal knows, one mechanism each; a model fitted on them answers from them alone
TOY = [
    ("frobnicator refused the gizmo handshake", "communication"),
    ("frobnicator refused the gizmo link twice", "communication"),
    ("widget quota exhausted on the loader", "model_load_capacity"),
    ("widget quota exhausted again", "model_load_capacity"),
    ("sprocket shim absent from the jar", "container_runtime"),
    ("sprocket shim absent here", "container_runtime"),
    ("flux capacitor too ancient", "driver_incompatible"),
    ("flux capacitor ancient firmware", "driver_incompatible"),
    ("tokenizer stencil typo", "other"),
    ("tokenizer stencil typo again", "other"),
]
COMM = "frobnicator refused the gizmo handshake"


@pytest.fixture(scope="module")
def toy() -> Backoff:
    return fit_backoff(TOY, {"margin": 1.0, "prior": "uniform"})


def load_script():
    spec = importlib.util.spec_from_file_location("fit_triage_backoff", ROOT / "scripts" / "fit_triage_backoff.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fit_triage_backoff", mod)
    spec.loader.exec_module(mod)
    return mod


def test_a_line_is_read_as_words_with_addresses_numbers_and_paths_normalised():
    line = ("ERROR 2024-01-02 Failed to open /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 at 10.0.0.2:29500 "
            "(0xdeadbeef) see https://x.io/a?b=c; cudaGetDeviceCount on GPU-4f1c2a9b-1234-5678 CUDA_ERROR_NO_DEVICE")
    ws = tokens(line)
    # a path keeps its last component, the rest is one placeholder word
    assert "path" in ws and {"libnvidia", "ml", "so"} <= set(ws) and not {"usr", "lib", "linux", "gnu"} & set(ws)
    # an address, a hex number, a URL and a GPU's UUID are placeholders, not their digits
    assert {"address", "hex", "url"} <= set(ws) and ws.count("hex") == 2
    assert not any(w.startswith(("deadbeef", "4f1c", "29500", "x86")) for w in ws)
    # camelCase and snake_case split into words, lower-cased; function words dropped
    assert ws[ws.index("cuda"):ws.index("cuda") + 4] == ["cuda", "get", "device", "count"]
    assert ["cuda", "error", "no", "device"] == ws[-4:]
    assert "to" not in ws and "on" not in ws and all(w == w.lower() for w in ws)
    # digits inside a word are one 0, so versions and ranks generalise
    assert tokens("CUDA12 sm_90 rank7") == ["cuda0", "sm", "rank0"]
    assert normalise("Tried 3 times") == "tried 0 times"
    assert features(["gizmo refused link"], bigrams=True) == {"gizmo", "refused", "link", "gizmo refused",
                                                               "refused link"}


def test_failure_lines_are_the_lines_that_say_something_failed():
    text = ("INFO 01-01 starting the server\n"
            "gpu-a03:1:1 [0] NCCL INFO NET/IB : No device found.\n"
            "[pip3] nvidia-nccl-cu12==2.21.5\n"
            "loading shards\n"
            "ValueError: the stencil has a typo\n"
            "worker exited: connection refused\n")
    assert failure_lines(text) == [(5, "ValueError: the stencil has a typo"), (6, "worker exited: connection refused")]
    # without a failing line, every line that is not INFO, NCCL INFO or a package listing
    assert failure_lines("INFO ok\nfrobnicator said bye\n") == [(2, "frobnicator said bye")]
    assert failure_lines(text, frozenset({5})) == [(6, "worker exited: connection refused")]


def test_it_abstains_on_text_with_no_known_word(toy):
    assert toy.guess(["qwxz vblorp"]) is None and toy.guess([]) is None
    for model in (toy, True):
        t = classify("qwxz vblorp zzrt\n", backoff=model)
        assert t.category == "other" and t.backoff == {"category": "other", "abstained": True, "known": 0}
        assert any(r.startswith("back-off: no word") for r in t.reasons)
    assert classify("", backoff=toy).category == "other"


def test_it_abstains_below_its_margin_and_answers_other_as_a_class(toy):
    # one word for each of two categories: too close to call
    t = classify("frobnicator exhausted\n", backoff=toy)
    assert t.category == "other" and t.backoff and t.backoff["abstained"] is True
    assert t.backoff["margin"] < toy.margin and any(r.startswith("back-off: abstains") for r in t.reasons)
    # the words of `other` make it answer other, not abstain
    t = classify("tokenizer stencil typo\n", backoff=toy)
    assert t.category == "other" and t.backoff and t.backoff["best"] == "other" and not t.backoff["abstained"]


def test_its_decision_names_its_lines_runner_up_confidence_and_that_it_came_from_the_back_off(toy):
    text = "loading the model\nwidget\n" + COMM + "\nbye\n"
    assert classify(text, backoff=False).category == "other"
    t = classify(text, backoff=toy)
    assert t.category == "communication" and t.evidence == [COMM]
    assert t.runner_up in CATEGORIES and t.runner_up != "communication"
    assert 0 < t.confidence <= toy.meta["precision"]
    assert t.reasons[0].startswith("back-off: communication") and "frobnicator" in t.reasons[0]
    assert t.backoff and t.backoff["category"] == "communication" and not t.backoff["abstained"]
    assert abs(sum(t.backoff["probabilities"].values()) - 1) < 1e-3
    assert [(h.family, h.lineno, h.line) for h in t.hits] == [("backoff", 3, COMM)]
    assert set(t.scores) == set(CATEGORIES) and max(t.scores.values()) < MIN_SCORE
    d = t.to_dict()
    assert d["backoff"]["category"] == "communication" and d["contributions"][0]["family"] == "backoff"
    assert "back-off: communication" in t.explain()


def test_it_never_overrides_a_signal_decision(toy):
    text = "RuntimeError: CUDA error: out of memory\n" + COMM + "\n"
    t = classify(text, backoff=toy)
    assert t.category == "model_load_capacity" and t.backoff is None


def test_it_is_asked_only_where_the_signals_prove_nothing_on_every_main_folder_log():
    for p in sorted(LOGS.glob("*.log")):
        text = p.read_text(errors="replace")
        alone, asked = classify(text, backoff=False), classify(text, backoff=True)
        if max(alone.scores.values()) >= MIN_SCORE:
            assert asked.category == alone.category and asked.backoff is None, p.name
        else:
            assert asked.backoff is not None, p.name


def test_it_never_overrides_a_driver_below_the_image_floor(toy):
    assert classify(COMM + "\n", backoff=toy).category == "communication"
    t = classify(COMM + "\n", driver="575.57.08", image_cuda="13.0.1", backoff=toy)
    assert t.category == "driver_incompatible" and t.confidence == 1.0 and t.backoff is None


def test_the_live_facts_act_on_its_probabilities_as_on_the_scores(toy):
    old = "flux capacitor too ancient\n"
    assert classify(old, backoff=toy).category == "driver_incompatible"
    # a driver new enough: driver-level words are the container's (tree step 2)
    t = classify(old, driver="580.65.06", image_cuda="13.0.1", backoff=toy)
    assert t.category == "container_runtime" and t.evidence == [old.strip()]
    # a launch that fails on one node alone is not communication
    assert classify(COMM + "\n", single_node_ok=False, backoff=toy).category != "communication"
    # a one-node replica dying at load: communication during load is step 3
    assert classify(COMM + "\n", nnodes=1, stage="vllm_smoke", backoff=toy).category == "model_load_capacity"


def test_a_line_a_signal_matched_is_not_read_again():
    # the c10d warning supports communication without deciding alone (test_triage_upstream.py):
    # a model that learned its words must not make it decide
    line = ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (head, 29500) cannot be retrieved "
            "(gai error: -2 - Name or service not known).")
    model = fit_backoff([(line, "communication")] * 3 + [("tokenizer stencil typo", "other")], {"margin": 1.0})
    assert failure_lines(line) and not failure_lines(line, matched_lines(scan(line)))
    t = classify(line + "\n", backoff=model)
    assert t.category == "other" and 0 < t.scores["communication"] < MIN_SCORE
    # the same words on a line no signal knows are read
    assert classify("Name or service not known, cannot be retrieved\n", backoff=model).category == "communication"


def test_training_counts_each_log_once_per_feature_and_drops_rare_features():
    docs = [({"a", "b"}, "other"), ({"a"}, "other"), ({"a", "c"}, "communication")]
    m = train(docs, CATEGORIES, alpha=1.0, min_df=2, bigrams=False, prior="empirical", margin=0.0)
    assert dict(m.counts) == {"a": (0, 0, 0, 1, 2)} and m.docs == (0, 0, 0, 1, 2)
    with pytest.raises(ValueError):
        train([({"a"}, "nonsense")], CATEGORIES, alpha=1.0, min_df=1, bigrams=False, prior="uniform", margin=0.0)
    with pytest.raises(ValueError):
        fit_backoff([("x", "nonsense")])


def test_the_shipped_model_is_a_fresh_fit_of_the_training_folders():
    script = load_script()
    text = script.SHIPPED.read_text(encoding="utf-8")
    assert script.fit().to_json() == text, "backoff.json is not what scripts/fit_triage_backoff.py writes"
    model = shipped()
    assert Backoff.from_json(text).to_json() == text and model.to_json() == text
    head = json.loads(text)
    assert head["training"] == {"folders": list(script.TRAINING), "logs": sum(model.docs)}
    assert tuple(head["classes"]) == CATEGORIES and model.margin > 0


def test_the_fitting_script_refuses_the_folders_never_tuned_on(tmp_path, monkeypatch):
    script = load_script()
    assert not set(script.TRAINING) & set(script.NEVER_TUNED)
    # it refuses before it opens anything: with the corpus moved away, the refusal still comes
    monkeypatch.setattr(script, "LOGS", tmp_path / "nowhere")
    for folder in (*script.NEVER_TUNED, "heldout25", "../logs"):
        with pytest.raises(script.NeverTuned):
            script.table(folder)
        with pytest.raises(script.NeverTuned):
            script.read_folder(folder)


def test_the_default_asks_the_shipped_model_unless_switched_off(monkeypatch, tmp_path, capsys):
    import k3rollout.checks.triage as triage
    from k3rollout.cli import main

    line = "podman: nvidia.com/gpu=all device could not be injected into the container"
    assert classify(line + "\n", backoff=False).category == "other"
    on = classify(line + "\n", backoff=True)
    assert on.category == "container_runtime" and on.evidence == [line]
    monkeypatch.setattr(triage, "BACKOFF_BY_DEFAULT", False)
    assert classify(line + "\n").category == "other" and classify(line + "\n").backoff is None
    monkeypatch.setattr(triage, "BACKOFF_BY_DEFAULT", True)
    assert classify(line + "\n").category == "container_runtime"
    # the CLI asks it unless told --no-backoff
    log = tmp_path / "podman.log"
    log.write_text(line + "\n")
    assert main(["triage", "--json", "--no-backoff", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["category"] == "other"
    assert main(["triage", "--json", str(log)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["category"] == "container_runtime" and d["backoff"]["category"] == "container_runtime"
    assert d["evidence"] == [line] and d["reasons"][0].startswith("back-off: container_runtime")


def test_an_answer_no_single_line_carries_is_not_given():
    # "alpha" weighs against communication on both lines, "beta" and "gamma" for it on one each:
    # together communication wins by 8, yet no line of the log shows it, so there is no answer
    model = train([({"alpha", "beta", "gamma"}, c) for c in CATEGORIES], CATEGORIES, alpha=1.0, min_df=1,
                  bigrams=False, prior="uniform", margin=1.0)
    far = (-20.0, -20.0, -20.0)
    object.__setattr__(model, "loglik", {"alpha": (*far, -11.0, -1.0), "beta": (*far, -1.0, -10.0),
                                         "gamma": (*far, -1.0, -10.0)})
    guess = model.guess(["alpha beta", "alpha gamma"])
    assert guess and guess.category == "communication" and guess.margin == pytest.approx(8.0)
    assert model.deciding_lines([(1, "alpha beta"), (2, "alpha gamma")], "communication", "other") == []
    t = classify("alpha beta\nalpha gamma\n", backoff=model)
    assert t.category == "other" and t.backoff and t.backoff["abstained"] and t.backoff["best"] == "communication"
    assert any(r.startswith("back-off: no line carries communication") for r in t.reasons)
