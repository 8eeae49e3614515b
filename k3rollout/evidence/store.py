"""The evidence store: every captured output is a new read-only file, never overwritten.

Layout: ``evidence/<node>/<NN-stage>/<name>.txt`` with ``evidence/MANIFEST.sha256`` in
``sha256sum`` format (paths relative to ``evidence/``). A second capture of the same
name gets ``<name>.2.txt``, ``.3`` ... Files are fsynced, then made read-only (0444),
then listed in the manifest, which is fsynced too.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: str) -> str:
    cleaned = _SAFE.sub("_", part).strip("._") or "_"
    return cleaned[:120]


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
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest = self.root / "MANIFEST.sha256"
        self._lock = threading.Lock()

    def write(self, node: str, folder: str, name: str, content: str | bytes) -> EvidenceRef:
        data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else content
        digest = hashlib.sha256(data).hexdigest()
        d = self.root / _safe(node) / _safe(folder)
        with self._lock:
            d.mkdir(parents=True, exist_ok=True)
            base = _safe(name)
            stem, dot, ext = base.rpartition(".") if "." in base else (base, "", "")
            if not dot:
                stem, ext = base, "txt"
            n = 1
            while True:
                fname = f"{stem}.{ext}" if n == 1 else f"{stem}.{n}.{ext}"
                path = d / fname
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    break
                except FileExistsError:
                    n += 1
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(path, 0o444)
            rel = path.relative_to(self.root).as_posix()
            with open(self.manifest, "a", encoding="utf-8") as m:
                m.write(f"{digest}  {rel}\n")
                m.flush()
                os.fsync(m.fileno())
        return EvidenceRef(rel, digest, len(data))

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
