"""Live progress: a redrawn status block on a terminal, one line per event otherwise."""

import json
import os
import pty
import select
import subprocess
import sys

from support import ROOT


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


def test_terminal_gets_a_redrawn_status_block(tmp_path):
    master, slave = pty.openpty()
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    out = read_all(master)
    p.wait(timeout=120)
    assert p.returncode == 0
    text = out.decode(errors="replace")
    assert "\x1b[" in text and "k3rollout  batch 5/5" in text
    assert "gpu-b08" in text and "run completed" in text


def test_pipe_gets_one_line_per_event(tmp_path):
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.run([sys.executable, "-m", "k3rollout", "demo", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode == 0
    assert "\x1b[" not in p.stderr
    # the default cluster plans K3 replicas: gpu-a08 fails and its replica partner gpu-a07 with it
    assert "batch 3 failed (failed: gpu-a07, gpu-a08)" in p.stderr
    assert "ROLLBACK gpu-a08" in p.stderr and "ROLLBACK gpu-a07" in p.stderr
    # 14 nodes walk all 8 stages; gpu-a08 stops at its 4th (cuda_check), gpu-a07 at its 5th
    # (vllm_smoke: its replica cannot launch without gpu-a08)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e["event"] == "stage_done") == 14 * 8 + 4 + 5
