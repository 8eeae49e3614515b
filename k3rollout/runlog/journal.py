"""The append-only JSONL journal: the run's memory, written before and after each action.

Every record is one JSON object on one line with a monotonically increasing ``seq``;
``append`` writes and, for a durable record, makes it durable before returning, so a
record on disk means "this happened or was about to happen". A write that does not
complete (a full disk, a file-size limit) or a commit that fails raises
``JournalWriteError`` before the caller's side effect: the partial line is cut off when
the file system allows it, and the journal takes no further record, so nothing runs
that is not on record.

Each record ends with ``"h"``, a link of a hash chain: the sha256 of the previous
record's link and of this record's bytes without the link. Any edit of any record (a
flipped bit, a valid-JSON change of a value, a deleted or inserted line) breaks the chain
at that line, and reading refuses the journal there (exit 2, with file and line). The
chain detects edits by anyone who does not rewrite every later record (``last_link``, kept
elsewhere, pins even that). Every record is also checked against its type
(runlog/records.py) as it is read. A journal without a chain (written before it existed)
is refused with the reason: it could not show an edit.

Durability is a group commit with plain ``fsync``: a commit fsyncs every evidence file
written since the last one, the evidence manifest, and each folder that got a new file or
folder (``extra_sync``, the evidence store's ``sync``), then the journal (and, once, the
run folder that holds it). A journal record on disk therefore never points at evidence
that is not. Threads that ask for durability while another thread's commit is in flight
share the next commit instead of each paying for one. On open, a torn last line (the process died mid-write) is
detected, its bytes are kept in ``journal.torn.<offset>``, the file is cut back to the last
complete record and a ``journal_repaired`` record says so. Damage anywhere else is an
error: a journal with a hole in the middle cannot be trusted to resume from.

Test seams are parameters, not code in the write path: ``write`` (default ``os.write``)
is how bytes reach the file, and ``after_append`` is called with each record once it is
written (and durable, when asked); the crash tests pass callables that tear a record or
kill the process there (tests/support/faultinject.py), or stop the run in the test's own
process with ``HardStop`` (tests/support/crash.py, errors.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.errors import InputError, K3RolloutError
from k3rollout.runlog.records import check as check_record

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
LINK = b',"h":"'           # a record's line ends with LINK + 64 hex digits + '"}'
LINK_TAIL = len(LINK) + 64 + 2


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def chain(prev: str, body: bytes) -> str:
    """The link of a record whose bytes (without its link) are ``body``."""
    return hashlib.sha256(prev.encode("ascii") + body).hexdigest()


# Signal safety: the CLI's SIGINT/SIGTERM handler raises KeyboardInterrupt in the main
# thread, between any two bytecodes. Inside a journal write that could leave a record on
# disk that the journal's own state does not count (the next record would reuse its seq),
# so while the main thread is in ``append`` the interrupt is deferred to its end.
_MAIN = threading.main_thread().ident
_IN_WRITE = [0]
_DEFERRED = [False]


def defer_interrupt() -> bool:
    """Called by a signal handler: True when the main thread is writing a record (the
    interrupt is then raised as the write ends), False when it may be raised now."""
    if _IN_WRITE[0]:
        _DEFERRED[0] = True
        return True
    return False


def torn_path(path: Path, offset: int) -> Path:
    """Where the torn tail of the journal at ``path`` is kept: beside it, named by its stem and
    the offset the tail started at (``journal.torn.<offset>`` for a run's journal.jsonl)."""
    return path.with_name(f"{path.stem}.torn.{offset}")


class JournalWriteError(K3RolloutError):
    """A record could not be written in full, or made durable: the run stops before the
    side effect it announced. The message says what state the journal was left in."""

    def __init__(self, message: str, *, run_dir: Path, cause: OSError | None = None):
        self.run_dir = run_dir
        self.cause = cause
        super().__init__(message)


class Journal:
    def __init__(self, path: Path, now_iso: Callable[[], str], *,
                 write: Callable[[int, bytes | memoryview], int] = os.write,
                 after_append: Callable[[dict[str, Any]], None] | None = None):
        self.path = Path(path)
        self.now_iso = now_iso
        self.records: list[dict[str, Any]] = []
        self._last_seq = 0
        self._last_h = ""
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._written = 0          # seq of the last record written to the file
        self._synced = 0           # seq of the last record known durable
        self._dir_synced = False   # the run folder's entry for the journal
        self.commits = 0           # how many syncs it took (bench and tests read this)
        self.extra_sync: Callable[[], None] | None = None   # fsyncs the evidence a commit covers
        self._write = write
        self._after_append = after_append
        self._broken: JournalWriteError | None = None
        self._closed = False
        self.repaired: str | None = None
        if self.path.exists():
            self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size     # bytes of complete records
        if self.repaired:
            self.append("journal_repaired", torn_bytes_file=self.repaired)

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        """Parse and verify a journal without repairing it (reports use this). A torn tail
        is skipped; an edit, a broken chain or a malformed record is an InputError."""
        records, _, _ = _parse_checked(Path(path))
        return records

    def _load(self) -> None:
        records, good_len, torn = _parse_checked(self.path)
        if torn is not None:
            keep = torn_path(self.path, good_len)
            keep.write_bytes(torn)
            with open(self.path, "r+b") as f:
                f.truncate(good_len)
                f.flush()
                os.fsync(f.fileno())
            self.repaired = keep.name
        self.records = records
        self._last_seq = records[-1]["seq"] if records else 0
        self._last_h = records[-1]["h"] if records else ""

    @property
    def next_seq(self) -> int:
        return self._last_seq + 1

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def last_link(self) -> str:
        """The hash-chain link of the last record (pins the whole journal)."""
        return self._last_h

    def append(self, type_: str, *, durable: bool = True,
               on_written: Callable[[dict[str, Any]], None] | None = None, **data: Any) -> dict[str, Any]:
        """Append one record. ``on_written`` is called with the record once it is written,
        before the next record can be: a reader folding records in it sees them in journal
        order, whichever thread appended them. ``durable=False`` skips the fsync (a read-only command's
        records): the bytes still reach the OS at once, so a killed process loses nothing,
        and the next durable record's fsync makes them durable too, in order. Raises
        ``JournalWriteError`` when the record is not written in full (or not made durable):
        the caller's side effect must not happen, and no later record is taken."""
        if "h" in data:
            raise ValueError("'h' is the journal's hash-chain link, not a record key")
        main = threading.get_ident() == _MAIN
        if main:
            _IN_WRITE[0] += 1
        try:
            rec = self._append(type_, data, on_written)
        finally:
            if main:
                _IN_WRITE[0] -= 1
                if _IN_WRITE[0] == 0 and _DEFERRED[0]:
                    # a signal came while the record was half handled: it unwinds now, with
                    # the record written and the journal's state consistent
                    _DEFERRED[0] = False
                    raise KeyboardInterrupt
        if durable:
            self.commit(rec["seq"])
        if self._after_append is not None:
            self._after_append(rec)
        return rec

    def _append(self, type_: str, data: dict[str, Any],
                on_written: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if self._closed:
                raise JournalWriteError(f"{self.path}: the journal is closed; record {type_!r} was not written "
                                        "(a step ran on after the run ended)", run_dir=self.path.parent)
            rec = {"seq": self.next_seq, "ts": self.now_iso(), "type": type_, **data}
            body = fastjson.dumps_line(rec)[:-1]
            h = chain(self._last_h, body)
            line = body[:-1] + LINK + h.encode("ascii") + b'"}\n'
            # one writer at a time: another process that appended since this one opened the
            # journal (an `observe` pass beside a `rollback` of the same run) would fork the
            # hash chain; the record is refused before the side effect it announces
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size != self._size:
                    self._broken = JournalWriteError(
                        f"{self.path}: another k3rollout process (an `observe` pass, a resume or a rollback of this "
                        f"run) appended to the journal since this one opened it; record {rec['seq']} ({type_}) was "
                        "not written and nothing it announced was done. Run the command again once the other one "
                        "has finished.", run_dir=self.path.parent)
                    raise self._broken
                self._write_all(line, rec["seq"], type_)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            rec["h"] = h
            # records read at open stay in ``records``; appended ones are not kept in memory
            # (the engine folds each into its view as it goes)
            self._last_seq = self._written = rec["seq"]
            self._last_h = h
            self._size += len(line)
            if on_written is not None:
                on_written(rec)
        return rec

    def _write_all(self, line: bytes, seq: int, type_: str) -> None:
        view = memoryview(line)
        done = 0
        try:
            while done < len(line):
                n = self._write(self._fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "write wrote nothing")
                done += n
        except OSError as exc:
            self._broken = self._failed(exc, seq, type_, done)
            raise self._broken from None

    def _failed(self, exc: OSError, seq: int, type_: str, done: int) -> JournalWriteError:
        run_dir = self.path.parent
        cut = done == 0
        if not cut:
            try:
                os.ftruncate(self._fd, self._size)
                os.fsync(self._fd)
                cut = True
            except OSError:
                pass
        why = exc.strerror or str(exc)
        if exc.errno in DISK_FULL:
            why += " (the file system holding the run directory is full, or a file-size limit was reached)"
        if cut:
            state = (f"The journal is intact: it ends at record {seq - 1}, the last complete one, and "
                     f"nothing that record {seq} ({type_}) announced was done.")
        else:
            state = (f"The journal is NOT intact: record {seq} ({type_}) is torn at its end and could not be cut "
                     f"off; nothing it announced was done, and `resume` sets the torn bytes aside and goes on from "
                     f"record {seq - 1}.")
        return JournalWriteError(
            f"could not write record {seq} to {self.path}: {why}. The run stopped before the step it announced. "
            f"{state} Free space, then continue with `k3rollout resume {run_dir}`.", run_dir=run_dir, cause=exc)

    def commit(self, seq: int | None = None) -> None:
        """Make every record up to ``seq`` (default: all written) durable, with evidence."""
        target = self._written if seq is None else seq
        with self._commit_lock:
            if self._broken is not None:
                raise self._broken
            if self._synced >= target:
                return                      # a commit that started after our write covered it
            if self._closed:
                raise JournalWriteError(f"{self.path}: the journal is closed; records after {self._synced} were "
                                        "not committed", run_dir=self.path.parent)
            upto = self._written
            try:
                if self.extra_sync:
                    self.extra_sync()
                os.fsync(self._fd)
                if not self._dir_synced:
                    # the journal's own name in the run folder (created by this process, or
                    # by one that may have died before any commit)
                    _fsync_path(self.path.parent)
                    self._dir_synced = True
            except OSError as exc:
                self._broken = JournalWriteError(
                    f"could not make {self.path} durable up to record {upto}: {exc.strerror or exc}. The run "
                    f"stopped before the step it announced; the records since the last commit may be lost in a "
                    f"power cut, and `resume` settles what they announced by probing the hosts. Continue with "
                    f"`k3rollout resume {self.path.parent}`.", run_dir=self.path.parent, cause=exc)
                raise self._broken from None
            self._synced = upto
            self.commits += 1

    def close(self) -> None:
        with self._lock, self._commit_lock:
            if self._closed:
                return
            self._closed = True
            try:
                os.close(self._fd)
            except OSError:
                pass


def _fast(raw: bytes) -> list[dict[str, Any]] | None:
    """A whole, well-formed journal parsed in one call (about 3x faster than line by line);
    None when anything is off, and the careful parser below finds and names the problem."""
    if not raw.endswith(b"\n"):
        return None
    try:
        recs: list[dict[str, Any]] = fastjson.loads(b"[" + raw[:-1].replace(b"\n", b",") + b"]")
    except ValueError:
        return None
    if not all(isinstance(r, dict) and type(r.get("seq")) is int and "type" in r for r in recs):
        return None
    if any(r["seq"] != i for i, r in enumerate(recs, start=recs[0]["seq"] if recs else 1)):
        return None
    if raw.count(b"\n") != len(recs):          # a record split over lines, or one line holding two
        return None
    return recs


def _parse(path: Path) -> tuple[list[dict[str, Any]], int, bytes | None]:
    """Structure only: records, the length of the complete ones, a torn tail."""
    records, _, good_len, torn = _parse_lines(path)
    return records, good_len, torn


def _parse_lines(path: Path) -> tuple[list[dict[str, Any]], list[bytes], int, bytes | None]:
    # a journal is hundreds of thousands of small dicts, none of them cyclic: the cyclic
    # collector, run again and again as they are created, tripled the parse time
    with no_gc():
        return _parse_file(path)


def _parse_checked(path: Path) -> tuple[list[dict[str, Any]], int, bytes | None]:
    """Parse, then check every record against its type and the hash chain from the first
    line to the last complete one."""
    records, lines, good_len, torn = _parse_lines(path)
    verify(records, lines, path)
    return records, good_len, torn


REFUSED = ("it cannot be trusted to resume, roll back or report from. Keep the run directory for the audit "
           "and check the nodes by hand per runbooks/.")


def verify(records: list[dict[str, Any]], lines: list[bytes], path: Path) -> None:
    """Each record well typed, and the hash chain unbroken; InputError naming the line."""
    prev = ""
    for i, (r, line) in enumerate(zip(records, lines, strict=True), start=1):
        bad = check_record(r)
        if bad is not None:
            raise InputError(f"journal record {bad}; {REFUSED}", path=str(path), line=i)
        h = r.get("h")
        if h is None and i == 1 and not any("h" in x for x in records):
            raise InputError("this journal has no hash chain (it was written by a k3rollout older than the chain), "
                             "so an edit in it could not be detected; k3rollout does not resume, roll back or report "
                             "from it. Finish this run with the version that started it.", path=str(path), line=1)
        if (not isinstance(h, str) or len(line) < LINK_TAIL or line[-LINK_TAIL:-LINK_TAIL + len(LINK)] != LINK
                or line[-2:] != b'"}' or chain(prev, line[:-LINK_TAIL] + b"}") != h):
            raise InputError(f"journal record {r['seq']} ({r['type']}) does not match the hash chain: the journal "
                             f"was edited or damaged here after it was written; {REFUSED}", path=str(path), line=i)
        prev = h


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse_file(path: Path) -> tuple[list[dict[str, Any]], list[bytes], int, bytes | None]:
    raw = path.read_bytes()
    fast = _fast(raw) if raw else []
    if fast is not None:
        return fast, raw.split(b"\n")[:-1], len(raw), None
    records: list[dict[str, Any]] = []
    lines: list[bytes] = []
    pos = 0
    lineno = 0
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        lineno += 1
        if nl == -1:
            # no newline: the writer died mid-record
            return records, lines, pos, raw[pos:]
        chunk = raw[pos:nl]
        try:
            rec = json.loads(chunk.decode("utf-8"))
            if not isinstance(rec, dict) or type(rec.get("seq")) is not int or "type" not in rec:
                raise ValueError("not a journal record")
        except (ValueError, UnicodeDecodeError) as exc:
            # a write cut short never ends its line (the newline is the record's last byte), so
            # a whole line that does not parse was damaged or edited, even the last one
            where = "at its end" if nl == len(raw) - 1 else "before its end"
            raise InputError(f"journal is damaged {where} ({exc}); it cannot be resumed safely. "
                             "Keep the run directory for the audit and roll back by hand per runbooks/.",
                             path=str(path), line=lineno) from None
        if records and rec["seq"] != records[-1]["seq"] + 1:
            raise InputError(f"journal sequence jumps from {records[-1]['seq']} to {rec['seq']}",
                             path=str(path), line=lineno)
        records.append(rec)
        lines.append(chunk)
        pos = nl + 1
    return records, lines, pos, None
