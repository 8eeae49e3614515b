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


def one(base: Path, level: int, token_s: float) -> dict:
    inv = write_inventory(base / "inv", {"gpu-01": {**DOCKER_HOST, "sim_token_s": token_s}},
                          {"sim_reboot_s": 0.01})
    pb = write_playbook(base / "pb.yml", serial=[1], min_serving=0,
                        stage_with={"features": {"context_tokens": 0, "concurrency": [level]}})
    run_dir = base / "run"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    ladder = next((run_dir / "evidence" / "gpu-01").glob("*features/load-ladder*.json"))
    return dict(json.loads(ladder.read_text())["steps"][0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--level", type=int, default=64)
    ap.add_argument("--token-s", type=float, default=0.02)
    args = ap.parse_args()
    print(f"level {args.level}, {args.token_s} s a token; ratio = client mean / server mean")
    print("repeat  ttft ratio  ttft gap s  e2e ratio  e2e gap s  agree")
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t = one(Path(tmp), args.level, args.token_s)["server_timing"]
        cols = []
        for key in ("ttft", "e2e"):
            c, s = t[key]["client_mean_s"], t[key]["server_mean_s"]
            cols += [f"{c / s:10.3f}" if c and s else f"{'-':>10}", f"{t[key]['gap_s']:10.4f}"]
        print(f"{i + 1:6d}  " + "  ".join(cols) + f"  {t['agree']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
