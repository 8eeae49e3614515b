"""The run directory has one owner: ``RunDir`` (runlog/rundir.py) spells its file names, opens
and verifies an existing run, holds its approvals and finds the lock files that name it.
No other module of k3rollout spells a name of the layout (a registered transport, such as the
simulator in k3sim/, names the folder it keeps its hosts in), and the names are the ones
docs/guide.md publishes."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess

import pytest
from support import ROOT, write_inventory

from k3rollout.errors import InputError, LockHeld
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model import load_inventory
from k3rollout.runlog import rundir
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.rundir import RunDir, RunNeverStarted

PACKAGE = ROOT / "k3rollout"
OWNER = PACKAGE / "runlog" / "rundir.py"

# the layout's names: rundir's constants, and the journal's torn tail (named by the journal
# from its own file, runlog/journal.py ``torn_path``)
NAMES = sorted({v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str)} | {"journal.torn"})
# a plain word ("evidence", "approvals", "ansible") is the layout's only where a path is built
# of it; a suffix (".retry") only where a name is made with it
WORDS = [n for n in NAMES if re.fullmatch(r"[a-z]+", n)]
SUFFIXES = [n for n in NAMES if n.startswith(".")]
SPELLED = re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in NAMES if n not in WORDS + SUFFIXES) +
                     r")(?![\w-]|\.[A-Za-z])")
WORD_PATH = re.compile(r"^/?(?:" + "|".join(WORDS) + r")(?:/|$)")
PATH_CALLS = {"Path", "PurePath", "joinpath", "with_name", "join"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in WORDS


def spelled(source: str) -> list[tuple[int, str]]:
    """(line, text) of each place ``source`` spells a name of the run directory's layout:
    a string (docstrings aside) holding one of the file names, or a path built of one of
    the plain words (``run_dir / "evidence"``, ``Path(d, "approvals")``, ``APPROVALS = "approvals"``)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if (SPELLED.search(node.value) or node.value in SUFFIXES
                    or "/" in node.value and WORD_PATH.match(node.value)):
                out.append((node.lineno, node.value))
        elif (isinstance(node, ast.Assign) and _word(node.value)
              and any(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)):
            out.append((node.lineno, ast.unparse(node)))         # a name for it, to build paths of
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (_word(node.left) or _word(node.right)):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and any(_word(a) for a in node.args):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in PATH_CALLS:
                out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_module_but_rundir_spells_a_name_of_the_run_directory():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == OWNER:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {text!r}" for line, text in spelled(path.read_text())]
    assert not found, "spell these through RunDir (k3rollout/runlog/rundir.py):\n" + "\n".join(found)


def test_the_check_finds_each_way_of_spelling_a_name():
    """The check above is not vacuous: each form a path literal took before RunDir is found."""
    for code in ('p = run_dir / "journal.jsonl"', 'print(f"report: {run_dir / \'report.html\'}")',
                 'EvidenceStore(self.run_dir / "evidence")', 'x = root.parent / "ansible" / node',
                 'raise InputError("--history: no journal.jsonl here")', 'd = Path(run_dir, "approvals")',
                 'keep = path.with_name(f"journal.torn.{n}")', 'name = Path(pb).stem + ".retry"',
                 'root = f"{run_dir}/observe.lock"', 'p = "evidence/node"', 'p = f"{run_dir}/approvals/{x}"',
                 'help="the report (result.json) of a run"', 'APPROVALS = "approvals"'):
        assert spelled(code), code
    for code in ('"""Writes journal.jsonl and report.html."""', 'r = {"evidence": []}',
                 'evidence.write("_run", "approvals", "x.json", text)', 't = "report.html.j2"',
                 'log = "k3rollout-debug.log"', 'rec["evidence"]', 'x = ("ansible", 1)',
                 'cfg = "/etc/ansible/ansible.cfg"', 'IGNORED = r"(\\.md|\\.retry)$"'):
        assert not spelled(code), code


# ---------------------------------------------------------------- the layout


def test_the_paths_are_the_published_names(tmp_path):
    rd = RunDir(tmp_path)
    assert {k: getattr(rd, k).relative_to(tmp_path).as_posix() for k in (
        "journal", "evidence", "events", "inputs", "result", "report_json", "report_md", "report_html", "approvals",
        "observe_lock", "preflight_json", "preflight_md", "ansible", "debug_log")} == {
        "journal": "journal.jsonl", "evidence": "evidence", "events": "events.jsonl", "inputs": "inputs.json",
        "result": "result.json", "report_json": "report.json", "report_md": "report.md", "report_html": "report.html",
        "approvals": "approvals", "observe_lock": "observe.lock", "preflight_json": "preflight.json",
        "preflight_md": "preflight.md", "ansible": "ansible", "debug_log": "debug.log"}
    # a registered transport's own folder (the simulator's sim-hosts/), one plain name that is
    # none of the layout's
    assert rd.transport_state("sim-hosts") == tmp_path / "sim-hosts"
    for bad in ("evidence", "journal.jsonl", "../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="not a transport state folder name"):
            rd.transport_state(bad)
    assert rd.torn(4096) == tmp_path / "journal.torn.4096"
    assert rd.retry("/etc/k3/k3-driver-rollout.yml") == tmp_path / "k3-driver-rollout.retry"
    assert rd.approval("after-batch1") == tmp_path / "approvals" / "after-batch1.json"
    # every file docs/guide.md's "The run directory" lists is one RunDir knows
    guide = (ROOT / "docs" / "guide.md").read_text()
    listed = set(re.findall(r"^RUN_DIR/([\w.-]+)", guide.split("## The run directory", 1)[1], re.M))
    assert listed and listed <= set(NAMES)


# ---------------------------------------------------------------- open and verify


def _run(rd: RunDir) -> str:
    """A started run with one evidence file its journal cites; the file's path in evidence/."""
    journal = Journal(rd.journal, lambda: "2026-12-03T00:00:00+00:00")
    evidence = EvidenceStore(rd.evidence)
    journal.extra_sync = evidence.sync
    journal.append("run_started", run_id="r1", plan={"hosts": ["gpu-01"], "batches": []})
    ref = evidence.write("gpu-01", "baseline", "nvidia-smi", "Driver Version: 570.172.08\n")
    journal.append("evidence", node="gpu-01", stage="baseline", path=ref.path, sha256=ref.sha256)
    journal.close()
    evidence.close()
    return ref.path


def test_a_directory_without_a_journal_is_not_a_run(tmp_path):
    rd = RunDir(tmp_path)
    assert not rd.is_run()
    with pytest.raises(InputError, match=r"not a k3rollout run directory \(no journal.jsonl\)"):
        rd.open()
    with pytest.raises(InputError, match="not a k3rollout run directory"):
        rd.require()


def test_open_reads_the_records_and_refuses_evidence_that_changed(tmp_path):
    rd = RunDir(tmp_path)
    rel = _run(rd)
    assert rd.require() is rd and rd.is_run()
    records = rd.open()
    assert [r["type"] for r in records] == ["run_started", "evidence"] and rd.verify(records) == []
    changed = rd.evidence / rel
    changed.chmod(0o600)
    changed.write_text("Driver Version: 580.95.05\n")
    with pytest.raises(InputError, match="content changed.*does not verify") as e:
        rd.open(release_unstarted=True)
    assert e.value.path == str(rd.evidence / "MANIFEST.sha256")
    # a citation the manifest does not list names the journal's line
    (rd.evidence / "MANIFEST.sha256").chmod(0o600)
    (rd.evidence / "MANIFEST.sha256").write_text("")
    problems = rd.verify(records)
    assert [(p.file, p.line) for p in problems] == [("journal.jsonl", 2)]


def test_observe_refuses_a_run_that_never_started_and_changes_nothing(tmp_path):
    rd = RunDir(tmp_path)
    rd.journal.touch()
    with pytest.raises(InputError, match="never started"):
        rd.open()
    assert rd.journal.exists()


def test_resume_of_a_run_that_never_started_releases_its_stale_lock(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.journal.write_bytes(b'{"seq": 1, "ty')           # a torn first record
    lock = rd.lock(load_inventory(str(write_inventory(tmp_path / "inv", {"gpu-01": {}}))), "2026-12-03T00:00:00Z")
    lock.acquire()
    assert [h["pid"] for h in rd.live_holders()] == [os.getpid()]
    with pytest.raises(LockHeld, match="starting right now"):
        rd.open(release_unstarted=True)                   # its holder lives: nothing is touched
    assert rd.journal.exists() and all(p.exists() for p in lock.taken)
    dead = subprocess.Popen(["true"])
    dead.wait()
    for p in lock.taken:
        p.write_text(json.dumps({**json.loads(p.read_text()), "pid": dead.pid}))
    with pytest.raises(RunNeverStarted, match="never started.*Released its stale cluster lock"):
        rd.open(release_unstarted=True)
    assert not any(p.exists() for p in lock.taken) and rd.live_holders() == []
    assert not rd.journal.exists() and rd.torn(0).read_bytes() == b'{"seq": 1, "ty'


def test_inputs_that_are_missing_are_an_input_error(tmp_path):
    rd = RunDir(tmp_path)
    with pytest.raises(InputError, match="inputs.json missing or damaged"):
        rd.read_inputs()
    rd.inputs.write_text('{"playbook": "pb.yml"}')
    assert rd.read_inputs() == {"playbook": "pb.yml"}


# ---------------------------------------------------------------- the observe lock and approvals


def test_one_observe_of_a_run_at_a_time(tmp_path):
    rd = RunDir(tmp_path)
    held = rd.lock_observe()
    with pytest.raises(LockHeld, match="another `k3rollout observe` of this run is running"):
        rd.lock_observe()
    held.release()
    rd.lock_observe().release()
    assert rd.observe_lock.exists()


def test_an_approval_is_written_once_and_read_only_when_it_decides(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_approval("after-batch1") is None
    path = rd.write_approval("after-batch1", decision="approved", by="alice", note="ok", at="2026-12-03T00:00:00Z")
    assert path == rd.approval("after-batch1") and os.listdir(rd.approvals) == ["after-batch1.json"]
    text, decided = rd.read_approval("after-batch1")
    assert json.loads(text) == decided and decided["decision"] == "approved" and decided["by"] == "alice"
    with pytest.raises(FileExistsError):
        rd.write_approval("after-batch1", decision="rejected", by="bob", note="", at="2026-12-03T00:00:01Z")
    assert rd.read_approval("after-batch1")[1]["by"] == "alice"
    with pytest.raises(ValueError, match="bad pause id"):
        rd.write_approval("../x", decision="approved", by="eve", note="", at="")
    rd.approval("half").write_text('{"pause": "half", "decision": "may')          # still being written
    rd.approval("other").write_text('{"pause": "other", "decision": "maybe"}')
    assert rd.read_approval("half") is None and rd.read_approval("other") is None
