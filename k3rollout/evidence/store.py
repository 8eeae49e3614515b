"""The evidence store: every captured output is a new read-only file, never overwritten.

Layout: ``evidence/<node>/<NN-stage>/<name>.txt`` with ``evidence/MANIFEST.sha256`` in
``sha256sum`` format (paths relative to ``evidence/``). A second capture of the same
name gets ``<name>.2.txt``, ``.3`` ... Files are written read-only and private (0400, in
0700 folders; the manifest 0600) and listed in the manifest. They are made durable by the journal's next commit (one ``syncfs`` of
the run's file system covers journal, evidence and manifest; see engine/journal.py), so
a journal record on disk never points at evidence that is not; ``sync()`` fsyncs the
pending files one by one where ``syncfs`` is not available.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

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

    def to_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


class EvidenceStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.manifest = self.root / "MANIFEST.sha256"
        self._lock = threading.Lock()
        self._pending: list[Path] = []
        self._root = str(self.root)
        self._dirs: set[str] = set()
        self._manifest_fd: int | None = None
        self.track_pending = True          # off when the journal's syncfs covers evidence

    def write(self, node: str, folder: str, name: str, content: str | bytes) -> EvidenceRef:
        data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else content
        digest = hashlib.sha256(data).hexdigest()
        rel_dir = f"{_safe(node)}/{_safe(folder)}"
        d = f"{self._root}/{rel_dir}"
        if rel_dir not in self._dirs:
            os.makedirs(d, mode=0o700, exist_ok=True)
            self._dirs.add(rel_dir)
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
            os.write(self._manifest_fd, line)
            if self.track_pending:
                self._pending.append(self.root / rel)
        return EvidenceRef(rel, digest, len(data))

    def close(self) -> None:
        with self._lock:
            if self._manifest_fd is not None:
                os.close(self._manifest_fd)
                self._manifest_fd = None

    def sync(self) -> None:
        """fsync what was written since the last sync (the fallback to the journal's syncfs)."""
        with self._lock:
            pending, self._pending = self._pending, []
        for p in [*pending, self.manifest, *sorted({q.parent for q in pending})]:
            try:
                fd = os.open(p, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")

    def verify(self) -> list[str]:
        """Paths whose content no longer matches the manifest (empty when all verify)."""
        bad = []
        if not self.manifest.exists():
            return bad
        for line in self.manifest.read_text().splitlines():
            digest, _, rel = line.partition("  ")
            p = self.root / rel
            if not p.exists() or hashlib.sha256(p.read_bytes()).hexdigest() != digest:
                bad.append(rel)
        return bad
