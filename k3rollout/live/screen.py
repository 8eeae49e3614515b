"""Drawing the live view on a terminal: during a run, and for ``k3rollout watch``.

The run's view redraws on a thread of its own, once a second (the finest unit it shows),
from the records the feed collected since: the engine's threads never wait for the
terminal. A frame that takes long (a slow terminal, a loaded machine) spaces the next ones
out, so drawing takes at most one part in ``FRAME_BUDGET`` of a CPU, and at most one part
in ``RUN_SHARE`` of the run's own CPU (the 1,000-node window bench: bench/README.md). A
terminal that goes away (closed, or its ssh session dropped) makes the next write fail;
the view then stops drawing and the run goes on (the CLI ignores the hangup signal while a
run works: `resume` needs nothing from the terminal, and a run cut short mid-driver is
the worse outcome).

``watch`` follows the journal on disk (``follow``) and draws the same view, or one line per
event when its output is not a terminal. It opens the journal for reading and nothing
else: no lock, no file written, nothing sent to the running process.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, RenderableType
from rich.live import Live

from k3rollout.live.feed import Feed
from k3rollout.live.follow import JournalTail
from k3rollout.live.state import LiveRun
from k3rollout.live.view import render
from k3rollout.progress import LineProgress, emit
from k3rollout.runlog.rundir import RunDir

REDRAW_S = 1.0
FRAME_BUDGET = 100
# the run's own view costs at most one part in RUN_SHARE + 1 of the run's CPU: a frame waits
# until the process has spent RUN_SHARE times the last frame's CPU since it, or MAX_WAIT_S
# went by (a run that only waits, on a reboot or an approval, still sees its clocks move)
RUN_SHARE = 100
MAX_WAIT_S = 15.0


def frame_due(cost_s: float, cpu_since_s: float, wall_since_s: float) -> bool:
    """Whether the run's view draws now: the last frame took ``cost_s`` of CPU, the process
    has spent ``cpu_since_s`` (every thread, the frame included) and ``wall_since_s`` went by."""
    return wall_since_s >= MAX_WAIT_S or cpu_since_s - cost_s >= RUN_SHARE * cost_s


class Screen:
    """A rich ``Live`` area that stops drawing, quietly, once its terminal is gone."""

    def __init__(self, stream: TextIO):
        self.console = Console(file=stream)
        self.live = Live(console=self.console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False,
                         transient=False)
        self.closed = False

    def start(self) -> None:
        try:
            self.live.start()
        except OSError:           # the terminal is gone already
            self.closed = True

    def show(self, renderable: RenderableType) -> None:
        if self.closed:
            return
        try:
            self.live.update(renderable, refresh=True)
        except OSError:           # EIO or EPIPE: nobody is looking any more
            self.closed = True

    def stop(self) -> None:
        try:
            self.live.stop()
        except OSError:
            self.closed = True


class LiveScreen:
    """The run's own live view, fed by the engine's records (``feed``)."""

    def __init__(self, feed: Feed, run_dir: str, stream: TextIO | None = None, every: float = REDRAW_S):
        self.feed = feed
        self.run_dir = run_dir
        self.screen = Screen(stream or sys.stderr)
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="k3rollout-live-view", daemon=True)
        self.failed: BaseException | None = None

    def start(self) -> None:
        self.screen.start()
        self._thread.start()

    def draw(self) -> float:
        """Draw a frame; the CPU seconds it took this thread."""
        t = time.thread_time()
        with self.feed.current() as state:
            view = render(state, time.time(), self.run_dir)
        self.screen.show(view)
        return time.thread_time() - t

    def _loop(self) -> None:
        wait, cost = self.every, 0.0
        cpu, wall = time.process_time(), time.monotonic()
        try:
            while not self._stop.wait(wait) and not self.screen.closed:
                if not frame_due(cost, time.process_time() - cpu, time.monotonic() - wall):
                    wait = self.every
                    continue
                cpu, wall = time.process_time(), time.monotonic()
                cost = self.draw()
                wait = max(self.every, FRAME_BUDGET * cost)
        except Exception as exc:  # noqa: BLE001 - a view never stops the run; said once, at stop()
            self.failed = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.failed is None:
            try:
                self.draw()        # the last frame: how the run ended
            except Exception as exc:  # noqa: BLE001 - as above: the run's outcome stands
                self.failed = exc
        self.screen.stop()
        if self.failed is not None and not self.screen.closed:
            try:
                self.screen.console.print(f"k3rollout: the live view stopped ({type(self.failed).__name__}: "
                                          f"{self.failed}); the run was not affected: `k3rollout watch "
                                          f"{self.run_dir}` or the journal show it", markup=False,
                                          highlight=False)
            except OSError:
                pass


class _WatchLines(LineProgress):
    """One line per event for ``watch`` into a pipe: stamped with the record's time."""

    def __init__(self, stream: TextIO, run_dir: str):
        super().__init__(stream=stream, run_dir=run_dir)
        self.ts = ""

    def _w(self, text: str) -> None:
        emit(self, f"[{self.ts[11:19] or '--:--:--'}Z] {text}\n")

    def __call__(self, r: dict[str, Any]) -> None:
        self.ts = r.get("ts") or ""
        super().__call__(r)


def alive(pid: int | None, host: str | None) -> bool | None:
    """Whether the run's process ``pid`` on ``host`` exists (None: not known here, e.g. a
    run directory on shared storage watched from another machine)."""
    if not pid or (host is not None and host != socket.gethostname()):
        return None
    try:
        os.kill(pid, 0)           # signal 0: existence only, nothing is delivered
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(run_dir: Path, *, plain: bool = False, stream: TextIO | None = None, every: float = REDRAW_S,
          gone_after: float = 3.0) -> str:
    """Follow ``run_dir``'s journal until the run ends; returns why it stopped (``ended``,
    or ``gone``: the process that wrote it is not running and nothing came for
    ``gone_after`` seconds). KeyboardInterrupt (Ctrl-C) goes to the caller."""
    out = stream or sys.stdout
    tail = JournalTail(RunDir(run_dir).journal)
    state = LiveRun()
    lines = _WatchLines(out, str(run_dir)) if plain or not out.isatty() else None
    screen = None if lines else Screen(out)
    quiet_since = time.monotonic()
    why = ""
    if screen:
        screen.start()
    try:
        while True:
            records = tail.read()
            if tail.reset:
                state = LiveRun()
            if records:
                quiet_since = time.monotonic()
            for r in records:
                if state.apply(r) and lines:
                    lines(r)
            if screen:
                screen.show(render(state, time.time(), str(run_dir)))
            if state.finished():
                why = "ended"
                break
            if alive(state.pid, state.host) is False and time.monotonic() - quiet_since > gone_after:
                why = "gone"
                break
            time.sleep(every)
    finally:
        if screen:
            screen.stop()
    return why
