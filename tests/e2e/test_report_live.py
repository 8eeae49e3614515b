"""report.html during the run: written at a batch's end, marked in progress with the time it
was written, replaced whole (written beside its name and renamed over it), so a reader who
opens it at any moment reads a whole report."""

from __future__ import annotations

import os
import re
import time

from support import journal_so_far
from support.background import Run, approve, setup


def test_report_is_whole_whenever_read_during_the_run_and_says_in_progress(tmp_path):
    pb, inv, run_dir = setup(tmp_path, pauses=[{"after_batch": 1}])
    run = Run(pb, inv, run_dir)
    reads, inodes = 0, set()

    def read_whole() -> str | None:
        nonlocal reads
        try:
            with open(run_dir / "report.html", encoding="utf-8") as f:
                inode = os.fstat(f.fileno()).st_ino
                text = f.read()
        except FileNotFoundError:
            return None
        reads += 1
        inodes.add(inode)
        assert text.lower().startswith("<!doctype html>"), text[:80]
        assert text.rstrip().endswith("</html>"), text[-200:]
        return text

    def paused() -> bool:
        return (run_dir / "journal.jsonl").exists() and any(r["type"] == "pause_started"
                                                            for r in journal_so_far(run_dir))

    # read it over and over until the run waits at the gate after batch 1
    deadline = time.monotonic() + 120
    while not paused():
        assert time.monotonic() < deadline and run.proc.poll() is None, "".join(run.out)
        read_whole()
        time.sleep(0.01)
    text = read_whole()
    assert text is not None
    m = re.search(r"<h1[^>]*>Run in progress \(this report was written at ([0-9T:.+-]+);", text)
    assert m, text[:2000]
    batch_done = next(r for r in journal_so_far(run_dir) if r["type"] == "batch_done")
    assert m.group(1) >= batch_done["ts"]          # written after batch 1 ended
    assert "gpu-01" in text

    approve(run_dir, "after-batch1")
    while run.proc.poll() is None:
        read_whole()
        time.sleep(0.01)
    assert run.wait() == 0, "".join(run.out)
    final = read_whole()
    assert final is not None and "Run in progress" not in final and "Rollout completed" in final
    assert len(inodes) >= 2                          # replaced by rename, never rewritten in place
    assert not list(run_dir.glob("*.tmp"))
    assert reads > 2
