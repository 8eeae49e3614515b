"""Line-per-event progress on stderr, fed by the engine's journal records.

Progress is a view, not a record: when its stream goes away (``2>&1 | head``, a closed
terminal) it falls silent and the run goes on; the journal and events.jsonl hold it all.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _emit(progress: Any, text: str) -> None:
    if getattr(progress, "closed", False):
        return
    try:
        progress.stream.write(text)
        progress.stream.flush()
    except (BrokenPipeError, ValueError):     # reader gone, or the stream was closed
        progress.closed = True


class LineProgress:
    def __init__(self, stream: TextIO | None = None, window_end: float | None = None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.window_end = window_end

    def _w(self, text: str) -> None:
        _emit(self, f"[{time.monotonic() - self.t0:7.2f}s] {text}\n")

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


class LiveProgress:
    """A redrawn status block for a terminal: batch, each node's stage, elapsed vs window.

    Plain ANSI (cursor up + clear to end); no curses, so it works over SSH and in tmux.
    """

    def __init__(self, stream: TextIO | None = None, window_end: float | None = None, total_batches: int = 0):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.window_end = window_end
        self.total = total_batches
        self.batch: int | None = None
        self.nodes: dict[str, str] = {}
        self.done: dict[str, int] = {}
        self.notes: list[str] = []
        self.lines = 0
        self.last_draw = 0.0

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_draw < 0.1:
            return      # at most ten redraws a second; the state is kept either way
        self.last_draw = now
        elapsed = time.monotonic() - self.t0
        head = f"k3rollout  batch {self.batch or '-'}/{self.total or '?'}  elapsed {elapsed:6.1f}s"
        if self.window_end is not None:
            left = self.window_end - (self.wall0 + elapsed)
            head += f"  window left {max(0, left) / 60:5.1f} min"
        body = [head, "  " + "  ".join(f"{k}: {v}" for k, v in sorted(self.done.items()))]
        body += [f"  {n:<16} {s}" for n, s in self.nodes.items()]
        body += [f"  ! {x}" for x in self.notes[-3:]]
        out = ""
        if self.lines:
            out += f"\x1b[{self.lines}F\x1b[J"
        out += "\n".join(body) + "\n"
        _emit(self, out)
        self.lines = len(body)

    def __call__(self, r: dict[str, Any]) -> None:
        t = r["type"]
        if t == "batch_started":
            self.batch = r["batch"]
            self.nodes = {n: "waiting" for n in r["nodes"]}
        elif t == "stage_started" and r.get("node") in self.nodes:
            self.nodes[r["node"]] = f"{r['stage']} ..."
        elif t == "stage_done" and r.get("node") in self.nodes:
            self.nodes[r["node"]] = f"{r['stage']} {'ok' if r['passed'] else 'FAILED'}"
        elif t == "rollback_started":
            self.nodes[r["node"]] = "rolling back ..."
        elif t == "node_state" and r["to"] in ("upgrade-done", "rolled-back", "rollback-failed", "failed", "skipped"):
            self.nodes[r["node"]] = r["to"]
            self.done[r["to"]] = self.done.get(r["to"], 0) + 1
        elif t == "run_halted":
            self.notes.append(f"HALTED ({r['kind']}): {r['reason']}")
        elif t == "run_finished":
            self.notes.append(f"run {r['status']}")
        else:
            return
        self._draw(force=t in ("batch_started", "run_halted", "run_finished", "rollback_started"))


def make_progress(window_end: float | None = None, total_batches: int = 0, plain: bool = False) -> Any:
    if not plain and sys.stderr.isatty():
        return LiveProgress(window_end=window_end, total_batches=total_batches)
    return LineProgress(window_end=window_end)
