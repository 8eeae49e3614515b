"""Line-per-event progress on stderr, fed by the engine's journal records: what a pipe or
``--plain`` gets (a terminal gets the live view, k3rollout/live/).

Progress is a view, not a record: when its stream goes away (``2>&1 | head``, a closed
terminal) it falls silent and the run goes on; the journal and events.jsonl hold it all.
"""

from __future__ import annotations

import shlex
import sys
import time
from typing import Any, TextIO


def emit(progress: Any, text: str) -> None:
    """Write ``text`` to ``progress.stream``; a reader gone or a stream closed closes the
    progress (``progress.closed``) instead of stopping the run."""
    if getattr(progress, "closed", False):
        return
    try:
        progress.stream.write(text)
        progress.stream.flush()
    except (OSError, ValueError):     # reader gone (EPIPE, a hung-up terminal's EIO), or the stream closed
        progress.closed = True


class LineProgress:
    def __init__(self, stream: TextIO | None = None, window_end: float | None = None, run_dir: str | None = None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.window_end = window_end
        self.run_dir = run_dir

    def _w(self, text: str) -> None:
        emit(self, f"[{time.monotonic() - self.t0:7.2f}s] {text}\n")

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
        elif t == "pause_started":
            cmd = f"k3rollout approve {shlex.quote(self.run_dir or 'RUN_DIR')} --pause {r['pause']}"
            self._w(f"WAITING at {r['pause']}: {r.get('reason') or 'approval'}; to go on: {cmd}")
        elif t == "pause_resolved":
            self._w(f"{r['pause']}: {r['decision']}" + (f" by {r['by']}" if r.get("by") else ""))
        elif t == "journal_repaired":
            self._w(f"journal had a torn last line; kept in {r['torn_bytes_file']} and repaired")
