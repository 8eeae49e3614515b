"""What durability costs a node: the journal's group commit with one ``syncfs(2)`` against
plain ``fsync`` of every new evidence file, its folder and the manifest, then the journal.

    python bench/durability.py [--nodes 100] [--rounds 2] [--mode syncfs fsync]

Runs the same simulated rollout as bench/run.py (the shipped playbook, ``serial: 10%``,
forks 16, every sim latency zero, one request per ladder step) in a temporary directory
on this machine's disk, in process, once per mode and round, alternating the modes so the
machine's load falls on both alike. ``syncfs`` is the commit as it is where the C library
has ``syncfs`` (``runlog/journal.py`` calls it through ctypes); ``fsync`` is the commit
where it has not (``EvidenceStore.sync``: each evidence file written since the last commit,
the manifest and each folder holding a new file, then the journal). Every ``os.fsync`` and
``syncfs`` call is counted and timed.

Prints, per mode: evidence files, commits, fsync/syncfs calls and the seconds spent in them
(summed over the engine's threads) per node; and the rollout's wall time. A node's stages
take about 83 minutes on real hardware (the playbook's estimates); the last line says what
share of that the commits would be, serialised on one commit lock across the whole run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"


class Meter:
    """Counts and times calls of a function, from any thread."""

    def __init__(self, fn: Any):
        self.fn, self.calls, self.seconds = fn, 0, 0.0
        self._lock = threading.Lock()

    def __call__(self, *a: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.fn(*a)
        finally:
            took = time.perf_counter() - t
            with self._lock:
                self.calls += 1
                self.seconds += took


def playbook(base: Path) -> Path:
    pb = yaml.safe_load(PLAYBOOK.read_text())
    pb[0].update({"serial": ["10%"], "min_serving": 0, "max_fail_percentage": 100})
    feats = next(st for st in pb[0]["stages"] if st["stage"] == "features")
    feats["with"].update({"context_tokens": 0, "concurrency": [1]})
    (base / "pb").mkdir(exist_ok=True)
    if not (base / "pb" / "vendor").exists():
        (base / "pb" / "vendor").symlink_to(ROOT / "playbooks" / "vendor")
    (base / "pb" / "pb.yml").write_text(yaml.safe_dump(pb, sort_keys=False))
    return base / "pb" / "pb.yml"


def rollout(base: Path, n: int, mode: str, tag: str) -> dict[str, Any]:
    from run import inventory

    from k3rollout.cli import main
    from k3rollout.runlog import journal as jr

    inv = inventory(base / f"inv-{tag}", n, racks=max(1, n // 16),
                    sim_vars={"sim_latency_s": 0, "sim_token_s": 0, "sim_reboot_s": 0})
    run_dir = base / f"run-{tag}"
    os.environ["K3ROLLOUT_LOCK_DIR"] = str(base / f"locks-{tag}")
    fsync = Meter(os.fsync)
    saved = {"fsync": os.fsync}
    syncfs = Meter(jr._SYNCFS) if getattr(jr, "_SYNCFS", None) is not None else None
    patches: list[tuple[Any, str, Any]] = []
    if mode == "fsync":
        # the commit as where the C library has no syncfs: every new file fsynced
        for mod in _modules_with("HAVE_SYNCFS"):
            patches.append((mod, "HAVE_SYNCFS", False))
        if hasattr(jr, "_SYNCFS"):
            patches.append((jr, "_SYNCFS", None))
    elif syncfs is not None:
        patches.append((jr, "_SYNCFS", syncfs))
    elif mode == "syncfs":
        raise SystemExit("this build has no syncfs path (runlog/journal.py commits with fsync only)")
    for mod, name, value in patches:
        saved[(id(mod), name)] = getattr(mod, name)
        setattr(mod, name, value)
    os.fsync = fsync
    out = io.StringIO()
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["run", str(playbook(base)), "-i", str(inv), "--yes", "--plain", "--run-dir", str(run_dir)])
    finally:
        wall = time.perf_counter() - t
        os.fsync = saved["fsync"]
        for mod, name, _ in patches:
            setattr(mod, name, saved[(id(mod), name)])
    if code != 0:
        raise SystemExit(f"{mode}: the rollout exited {code}:\n{out.getvalue()[-3000:]}")
    files = sum(1 for _ in (run_dir / "evidence" / "MANIFEST.sha256").open())
    records = sum(1 for _ in (run_dir / "journal.jsonl").open())
    return {"mode": mode, "wall_s": wall, "files": files, "records": records,
            "fsyncs": fsync.calls, "fsync_s": fsync.seconds,
            "syncfs": syncfs.calls if (syncfs and mode == "syncfs") else 0,
            "syncfs_s": syncfs.seconds if (syncfs and mode == "syncfs") else 0.0}


def _modules_with(name: str) -> list[Any]:
    import importlib

    mods = []
    for m in ("k3rollout.engine.runner", "k3rollout.engine.observe"):
        mod = importlib.import_module(m)
        if hasattr(mod, name):
            mods.append(mod)
    return mods


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mode", nargs="+", default=["syncfs", "fsync"], choices=("syncfs", "fsync"))
    args = ap.parse_args()
    from k3rollout.runlog import journal as jr

    modes = [m for m in args.mode if m != "syncfs" or getattr(jr, "_SYNCFS", None) is not None]
    if modes != args.mode:
        print("(no syncfs path in this build: measuring fsync only)")
    n = args.nodes
    stage_min = sum(s.estimate_s for s in __import__("k3rollout.model", fromlist=["load_playbook"])
                    .load_playbook(PLAYBOOK).play.stages) / 60.0
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="k3dur-", dir=os.environ.get("K3BENCH_DIR")) as d:
        for r in range(args.rounds):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                res = rollout(Path(d), n, m, f"{m}{r}")
                rows[m].append(res)
                print(f"round {r + 1} {m:<6}: {res['wall_s']:.1f} s wall, {res['files'] / n:.0f} evidence files, "
                      f"{res['records'] / n:.0f} journal records, {res['fsyncs'] / n:.1f} fsync + "
                      f"{res['syncfs'] / n:.1f} syncfs calls, {(res['fsync_s'] + res['syncfs_s']) / n * 1000:.1f} ms "
                      "in them, per node", flush=True)
    worst = 0.0
    for m, rs in rows.items():
        per_node = max((x["fsync_s"] + x["syncfs_s"]) / n for x in rs)
        worst = max(worst, per_node)
        print(f"{m}: at most {per_node * 1000:.1f} ms of commits per node; "
              f"wall {', '.join(format(x['wall_s'], '.1f') for x in rs)} s for {n} nodes")
    print(f"durability: worst {worst * 1000:.1f} ms per node against {stage_min:.0f} min of stages "
          f"({worst / (stage_min * 60):.1e} of a node's time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
