"""A command in a real pseudo-terminal, as an operator's terminal runs it: the terminal is
its controlling terminal (so Ctrl-C typed into it and a hangup reach it as they would), a
wide window, and everything it draws collected on a thread, readable with the escape
codes taken out."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

from support import ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def terminal_env() -> dict[str, str]:
    """The environment less COLUMNS and LINES: pytest-xdist's workers set them (80x24), and
    rich takes them over the pseudo-terminal's own size, as a program in a real terminal
    would not see them."""
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def _controlling_tty() -> None:
    # runs in the child after setsid (start_new_session): stdin is the terminal's slave side
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Term:
    def __init__(self, args: list[str], *, cwd: Path | str = ROOT, env: dict | None = None,
                 rows: int = 60, cols: int = 200):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "k3rollout", *args], stdin=slave, stdout=slave,
                                     stderr=slave, cwd=str(cwd), start_new_session=True,
                                     preexec_fn=_controlling_tty,
                                     env={**terminal_env(), "TERM": "xterm-256color", **(env or {})})
        os.close(slave)
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:           # EIO: the other side is closed
                return
            if not chunk:
                return
            with self._lock:
                self._raw += chunk

    @property
    def raw(self) -> str:
        with self._lock:
            return self._raw.decode(errors="replace")

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw)

    def wait_for(self, ok: Callable[[str], bool], timeout: float = 600.0) -> str:
        """Until what the terminal shows satisfies ``ok`` (checked on the whole output)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text
            if ok(text):
                return text
            if self.proc.poll() is not None:
                time.sleep(0.2)       # what it drew last
                text = self.text
                if ok(text):
                    return text
                raise AssertionError(f"exited {self.proc.returncode} before showing it:\n{text[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"not shown within {timeout} s:\n{self.text[-3000:]}")

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        """Hang up: the terminal goes away, as a closed window's does."""
        try:
            os.close(self.master)
        except OSError:
            pass

    def wait(self, timeout: float = 600.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc
