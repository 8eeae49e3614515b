"""Serial batches against the sliding window, on a simulated cluster whose stages take time.

    python bench/window.py [--nodes 1000] [--max-out 50] [--scale 0.05] [--stragglers 5] [--seed 22]
                           [--backend docker|kubernetes]

Runs the shipped playbook (playbooks/k3-driver-rollout.yml) twice over the same simulated
cluster of N nodes, at the same capacity floor (``min_serving: N - max_out``, ``forks:
max_out``), side by side: each rollout in a process of its own, with its own simulated
cluster daemon (``--sequential``: one after the other). The runs' folders go to
``K3WINDOW_DIR``, else to /dev/shm when it is a tmpfs with room (see :func:`scratch`):

- **serial batches**: ``serial: [1, 2, max_out]`` (two canaries, then barriers of max_out);
- **sliding window**: the same ``serial`` list (its leading values are the canaries) and
  ``window: {max_unavailable: max_out}``.

Every stage takes its estimate from the playbook (``estimate:``; DEFAULT_ESTIMATES in
k3rollout/model/playbook.py where a stage gives none), scaled: ``--scale`` seconds stand
for one minute. The default is 0.05 s per minute (a 25-minute driver stage takes 1.25 s;
a node's 83 minutes take about 4 s; with 50 slots each policy's sleeps then come to
about 90 s for 1,000 nodes; 1 s per minute would take about half an hour per policy).
The engine's and the simulator's own work per node is not scaled: at 1,000 nodes on a
2-vCPU machine it is most of a node's measured time (bench/README.md, sixth round), and
it grows with the machine's load, so compare figures taken on a quiet one. The bench holds each stage for
its scaled estimate before the stage's own work runs (the engine has journaled the
stage's start), except for the reboot inside ``driver_upgrade``: that one is the
simulator's own (``sim_reboot_s``: the host is down, refuses connections, and the engine
polls it back, as on a real node), :data:`REBOOT_MIN` of the stage's 25 minutes.
Stragglers: ``--stragglers`` percent of the nodes (chosen with ``--seed``, so both runs
and every rerun get the same ones) reboot three times as long.

What it prints, from each run's report.json, which the run wrote from its journal at its
end (its ``timing``: ``report/history.run_timing`` over ``plan/timing.actual``, which uses
plan/timing.py's lower bound; its ``result``: batches and final node states):

- per node, the time out of service (cordon start to uncordon end) against the
  irreducible in-window work (the sum of its stage spans from the cordon on): mean, p95
  and the ratio of the totals (``out_of_service_ratio``);
- the makespan (run start to end) against the lower bound for the floor (the critical
  path, or the out-of-service work over max_out slots plus the shortest in-service lead);
- the Kubernetes API requests the controller sent per node-stage (counted as it sends them,
  k3rollout/scheduler/k8s_calls.py, by verb and resource as the API server's audit log names
  them): mean and max, by stage kind and by verb and resource, and how many outside any
  node-stage (the lock's Lease, preflight).

``--backend kubernetes`` makes the nodes containerd nodes whose checks and test servers are
pinned Pods created, watched and deleted through the simulated API server, and whose gates
go through its pod proxy (``k3_workload_backend: kubernetes``); each node serves a
one-replica Deployment of its own, which the drain evicts and the uncordon proves back.
``docker`` (the default) keeps the Docker hosts; both drain through the API
(``scheduler: kubernetes``).

Two lower bounds, both printed: the plain one (``lower_bound_s``: every one of max_out
slots busy from the start) and the one with the canary batches as barriers
(``canary_bound_s``: each canary batch's slowest node, one after the other, then the plain
bound of the nodes after them). The expansion waits for the canaries' verdict in both
policies (the tool's safety contract), so no policy that keeps it can beat the second; the
makespan ratios on the last two lines are against it, and the line before them gives both
policies' ratios against the plain bound.

Targets (issue 22): out_of_service_ratio <= 1.15 and the sliding window's makespan_ratio
<= 1.15. The last line reads
``window: out_of_service_ratio=X makespan_ratio=Y serial_makespan_ratio=Z`` (X and Y of
the sliding window, Z of serial batches; Y and Z against the bound with the canaries).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"
REBOOT_MIN = 10.0           # minutes of the driver stage a normal node spends rebooting
STRAGGLER_FACTOR = 3.0


def scratch() -> str | None:
    """Where the two runs' folders go: ``K3WINDOW_DIR``, else /dev/shm where it is a
    memory file system with room (about 1 GB a run at 1,000 nodes), else the system's
    temporary folder. In memory, a journal commit costs what it costs a real controller
    next to a stage of minutes: nothing. On this VM's disk each commit's fsync is a few
    milliseconds, which the bench's scale (0.05 s a minute) blows up 1,200 times into
    simulated minutes of a node's out-of-service time that no real window spends; and
    removing the 200,000 files afterwards took over a minute."""
    if os.environ.get("K3WINDOW_DIR"):
        return os.environ["K3WINDOW_DIR"]
    shm = Path("/dev/shm")
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
        fs = os.statvfs(shm)
    except OSError:
        return None
    if not any(m.split()[1:3] == [str(shm), "tmpfs"] for m in mounts if m):
        return None
    return str(shm) if fs.f_bavail * fs.f_frsize > 4 << 30 and os.access(shm, os.W_OK) else None


def stage_minutes() -> dict[str, float]:
    """Stage kind -> its estimate in minutes, as the shipped playbook gives it."""
    from k3rollout.model import load_playbook

    return {s.stage: s.estimate_s / 60.0 for s in load_playbook(PLAYBOOK).play.stages}


def stragglers(nodes: list[str], pct: float, seed: int) -> set[str]:
    return set(random.Random(seed).sample(nodes, round(len(nodes) * pct / 100.0)))


# the node-side workload backend (--backend): Docker hosts, or containerd nodes whose checks and
# test servers are pinned Pods through the API server (k3rollout/workload/kubernetes.py), named
# explicitly so the bench does not follow the product's default
BACKENDS: dict[str, dict[str, Any]] = {
    "docker": {"scheduler": "kubernetes", "sim_container_runtime": "docker", "k3_workload_backend": "docker"},
    "kubernetes": {"scheduler": "kubernetes", "sim_container_runtime": "containerd",
                   "k3_workload_backend": "kubernetes"}}


def write_inventory(path: Path, nodes: list[str], slow: set[str], reboot_s: float, backend: str = "docker") -> Path:
    hosts: dict[str, dict[str, Any] | None] = {}
    for n in nodes:
        hv: dict[str, Any] = {"sim_reboot_s": reboot_s * STRAGGLER_FACTOR} if n in slow else {}
        if backend == "kubernetes":
            # each node serves a Deployment of its own, pinned to it (nodeSelector on its
            # hostname): one replica holding its 8 GPUs, evicted by the drain and proven back
            # (readyReplicas, image digest) after the uncordon. One Deployment over many nodes
            # would, in a sliding window, be short of the replicas of the other nodes out at the
            # time; unpinned, a node coming back takes the pending pod of another node still out,
            # and its own Deployment waits for that node's uncordon
            hv["sim_k8s_serving"] = {"kind": "Deployment", "name": f"k3-serving-{n}",
                                     "node_selector": {"kubernetes.io/hostname": n}}
        hosts[n] = hv or None
    # every other sim latency zero: the stage's time is the scaled estimate, not the simulator
    path.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "k3sim", "sim_latency_s": 0,
                                                     "sim_token_s": 0, "sim_reboot_s": reboot_s,
                                                     # one node is one unit (no profile): GPUs that hold
                                                     # K3 on one node, as the simulated vLLM checks
                                                     "k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8,
                                                     "k3_gpu_mem_gib": 268, **BACKENDS[backend]},
                                            "children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def write_playbook(path: Path, n: int, k: int, window: bool) -> Path:
    pb = yaml.safe_load(PLAYBOOK.read_text())
    play = pb[0]
    # one node is one unit: the batch policy is what this measures, not K3's two-node
    # replicas (with the model profile, units are replicas and the floor counts them)
    play.pop("profile", None)
    # the same serial list in both: its leading values (1, 2) are the canary batches; with
    # a window, every node after them is one sliding window (engine/window.py)
    play.update({"serial": [1, 2, k], "min_serving": n - k, "forks": k,
                 "max_fail_percentage": 25})
    if window:
        play["window"] = {"max_unavailable": k}
    # the gates' own load is not what this measures: one request per ladder step, no
    # target-context request (their time is in the stage's scaled estimate)
    feats = next(st for st in play["stages"] if st["stage"] == "features")
    feats["with"].update({"context_tokens": 0, "concurrency": [1], "prefix_block_tokens": 1536})
    path.parent.mkdir(parents=True, exist_ok=True)
    vendor = path.parent / "vendor"
    if not vendor.exists():
        vendor.symlink_to(ROOT / "playbooks" / "vendor")
    path.write_text(yaml.safe_dump(pb, sort_keys=False))
    return path


@contextlib.contextmanager
def timed_stages(seconds: dict[str, float], calls: dict[tuple[str, str], Counter[str]] | None = None):
    """Hold each stage for its scaled estimate before its own work runs (the engine looks
    the stage up in the registry at every call). ``calls``: each node-stage's Kubernetes API
    requests, by "verb resource" (k3rollout/scheduler/k8s_calls.py), counted in the node's
    thread while the stage's own work runs."""
    from k3rollout.scheduler import k8s_calls
    from k3rollout.stages import registry

    saved = dict(registry.STAGES)

    def held(fn: Callable[[Any], Any], s: float, kind: str) -> Callable[[Any], Any]:
        def run(ctx: Any) -> Any:
            time.sleep(s)
            if calls is None:
                return fn(ctx)
            with k8s_calls.counting() as tally:
                try:
                    return fn(ctx)
                finally:
                    key = (str(getattr(ctx, "node", "?")), kind)
                    calls[key] = calls.get(key, Counter()) + tally
        return run

    for kind, fn in saved.items():
        registry.STAGES[kind] = held(fn, seconds.get(kind, 0.0), kind)
    try:
        yield
    finally:
        registry.STAGES.clear()
        registry.STAGES.update(saved)


def call_counts(calls: dict[tuple[str, str], Counter[str]], total: Counter[str]) -> dict[str, Any]:
    """Kubernetes API requests per node-stage: all of them, by "verb resource" and by stage
    kind (mean and max over the node-stages that ran), and how many the process sent outside
    any node-stage (the lock's lease, preflight, the plan's checks)."""
    if not calls:
        return {}
    n = len(calls)
    per = [sum(c.values()) for c in calls.values()]
    keys = sorted({k for c in calls.values() for k in c})
    kinds = sorted({kind for _, kind in calls})
    by_kind = {}
    for kind in kinds:
        got = [sum(c.values()) for (_, k_), c in calls.items() if k_ == kind]
        by_kind[kind] = {"mean": sum(got) / len(got), "max": max(got)}
    return {"node_stages": n, "calls": sum(per), "mean": sum(per) / n, "max": max(per),
            "outside": sum(total.values()) - sum(per),
            "by_call": {k: {"mean": sum(c[k] for c in calls.values()) / n, "max": max(c[k] for c in calls.values())}
                        for k in keys},
            "by_stage": by_kind}


def rollout(base: Path, nodes: list[str], slow: set[str], k: int, scale: float, window: bool,
            backend: str = "docker") -> dict[str, Any]:
    from k3rollout import fastjson
    from k3rollout.cli import main
    from k3rollout.scheduler import k8s_calls

    minutes = stage_minutes()
    seconds = {kind: m * scale for kind, m in minutes.items()}
    reboot_s = REBOOT_MIN * scale
    seconds["driver_upgrade"] = max(0.0, seconds["driver_upgrade"] - reboot_s)   # the rest is the sim's reboot
    name = "window" if window else "serial"
    inv = write_inventory(base / f"{name}-hosts.yml", nodes, slow, reboot_s, backend)
    pb = write_playbook(base / name / "pb.yml", len(nodes), k, window)
    run_dir = base / f"{name}-run"
    os.environ["K3ROLLOUT_LOCK_DIR"] = str(base / f"{name}-locks")
    t = time.perf_counter()
    out = io.StringIO()
    calls: dict[tuple[str, str], Counter[str]] = {}
    sent_before = Counter(k8s_calls.totals)
    with timed_stages(seconds, calls), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["run", str(pb), "-i", str(inv), "--yes", "--plain", "--run-dir", str(run_dir)])
    wall = time.perf_counter() - t
    sent = k8s_calls.totals - sent_before
    if code != 0:
        raise SystemExit(f"{name}: the rollout exited {code}:\n{out.getvalue()[-3000:]}")
    # what the run's own report computed from its journal at its end (report.json: the
    # report's timing, plan/timing.py's bounds, the batches and the nodes' final states),
    # rather than reading and verifying its 250,000 records a second time
    rep = fastjson.loads((run_dir / "report.json").read_bytes())
    tm, res = rep["timing"], rep["result"]
    assert tm is not None and res["finished"], name
    upgraded = sum(1 for v in res["nodes"].values() if v["state"] == "upgrade-done")
    # a node that did not finish is named with its stage and reason (no fault is injected, so
    # one that failed is a finding of its own, e.g. a timeout under the machine's load)
    not_done = [f"{n}: {v['state']} at {v.get('failed_stage') or '-'}: {v.get('reason') or '-'}"[:400]
                for n, v in sorted(res["nodes"].items()) if v["state"] != "upgrade-done"]
    # the canary batches (the first two) are barriers by design in both policies: the part
    # after them, against its own lower bound, shows what the batch policy itself costs
    from k3rollout.plan import timing

    rest_b = sorted(res["batches"], key=lambda b: b["index"])[2:]
    if not rest_b or not rest_b[0]["started"]:
        raise SystemExit(f"{name}: no batch after the two canaries (give more nodes)")
    after = {n for b in rest_b for n in b["nodes"]}
    began = timing.parse_ts(rest_b[0]["started"])
    rest = [{**u, "out_of_service_s": u["work_s"]} for u in tm["units"] if set(u["nodes"]) & after]
    lb_rest, _ = timing.lower_bound(rest, tm["max_out"])
    end = timing.parse_ts(res["finished"])
    tm["after_canaries"] = {"span_s": end - began, "lower_bound_s": lb_rest, "canaries_s": began - timing.parse_ts(res["started"])}
    works = sorted(u["work_s"] for u in tm["units"])
    return {"name": name, "wall_s": wall, "upgraded": upgraded, "not_done": not_done, "timing": tm,
            "api": call_counts(calls, sent), "gates": gate_requests(run_dir / "journal.jsonl", seconds, minutes),
            "work_mean_s": sum(works) / len(works), "work_p95_s": works[max(0, -(-95 * len(works) // 100) - 1)]}


# the serving stages whose time the gates' own requests add to
VALIDATION_STAGES = ("vllm_smoke", "features")


def gate_requests(journal: Path, held: dict[str, float], minutes: dict[str, float]) -> dict[str, Any]:
    """What the gates' requests that are not load (``POST /tokenize`` to size prompts,
    ``/metrics`` before and after a level or a prefix proof) took, per unit that ran the
    serving stages, against that unit's validation time (its vllm_smoke and features spans,
    held estimate included): the share, mean and max, from the journal's step and stage
    records. The held estimate is scaled (``--scale``) while the requests take real time,
    so the share is also given against the stages as a replica would spend them: each
    stage's span with its held part replaced by the playbook's estimate in real minutes."""
    from k3rollout import fastjson
    from k3rollout.plan import timing

    added: dict[str, float] = {}
    began: dict[tuple[str, str], float] = {}
    spent: dict[str, float] = {}
    with journal.open("rb") as f:
        for line in f:
            if b'"step_done"' in line and (b"tokenize" in line or b"metrics" in line):
                r = fastjson.loads(line)
                if r.get("kind") == "http" and r.get("stage") in VALIDATION_STAGES:
                    added[r["node"]] = added.get(r["node"], 0.0) + float(r.get("duration_s") or 0.0)
            elif b'"stage_' in line and any(k.encode() in line for k in VALIDATION_STAGES):
                r = fastjson.loads(line)
                if r.get("stage") not in VALIDATION_STAGES:
                    continue
                key = (r["node"], r["stage"])
                if r["type"] == "stage_started":
                    began[key] = timing.parse_ts(r["ts"])
                elif r["type"] == "stage_done" and key in began:
                    spent[r["node"]] = spent.get(r["node"], 0.0) + timing.parse_ts(r["ts"]) - began.pop(key)
    shares = [added[n] / spent[n] for n in added if spent.get(n)]
    if not shares:
        return {}
    real = sum(60 * minutes.get(k, 0.0) - held.get(k, 0.0) for k in VALIDATION_STAGES)
    at_real = [added[n] / (spent[n] + real) for n in added if spent.get(n)]
    return {"units": len(shares), "added_s": sum(added.values()), "validation_s": sum(spent[n] for n in added),
            "share_mean": sum(shares) / len(shares), "share_max": max(shares),
            "real_share_mean": sum(at_real) / len(at_real), "real_share_max": max(at_real)}


def report(r: dict[str, Any], scale: float) -> list[str]:
    t = r["timing"]
    a = t["after_canaries"]

    def mins(s: float) -> str:
        return f"{s / scale:.1f} min" if scale else f"{s:.2f} s"

    return [f"{r['name']}: {r['upgraded']} node(s) upgraded, {r['wall_s']:.1f} s wall",
            *(f"  not upgraded: {x}" for x in r["not_done"][:10]),
            f"  out of service per node: mean {mins(t['out_of_service_mean_s'])}, p95 {mins(t['out_of_service_p95_s'])}"
            f"; in-window work mean {mins(r['work_mean_s'])}, p95 {mins(r['work_p95_s'])}"
            f"; ratio {t['out_of_service_ratio']:.3f}",
            f"  makespan {mins(t['makespan_s'])} against the plain lower bound {mins(t['lower_bound_s'])}"
            f" ({t['lower_bound_basis']}, {t['max_out']} out at once, every slot busy from the start): ratio "
            f"{t['makespan_ratio']:.3f}",
            f"  against the lower bound with the canary batches as barriers (the expansion waits for their "
            f"verdict) {mins(t['canary_bound_s'])}: ratio {t['canary_makespan_ratio']:.3f}",
            f"  of which the two canary batches (barriers in both policies) {mins(a['canaries_s'])}; after them "
            f"{mins(a['span_s'])} against that part's own lower bound {mins(a['lower_bound_s'])}: ratio "
            f"{a['span_s'] / a['lower_bound_s']:.3f}",
            *api_lines(r["api"]), *gate_lines(r.get("gates") or {})]


def gate_lines(g: dict[str, Any]) -> list[str]:
    if not g:
        return []
    return [f"  the gates' tokenize and metrics requests: {g['added_s']:.1f} s over {g['units']} node(s), against "
            f"their validation stages' {g['validation_s']:.1f} s: share mean {100 * g['share_mean']:.3f}%, "
            f"max {100 * g['share_max']:.3f}% (their held estimates scaled); against the stages at their "
            f"estimates in real minutes: mean {100 * g['real_share_mean']:.4f}%, max {100 * g['real_share_max']:.4f}% "
            "(issue 35: at most 2%)"]


def api_lines(api: dict[str, Any]) -> list[str]:
    if not api:
        return []
    return [f"  Kubernetes API calls per node-stage: mean {api['mean']:.2f}, max {api['max']} ({api['calls']:,} in "
            f"{api['node_stages']:,} node-stages; {api['outside']:,} more outside them)",
            "    by stage, mean / max per node: " + ", ".join(f"{k} {v['mean']:.2f}/{v['max']}"
                                                           for k, v in api["by_stage"].items()),
            "    by verb and resource, mean / max per node-stage: " + ", ".join(
                f"{k} {v['mean']:.2f}/{v['max']}" for k, v in sorted(api["by_call"].items(),
                                                                   key=lambda kv: -kv[1]["mean"]))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--max-out", type=int, default=50, help="nodes out of service at once (the floor: N minus this)")
    ap.add_argument("--scale", type=float, default=0.05, help="seconds that stand for one minute")
    ap.add_argument("--stragglers", type=float, default=5.0, help="percent of nodes whose reboot takes 3x as long")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--backend", choices=sorted(BACKENDS), default="docker",
                    help="the nodes' workload backend: Docker hosts, or containerd nodes with Pods through the API")
    ap.add_argument("--only", choices=("serial", "window"), help="run one policy (the last line needs both)")
    ap.add_argument("--sequential", action="store_true",
                    help="run the two policies one after the other, not side by side")
    args = ap.parse_args()
    nodes = [f"gpu-{i:04d}" for i in range(args.nodes)]
    slow = stragglers(nodes, args.stragglers, args.seed)
    minutes = stage_minutes()
    print(f"{args.nodes} simulated nodes, {args.max_out} out of service at once (min_serving {args.nodes - args.max_out}), "
          f"{args.scale:g} s per minute; {len(slow)} straggler(s) reboot in {REBOOT_MIN * STRAGGLER_FACTOR:g} min "
          f"instead of {REBOOT_MIN:g} (seed {args.seed}); workload backend {args.backend}")
    print("stage minutes (playbook estimates): " + ", ".join(f"{k} {v:g}" for k, v in minutes.items()))
    results: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    names = [n for n in ("serial", "window") if not args.only or args.only == n]
    with tempfile.TemporaryDirectory(prefix="k3window-", dir=scratch()) as d:
        if args.sequential or len(names) == 1:
            for name in names:
                results[name] = rollout(Path(d), nodes, slow, args.max_out, args.scale, name == "window",
                                        args.backend)
                for line in report(results[name], args.scale):
                    print(line, flush=True)
        else:
            # side by side, each rollout in a process of its own (its engine, its simulated
            # cluster's daemon): the two policies see the same machine at the same time
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
                futures = {pool.submit(rollout, Path(d), nodes, slow, args.max_out, args.scale, name == "window",
                                       args.backend): name
                           for name in names}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    for line in report(results[futures[fut]], args.scale):
                        print(line, flush=True)
        if len(results) == 2:
            # printed before the scratch folder (two runs' journals and evidence, about 100 files
            # a node) is removed: on a loaded disk that takes minutes of its own
            w, s = results["window"]["timing"], results["serial"]["timing"]
            print(f"both runs measured in {time.perf_counter() - t0:.1f} s")
            print(f"plain lower bound (every slot busy from the start): window makespan_ratio={w['makespan_ratio']:.3f} "
                  f"serial makespan_ratio={s['makespan_ratio']:.3f}")
            print(f"serial: out_of_service_ratio={s['out_of_service_ratio']:.3f} "
                  f"makespan_ratio={s['canary_makespan_ratio']:.3f}")
            print(f"window: out_of_service_ratio={w['out_of_service_ratio']:.3f} "
                  f"makespan_ratio={w['canary_makespan_ratio']:.3f} serial_makespan_ratio={s['canary_makespan_ratio']:.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
