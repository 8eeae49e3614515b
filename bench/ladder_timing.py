"""How far the load ladder's client timings sit from the simulated server's own histograms.

The features stage compares, at each concurrency level, the client's mean time to first token
and mean latency with the server's ``vllm:time_to_first_token_seconds`` and
``vllm:e2e_request_latency_seconds`` (``k3rollout/checks/server_timing.py``). Whether the two
agree depends on how much CPU the controller gets while 64 streams run, so it is measured here,
not asserted by a test. Each repeat is one single-node rollout (Docker host, one level of
``--level`` streams, ``--token-s`` seconds a decode step); printed per repeat: the client's mean
over the server's mean for both figures, the gap in seconds, and whether the check called it
agreement.

    .venv/bin/python bench/ladder_timing.py --repeats 5
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support import DOCKER_HOST, write_inventory, write_playbook  # noqa: E402

from k3rollout.cli import main as cli_main  # noqa: E402


def one(base: Path, level: int, token_s: float, nodes: int) -> list[dict]:
    hosts = {f"gpu-{i:02d}": {**DOCKER_HOST, "sim_token_s": token_s} for i in range(1, nodes + 1)}
    inv = write_inventory(base / "inv", hosts, {"sim_reboot_s": 0.01})
    pb = write_playbook(base / "pb.yml", serial=[nodes], min_serving=0, forks=nodes,
                        stage_with={"features": {"context_tokens": 0, "concurrency": [level]}})
    run_dir = base / "run"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    rows = []
    for host in hosts:
        ladder = next((run_dir / "evidence" / host).glob("*features/load-ladder*.json"))
        rows.append(dict(json.loads(ladder.read_text())["steps"][0]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--level", type=int, default=64)
    ap.add_argument("--token-s", type=float, default=0.02)
    ap.add_argument("--nodes", type=int, default=1, help="nodes in one batch, each running the level at once")
    args = ap.parse_args()
    print(f"{args.nodes} node(s) at once, level {args.level} each, {args.token_s} s a token; "
          "ratio = client mean / server mean")
    print("repeat  node  ttft ratio  ttft gap s  e2e ratio  e2e gap s  agree")
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            rows = one(Path(tmp), args.level, args.token_s, args.nodes)
        for n, row in enumerate(rows, 1):
            t = row["server_timing"]
            cols = []
            for key in ("ttft", "e2e"):
                c, s = t[key]["client_mean_s"], t[key]["server_mean_s"]
                cols += [f"{c / s:10.3f}" if c and s else f"{'-':>10}", f"{t[key]['gap_s']:10.4f}"]
            print(f"{i + 1:6d}  {n:4d}  " + "  ".join(cols) + f"  {t['agree']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
