"""Whether two run directories record the same rollout: the journal's records in the same
order per node and an equal result.json, once what differs from one run to the next by
nature is masked. A refactoring that must not change behaviour is checked by running the
default 16-node rollout from the tree before and after it:

    git archive main | tar -x -C /tmp/before
    (cd /tmp/before && PYTHONPATH=/tmp/before .venv/bin/python -m k3rollout demo --run-dir /tmp/a --plain)
    .venv/bin/python -m k3rollout demo --run-dir /tmp/b --plain
    .venv/bin/python scripts/compare_runs.py /tmp/a /tmp/b /tmp/before "$PWD"

Masked: times, durations and what was measured in seconds, addresses and ports, run ids,
boot ids, generated name suffixes (pods, containers), the tree's own path (the extra
arguments), the journal's hash chain and evidence digests (the evidence holds what the
simulated hosts measured: latencies, resource versions), and what depends on the machine's
load or the simulated controllers' own clock: a load ladder's timing agreement, and how far
the controllers had placed a drained node's serving pods again when a stage read them. Two
runs of one tree compare equal. A run stopped at an inconclusive gate (a load ladder under
heavy CPU load) is not comparable: run it again. Exit 0 when both match, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
DATE = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ "
                  r"\d\d:\d\d:\d\d( [A-Z]+)? \d{4}")
DURATION = re.compile(r"\b(\w*duration_s|\w*took_s|\w*elapsed_s)=[\d.]+")
LOOPBACK = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")
IPV4 = re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b")
RUN_ID = re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{6}\b")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
SUFFIX = re.compile(r"-[0-9a-f]{5}(?:[0-9a-f]{5})?\b")
SERVING_POD = re.compile(r"/pods/([a-z0-9-]+?)-\d+:(\d+)/")
TIME_KEYS = re.compile(r"^(h|evidence_sha256|sha256|ts|seq|t|time|at|started|finished|ended|elapsed|took|duration|"
                       r"since|until|deadline|now|pid|port|.*_at|.*_ts|.*_ms|.*_time)$")
# a float in seconds that was measured, not planned
MEASURED = re.compile(r"^(?!estimate|rollback_estimate|start_offset|end_offset|timeout|drain_timeout).*_s$")
LOAD_KEYS = {"measurement_problem", "server_timing", "serving_short_elsewhere"}
ASYNC_POD_KEYS = ("node", "phase", "unschedulable")


def mask_text(s: str, run: str, roots: list[str]) -> str:
    for r in roots:
        s = s.replace(r, "<ROOT>")
    s = s.replace(run, "<RUN>")
    for rx, to in ((RUN_ID, "<RUNID>"), (ISO, "<TIME>"), (DATE, "<DATE>"), (DURATION, r"\1=<T>"),
                   (LOOPBACK, "<ADDR>"), (IPV4, "<IP>"), (UUID, "<UUID>"), (SUFFIX, "-<ID>"),
                   (SERVING_POD, r"/pods/\1-<N>:\2/")):
        s = rx.sub(to, s)
    return s


def mask(v: Any, run: str, roots: list[str], key: str = "") -> Any:
    if TIME_KEYS.match(key) or (MEASURED.match(key) and isinstance(v, float)):
        return "<T>"
    if isinstance(v, dict):
        return {mask_text(k, run, roots): mask(x, run, roots, k) for k, x in v.items() if k not in LOAD_KEYS}
    if isinstance(v, list):
        return [mask(x, run, roots, key) for x in v]
    if isinstance(v, str):
        return mask_text(v, run, roots)
    return v


def records_per_node(run: str, roots: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for line in Path(run, "journal.jsonl").read_text().splitlines():
        r = json.loads(line)
        owners = (r.get("facts") or {}).get("serving_owners") if r.get("type") == "facts" else None
        for owner in (owners or {}).values():
            if isinstance(owner, dict):
                owner["ready"] = "<ASYNC>"
                for pod in owner.get("pods") or []:
                    pod.update({k: "<ASYNC>" for k in ASYNC_POD_KEYS if k in pod})
        out[r.get("node") or "-"].append(mask(r, run, roots))
    return out


def first_diff(x: Any, y: Any, path: str) -> str | None:
    if type(x) is not type(y):
        return f"{path}: {x!r} != {y!r}"
    if isinstance(x, dict):
        for k in sorted(set(x) | set(y)):
            if k not in x or k not in y:
                return f"{path}.{k}: only in {'the second' if k not in x else 'the first'}"
            d = first_diff(x[k], y[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(x, list):
        if len(x) != len(y):
            return f"{path}: {len(x)} items != {len(y)}"
        pairs = enumerate(zip(x, y, strict=True))
        return next((d for i, (p, q) in pairs if (d := first_diff(p, q, f"{path}[{i}]"))), None)
    return None if x == y else f"{path}: {str(x)[:200]!r} != {str(y)[:200]!r}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("roots", nargs="*", help="the source trees the runs came from (their paths are masked)")
    ap.add_argument("--show", type=int, default=5, help="differing records shown per node")
    args = ap.parse_args(argv)
    a, b = records_per_node(args.first, args.roots), records_per_node(args.second, args.roots)
    print(f"nodes: {len(a)} and {len(b)}; records: {sum(map(len, a.values()))} and {sum(map(len, b.values()))}")
    differ = 0
    for node in sorted(set(a) | set(b)):
        ra, rb = a.get(node, []), b.get(node, [])
        # the records both have, in order; a count that differs is one more difference
        pairs = enumerate(zip(ra, rb, strict=False))
        found = [d for i, (p, q) in pairs if (d := first_diff(p, q, f"{node}[{i}]"))]
        if len(ra) != len(rb):
            found.append(f"{node}: {len(ra)} records != {len(rb)}")
        if found:
            differ += 1
            for d in found[:args.show]:
                print("differs:", d[:300])
    results = [mask(json.loads(Path(run, "result.json").read_text()), run, args.roots)
               for run in (args.first, args.second)]
    d = first_diff(results[0], results[1], "result.json")
    print("result.json:", "equal" if d is None else f"differs: {d}")
    print("journal, per node:", "the same records in the same order" if not differ else f"{differ} node(s) differ")
    return 1 if differ or d else 0


if __name__ == "__main__":
    sys.exit(main())
