"""Live progress: the live view on a terminal, one line per event otherwise."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

from support import ROOT
from support.term import terminal_env

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def read_all(fd: int) -> bytes:
    buf = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def test_terminal_gets_the_live_view(tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
    env = {**terminal_env(), "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks"), "TERM": "xterm-256color"}
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    out = read_all(master)
    p.wait(timeout=600)
    assert p.returncode == 0
    raw = out.decode(errors="replace")
    assert "\x1b[" in raw                   # drawn in place, not scrolled
    text = ANSI.sub("", raw)
    # the last frame: every batch and replica done, the failure with its triage and rollback
    last = text[text.rindex("batch 5/5"):]
    assert "completed" in last and "12/12 replicas" in last and "run completed" in last
    row = next(line for line in last.splitlines() if "gpu-a08" in line and "cuda_check" in line)
    assert "container_runtime" in row and "done" in row
    # while it ran: the ETA from measured stage times, and units in flight with their stage
    assert "left (measured)" in text and "in flight" in text


def test_pipe_gets_one_line_per_event(tmp_path):
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.run([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert p.returncode == 0
    assert "\x1b[" not in p.stderr
    # the default cluster plans K3 replicas: gpu-a08 fails and its replica partner gpu-a07 with it
    assert "batch 3 failed (failed: gpu-a07, gpu-a08)" in p.stderr
    assert "ROLLBACK gpu-a08" in p.stderr and "ROLLBACK gpu-a07" in p.stderr
    # 14 nodes walk all 8 stages; gpu-a08 stops at its 4th (cuda_check), gpu-a07 at its 5th
    # (vllm_smoke: its replica cannot launch without gpu-a08)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e["event"] == "stage_done") == 14 * 8 + 4 + 5
