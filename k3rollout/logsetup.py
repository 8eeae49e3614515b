"""structlog set-up. Only the CLI calls this; library code only asks for a logger."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import structlog


class _JsonFile:
    def __init__(self) -> None:
        self.fh = None
        self.lock = threading.Lock()

    def open(self, path: Path) -> None:
        self.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "a", encoding="utf-8")

    def close(self) -> None:
        if self.fh:
            self.fh.close()
            self.fh = None

    def __call__(self, logger: Any, name: str, event: dict[str, Any]) -> Any:
        if self.fh:
            with self.lock:
                self.fh.write(json.dumps(event, default=str) + "\n")
                self.fh.flush()
        if event.get("level") in ("error", "critical") and not self.fh:
            sys.stderr.write(f"{event.get('event')}: {event}\n")
        raise structlog.DropEvent


EVENTS = _JsonFile()


def configure(events_path: Path | None = None) -> None:
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), EVENTS],
        cache_logger_on_first_use=False,
    )
    if events_path is not None:
        EVENTS.open(events_path)
