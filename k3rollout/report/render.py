"""Render a run directory into result.json, report.json, report.md and report.html.

Pure over the run directory: reads the journal (never repairs it) and writes the reports;
running it again gives the same reports. The HTML is one self-contained file (inline CSS,
no fetches) and Jinja2's autoescape escapes every string that came from a host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from k3rollout.engine.journal import Journal
from k3rollout.model.durations import format_duration
from k3rollout.report import checklist
from k3rollout.report.result import build_result
from k3rollout.report.state import fold

_ENV = Environment(loader=PackageLoader("k3rollout.report", "templates"),
                   autoescape=select_autoescape(["html", "j2"], default_for_string=False),
                   trim_blocks=True, lstrip_blocks=True)
_ENV.filters["dur"] = lambda s: format_duration(s) if s is not None else "-"
_ENV_MD = Environment(loader=PackageLoader("k3rollout.report", "templates"), autoescape=False,
                      trim_blocks=True, lstrip_blocks=True)
_ENV_MD.filters["dur"] = _ENV.filters["dur"]
_ENV_MD.filters["md"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _play_vars(run_dir: Path) -> dict[str, Any]:
    try:
        inputs = json.loads((run_dir / "inputs.json").read_text())
        from k3rollout.model.playbook import load_playbook, play_vars

        return play_vars(load_playbook(inputs["playbook"]).play)
    except Exception:  # noqa: BLE001 - the report must render even when inputs moved
        return {}


def model(run_dir: Path) -> dict[str, Any]:
    records = Journal.read(run_dir / "journal.jsonl")
    v = fold(records)
    result = build_result(v)
    items = checklist.evaluate(v, _play_vars(run_dir))
    triage = [{"node": n.name, **n.triage} for n in v.nodes.values() if n.triage]
    counts: dict[str, int] = {}
    for n in result["nodes"].values():
        counts[n["final"]] = counts.get(n["final"], 0) + 1
    verdict = {"completed": "Rollout completed", "halted": "Rollout HALTED", "aborted": "Rollout ABORTED",
               "no_change": "No in-place change (evidence only)", "running": "Run did not finish (resume it)"}
    return {"result": result, "view": v, "checklist": items, "triage": triage, "counts": counts,
            "verdict": verdict.get(result["status"], result["status"]), "plan": v.plan or {},
            "nodes": v.nodes, "records": len(records)}


def write_reports(run_dir: Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    m = model(run_dir)
    out = {"result.json": json.dumps(m["result"], indent=2, default=str),
           "report.json": json.dumps({"result": m["result"], "checklist": m["checklist"], "triage": m["triage"]},
                                     indent=2, default=str),
           "report.md": _ENV_MD.get_template("report.md.j2").render(**m),
           "report.html": _ENV.get_template("report.html.j2").render(**m)}
    for name, text in out.items():
        tmp = run_dir / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, run_dir / name)
    return m["result"]


def render(run_dir: Path, fmt: str) -> str:
    m = model(Path(run_dir))
    if fmt == "json":
        return json.dumps({"result": m["result"], "checklist": m["checklist"], "triage": m["triage"]}, indent=2,
                          default=str)
    return (_ENV_MD if fmt == "md" else _ENV).get_template(f"report.{fmt}.j2").render(**m)
