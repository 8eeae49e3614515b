"""Earlier runs' journals as evidence for estimates (``plan --history``), and a run's own
timing (out of service, makespan, lower bound) for its report. See plan/timing.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3rollout.errors import InputError
from k3rollout.plan import timing as tm
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.rundir import RunDir
from k3rollout.runlog.view import RunView, fold


def load_history(run_dirs: list[str]) -> tm.History:
    """Fold each run's journal (verified: hash chain and record types) into stage samples."""
    hist = tm.History()
    for d in run_dirs:
        path = RunDir(d).journal
        if not path.is_file():
            raise InputError(f"--history: no {path.name} here (give a run directory k3rollout wrote)", path=str(d))
        view = fold(Journal.read(path))
        nodes = {n: (str(v.baseline.get("gpu_model") or tm.UNKNOWN), v.timeline) for n, v in view.nodes.items()}
        if hist.add_run(str(d), nodes) == 0:
            raise InputError("--history: this run recorded no completed stage to take a duration from", path=str(path))
    return hist


def run_timing(view: RunView, ts: Callable[[str | None], float | None] = tm.parse_ts) -> dict[str, Any] | None:
    return tm.actual(view.plan or {}, {n: v.timeline for n, v in view.nodes.items()}, view.started,
                     view.finished or view.last_ts, ts)
