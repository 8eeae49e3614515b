"""Render a run directory into result.json, report.json, report.md and report.html.

Pure over the run directory: reads the journal (never repairs it) and writes the reports;
running it again gives the same reports. The HTML is one self-contained file (inline CSS
and SVG, a CSP that forbids every fetch) and Jinja2's autoescape escapes every string
that came from a host. ``render_plan`` renders a dry-run plan the same way, for review
before the window.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import BytecodeCache, Environment, FileSystemBytecodeCache, PackageLoader
from jinja2.bccache import Bucket

from k3rollout import fastjson
from k3rollout.checks.cuda_table import BRANCH_MAX_CUDA
from k3rollout.evidence.store import Problem
from k3rollout.model.durations import format_duration
from k3rollout.model.playbook import STAGE_TABLES, load_playbook, play_vars
from k3rollout.plan.approval import plan_digest, plan_vs_actual
from k3rollout.plan.timing import parsed_once
from k3rollout.report import checklist
from k3rollout.report.history import run_timing
from k3rollout.report.observation import summarise as observation_summary
from k3rollout.report.result import build_result
from k3rollout.report.timeline import render_svg
from k3rollout.resources import shipped
from k3rollout.runlog.journal import Journal, no_gc
from k3rollout.runlog.rundir import REPORT_HTML, REPORT_JSON, REPORT_MD, RESULT, RunDir
from k3rollout.runlog.view import RunView, fold

RUNBOOKS = shipped("runbooks")
# each stage kind's runbook (model/playbook.py's STAGE_KINDS), then the rollback's and the index
RUNBOOK_FILES = {**STAGE_TABLES.runbooks, "rollback": "rollback.md", "index": "README.md"}
OBSERVE_RUNBOOK = "08-observe.md"


class _CompiledTemplates(FileSystemBytecodeCache):
    """The templates' compiled code, kept between processes in Jinja's own per-user cache
    folder (in the temp folder; Jinja makes it private and refuses one another user owns
    or can write). Compiling them took each process 0.3 s of CPU before its first report.
    A cache entry is keyed by the template's source and Jinja's and Python's versions; one
    that cannot be read or written only costs the compile again: never a failed report."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, TypeError):
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> BytecodeCache | None:
    try:
        return _CompiledTemplates()
    except (OSError, RuntimeError):      # no private cache folder can be had: compile each time
        return None


_CACHE = _bytecode_cache()


def _env(autoescape: bool) -> Environment:
    env = Environment(loader=PackageLoader("k3rollout.report", "templates"), autoescape=autoescape,
                      trim_blocks=True, lstrip_blocks=True, bytecode_cache=_CACHE)
    env.filters["dur"] = lambda s: format_duration(s) if s is not None else "-"
    env.filters["md"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")
    return env


_HTML, _MD = _env(True), _env(False)


def _ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def _cuda(driver: str | None) -> str | None:
    if not driver:
        return None
    try:
        return BRANCH_MAX_CUDA.get(int(str(driver).split(".")[0]))
    except ValueError:
        return None


def _play_vars(run_dir: Path) -> dict[str, Any]:
    try:
        inputs = json.loads(RunDir(run_dir).inputs.read_text())

        return play_vars(load_playbook(inputs["playbook"]).play)
    except Exception:  # noqa: BLE001 - the report must render even when the inputs moved
        return {}


def runbook_links() -> dict[str, str]:
    return {k: (RUNBOOKS / v).as_uri() for k, v in RUNBOOK_FILES.items()}


def _node_rows(v: RunView, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, r in result["nodes"].items():
        n = v.nodes[name]
        serving = n.baseline.get("serving_containers") or []
        before_img = serving[0]["image"] + "@" + (serving[0].get("digest") or "?").split("@")[-1][:19] \
            if serving else None
        after_img = (f"{n.facts.get('image')}@{(n.facts.get('image_digest') or '?').split('@')[-1][:19]}"
                     if n.facts.get("image_digest") and r["final"] == "upgraded" else before_img)
        rows.append({"name": name, **r, "cuda_before": n.baseline.get("cuda_driver_version") or _cuda(r["driver_before"]),
                     "cuda_after": _cuda(r["driver_after"]), "image_before": before_img,
                     "image_after": after_img if r["final"] != "pending" else None,
                     "gpus_before": n.baseline.get("gpu_count"),
                     "gpus_after": n.facts.get("gpu_count") if r["final"] != "pending" else None})
    return rows


def _probe_rows(v: RunView) -> list[dict[str, Any]]:
    """Each node's own serving workloads, their probe at baseline and after they were back
    (stages/workload_probes.py), side by side."""
    def said(r: dict[str, Any] | None) -> str:
        if r is None:
            return "not probed"
        if r.get("skipped"):
            return f"skipped ({r['skipped']})"
        return "passed" if r.get("ok") else f"FAILED: {r.get('detail') or ''}".strip()

    rows = []
    for name, n in v.nodes.items():
        after = {r["name"]: r for r in n.facts.get("workload_probes_after") or []}
        for r in n.baseline.get("workload_probes") or []:
            rows.append({"node": name, "workload": r["name"], "probe": r.get("probe"), "before": said(r),
                         "after": said(after.get(r["name"]))})
    return rows


def _sha_short(ref: str | None) -> str:
    """``IMAGE@sha256:abc...`` or ``sha256:abc...`` as ``sha256:`` and 12 hex digits."""
    digest = (ref or "").rsplit("@", 1)[-1]
    return digest[:19] if digest else "-"


def _pods_after(node: str, pods: list[dict[str, Any]]) -> list[str]:
    """The owner's pods on this node by name and phase; the others counted."""
    here = [f"{p['name']} ({p.get('phase')})" for p in pods if p.get("node") == node]
    placed = sum(1 for p in pods if p.get("node") and p.get("node") != node)
    pending = sum(1 for p in pods if not p.get("node"))
    return here + ([f"{placed} on other nodes"] if placed else []) + ([f"{pending} not scheduled"] if pending else [])


def _pod_rows(v: RunView) -> list[dict[str, Any]]:
    """Each node's serving Pods and their owners as baseline saw them, beside each owner as
    the uncordon found it once the node was back (``serving_owners``: readyReplicas against
    baseline's, the digests its running pods run, where its pods are). Only a Kubernetes
    backend records owners; a node whose owners were not checked after (rolled back, halted
    before its uncordon) says so."""
    rows = []
    for name, n in v.nodes.items():
        after = n.facts.get("serving_owners") or {}
        for s in n.baseline.get("serving_containers") or []:
            if "owner" not in s:
                continue                   # a Docker host's container: the nodes table shows its image
            o = s["owner"]
            key = f"{o['kind']}/{o['namespace']}/{o['name']}" if o else None
            a = after.get(key) if key else None
            rows.append({
                "node": name, "pod": s["name"], "image": s.get("image") or "-", "digest": _sha_short(s.get("digest")),
                "restarts": s.get("restarts"), "gpus": s.get("gpus"),
                "owner": f"{o['kind']} {o['namespace']}/{o['name']}" if o else "none: nothing brings it back",
                "ready_before": o.get("ready_replicas") if o else None,
                "ready_after": a.get("ready") if a else None,
                "back": a is not None and a.get("ready") is not None and a.get("baseline_ready") is not None
                and a["ready"] >= a["baseline_ready"],
                "digests_after": [_sha_short(d) for d in a.get("digests") or []] if a else [],
                "pods_after": _pods_after(name, a.get("pods") or []) if a else [],
                "checked": a is not None})
    return rows


def _batches(v: RunView, result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    plan_batches = {b["index"]: b for b in (v.plan or {}).get("batches", [])}
    for b in result["batches"]:
        pb = plan_batches.get(b["index"], {})
        groups: dict[tuple[str, ...], list[str]] = {}
        for rp in b["rollback_plan"]:
            # the same steps for several nodes read once: the node name only appears in commands
            key = tuple(s.replace(rp["node"], "NODE") for s in rp["steps"])
            groups.setdefault(key, []).append(rp["node"])
        plans = [{"nodes": nodes, "steps": [s.replace("NODE", nodes[0]) if len(nodes) == 1 else s for s in steps]}
                 for steps, nodes in groups.items()]
        ran = [{"name": n, "final": result["nodes"][n]["final"], "results": result["nodes"][n]["rollback"]["results"]}
               for n in b["nodes"] if result["nodes"].get(n, {}).get("rollback")]
        began, ended = _ts(b["started"]), _ts(b["finished"])
        took = ended - began if began is not None and ended is not None else None
        out.append({**b, "planned": pb.get("estimate_s"), "planned_start": pb.get("start_offset_s"), "took": took,
                    "serving_during": pb.get("serving_during"), "serving_floor": pb.get("serving_floor"),
                    "plans": plans, "ran": ran})
    return out


def _window(v: RunView, result: dict[str, Any]) -> dict[str, Any]:
    start, end = _ts(result["started"]), _ts(result["finished"]) or _ts(v.last_ts)
    used = (end - start) if start and end else None
    booked = (v.window_end - start) if (v.window_end and start) else None
    if booked is None:
        text = f"none booked; the run took {format_duration(used) if used is not None else '-'}"
    else:
        text = (f"booked {format_duration(booked)} (ends {result['window_end']}), used "
                f"{format_duration(used) if used is not None else '-'}")
    return {"used_s": used, "booked_s": booked, "text": text}


def model(run_dir: Path, view: RunView | None = None, records: int | None = None) -> dict[str, Any]:
    """What the reports show: the journal folded into a view (or ``view``, the journal's
    ``records`` records already folded)."""
    problems: list[Problem] = []
    if view is None:
        # a report from the run directory re-verifies it: the journal's hash chain and record
        # types (Journal.read), the evidence files against the manifest, the manifest against
        # what the journal cites
        rd = RunDir(run_dir)
        recs = Journal.read(rd.journal)
        problems = rd.verify(recs)
        with no_gc():
            view = fold(recs)
        records = len(recs)
        del recs            # the view keeps what it needs; the rest goes now, before a collection walks it
    v = view
    result = build_result(v)
    items = checklist.evaluate(v, _play_vars(run_dir))
    if problems:
        bad = {p.subject for p in problems if p.subject}
        for item in items:
            failed = [e["path"] for e in item["evidence"] if e["path"] in bad]
            if failed:
                item["status"] = "not proven"
                item["detail"] = f"evidence failed verification: {', '.join(failed)}; " + item["detail"]
    triage = [{"node": n.name, **n.triage} for n in v.nodes.values() if n.triage]
    counts: dict[str, int] = {}
    for n in result["nodes"].values():
        counts[n["final"]] = counts.get(n["final"], 0) + 1
    banner = verdict_banner(result, (v.preflight or {}).get("skipped_nodes") or [])
    batches = _batches(v, result)
    diff = plan_vs_actual(v.plan or {}, v)
    ts = parsed_once()                # the spans' times, read by the timing and the timeline
    return {"timing": run_timing(v, ts), "diff": diff, "result": result, "view": v, "checklist": items, "triage": triage, "counts": counts,
            "verdict": banner["text"], "banner": banner,
            "unchanged": {n: r["no_change"] for n, r in result["nodes"].items() if r.get("no_change")},
            "plan": v.plan or {}, "nodes": v.nodes,
            "records": records, "batches": batches, "node_rows": _node_rows(v, result), "probe_rows": _probe_rows(v),
            "pod_rows": _pod_rows(v),
            "window": _window(v, result), "runbooks": runbook_links(),
            "timeline_svg": render_svg(result["batches"], v.nodes, result["finished"], ts),
            "verification": [str(p) for p in problems], "observation": observation_summary(v),
            "observe_runbook": (RUNBOOKS / OBSERVE_RUNBOOK).as_uri()}


VERDICTS = {"completed": "Rollout completed", "halted": "Rollout HALTED", "aborted": "Rollout ABORTED",
            "no_change": "No in-place change (evidence only)", "running": "Run did not finish (resume it)"}
# the units a completed run did not return upgraded: its serving groups (replicas) when the
# plan has them, else its nodes
_KEPT_OUT = frozenset({"failed", "rollback_failed", "quarantined"})
# Markdown has no colour of its own: the headline starts with one, as the HTML's background
_MARKS = {"completed": "\U0001F7E2", "completed_partial": "\U0001F7E0", "halted": "\U0001F534",
          "aborted": "\U0001F534", "running": "\U0001F534", "no_change": "\U0001F7E1"}


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def _returned(node: dict[str, Any]) -> bool:
    """A node whose rollback failed after it gave the node back to its scheduler (uncordoned,
    its workloads not proven back: the rollback's result says ``in_service``)."""
    results = (node.get("rollback") or {}).get("results") or []
    return node["final"] == "rollback_failed" and any(r.get("in_service") for r in results)


def verdict_banner(result: dict[str, Any], skipped: list[str]) -> dict[str, str]:
    """The report's headline: the run's status and, for a completed run that rolled a unit back
    or kept one out (failed, quarantined, or left out with --skip-node), how many, with a class
    (``completed_partial``) whose colour differs from a clean run's. The reasons stay in the body."""
    status = str(result["status"])
    text = VERDICTS.get(status, status)
    if status != "completed":
        return {"text": text, "class": status, "detail": "", "mark": _MARKS.get(status, _MARKS["no_change"])}
    replicas = result.get("replicas") or {}
    nodes = result["nodes"]
    # each unit: its final, and the nodes of it that failed (a replica's, or the node itself)
    units = ([(r["final"], [nodes[n] for n in r.get("nodes") or [] if n in nodes and nodes[n]["final"] in _KEPT_OUT])
              for r in replicas.values()] if replicas else
             [(n["final"], [n] if n["final"] in _KEPT_OUT else []) for n in nodes.values()])
    unit = "replica" if replicas else "node"
    rolled = sum(f == "rolled_back" for f, _ in units)
    failed = [bad for f, bad in units if f in _KEPT_OUT]
    back = sum(1 for bad in failed if bad and all(_returned(n) for n in bad))
    kept = len(failed) - back
    parts = ([f"{_count(rolled, unit)} of {len(units)} rolled back"] if rolled else []) + \
            ([f"{_count(kept, unit)} failed and kept out of service"] if kept else []) + \
            ([f"{_count(back, unit)} failed and returned to service, its workloads not proven back"] if back else []) + \
            ([f"{_count(len(skipped), 'node')} left out with --skip-node"] if skipped else [])
    if not parts:
        return {"text": text, "class": status, "detail": "", "mark": _MARKS["completed"]}
    detail = "; ".join(parts)
    return {"text": f"{text} with {detail}", "class": "completed_partial", "detail": detail,
            "mark": _MARKS["completed_partial"]}


def _json(m: dict[str, Any]) -> str:
    return fastjson.dumps_pretty({"result": m["result"], "checklist": m["checklist"], "triage": m["triage"],
                                  **({"verification_failures": m["verification"]} if m["verification"] else {}),
                                  "window": m["window"], "plan_vs_actual": m["diff"], "timing": m["timing"],
                                  "plan_sha256": m["view"].plan_sha256, "approved_plan": m["view"].approved_plan,
                                  **({"preflight": m["view"].preflight} if m["view"].preflight else {}),
                                  "gates": list(m["view"].pauses.values()), "hooks": list(m["view"].hooks.values()),
                                  **({"observation": m["observation"]} if m["observation"] else {})})


def outputs(m: dict[str, Any]) -> dict[str, str]:
    """The files a run directory's reports are: name -> text."""
    return {RESULT: fastjson.dumps_pretty(m["result"]), REPORT_JSON: _json(m),
            REPORT_MD: _MD.get_template("report.md.j2").render(**m),
            REPORT_HTML: _HTML.get_template("report.html.j2").render(**m)}


def write_reports(run_dir: Path, view: RunView | None = None, records: int | None = None,
                  in_progress: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = write_model(run_dir, view, records, in_progress)["result"]
    return result


def write_model(run_dir: Path, view: RunView | None = None, records: int | None = None,
                in_progress: str | None = None) -> dict[str, Any]:
    """Write the reports; the model they show (``verification`` lists what did not verify).
    ``in_progress``: the time of writing, for a report written while the run goes on (each
    file is written beside its name and renamed over it: a reader never sees half of one)."""
    run_dir = Path(run_dir)
    # hundreds of thousands of small objects, none cyclic: a collection would walk them all
    with no_gc():
        m = model(run_dir, view, records)
        if in_progress and m["result"]["status"] == "running":
            # said at the top (the heading and the title), where a reader looks first
            m["verdict"] = f"Run in progress (this report was written at {in_progress}; rewritten as batches end)"
        texts = outputs(m)
    for name, text in texts.items():
        tmp = run_dir / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, run_dir / name)
    return m


def render(run_dir: Path, fmt: str) -> tuple[str, list[str]]:
    """One report as text, and what did not verify."""
    with no_gc():
        m = model(Path(run_dir))
        if fmt == "json":
            return _json(m), m["verification"]
        return (_MD if fmt == "md" else _HTML).get_template(f"report.{fmt}.j2").render(**m), m["verification"]


def render_plan(plan: dict[str, Any], fmt: str) -> str:
    plan = {**plan, "plan_sha256": plan_digest(plan)}
    if fmt == "json":
        return json.dumps(plan, indent=2)
    return (_MD if fmt == "md" else _HTML).get_template(f"plan.{fmt}.j2").render(plan=plan)
