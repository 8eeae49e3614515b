"""Benchmarks (not part of the test suite): print ratios measured side by side, on this machine.

    python bench/run.py [--nodes 100] [--skip-rollout]

Measures: `plan --json` on generated 1,000 and 10,000-host inventories (and the 10k/1k
ratio: 10 means linear); a whole simulated rollout of N nodes (zero sim latency) with the
cost per node-stage, journal fsyncs included; report rendering time and size; peak RSS of
each. Targets and peers (ansible-playbook fan-out over sshd) are tracked in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"


def inventory(path: Path, n: int, racks: int = 40, sim_vars: dict | None = None) -> Path:
    names = [f"gpu-{i:05d}" for i in range(n)]
    per = max(1, n // racks)
    children = {f"rack{r:02d}": {"hosts": {h: None for h in names[r * per:(r + 1) * per]}} for r in range(racks)}
    rest = names[racks * per:]
    if rest:
        children["rack_extra"] = {"hosts": {h: None for h in rest}}
    path.mkdir(parents=True, exist_ok=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "k3sim",
                                                                     # the model profile sizes replicas from these
                                                                     "k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8,
                                                                     "k3_gpu_mem_gib": 141,
                                                                     **(sim_vars or {})},
                                                           "children": {"gpu_nodes": {"children": children}}}}))
    return path / "hosts.yml"


def timed(argv: list[str], env: dict | None = None) -> tuple[float, int, subprocess.CompletedProcess]:
    """Wall seconds and peak RSS (KiB) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(rss, before), p


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000, help="nodes in the simulated rollout")
    ap.add_argument("--skip-rollout", action="store_true")
    args = ap.parse_args()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="k3bench-") as d:
        base = Path(d)
        k3 = [sys.executable, "-m", "k3rollout"]
        plan = {}
        for n in (1000, 10000):
            inv = inventory(base / f"inv{n}", n)
            wall, rss, p = timed([*k3, "plan", str(PLAYBOOK), "-i", str(inv), "--json"])
            assert p.returncode == 0, p.stderr
            plan[n] = wall
            rows.append((f"plan --json, {n:,} hosts", f"{wall:.2f} s, peak RSS {rss / 1024:.0f} MiB"))
        rows.append(("plan 10k/1k time ratio (10 = linear)", f"{plan[10000] / plan[1000]:.1f}"))
        if not args.skip_rollout:
            n = args.nodes
            inv = inventory(base / "rollout", n, racks=max(1, n // 16),
                            sim_vars={"sim_latency_s": 0, "sim_token_s": 0, "sim_reboot_s": 0})
            pb = yaml.safe_load(PLAYBOOK.read_text())
            pb[0].update({"serial": ["10%"], "min_serving": 0, "max_fail_percentage": 100})   # forks as shipped
            # engine overhead, not the gates' load: one request per ladder step, no target-context
            # request (the simulated server answers at once with sim_token_s 0)
            feats = next(st for st in pb[0]["stages"] if st["stage"] == "features")
            feats["with"].update({"context_tokens": 0, "concurrency": [1]})
            (base / "pb").mkdir()
            (base / "pb" / "vendor").symlink_to(ROOT / "playbooks" / "vendor")
            (base / "pb" / "pb.yml").write_text(yaml.safe_dump(pb, sort_keys=False))
            run_dir = base / "run"
            wall, rss, p = timed([*k3, "run", str(base / "pb" / "pb.yml"), "-i", str(inv), "--yes", "--plain",
                                  "--run-dir", str(run_dir)], {"K3ROLLOUT_LOCK_DIR": str(base / "locks")})
            assert p.returncode == 0, p.stderr[-2000:]
            recs = [json.loads(x) for x in (run_dir / "journal.jsonl").open()]
            records = len(recs)
            final = json.loads((run_dir / "result.json").read_text())
            upgraded = sum(1 for v in final["nodes"].values() if v["final"] == "upgraded")
            rows.append(("  nodes upgraded", f"{upgraded} of {n} (status {final['status']})"))
            node_stages = n * len(pb[0]["stages"])
            rows.append((f"simulated rollout, {n} nodes", f"{wall:.1f} s, peak RSS {rss / 1024:.0f} MiB"))
            rows.append(("  per node-stage (journal fsyncs included)", f"{wall / node_stages * 1000:.1f} ms"))
            rows.append(("  journal records", f"{records:,}"))
            evid = sum(1 for _ in (run_dir / "evidence" / "MANIFEST.sha256").open())
            rows.append(("  evidence files", f"{evid:,}"))
            t = time.perf_counter()
            r = subprocess.run([*k3, "report", str(run_dir)], capture_output=True, text=True, cwd=ROOT)
            assert r.returncode == 0, r.stderr
            size = (run_dir / "report.html").stat().st_size
            rows.append((f"report.html for {n} nodes", f"{time.perf_counter() - t:.2f} s, {size / 1e6:.2f} MB"))
    width = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
