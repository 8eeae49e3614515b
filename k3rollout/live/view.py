"""The live view of a run as one rich renderable. Pure: a ``LiveRun`` and the time in, the
renderable out (``screen`` draws it). The same view serves ``run``, ``resume``,
``rollback`` and ``watch``.

What an operator needs on one screen, top to bottom: where the rollout stands (batch,
status, elapsed, the plan's estimate and the ETA from measured stage times), whether it
fits the booked window (the time left turns amber when the estimate takes more than 80% of
it, red when it takes more than all of it), progress in units (replicas or nodes) overall
and per batch, every unit in flight with its current stage against its estimate (a
replica's nodes together), a pause waiting for a person with the command that answers it,
and every failure with its triage category and rollback, which stay on screen.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timezone

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from k3rollout.live.state import LiveRun, ts
from k3rollout.model.durations import format_duration

WINDOW_STYLE = {"ok": "green", "tight": "yellow", "over": "bold red", "none": "dim"}
BATCH_STYLE = {"passed": "green", "failed": "red", "rolled_back": "magenta", "running": "cyan", "not_started": "dim"}
MAX_BATCH_ROWS = 8
MAX_FLIGHT_ROWS = 16
MAX_FAILURE_ROWS = 10


def clock(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%H:%M:%SZ") if epoch is not None else "-"


def dur(seconds: float | None) -> str:
    return format_duration(max(0.0, seconds)) if seconds is not None else "-"


def _current_batch(s: LiveRun) -> int | None:
    running = [i for i, b in s.view.batches.items() if b["status"] == "running"]
    if running:
        return running[0]
    started = [i for i, b in s.view.batches.items() if b["status"] != "not_started"]
    return max(started) if started else None


def header(s: LiveRun, now: float) -> Text:
    v = s.view
    cur = _current_batch(s)
    t = Text()
    t.append("k3rollout", style="bold")
    t.append(f"  batch {cur or '-'}/{len(v.batches) or '?'}")
    status = "running" if v.status == "running" else v.status
    t.append(f"  {status}", style="bold cyan" if status == "running" else
             "bold green" if status in ("completed", "no_change") else "bold red")
    if v.run_id:
        t.append(f"  run {v.run_id}", style="dim")
    t.append("\n")
    t.append(f"elapsed {dur(s.elapsed(now))}")
    planned = s.plan.get("total_estimate_s")
    if planned is not None:
        t.append(f"   plan estimate {dur(float(planned))}")
    if v.status == "running" and v.started:
        left = s.remaining(now)
        cal = " (measured)" if s.measured_s else " (planned)"     # what the stage times come from
        t.append(f"   ETA {clock(now + left)}, {dur(left)} left{cal}")
    elif v.finished:
        t.append(f"   ended {clock(ts(v.finished))}")
    t.append("\n")
    state = s.window_state(now)
    if v.window_end is None:
        t.append("window: none booked", style=WINDOW_STYLE["none"])
    else:
        left = v.window_end - now
        t.append(f"window ends {clock(v.window_end)}", style=WINDOW_STYLE[state])
        if v.status == "running":
            t.append(f", {dur(left)} left" if left > 0 else ", ENDED", style=WINDOW_STYLE[state])
            if state == "over":
                t.append(f": the estimate ({dur(s.remaining(now))}) does not fit", style=WINDOW_STYLE[state])
            elif state == "tight":
                t.append(f": the estimate ({dur(s.remaining(now))}) takes most of it", style=WINDOW_STYLE[state])
    return t


def _bar(done: int, total: int, style: str) -> ProgressBar:
    return ProgressBar(total=max(total, 1), completed=done, width=20, complete_style=style,
                       finished_style=style)


def progress(s: LiveRun, now: float) -> Table:
    unit = s.unit
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    overall = s.count(s.groups())
    table.add_row(Text("all", style="bold"), _bar(overall.done, overall.total, "green"),
                  f"{overall.done}/{overall.total} {unit}s",
                  f"{overall.in_flight} in flight" if overall.in_flight else "")
    batches = sorted(s.view.batches)
    plan_batches = {b["index"]: b for b in s.plan.get("batches", [])}
    shown = _batches_to_show(s, batches)
    for i in batches:
        if i not in shown:
            continue
        b = s.view.batches[i]
        c = s.count(s.batch_units(i))
        pb = plan_batches.get(i, {})
        est = pb.get("estimate_s")
        start, end = ts(b["started"]), ts(b["finished"])
        if b["status"] == "running":
            detail = f"elapsed {dur(now - start) if start else '-'} of {dur(est)} planned, " \
                     f"~{dur(s.batch_left(i, now))} left"
        elif b["status"] == "not_started":
            detail = f"planned {dur(est)}"
        else:
            took = dur(end - start) if start and end else "-"
            failed = f"; failed: {', '.join(b['failed'])}" if b["failed"] else ""
            detail = f"{b['status']} in {took} (planned {dur(est)}){failed}"
        style = BATCH_STYLE.get(b["status"], "")
        table.add_row(Text(f"batch {i}", style=style), _bar(c.done, c.total, style or "green"),
                      f"{c.done}/{c.total} {unit}s", Text(detail, style=style if b["status"] != "passed" else ""))
    hidden = len(batches) - len(shown)
    if hidden:
        table.add_row("", "", "", Text(f"... {hidden} more batch(es)", style="dim"))
    return table


def _batches_to_show(s: LiveRun, batches: list[int]) -> set[int]:
    if len(batches) <= MAX_BATCH_ROWS:
        return set(batches)
    cur = _current_batch(s) or batches[0]
    pos = batches.index(cur)
    lo = max(0, min(pos - 2, len(batches) - MAX_BATCH_ROWS))
    return set(batches[lo:lo + MAX_BATCH_ROWS])


def in_flight(s: LiveRun, now: float) -> Table | None:
    nodes = s.in_flight()
    if not nodes:
        return None
    of_node = {n: u for u, members in s.groups().items() for n in members} if s.unit == "replica" else {}
    nodes.sort(key=lambda n: (n.batch or 0, of_node.get(n.name, n.name), n.name))
    table = Table(title="in flight", title_justify="left", expand=False, show_edge=False, pad_edge=False)
    if of_node:
        table.add_column("replica", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("stage", no_wrap=True)
    table.add_column("elapsed / estimate", no_wrap=True)
    last_unit = None
    waiting = s.open_pauses()
    for n in nodes[:MAX_FLIGHT_ROWS]:
        span = n.timeline[-1] if n.timeline else None
        stage = n.stage or "-"
        timing = ""
        style = ""
        if span is not None and span["end"] is None:
            stage = span["stage"]
            took = now - (ts(span["start"]) or now)
            est = s.estimate(stage, s.hw_class(n)) if stage != "rollback" else None
            timing = f"{dur(took)} / {dur(est)}" if est is not None else dur(took)
            if stage == "rollback":
                style = "magenta"
            elif est is not None and took > est * 1.5 + 1:
                style = "yellow"
        elif n.state == "rollback-required":
            stage, style = "rollback due", "magenta"
        elif any(p.get("stage") == stage and p.get("node") in (None, n.name) and p.get("batch") in (None, n.batch)
                 for p in waiting):
            stage, style = f"{stage}: waiting for approval", "yellow"
        else:
            stage = f"{stage} (next)"
        row: list[RenderableType] = [n.name, Text(stage, style=style), Text(timing, style=style)]
        if of_node:
            unit = of_node.get(n.name, "")
            row.insert(0, unit if unit != last_unit else "")
            last_unit = unit
        table.add_row(*row)
    if len(nodes) > MAX_FLIGHT_ROWS:
        table.caption = f"... and {len(nodes) - MAX_FLIGHT_ROWS} more node(s) in flight"
    return table


def pauses(s: LiveRun, run_dir: str) -> Panel | None:
    waiting = s.open_pauses()
    if not waiting:
        return None
    lines = Text()
    for p in waiting:
        lines.append(f"{p['id']}: {p.get('reason') or 'waiting for a person'}", style="bold")
        if p.get("until_iso"):
            lines.append(f" (goes on by itself at {p['until_iso']})")
        lines.append("\n  approve:  ")
        lines.append(f"k3rollout approve {shlex.quote(run_dir)} --pause {p['id']}", style="bold green")
        lines.append("\n  reject:   ")
        lines.append(f"k3rollout approve {shlex.quote(run_dir)} --pause {p['id']} --reject", style="red")
        lines.append("\n")
    lines.rstrip()
    return Panel(lines, title="WAITING for approval", border_style="yellow", expand=False)


def failures(s: LiveRun) -> Panel | None:
    v = s.view
    failed = [n for n in v.nodes.values() if n.failed_stage or n.rollback_attempts]
    if not failed and not v.halt and not v.manual_rollbacks:
        return None
    table = Table(show_edge=False, pad_edge=False, expand=False)
    table.add_column("node", no_wrap=True)
    table.add_column("failed at", no_wrap=True)
    table.add_column("triage", no_wrap=True)
    table.add_column("rollback", no_wrap=True)
    table.add_column("why", overflow="ellipsis", no_wrap=True, max_width=70)
    for n in failed[:MAX_FAILURE_ROWS]:
        if n.rollback_attempts:
            rb = ("done" if n.rollback_ok else "FAILED (kept cordoned)") if n.rollback_done_seq >= \
                n.rollback_requested_seq and n.rollback_ok is not None else "running"
        elif n.state == "rollback-required":
            rb = "due"
        else:
            rb = "-"
        table.add_row(n.name, n.failed_stage or "-", (n.triage or {}).get("category", "-"),
                      Text(rb, style="magenta" if rb == "done" else "red" if rb.startswith("FAILED") else ""),
                      n.reason or n.rollback_reason or "")
    parts: list[RenderableType] = [table]
    if len(failed) > MAX_FAILURE_ROWS:
        parts.append(Text(f"... and {len(failed) - MAX_FAILURE_ROWS} more", style="dim"))
    for m in v.manual_rollbacks:
        parts.append(Text(f"batch {m['batch']} rolled back by the operator"
                          f"{'' if m.get('ok') is not False else ' (FAILED on a node)'}", style="magenta"))
    if v.halt:
        parts.append(Text(f"HALTED ({v.halt['kind']}): {v.halt['reason']}", style="bold red"))
    return Panel(Group(*parts), title="failures, triage and rollbacks", border_style="red", expand=False)


def footer(s: LiveRun) -> Text | None:
    if s.view.status == "running":
        return None
    return Text(f"run {s.view.status}", style="bold green" if s.view.status in ("completed", "no_change")
                else "bold red")


def render(s: LiveRun, now: float, run_dir: str) -> RenderableType:
    """The whole view of ``s`` at time ``now``; ``run_dir`` names the run in commands."""
    if s.view.started is None:
        return Text(f"k3rollout  waiting for the run in {run_dir} to start", style="dim")
    parts: list[RenderableType | None] = [header(s, now), progress(s, now), pauses(s, run_dir),
                                          in_flight(s, now), failures(s), footer(s)]
    return Group(*(p for p in parts if p is not None))
