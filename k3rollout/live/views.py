"""What ``run``, ``resume`` and ``rollback`` show while they work: the live view on a
terminal (one line per event into a pipe or with ``--plain``), and, when asked, the
Prometheus endpoint. Used as a context manager around the session; ``on_event`` is what
the engine hands each journal record to.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from k3rollout.errors import InputError
from k3rollout.live.feed import Feed, fan_out
from k3rollout.progress import LineProgress
from k3rollout.runlog.rundir import RunDir


class RunViews:
    def __init__(self, run_dir: Path, *, plain: bool = False, window_end: float | None = None,
                 metrics_port: int | None = None, metrics_address: str = "127.0.0.1",
                 stream: TextIO | None = None):
        self.run_dir = Path(run_dir)
        self.stream = stream or sys.stderr
        self.live = not plain and self.stream.isatty()
        self.window_end = window_end
        self.metrics_port = metrics_port
        self.metrics_address = metrics_address
        self.on_event: Any = None
        self.metrics_url: str | None = None
        self._screen: Any = None
        self._server: Any = None

    def __enter__(self) -> RunViews:
        feed = Feed(RunDir(self.run_dir).journal) if self.live or self.metrics_port is not None else None
        if self.metrics_port is not None:
            from k3rollout.live import metrics  # lazy: prometheus_client, for --metrics-port only

            assert feed is not None
            try:
                self._server, port = metrics.serve(self.metrics_port, self.metrics_address,
                                                   metrics.registry(feed.current))
            except OSError as exc:
                raise InputError(f"--metrics-port {self.metrics_port}: cannot serve metrics on "
                                 f"{self.metrics_address} ({exc.strerror or exc}); nothing was changed") from None
            host = f"[{self.metrics_address}]" if ":" in self.metrics_address else self.metrics_address
            self.metrics_url = f"http://{host}:{port}/metrics"
            print(f"metrics: {self.metrics_url}", file=self.stream, flush=True)
        lines = None
        if self.live:
            from k3rollout.live.screen import LiveScreen  # lazy: rich, for a live screen only

            assert feed is not None
            self._screen = LiveScreen(feed, str(self.run_dir), self.stream)
            self._screen.start()
        else:
            lines = LineProgress(self.stream, window_end=self.window_end, run_dir=str(self.run_dir))
        self.on_event = fan_out(lines, feed)
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._screen is not None:
            self._screen.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
