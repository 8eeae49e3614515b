"""Line-per-event progress on stderr, fed by the engine's journal records."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class LineProgress:
    def __init__(self, stream: TextIO | None = None, window_end: float | None = None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.window_end = window_end

    def _w(self, text: str) -> None:
        self.stream.write(f"[{time.monotonic() - self.t0:7.2f}s] {text}\n")
        self.stream.flush()

    def __call__(self, r: dict[str, Any]) -> None:
        t = r["type"]
        if t == "batch_started":
            self._w(f"batch {r['batch']} started: {', '.join(r['nodes'])}")
        elif t == "stage_done":
            mark = "ok  " if r["passed"] else "FAIL"
            self._w(f"  {mark} {r['node']:<14} {r['stage']:<15} {r.get('reason') or ''}".rstrip())
        elif t == "triage":
            self._w(f"       {r['node']:<14} triage: {r['category']}")
        elif t == "rollback_started":
            self._w(f"  ROLLBACK {r['node']}: {r.get('reason', '')}")
        elif t == "rollback_done":
            self._w(f"  rollback {r['node']}: {'done' if r['ok'] else 'FAILED - node kept cordoned'}")
        elif t == "batch_done":
            failed = f" (failed: {', '.join(r['failed'])})" if r.get("failed") else ""
            self._w(f"batch {r['batch']} {r['status']}{failed}")
        elif t == "run_halted":
            self._w(f"HALTED ({r['kind']}): {r['reason']}")
        elif t == "run_finished":
            self._w(f"run {r['status']}")
        elif t == "journal_repaired":
            self._w(f"journal had a torn last line; kept in {r['torn_bytes_file']} and repaired")
