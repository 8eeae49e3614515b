"""Reading a journal that another process is still appending to, read-only.

The file is opened for reading only and nothing is written anywhere: no lock, no repair,
no cache. Only whole lines are records: a last line without its newline is a record being
written (or one a crash tore), kept back until its newline arrives. A journal that shrank
or was replaced (``resume`` cuts a torn last line off before it appends again) is read
again from its start, and the caller starts its fold again (``reset``). The hash chain is
not verified here: this is a view; ``report`` and ``resume`` verify.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from k3rollout import fastjson


class JournalTail:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0           # bytes of whole lines read so far
        self._partial = b""
        self._ino: int | None = None
        self.reset = False        # set when the file was cut or replaced: fold again from the start

    def read(self) -> list[dict[str, Any]]:
        """The records appended since the last call (all of them on the first)."""
        self.reset = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            st = os.fstat(fd)
            if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
                self.offset, self._partial, self.reset = 0, b"", True
            self._ino = st.st_ino
            chunks = []
            pos = self.offset + len(self._partial)
            while True:
                data = os.pread(fd, 1 << 20, pos)
                if not data:
                    break
                chunks.append(data)
                pos += len(data)
        finally:
            os.close(fd)
        data = self._partial + b"".join(chunks)
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        self.offset += cut
        out = []
        for line in data[:cut].splitlines():
            if not line.strip():
                continue
            try:
                rec = fastjson.loads(line)
            except ValueError:
                continue          # not a record (the file is checked by `report`, not here)
            if isinstance(rec, dict) and "seq" in rec and "type" in rec:
                out.append(rec)
        return out
