"""What the live view, the metrics and the reports written at batch ends cost a run's
controller, against the CPU of the run itself (not part of the test suite).

    python bench/live.py [--nodes 50]
    python bench/live.py --window-nodes 1000      # against the window bench's rollout
    python bench/live.py --window-nodes 1000 --keep DIR   # ... and keep its run for --replay
    python bench/live.py --replay DIR             # the same figures over a kept run (its wall and CPU)

Runs a simulated rollout of N nodes with ``--plain`` (every sim latency zero, the ladder cut
to one request per step, as bench/run.py does), measuring the controller process's CPU.
Then replays its journal, in this process, through what a terminal and a scraper would
cost it, each as the run's own process does it:

- the fold: every record handed to a ``live/feed.py`` Feed (what the engine calls) and
  folded when the view looks (``Feed.current``, every 2,000 records here);
- the frames of the view at ``live/screen.py``'s rate (its rule played at the run's mean
  CPU rate; each frame rendered to a 160-column terminal, taken at evenly spaced points of
  the journal so in-flight nodes are on it). The fold is counted beside the frames: in the
  run a frame's cost, which the rule spaces frames by, includes the fold of the records
  since the last one, so there the two together stay near 1 / (RUN_SHARE + 1) of its CPU;
  the figure here is the larger;
- one scrape of ``/metrics`` every ``SCRAPE_S`` (15 s; Prometheus' own default
  ``scrape_interval`` is 1 minute, 15 s is the common setting and the dearer one), each
  served over HTTP by the endpoint ``--metrics-port`` starts (``metrics.serve``) to a
  scraper in another process that asks as Prometheus does (OpenMetrics, gzip), at evenly
  spaced points of the journal, so the state moved since the last one as in a run; the CPU
  is this process's while it answers;
- the reports written at each batch's end, each rendered from the engine's view (the fold of
  every record, step records and their evidence included) at the run's end state (the most
  nodes, spans and evidence a report of the run has: the upper bound; ``REPORT_BUDGET`` in
  engine/session.py skips some when batches are short), the mean of three after one
  unmeasured write (a run has rendered a report before its first batch ends).

Prints each figure and its ratio to the run's CPU, and the machine's load average.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from k3rollout.engine.session import REPORT_BUDGET
from k3rollout.live import metrics
from k3rollout.live.feed import Feed
from k3rollout.live.follow import JournalTail
from k3rollout.live.screen import FRAME_BUDGET, MAX_WAIT_S, RUN_SHARE
from k3rollout.live.state import ts
from k3rollout.live.view import render
from k3rollout.report.render import write_reports
from k3rollout.runlog.journal import no_gc
from k3rollout.runlog.view import fold

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


# a scraper in a process of its own, as Prometheus is: one request per line read, with the
# Accept and Accept-Encoding headers Prometheus 2 sends
SCRAPER = """
import sys, urllib.request
accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
req = urllib.request.Request(sys.argv[1], headers={"Accept": accept, "Accept-Encoding": "gzip"})
for _ in sys.stdin:
    with urllib.request.urlopen(req, timeout=120) as r:
        print(len(r.read()), flush=True)
"""
FOLD_EVERY = 2000


def replay(run_dir: Path, records: list[dict[str, Any]], marks: list[int]) -> dict[str, float]:
    """CPU seconds of the fold, the frames and the scrapes at ``marks`` (their means for the
    last two, and the dearest scrape), as the run's process spends them."""
    feed = Feed(run_dir / "journal.jsonl")
    at = [0.0]
    server, port = metrics.serve(0, "127.0.0.1", metrics.registry(feed.current, lambda: at[0]))
    scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, f"http://127.0.0.1:{port}/metrics"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert scraper.stdin is not None and scraper.stdout is not None
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system="truecolor")
    folding = frames = scrapes = worst = 0.0
    done = 0
    try:
        for m in marks:
            t = time.process_time()
            for r in records[done:m]:
                feed(r)
                if r["seq"] % FOLD_EVERY == 0:
                    with feed.current():
                        pass
            with feed.current():
                pass
            folding += time.process_time() - t
            done = m
            at[0] = ts(records[m - 1]["ts"]) or 0.0     # each at the time its last record was written
            t = time.process_time()
            with feed.current() as state:
                console.print(render(state, at[0], str(run_dir)))
            frames += time.process_time() - t
            t = time.process_time()
            scraper.stdin.write("\n")
            scraper.stdin.flush()
            assert int(scraper.stdout.readline()) > 0
            t = time.process_time() - t
            scrapes, worst = scrapes + t, max(worst, t)
    finally:
        scraper.stdin.close()
        scraper.wait()
        server.shutdown()
        server.server_close()
    assert feed.state.seq == records[-1]["seq"]
    return {"fold": folding, "frame": frames / len(marks), "scrape": scrapes / len(marks), "worst_scrape": worst}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=40,
                    help="points of the journal a frame is drawn and a scrape is served at, to take their means")
    ap.add_argument("--window-nodes", type=int, default=0,
                    help="measure against bench/window.py's sliding-window rollout of this many nodes instead")
    ap.add_argument("--max-out", type=int, default=50)
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--keep", type=Path, help="keep the rollout's folder here (for --replay)")
    ap.add_argument("--replay", type=Path, help="replay a rollout kept with --keep instead of running one")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="k3live-") as d:
        base = Path(d)
        if args.replay:
            kept = json.loads((args.replay / "bench.json").read_text())
            args.nodes, wall, run_cpu = kept["nodes"], kept["wall_s"], kept["cpu_s"]
            run_dir = base / "run"                      # the reports below are written into a copy
            shutil.copytree(args.replay / kept["run_dir"], run_dir, ignore=shutil.ignore_patterns("evidence"))
            (run_dir / "evidence").symlink_to((args.replay / kept["run_dir"] / "evidence").resolve())
        else:
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=False)
                base = args.keep
            if args.window_nodes:
                args.nodes = args.window_nodes
                run_dir, wall, run_cpu = window_rollout(base, args.window_nodes, args.max_out, args.scale)
            else:
                run_dir, wall, run_cpu = rollout(base, args.nodes)
            if args.keep:
                (args.keep / "bench.json").write_text(json.dumps({
                    "nodes": args.nodes, "wall_s": wall, "cpu_s": run_cpu, "run_dir": run_dir.name,
                    "load_before": load_before, "load_after": os.getloadavg()}))
        records = JournalTail(run_dir / "journal.jsonl").read()
        n = len(records)
        marks = sorted({max(1, n * (i + 1) // args.frames) for i in range(args.frames)})
        got = replay(run_dir, records, marks)
        fold_cpu, frame, scrape = got["fold"], got["frame"], got["scrape"]

        # the engine's own view, the fold of every record (the live view's skips the steps'
        # records, whose evidence the report lists): what a batch end renders
        with no_gc():
            view = fold(records)
        batches = len(view.batches)
        write_reports(run_dir, view=view, records=n, in_progress="now")
        t = time.process_time()
        for _ in range(3):
            write_reports(run_dir, view=view, records=n, in_progress="now")
        report = (time.process_time() - t) / 3
    load_after = os.getloadavg()

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
        ("fold, per journal record (through the feed)", f"{fold_cpu / n * 1e6:.2f} us ({fold_cpu:.3f} s in all)"),
        ("one frame of the view (160 columns)", f"{frame * 1e3:.2f} ms; {frames} frames, one every {t_frame:.1f} s "
                                                f"(run at {rate:.2f} CPU)"),
        ("live view per journal record (fold + frames)", f"{view_cpu / n * 1e6:.1f} us"),
        ("live view / run CPU", f"{view_cpu / run_cpu:.2%}"),
        ("one metrics scrape, served over HTTP", f"{scrape * 1e3:.2f} ms (at most {got['worst_scrape'] * 1e3:.2f} ms); "
                                                 f"every {SCRAPE_S:.0f} s: {scrape * scrapes / run_cpu:.3%} of run CPU "
                                                 "(beside the fold above)"),
        ("reports at every batch end (no budget)", f"{report:.3f} s each, x{batches}: "
                                                   f"{report * batches / run_cpu:.2%} of run CPU"),
        ("  with REPORT_BUDGET (engine/session.py)", f"at most {1 / (REPORT_BUDGET + 1):.2%} of run CPU"),
        ("view + scrapes / run CPU", f"{(view_cpu + scrape * scrapes) / run_cpu:.2%}"),
        ("view + scrapes + batch-end reports / run CPU",
         f"{(view_cpu + scrape * scrapes + min(report * batches, run_cpu / (REPORT_BUDGET + 1))) / run_cpu:.2%} "
         "(the reports at their bound where REPORT_BUDGET binds)"),
        ("load average (1, 5, 15 min)", f"{', '.join(f'{x:.1f}' for x in load_before)} before, "
                                        f"{', '.join(f'{x:.1f}' for x in load_after)} after"),
    ]
    width = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "nodes": args.nodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
