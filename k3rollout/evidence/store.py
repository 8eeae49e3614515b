"""The evidence store: every captured output is a new read-only file, never overwritten.

Layout: ``evidence/<node>/<NN-stage>/<name>.txt`` with ``evidence/MANIFEST.sha256`` in
``sha256sum`` format (paths relative to ``evidence/``). A second capture of the same
name gets ``<name>.2.txt``, ``.3`` ... Files are written read-only and private (0400, in
0700 folders; the manifest 0600) and listed in the manifest. They are made durable by
the journal's next commit, which calls ``sync()``: an ``fsync`` of each file written
since the last one, of the manifest, and of each folder that got a new entry (a file, or
a node's or stage's new folder), so a journal record on disk never points at evidence
that is not (see runlog/journal.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@functools.lru_cache(maxsize=65536)
def _safe(part: str) -> str:
    cleaned = _SAFE.sub("_", part).strip("._") or "_"
    return cleaned[:120]


@functools.lru_cache(maxsize=65536)
def _stem_ext(name: str) -> tuple[str, str]:
    base = _safe(name)
    stem, dot, ext = base.rpartition(".") if "." in base else (base, "", "")
    return (stem, ext) if dot else (base, "txt")


@dataclass(frozen=True)
class EvidenceRef:
    path: str      # relative to the evidence root
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


class EvidenceStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.manifest = self.root / "MANIFEST.sha256"
        self._lock = threading.Lock()
        self._pending: list[str] = []        # files written since the last sync
        self._pending_dirs: set[str] = {str(self.root.parent)}   # folders with a new entry
        self._root = str(self.root)
        self._dirs: set[str] = set()
        self._manifest_fd: int | None = None
        self._manifest_size = 0

    def write(self, node: str, folder: str, name: str, content: str | bytes) -> EvidenceRef:
        data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else content
        digest = hashlib.sha256(data).hexdigest()
        rel_dir = f"{_safe(node)}/{_safe(folder)}"
        d = f"{self._root}/{rel_dir}"
        if rel_dir not in self._dirs:
            self._makedirs(rel_dir)
        stem, ext = _stem_ext(name)
        n = 1
        while True:
            # O_EXCL picks the name atomically, so threads writing the same name get .2, .3 ...
            fname = f"{stem}.{ext}" if n == 1 else f"{stem}.{n}.{ext}"
            try:
                # created read-only (0400): this descriptor may still write it, nothing later can
                fd = os.open(f"{d}/{fname}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
                break
            except FileExistsError:
                n += 1
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)
        rel = f"{rel_dir}/{fname}"
        line = f"{digest}  {rel}\n".encode()
        with self._lock:
            if self._manifest_fd is None:
                self._manifest_fd = os.open(self.manifest, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._pending_dirs.add(self._root)          # the manifest's name, when new
                self._manifest_size = os.fstat(self._manifest_fd).st_size
            done = 0
            try:
                while done < len(line):
                    done += os.write(self._manifest_fd, line[done:])
            except OSError:
                # a full disk mid-line: cut the manifest back to its last whole line, so the
                # manifest stays verifiable, and stop (the journal never cites this file)
                if done:
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._manifest_fd, self._manifest_size)
                raise
            self._manifest_size += len(line)
            self._pending.append(f"{self._root}/{rel}")
            self._pending_dirs.add(d)
        return EvidenceRef(rel, digest, len(data))

    def close(self) -> None:
        with self._lock:
            if self._manifest_fd is not None:
                os.close(self._manifest_fd)
                self._manifest_fd = None

    def _makedirs(self, rel_dir: str) -> None:
        """Create ``<node>/<stage>`` under the root. The first time this store writes into
        a folder, the next ``sync`` fsyncs the folders above it too (a new folder's name
        lives in its parent), whichever thread created them."""
        os.makedirs(f"{self._root}/{rel_dir}", mode=0o700, exist_ok=True)
        with self._lock:
            self._pending_dirs.update((self._root, f"{self._root}/{rel_dir.split('/', 1)[0]}"))
            self._dirs.add(rel_dir)

    def sync(self) -> None:
        """fsync what was written since the last sync: the new files, the manifest, and the
        folders holding new entries (the journal's commit calls this before its own fsync)."""
        with self._lock:
            pending, self._pending = self._pending, []
            dirs, self._pending_dirs = self._pending_dirs, set()
        try:
            for p in [*pending, str(self.manifest), *sorted(dirs)]:
                try:
                    fd = os.open(p, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError:
            # not durable: the next commit tries these again (this one fails the journal)
            with self._lock:
                self._pending[:0] = pending
                self._pending_dirs |= dirs
            raise

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")

    def verify(self) -> list[str]:
        """Paths whose content no longer matches the manifest (empty when all verify)."""
        _, problems = verify_manifest(self.root)
        return [p.subject for p in problems if p.subject]


@dataclass(frozen=True)
class Problem:
    """One verification failure: where (file and line, when there is one) and what."""
    file: str
    line: int | None
    subject: str           # the evidence path concerned ('' when the manifest itself is)
    why: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.subject + ': ' if self.subject else ''}{self.why}"


_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


def verify_manifest(root: Path) -> tuple[dict[str, str], list[Problem]]:
    """Check every file the manifest lists against its sha256: (path -> listed digest,
    problems). A missing manifest is one problem; a torn last line (a power cut mid-write)
    is not, as long as nothing cites it."""
    root = Path(root)
    manifest = root / "MANIFEST.sha256"
    name = f"{root.name}/{manifest.name}"
    listed: dict[str, str] = {}
    problems: list[Problem] = []
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        if any(p.is_file() for p in root.rglob("*")):
            problems.append(Problem(name, None, "", "missing: no evidence file can be verified"))
        return listed, problems
    lines = raw.split(b"\n")
    for i, b in enumerate(lines, start=1):
        if not b and i == len(lines):
            break
        m = _LINE.match(b.decode("utf-8", "replace"))
        if m is None or ".." in Path(m.group(2)).parts or m.group(2).startswith("/"):
            if i == len(lines):
                break                          # a torn last line: no newline, never cited
            problems.append(Problem(name, i, "", "not a sha256sum line"))
            continue
        digest, rel = m.groups()
        listed[rel] = digest
        p = root / rel
        try:
            got = hashlib.sha256(p.read_bytes()).hexdigest()
        except FileNotFoundError:
            problems.append(Problem(name, i, rel, "file missing"))
            continue
        except OSError as exc:
            problems.append(Problem(name, i, rel, f"unreadable ({exc.strerror})"))
            continue
        if got != digest:
            problems.append(Problem(name, i, rel, f"content changed: sha256 {got}, manifest says {digest}"))
    return listed, problems


def cited(records: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    """(journal line, evidence path, sha256) for every evidence file the journal cites."""
    out = []
    for i, r in enumerate(records, start=1):
        t = r["type"]
        if t == "evidence":
            out.append((i, r["path"], r["sha256"]))
        elif t in ("step_done", "hook_done", "pause_resolved") and r.get("evidence"):
            out.append((i, r["evidence"], r.get("sha256") or ""))
        elif t == "run_started" and r.get("playbook_evidence"):
            out.append((i, r["playbook_evidence"], r.get("playbook_evidence_sha256") or ""))
    return out


def verify_evidence(root: Path, records: list[dict[str, Any]], journal: str) -> list[Problem]:
    """The manifest of a run's evidence folder ``root`` against the files, and every evidence
    file the journal cites against the manifest (a problem of a citation names ``journal``, the
    journal's file): empty when every claim of the run can be re-verified from its directory.
    ``RunDir.verify`` (runlog/rundir.py) says where those are."""
    root = Path(root)
    listed, problems = verify_manifest(root)
    bad = {p.subject for p in problems}
    no_manifest = any(p.line is None and not p.subject for p in problems)
    for line, rel, digest in cited(records):
        if rel in bad:
            continue
        if no_manifest:
            bad.add(rel)
            problems.append(Problem(journal, line, rel, "cited as evidence, but there is no manifest"))
        elif listed.get(rel) != digest:
            bad.add(rel)
            why = ("cited as evidence, but the manifest does not list it" if rel not in listed else
                   f"cited with sha256 {digest}, but the manifest lists {listed[rel]}")
            problems.append(Problem(journal, line, rel, why))
    return problems
