"""The append-only JSONL journal: the run's memory, written before and after each action.

Every record is one JSON object on one line with a monotonically increasing ``seq``;
``append`` writes and, for a durable record, makes it durable before returning, so a
record on disk means "this happened or was about to happen".

Durability is a group commit of the whole run directory: one ``syncfs(2)`` on the run's
file system flushes the journal *and* every evidence file and manifest line written
before it, so evidence files need no fsync of their own (``fsync`` of the journal and of
the pending evidence files is the fallback where ``syncfs`` is missing). Threads that ask
for durability while another thread's commit is in flight share the next commit instead
of each paying for one. On open, a torn last line (the process died mid-write) is
detected, its bytes are kept in ``journal.torn.<offset>``, the file is cut back to the last
complete record and a ``journal_repaired`` record says so. Damage anywhere else is an
error: a journal with a hole in the middle cannot be trusted to resume from.

Fault injection for the crash tests: ``K3ROLLOUT_KILL_AT_SEQ=N`` SIGKILLs the process
right after record N is durable; ``K3ROLLOUT_TEAR_AT_SEQ=N`` writes half of record N and
then SIGKILLs, leaving a torn line.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from k3rollout import fastjson
from k3rollout.errors import InputError


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()
HAVE_SYNCFS = _SYNCFS is not None


class Journal:
    def __init__(self, path: Path, now_iso: Callable[[], str]):
        self.path = Path(path)
        self.now_iso = now_iso
        self.records: list[dict[str, Any]] = []
        self._last_seq = 0
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._written = 0          # seq of the last record written to the file
        self._synced = 0           # seq of the last record known durable
        self.commits = 0           # how many syncs it took (bench and tests read this)
        self.extra_sync: Callable[[], None] | None = None   # fsync fallback for evidence files
        self._kill_at = int(os.environ.get("K3ROLLOUT_KILL_AT_SEQ", "0") or 0)
        self._tear_at = int(os.environ.get("K3ROLLOUT_TEAR_AT_SEQ", "0") or 0)
        self.repaired: str | None = None
        if self.path.exists():
            self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self.repaired:
            self.append("journal_repaired", torn_bytes_file=self.repaired)

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        """Parse a journal without repairing it (reports use this). A torn tail is skipped."""
        records, _, _ = _parse(Path(path))
        return records

    def _load(self) -> None:
        records, good_len, torn = _parse(self.path)
        if torn is not None:
            keep = self.path.with_name(f"journal.torn.{good_len}")
            keep.write_bytes(torn)
            with open(self.path, "r+b") as f:
                f.truncate(good_len)
                f.flush()
                os.fsync(f.fileno())
            self.repaired = keep.name
        self.records = records
        self._last_seq = records[-1]["seq"] if records else 0

    @property
    def next_seq(self) -> int:
        return self._last_seq + 1

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def append(self, type_: str, *, durable: bool = True, **data: Any) -> dict[str, Any]:
        """Append one record. ``durable=False`` skips the fsync (a read-only command's
        records): the bytes still reach the OS at once, so a killed process loses nothing,
        and the next durable record's fsync makes them durable too, in order."""
        with self._lock:
            rec = {"seq": self.next_seq, "ts": self.now_iso(), "type": type_, **data}
            line = fastjson.dumps_line(rec)
            if self._tear_at and rec["seq"] == self._tear_at:
                os.write(self._fd, line[: max(1, len(line) // 2)])
                os.fsync(self._fd)
                os.kill(os.getpid(), signal.SIGKILL)
            os.write(self._fd, line)
            # records read at open stay in ``records``; appended ones are not kept in memory
            # (the engine folds each into its view as it goes)
            self._last_seq = self._written = rec["seq"]
        if durable:
            self.commit(rec["seq"])
        if self._kill_at and rec["seq"] == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return rec

    def commit(self, seq: int | None = None) -> None:
        """Make every record up to ``seq`` (default: all written) durable, with evidence."""
        target = self._written if seq is None else seq
        with self._commit_lock:
            if self._synced >= target:
                return                      # a commit that started after our write covered it
            upto = self._written
            if _SYNCFS is not None and _SYNCFS(self._fd) == 0:
                pass
            else:
                if self.extra_sync:
                    self.extra_sync()
                os.fsync(self._fd)
            self._synced = upto
            self.commits += 1

    def close(self) -> None:
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
        recs = fastjson.loads(b"[" + raw[:-1].replace(b"\n", b",") + b"]")
    except ValueError:
        return None
    if not all(isinstance(r, dict) and "seq" in r and "type" in r for r in recs):
        return None
    if any(r["seq"] != i for i, r in enumerate(recs, start=recs[0]["seq"] if recs else 1)):
        return None
    if raw.count(b"\n") != len(recs):          # a record split over lines, or one line holding two
        return None
    return recs


def _parse(path: Path) -> tuple[list[dict[str, Any]], int, bytes | None]:
    # a journal is hundreds of thousands of small dicts, none of them cyclic: the cyclic
    # collector, run again and again as they are created, tripled the parse time
    with no_gc():
        return _parse_file(path)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse_file(path: Path) -> tuple[list[dict[str, Any]], int, bytes | None]:
    raw = path.read_bytes()
    fast = _fast(raw) if raw else []
    if fast is not None:
        return fast, len(raw), None
    records: list[dict[str, Any]] = []
    pos = 0
    lineno = 0
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        lineno += 1
        if nl == -1:
            # no newline: the writer died mid-record
            return records, pos, raw[pos:]
        chunk = raw[pos:nl]
        try:
            rec = json.loads(chunk.decode("utf-8"))
            if not isinstance(rec, dict) or "seq" not in rec or "type" not in rec:
                raise ValueError("not a journal record")
        except (ValueError, UnicodeDecodeError) as exc:
            if nl == len(raw) - 1:
                return records, pos, raw[pos:]
            raise InputError(f"journal is damaged before its end ({exc}); it cannot be resumed safely. "
                             "Keep the run directory for the audit and roll back by hand per runbooks/.",
                             path=str(path), line=lineno) from None
        if records and rec["seq"] != records[-1]["seq"] + 1:
            raise InputError(f"journal sequence jumps from {records[-1]['seq']} to {rec['seq']}",
                             path=str(path), line=lineno)
        records.append(rec)
        pos = nl + 1
    return records, pos, None
