"""A rollout running in the background while a test looks at it from outside (``watch``,
the metrics endpoint, the report), held still at gates that wait for ``approve``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from support import ROOT, cli, journal_so_far, write_inventory, write_playbook

FAST = {"K3ROLLOUT_APPROVAL_POLL_S": "0.05"}
# every background run started in this process, until stop_left_behind() has seen it end
_STARTED: list[Run] = []


def setup(tmp_path: Path, **play) -> tuple[Path, Path, Path]:
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}}, {"sim_reboot_s": 0.01})
    play.setdefault("serial", [1])
    play.setdefault("min_serving", 0)
    return write_playbook(tmp_path / "pb.yml", **play), inv, tmp_path / "run"


class Run:
    """``k3rollout run --plain`` in the background, its output drained on a thread."""

    def __init__(self, pb: Path, inv: Path, run_dir: Path, *extra: str):
        self.run_dir = run_dir
        self.proc = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes",
                                      "--plain", "--no-preflight", "--run-dir", str(run_dir), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                     env={**os.environ, **FAST})
        self.out: list[str] = []
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()
        _STARTED.append(self)

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)

    def wait_for_pause(self, pause_id: str, timeout: float = 600.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "".join(self.out)
            if (self.run_dir / "journal.jsonl").exists():
                recs = journal_so_far(self.run_dir)
                resolved = {r["pause"] for r in recs if r["type"] == "pause_resolved"}
                for r in recs:
                    if r["type"] == "pause_started" and r["pause"] == pause_id and pause_id not in resolved:
                        return r
            time.sleep(0.05)
        raise AssertionError(f"the run never paused at {pause_id}:\n{''.join(self.out)}")

    def wait(self, timeout: float = 600.0) -> int:
        rc = self.proc.wait(timeout)
        self._t.join(5)
        return rc


def approve(run_dir: Path, pause_id: str) -> None:
    p = cli("approve", str(run_dir), "--pause", pause_id)
    assert p.returncode == 0, p.stderr


def stop_left_behind() -> list[int]:
    """Kill the background runs still alive (a test that failed while its run was held at a gate
    would leave it waiting for an approval that never comes); returns their pids. Called after
    every test (tests/conftest.py)."""
    killed = []
    while _STARTED:
        run = _STARTED.pop()
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(30)
            killed.append(run.proc.pid)
        run._t.join(5)
    return killed
