"""structlog set-up. Only the CLI calls this; library code only asks for a logger."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import structlog

from k3rollout import fastjson


class _JsonFile:
    """events.jsonl: one JSON line per event, each one O_APPEND write (no buffering, so
    ``tail -f`` sees it at once and a killed process loses none; lines never interleave)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def open(self, path: Path) -> None:
        self.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> Any:
        fd = self.fd
        if fd is not None:
            os.write(fd, fastjson.dumps_line(event))
        elif event.get("level") in ("error", "critical"):
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
