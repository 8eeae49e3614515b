"""The run directory: the one place that knows its layout.

::

    RUN_DIR/
      journal.jsonl           append-only, fsynced, hash-chained (the source of truth)
      journal.torn.<offset>   a torn last record, kept aside when the journal is repaired
      evidence/               write-once outputs + MANIFEST.sha256 (evidence/store.py)
      events.jsonl            structlog JSON events
      inputs.json             where the playbook and inventory were, and their digests
      result.json report.md report.html report.json   regenerated from the journal
      approvals/<pause>.json  a person's decision at a gate (``k3rollout approve``)
      observe.lock            held by the one ``k3rollout observe`` of the run
      preflight.json preflight.md   the preflight's report (``run`` performs it first)
      <playbook>.retry        the failed hosts, in Ansible's retry file format
      ansible/<node>/         ansible-playbook's private files, one folder per step
      <transport state>/      a registered transport's hosts (k3rollout/plugins.py; the simulator's
                              sim-hosts/)
      debug.log               traceback of an internal error, if any

The names are a public interface (docs/guide.md "The run directory", the tests, whoever
reads the files): spelled here only, which ``tests/test_rundir.py`` checks. ``RunDir``
also opens an existing run and verifies it (``open``), takes and looks up the lock files
that name the run (runlog/lock.py), and writes and reads the approvals.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k3rollout.errors import InputError, K3RolloutError, LockHeld
from k3rollout.evidence.store import Problem, verify_evidence
from k3rollout.runlog.journal import Journal, torn_path
from k3rollout.runlog.lock import RunLock, holder_text, live_holders, release_stale

if TYPE_CHECKING:
    from k3rollout.model.inventory import Inventory
    from k3rollout.model.playbook import Playbook

JOURNAL = "journal.jsonl"
EVIDENCE = "evidence"
EVENTS = "events.jsonl"
INPUTS = "inputs.json"
RESULT = "result.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
APPROVALS = "approvals"
OBSERVE_LOCK = "observe.lock"
PREFLIGHT_JSON = "preflight.json"
PREFLIGHT_MD = "preflight.md"
RETRY = ".retry"
ANSIBLE = "ansible"
DEBUG_LOG = "debug.log"
_LAYOUT_NAMES = (JOURNAL, EVIDENCE, EVENTS, INPUTS, RESULT, REPORT_JSON, REPORT_MD, REPORT_HTML, APPROVALS,
                 OBSERVE_LOCK, PREFLIGHT_JSON, PREFLIGHT_MD, ANSIBLE, DEBUG_LOG)

_PAUSE_ID = re.compile(r"^[A-Za-z0-9._-]+$")


class RunNeverStarted(K3RolloutError):
    """``resume`` of a run that was killed before its first journal record."""

    exit_code = 1


class FileLock:
    """An exclusive ``flock`` on a file of the run directory, held until ``release``."""

    def __init__(self, path: Path, busy: str):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise LockHeld(busy) from None

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


class RunDir:
    """One run directory: its paths, open-and-verify, its lock, its approvals."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ paths

    @property
    def journal(self) -> Path:
        return self.path / JOURNAL

    def torn(self, offset: int) -> Path:
        """Where a torn tail of the journal that started at ``offset`` is kept."""
        return torn_path(self.journal, offset)

    @property
    def evidence(self) -> Path:
        """The evidence store's root (its own layout: evidence/store.py)."""
        return self.path / EVIDENCE

    @property
    def events(self) -> Path:
        return self.path / EVENTS

    @property
    def inputs(self) -> Path:
        return self.path / INPUTS

    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def report_json(self) -> Path:
        return self.path / REPORT_JSON

    @property
    def report_md(self) -> Path:
        return self.path / REPORT_MD

    @property
    def report_html(self) -> Path:
        return self.path / REPORT_HTML

    @property
    def approvals(self) -> Path:
        return self.path / APPROVALS

    def approval(self, pause_id: str) -> Path:
        """The file ``k3rollout approve`` writes for the pause ``pause_id``."""
        return self.approvals / f"{pause_id}.json"

    @property
    def observe_lock(self) -> Path:
        return self.path / OBSERVE_LOCK

    @property
    def preflight_json(self) -> Path:
        return self.path / PREFLIGHT_JSON

    @property
    def preflight_md(self) -> Path:
        return self.path / PREFLIGHT_MD

    def retry(self, playbook: str) -> Path:
        """The retry file of a run of ``playbook`` (its path as the journal has it)."""
        return self.path / (Path(playbook).stem + RETRY)

    @property
    def ansible(self) -> Path:
        return self.path / ANSIBLE

    def transport_state(self, name: str) -> Path:
        """The folder a registered transport keeps its hosts' state in, named by the transport
        (``TransportPlugin.state_dir``): one plain folder name, none of the layout's own."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name in _LAYOUT_NAMES:
            raise ValueError(f"not a transport state folder name: {name!r}")
        return self.path / name

    @property
    def debug_log(self) -> Path:
        return self.path / DEBUG_LOG

    # ------------------------------------------------------------------ open and verify

    def is_run(self) -> bool:
        """Whether this is a run directory k3rollout wrote (it holds a journal)."""
        return self.journal.is_file()

    def require(self) -> RunDir:
        """This run directory, or InputError when it is not one."""
        if not self.is_run():
            raise InputError(f"not a k3rollout run directory (no {JOURNAL})", path=str(self.path))
        return self

    def verify(self, records: list[dict[str, Any]]) -> list[Problem]:
        """The evidence against its manifest, and what the journal's ``records`` cite against
        the manifest: empty when every claim of the run can be re-verified from here."""
        return verify_evidence(self.evidence, records, JOURNAL)

    def open(self, *, release_unstarted: bool = False) -> list[dict[str, Any]]:
        """The records of an existing run, read and verified (the journal's hash chain and
        record types, the evidence against the manifest and the journal's citations) before
        anything is repaired or appended; InputError (exit 2) naming the first problem when the
        directory does not verify.

        A run killed between taking its lock and its first record changed nothing. With
        ``release_unstarted`` (resume, rollback) its stale lock is released and its empty or
        torn journal set aside, so that ``run`` can start there again (RunNeverStarted);
        without it (observe), InputError."""
        records = Journal.read(self.require().journal)
        if release_unstarted:
            if not any(r["type"] == "run_started" for r in records):
                self._never_started(records)
        elif not records or records[0]["type"] != "run_started":
            raise InputError("journal does not start with run_started: the run never started",
                             path=str(self.journal))
        problems = self.verify(records)
        if problems:
            raise self._unverified(problems)
        return records

    def _unverified(self, problems: list[Problem]) -> InputError:
        """Exit 2 naming the first problem's file and line, and how many there are."""
        first = problems[0]
        more = (f" ({len(problems) - 1} more problem(s): see `k3rollout report {self.path}`)"
                if len(problems) > 1 else "")
        return InputError(f"{first.subject + ': ' if first.subject else ''}{first.why}{more}. The run directory does "
                          "not verify: what it claims cannot be trusted; nothing was changed. Keep it for the audit.",
                          path=str(self.path / first.file), line=first.line)

    def _never_started(self, records: list[dict[str, Any]]) -> None:
        """A run killed between taking its lock and its first record changed nothing (every
        change is journaled first): release its stale lock, so neither `resume` nor `run`
        stays stuck on it, and say how to start again."""
        live = self.live_holders()
        if live:
            raise LockHeld(f"{self.path}: this run is starting right now ({holder_text(live[0])}); its journal "
                           "has no record yet")
        released = self.release_stale()
        if not records:
            # the run directory can take the run again: a torn first record is kept aside
            if self.journal.stat().st_size == 0:
                self.journal.unlink()
            else:
                os.replace(self.journal, self.torn(0))
        raise RunNeverStarted(
            f"{self.path}: this run never started: its journal holds no record, so nothing was changed on any "
            "host. " + (f"Released its stale cluster lock ({', '.join(map(str, released))}). " if released else "")
            + "Start the rollout again with `k3rollout run`.")

    def read_inputs(self) -> dict[str, Any]:
        """inputs.json: where the run's playbook and inventory were, and their digests."""
        try:
            inputs: dict[str, Any] = json.loads(self.inputs.read_text())
        except (FileNotFoundError, ValueError) as exc:
            raise InputError(f"{INPUTS} missing or damaged ({exc})", path=str(self.path)) from None
        return inputs

    def reload_inputs(self) -> tuple[Playbook, Inventory, dict[str, Any]]:
        """The run's playbook and inventory, loaded again from where inputs.json says they
        were (model/inputs.py ``reload_inputs``), and inputs.json itself."""
        # lazy: the models (pydantic, YAML) are for resume and rollback, not `watch`
        from k3rollout.model.inputs import reload_inputs
        from k3rollout.model.playbook import load_playbook

        inputs = self.read_inputs()
        playbook, inventory = reload_inputs(load_playbook(inputs["playbook"]), inputs)
        return playbook, inventory, inputs

    # ------------------------------------------------------------------ the lock

    def lock(self, inventory: Any, started: str, hosts: Iterable[str] | None = None) -> RunLock:
        """The lock files of a run here on ``hosts`` of ``inventory`` (not yet taken)."""
        return RunLock(inventory, self.path, started, hosts=hosts)

    def live_holders(self) -> list[dict[str, Any]]:
        """The live processes that hold a lock for this run (a run starting or going on)."""
        return live_holders(self.path)

    def release_stale(self) -> list[Path]:
        """Remove the locks a dead run of this directory left."""
        return release_stale(self.path)

    def lock_observe(self) -> FileLock:
        """observe.lock, taken: one ``k3rollout observe`` of a run at a time (LockHeld)."""
        return FileLock(self.observe_lock, f"{self.path}: another `k3rollout observe` of this run is running")

    # ------------------------------------------------------------------ approvals

    def write_approval(self, pause_id: str, *, decision: str, by: str, note: str, at: str) -> Path:
        """What `k3rollout approve` writes: one file per pause, created once (never replaced:
        FileExistsError)."""
        if not _PAUSE_ID.match(pause_id):
            raise ValueError(f"bad pause id {pause_id!r}")
        d = self.approvals
        d.mkdir(parents=True, exist_ok=True)
        path = self.approval(pause_id)
        tmp = d / f".{pause_id}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"pause": pause_id, "decision": decision, "by": by, "note": note, "at": at}))
        try:
            os.link(tmp, path)          # atomic and exclusive: a second approval is refused
        finally:
            tmp.unlink()
        return path

    def read_approval(self, pause_id: str) -> tuple[str, dict[str, Any]] | None:
        """The decision written for ``pause_id`` (its text and what it says), or None while
        there is none, or none that approves or rejects."""
        path = self.approval(pause_id)
        if not path.is_file():
            return None
        text = path.read_text()
        try:
            a = json.loads(text)
        except ValueError:
            return None
        if isinstance(a, dict) and a.get("decision") in ("approved", "rejected"):
            return text, a
        return None
