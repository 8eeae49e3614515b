"""What the live view, the metrics and the reports written at batch ends cost a run's
controller, against the CPU of the run itself (not part of the test suite).

    python bench/live.py [--nodes 50]
    python bench/live.py --window-nodes 1000      # against the window bench's rollout

Runs a simulated rollout of N nodes with ``--plain`` (every sim latency zero, the ladder cut
to one request per step, as bench/run.py does), measuring the controller process's CPU.
Then replays its journal, in this process, through what a terminal and a scraper would
cost it: the fold of every record (``live/state.py``), the frames of the view at
``live/screen.py``'s rate (its rule played at the run's mean CPU rate; each frame rendered to
a 160-column terminal, taken at evenly spaced points of the journal so in-flight nodes are on
it), one
scrape of the metrics every 15 s, and the reports written at each batch's end (the upper
bound: ``REPORT_BUDGET`` in engine/session.py skips some when batches are short). Prints
each figure and its ratio to the run's CPU.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import yaml
from rich.console import Console

from k3rollout.engine.session import REPORT_BUDGET
from k3rollout.live import metrics
from k3rollout.live.follow import JournalTail
from k3rollout.live.screen import FRAME_BUDGET, MAX_WAIT_S, RUN_SHARE
from k3rollout.live.state import LiveRun, ts
from k3rollout.live.view import render
from k3rollout.report.render import write_reports

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"
FRAME_S, SCRAPE_S = 1.0, 15.0


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rollout(base: Path, n: int) -> tuple[Path, float, float]:
    hosts = {f"gpu-{i:04d}": None for i in range(n)}
    inv = base / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "k3sim", "sim_latency_s": 0,
                                                    "sim_token_s": 0, "sim_reboot_s": 0},
                                           "children": {"gpu_nodes": {"hosts": hosts}}}}))
    pb = yaml.safe_load(PLAYBOOK.read_text())
    pb[0].pop("profile", None)
    pb[0].update({"serial": ["10%"], "min_serving": 0, "max_fail_percentage": 100})
    feats = next(st for st in pb[0]["stages"] if st["stage"] == "features")
    feats["with"].update({"context_tokens": 0, "concurrency": [1], "prefix_block_tokens": 1536})
    (base / "pb").mkdir()
    (base / "pb" / "vendor").symlink_to(ROOT / "playbooks" / "vendor")
    (base / "pb" / "pb.yml").write_text(yaml.safe_dump(pb, sort_keys=False))
    run_dir = base / "run"
    cpu, t = child_cpu(), time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "k3rollout", "run", str(base / "pb" / "pb.yml"), "-i", str(inv),
                        "--yes", "--plain", "--no-preflight", "--run-dir", str(run_dir)], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "K3ROLLOUT_LOCK_DIR": str(base / "locks")})
    wall, cpu = time.perf_counter() - t, child_cpu() - cpu
    assert p.returncode == 0, p.stderr[-2000:]
    return run_dir, wall, cpu


def window_rollout(base: Path, n: int, max_out: int, scale: float) -> tuple[Path, float, float]:
    """The window bench's sliding-window rollout (bench/window.py: its stages held for their
    scaled estimates, 5% stragglers), run in this process; its CPU is this process's over
    the run (the engine and the in-process simulated commands; the cluster's daemon is a
    process of its own, as a real cluster is)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import window  # bench/window.py

    nodes = [f"gpu-{i:04d}" for i in range(n)]
    slow = window.stragglers(nodes, 5.0, 22)
    cpu, t = time.process_time(), time.perf_counter()
    window.rollout(base, nodes, slow, max_out, scale, True)
    return base / "window-run", time.perf_counter() - t, time.process_time() - cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=40, help="frames rendered to take the mean frame cost")
    ap.add_argument("--window-nodes", type=int, default=0,
                    help="measure against bench/window.py's sliding-window rollout of this many nodes instead")
    ap.add_argument("--max-out", type=int, default=50)
    ap.add_argument("--scale", type=float, default=0.05)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="k3live-") as d:
        if args.window_nodes:
            args.nodes = args.window_nodes
            run_dir, wall, run_cpu = window_rollout(Path(d), args.window_nodes, args.max_out, args.scale)
        else:
            run_dir, wall, run_cpu = rollout(Path(d), args.nodes)
        records = JournalTail(run_dir / "journal.jsonl").read()
        n = len(records)

        state = LiveRun()
        t = time.process_time()
        for r in records:
            state.apply(r)
        fold_cpu = time.process_time() - t

        # frames at evenly spaced points of the journal, each at the time its last record was written
        console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system="truecolor")
        marks = sorted({max(1, n * (i + 1) // args.frames) for i in range(args.frames)})
        replay, frame_cpu, done = LiveRun(), 0.0, 0
        for m in marks:
            for r in records[done:m]:
                replay.apply(r)
            done = m
            now = ts(records[m - 1]["ts"]) or 0.0
            t = time.process_time()
            console.print(render(replay, now, str(run_dir)))
            frame_cpu += time.process_time() - t
        frame = frame_cpu / len(marks)

        reg = metrics.registry(lambda: nullcontext(state))
        t = time.process_time()
        for _ in range(5):
            metrics.text(reg)
        scrape = (time.process_time() - t) / 5

        batches = len(state.view.batches)
        t = time.process_time()
        write_reports(run_dir, view=state.view, records=n, in_progress="now")
        report = time.process_time() - t

    # the run's own view draws by live/screen.py's rule: a second at the least, FRAME_BUDGET
    # frames' worth of wall time, and otherwise once the run has spent RUN_SHARE frames' worth
    # of CPU (at this run's mean CPU rate) or MAX_WAIT_S went by
    rate = run_cpu / wall if wall else 0.0
    frames, t_frame = 0, 0.0
    due = 0.0
    while due < wall:
        frames += 1
        t_frame = max(FRAME_S, FRAME_BUDGET * frame,
                      min(MAX_WAIT_S, RUN_SHARE * frame / rate if rate else MAX_WAIT_S))
        due += t_frame
    scrapes = wall / SCRAPE_S
    view_cpu = fold_cpu + frames * frame
    rows = [
        (f"simulated rollout, {args.nodes} nodes", f"{wall:.1f} s wall, controller CPU {run_cpu:.2f} s, "
                                                   f"{n:,} journal records, {batches} batches"),
        ("fold, per journal record", f"{fold_cpu / n * 1e6:.1f} us ({fold_cpu:.3f} s in all)"),
        ("one frame of the view (160 columns)", f"{frame * 1e3:.2f} ms; {frames} frames, one every {t_frame:.1f} s "
                                                f"(run at {rate:.2f} CPU)"),
        ("live view per journal record (fold + frames)", f"{view_cpu / n * 1e6:.1f} us"),
        ("live view / run CPU", f"{view_cpu / run_cpu:.2%}"),
        ("one metrics scrape", f"{scrape * 1e3:.2f} ms; every {SCRAPE_S:.0f} s: {scrape * scrapes / run_cpu:.3%} "
                               "of run CPU (beside the fold above)"),
        ("reports at every batch end (no budget)", f"{report:.3f} s each, x{batches}: "
                                                   f"{report * batches / run_cpu:.2%} of run CPU"),
        ("  with REPORT_BUDGET (engine/session.py)", f"at most {1 / (REPORT_BUDGET + 1):.2%} of run CPU"),
        ("view + scrapes / run CPU", f"{(view_cpu + scrape * scrapes) / run_cpu:.2%}"),
        ("view + scrapes + batch-end reports / run CPU",
         f"{(view_cpu + scrape * scrapes + min(report * batches, run_cpu / (REPORT_BUDGET + 1))) / run_cpu:.2%} "
         "(the reports at their bound where REPORT_BUDGET binds)"),
    ]
    width = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "nodes": args.nodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
