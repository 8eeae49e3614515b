"""Durations from evidence, time out of service, makespan and its lower bound. Pure.

Where estimates come from
    Each stage's duration is the playbook's ``estimate`` unless earlier runs say otherwise:
    ``plan --history RUN_DIR...`` folds those runs' journals and takes, per stage kind and
    hardware class (the GPU model a node's baseline read), every passed stage's span from
    ``stage_started`` to ``stage_done``. The plan then uses that class's **p90** (a window
    plan must hold for the slow nodes too, not only the typical one) and shows the median
    beside it. A node whose class has no sample for a stage takes the stage's samples over
    all classes; a stage with no sample at all keeps the playbook's estimate. Every
    (stage, class) says which of the three it used.

What a unit costs a window
    A node is out of service from the start of its ``cordon`` stage to the end of its
    ``uncordon`` stage; the stages before (baseline, pre-staging) run while it still serves.
    A replica is out while any of its nodes is (its nodes walk their stages together).

The lower bound (what no batch policy can beat at the given floor)
    - the critical path: the longest single unit, start to finish;
    - the capacity bound: at most ``k`` units may be out of service at once (``k`` = serving
      units minus the floor, and at most ``forks`` nodes run at a time), so the total
      out-of-service work divided by ``k``, plus the shortest in-service lead (a unit's
      stages before its cordon) that must pass before the first unit can go out.
    ``lower_bound_s`` is the larger of the two. Serial batches pay a barrier per batch (a
    batch waits for its slowest unit); a sliding window refills a slot as soon as a unit
    finishes, so it approaches the bound.

The bound with the canary batches (``canary_bound_s``)
    The plain bound has every slot busy from the start. A rollout that honours its canary
    contract cannot: the expansion waits for the canary batches' verdict (``serial``'s
    leading values, barriers in both policies), while one unit, then two, are out. So
    ``canary_bound_s`` is each canary batch's slowest unit, one after the other, plus the
    plain bound of the units after them: what no policy that waits for the canaries can
    beat. It is printed beside the plain bound, never in place of it.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from k3rollout.model.inventory import connection_of
from k3rollout.model.playbook import STAGE_TABLES
from k3rollout.model.stagekinds import RETURNS_TO_SERVICE, TAKES_OUT_OF_SERVICE
from k3rollout.plugins import transport_plugin

UNKNOWN = "unknown"


def hardware_class(host_vars: dict[str, Any]) -> str:
    """A node's hardware class as the inventory tells it before the run: ``hardware_class``,
    else ``gpu_model``, else what a registered transport builds the host with (a simulated
    host's GPU model, k3rollout/plugins.py)."""
    for key in ("hardware_class", "gpu_model"):
        if host_vars.get(key):
            return str(host_vars[key])
    plugin = transport_plugin(connection_of(host_vars))
    return plugin.hardware_class(host_vars) if plugin is not None else UNKNOWN


def parse_ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def parsed_once() -> Callable[[str | None], float | None]:
    """``parse_ts`` that parses each text once: a report reads every span's times more than once
    (its timing, its timeline), 16,000 of them at 1,000 nodes."""
    seen: dict[str, float | None] = {}

    def ts(text: str | None) -> float | None:
        if not text:
            return None
        if text not in seen:
            seen[text] = parse_ts(text)
        return seen[text]
    return ts


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a duration that some run really took."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


@dataclass
class History:
    """Stage kind -> hardware class -> the passed spans (seconds) earlier runs recorded."""
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    def add_run(self, name: str, nodes: dict[str, tuple[str, list[dict[str, Any]]]]) -> int:
        """``nodes``: node -> (hardware class, its timeline spans ``{stage, start, end, passed}``).
        Returns how many spans were taken."""
        taken = 0
        for _node, (hw, spans) in nodes.items():
            for sp in spans:
                if sp.get("stage") == "rollback" or not sp.get("passed"):
                    continue
                a, b = parse_ts(sp.get("start")), parse_ts(sp.get("end"))
                if a is None or b is None or b < a:
                    continue
                self.samples.setdefault(sp["stage"], {}).setdefault(hw, []).append(b - a)
                taken += 1
        self.runs.append(name)
        return taken

    def lookup(self, stage: str, hw: str) -> tuple[list[float], str] | None:
        by_hw = self.samples.get(stage) or {}
        if by_hw.get(hw):
            return by_hw[hw], f"history ({hw})"
        pooled = [x for xs in by_hw.values() for x in xs]
        if pooled:
            return pooled, "history (all classes)"
        return None


def stage_table(stages: list[dict[str, Any]], classes: Iterable[str], history: History | None
                ) -> list[dict[str, Any]]:
    """One row per (stage, hardware class): the duration used, its source, median and p90."""
    rows = []
    for hw in sorted(set(classes)):
        for s in stages:
            found = history.lookup(s["stage"], hw) if history else None
            if found is None:
                rows.append({"stage": s["stage"], "class": hw, "source": "playbook", "used_s": s["estimate_s"],
                             "median_s": None, "p90_s": None, "samples": 0})
            else:
                xs, source = found
                p90 = percentile(xs, 90)
                rows.append({"stage": s["stage"], "class": hw, "source": source, "used_s": p90,
                             "median_s": statistics.median(xs), "p90_s": p90, "samples": len(xs)})
    return rows


def duration_fn(rows: list[dict[str, Any]], node_class: dict[str, str], key: str = "used_s"
                ) -> Callable[[str, str], float]:
    """(node, stage kind) -> seconds, from ``stage_table`` rows (``key``: used_s or median_s)."""
    table = {(r["stage"], r["class"]): (r[key] if r[key] is not None else r["used_s"]) for r in rows}
    return lambda node, stage: table[(stage, node_class[node])]


def split_at_cordon(kinds: list[str], durs: list[float]) -> tuple[float, float]:
    """(seconds in service before the cordon, seconds out of service from it on)."""
    i = STAGE_TABLES.index(kinds, TAKES_OUT_OF_SERVICE)
    if i is None:
        return sum(durs), 0.0
    return sum(durs[:i]), sum(durs[i:])


def unit_times(units: dict[str, list[str]], kinds: list[str], dur: Callable[[str, str], float],
               disruptive: bool) -> list[dict[str, Any]]:
    """Per unit: in-service lead, out-of-service time, total (its nodes walk together)."""
    out = []
    for unit, nodes in units.items():
        lead = oos = 0.0
        for n in nodes:
            a, b = split_at_cordon(kinds, [dur(n, k) for k in kinds])
            if not disruptive:
                a, b = a + b, 0.0
            lead, oos = max(lead, a), max(oos, b)
        out.append({"unit": unit, "nodes": list(nodes), "lead_s": lead, "out_of_service_s": oos,
                    "total_s": lead + oos})
    return out


def lower_bound(units: list[dict[str, Any]], k: int) -> tuple[float, str]:
    if not units:
        return 0.0, "no units"
    crit = max(u["total_s"] for u in units)
    k = max(1, k)
    cap = min(u["lead_s"] for u in units) + sum(u["out_of_service_s"] for u in units) / k
    if cap > crit:
        return cap, f"capacity: out-of-service work over {k} unit(s) out at once"
    return crit, "critical path: the longest single unit"


def _canary_barriers(units: list[dict[str, Any]], canary: list[int]) -> tuple[float, int]:
    """The canary batches (``canary``: their sizes, the first units in order) run as
    barriers: the time they take (each batch's slowest unit, one after the other) and how
    many units they hold."""
    t, i = 0.0, 0
    for size in canary:
        part = units[i:i + size]
        if not part:
            break
        t += max(u["total_s"] for u in part)
        i += len(part)
    return t, i


def canary_bound(units: list[dict[str, Any]], canary: list[int], k: int) -> float:
    """The lower bound when the canary batches (``canary``: their sizes, the first units in
    order) are barriers: each canary batch's slowest unit, then the plain bound of the rest."""
    t, i = _canary_barriers(units, canary)
    rest = units[i:]
    return t + (lower_bound(rest, k)[0] if rest else 0.0)


def window_makespan(units: list[dict[str, Any]], canary: list[int], k: int) -> float:
    """The sliding window, simulated: the canary batches run as barriers (each waits for
    its slowest unit); after them a unit walks its in-service stages ahead and goes out
    (cordon) as soon as one of ``k`` slots frees, holding it until it is done."""
    t, i = _canary_barriers(units, canary)
    slots = [t] * max(1, k)
    heapq.heapify(slots)
    end = t
    for u in units[i:]:
        free = heapq.heappop(slots)
        out = max(free, t + u["lead_s"])
        finish = out + u["out_of_service_s"]
        end = max(end, finish)
        heapq.heappush(slots, finish)
    return end


def summary(units: list[dict[str, Any]], serial_s: float, window_s: float, k: int,
            canary: list[int] | None = None) -> dict[str, Any]:
    lb, basis = lower_bound(units, k)
    oos = [u["out_of_service_s"] for u in units]
    return {"units": units, "max_out": k, "lower_bound_s": lb, "lower_bound_basis": basis,
            "canary_bound_s": canary_bound(units, list(canary or []), k),
            "serial_makespan_s": serial_s, "window_makespan_s": window_s,
            "out_of_service_mean_s": statistics.fmean(oos) if oos else 0.0,
            "out_of_service_p95_s": percentile(oos, 95) if oos else 0.0}


def actual(plan: dict[str, Any], nodes: dict[str, list[dict[str, Any]]], started: str | None,
           finished: str | None, ts: Callable[[str | None], float | None] = parse_ts) -> dict[str, Any] | None:
    """What happened, from a run's folded journal: per unit, the time out of service (its
    first cordon start to its last uncordon end, or its rollback's end), the irreducible
    in-window work (the sum of its stage spans from the cordon on), the makespan, and the
    lower bound the same stage spans give at the plan's floor. ``nodes``: node -> timeline;
    ``ts``: how a time's text is read (``parsed_once()`` for a caller that reads them again)."""
    kinds = [s["stage"] for s in plan.get("stages", [])]
    if not plan.get("batches"):
        return None
    groups = plan.get("groups") or {n: [n] for n in plan.get("hosts", [])}
    units: list[dict[str, Any]] = []
    for unit, members in groups.items():
        out_from: float | None = None
        out_to: float | None = None
        lead = work = 0.0
        ran = False
        for n in members:
            spans: list[dict[str, Any]] = nodes.get(n) or []
            by_stage: dict[str, float] = {}
            for sp in spans:
                a, b = ts(sp.get("start")), ts(sp.get("end"))
                if a is None or b is None:
                    continue
                ran = True
                if sp["stage"] in kinds:
                    by_stage[sp["stage"]] = by_stage.get(sp["stage"], 0.0) + (b - a)
                if STAGE_TABLES.plays(sp["stage"], TAKES_OUT_OF_SERVICE):
                    out_from = a if out_from is None else min(out_from, a)
                if out_from is not None and (STAGE_TABLES.plays(sp["stage"], RETURNS_TO_SERVICE)
                                             or sp["stage"] == "rollback"):
                    out_to = b if out_to is None else max(out_to, b)
            a_, b_ = split_at_cordon(kinds, [by_stage.get(k, 0.0) for k in kinds])
            lead, work = max(lead, a_), max(work, b_)
        if not ran:
            continue
        oos = (out_to - out_from) if (out_from is not None and out_to is not None) else 0.0
        units.append({"unit": unit, "nodes": list(members), "lead_s": lead, "work_s": work,
                      "out_of_service_s": oos, "total_s": lead + work})
    if not units:
        return None
    a, b = ts(started), ts(finished)
    makespan = (b - a) if (a is not None and b is not None) else None
    k = _max_out(plan)
    bound_units = [{**u, "out_of_service_s": u["work_s"]} for u in units]
    lb, basis = lower_bound(bound_units, k)
    cb = _canary_bound_actual(plan, bound_units, k)
    oos_all = [float(u["out_of_service_s"]) for u in units]
    total_work = sum(float(u["work_s"]) for u in units)
    return {"units": units, "makespan_s": makespan, "lower_bound_s": lb, "lower_bound_basis": basis, "max_out": k,
            "out_of_service_mean_s": statistics.fmean(oos_all), "out_of_service_p95_s": percentile(oos_all, 95),
            "out_of_service_ratio": (sum(oos_all) / total_work) if total_work else None,
            "makespan_ratio": (makespan / lb) if (makespan and lb) else None,
            "canary_bound_s": cb, "canary_makespan_ratio": (makespan / cb) if (makespan and cb) else None}


def _canary_bound_actual(plan: dict[str, Any], units: list[dict[str, Any]], k: int) -> float:
    """``canary_bound`` over what happened: the plan's canary batches (those before its window
    batch; with serial batches, the ``serial`` list's leading values), each its slowest unit."""
    policy = plan.get("policy") or {}
    n = policy["batch"] - 1 if policy.get("name") == "window" else len((plan.get("timing") or {}).get("canary") or [])
    batches = plan.get("batches") or []
    groups = plan.get("groups") or {}
    unit_of = {m: g for g, ms in groups.items() for m in ms}
    canary_units = [{unit_of.get(x, x) for x in b["nodes"]} for b in batches[:n]]
    seen = set().union(*canary_units) if canary_units else set()
    ordered = [u for cu in canary_units for u in units if u["unit"] in cu]
    sizes = [len([u for u in units if u["unit"] in cu]) for cu in canary_units]
    return canary_bound(ordered + [u for u in units if u["unit"] not in seen], [s for s in sizes if s], k)


def _max_out(plan: dict[str, Any]) -> int:
    b = (plan.get("batches") or [{}])[0]
    k = (b.get("serving_before") or 0) - (b.get("serving_floor") or 0)
    if plan.get("unit", "node") == "node":
        k = min(k, plan.get("forks") or k)
    return max(1, k)


def describe(t: dict[str, Any], unit: str = "node", fmt: Callable[[float], str] = lambda s: f"{s:.0f}s") -> list[str]:
    """The plan's timing section as text lines (``plan`` prints them)."""
    if not t:
        return []
    lines = [f"estimates: {t['estimate_basis']}"
             + (f" ({len(t['history_runs'])} run(s): {', '.join(t['history_runs'])})" if t.get("history_runs") else "")]
    for r in t["stages"]:
        extra = (f" (median {fmt(r['median_s'])}, p90 {fmt(r['p90_s'])}, {r['samples']} sample(s))"
                 if r["samples"] else "")
        lines.append(f"  {r['stage']:<15} {r['class']:<22} {fmt(r['used_s']):>8}  {r['source']}{extra}")
    if t.get("prestage"):
        p = t["prestage"]
        lines.append(f"pre-staging: {p['nodes']} node(s), {p['parallel']} at a time, {fmt(p['ahead_s'])} before batch 1 "
                     "(nodes still serving)")
    lines.append(f"out of service per {unit}: mean {fmt(t['out_of_service_mean_s'])}, "
                 f"p95 {fmt(t['out_of_service_p95_s'])}")
    for u in t["units"]:
        lines.append(f"  {u['unit']:<15} out of service {fmt(u['out_of_service_s']):>8}  "
                     f"(in service before cordon {fmt(u['lead_s'])})")
    lb = t["lower_bound_s"] or 0.0

    def ratio(x: float) -> str:
        return f"{x / lb:.2f}x" if lb else "-"

    lines.append(f"makespan: serial batches {fmt(t['serial_makespan_s'])} ({ratio(t['serial_makespan_s'])} the bound), "
                 f"sliding window {fmt(t['window_makespan_s'])} ({ratio(t['window_makespan_s'])}); "
                 f"lower bound {fmt(lb)} at {t['max_out']} {unit}(s) out at once ({t['lower_bound_basis']})")
    if t.get("canary_bound_s") and t.get("canary"):
        cb = t["canary_bound_s"]
        lines.append(f"  with the canary batches ({', '.join(str(c) for c in t['canary'])} {unit}(s)) as barriers, as the "
                     f"rollout's safety contract makes them (the expansion waits for their verdict): lower bound {fmt(cb)}; "
                     f"sliding window {t['window_makespan_s'] / cb:.2f}x, serial batches {t['serial_makespan_s'] / cb:.2f}x "
                     "that bound")
    return lines
