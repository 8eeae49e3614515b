"""The SVG timeline of a run: batches as lanes, each node's stages as bars by outcome.

Pure: journal-derived spans in, SVG text out. Every label is escaped; the SVG is inline,
so the HTML report stays one self-contained file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from html import escape
from typing import Any

COLOURS = {True: "#2da44e", False: "#cf222e", None: "#8c959f"}
ROLLBACK = {True: "#bf8700", False: "#82071e", None: "#8c959f"}
ROW, LANE_GAP, LEFT, WIDTH = 16, 14, 120, 860
_MARKUP = re.compile("[&<>\"']")          # what html.escape changes: a span's time (ISO 8601) has none


def _t(ts: str | None) -> float | None:
    return datetime.fromisoformat(ts).timestamp() if ts else None


def render_svg(batches: list[dict[str, Any]], nodes: dict[str, Any], finished: str | None,
               ts: Callable[[str | None], float | None] = _t) -> str:
    """``ts``: how a time's text is read (``plan/timing.parsed_once()`` where the caller reads
    the same spans' times for other parts too)."""
    # each span's times read once (a 1,000-node run has 8,000 spans)
    spans = {name: [(s, ts(s["start"]), ts(s["end"])) for s in n.timeline] for name, n in nodes.items()}
    starts = [a for ss in spans.values() for _, a, _ in ss if a is not None]
    if not starts:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="30" role="img" aria-label="no timeline">' \
               '<text x="4" y="20" font-size="12">No stage ran.</text></svg>'
    t0 = min(starts)
    ends = [b for ss in spans.values() for _, _, b in ss if b is not None] + starts
    end_of_run = ts(finished) if finished else None
    t1 = max(ends + ([end_of_run] if end_of_run is not None else []))
    scale = WIDTH / max(t1 - t0, 1e-3)
    out: list[str] = []
    y = 20
    looks: dict[tuple[str, Any, bool], tuple[str, str, str]] = {}   # (stage, passed) -> colour, stroke, label
    for b in batches:
        members = [n for n in b["nodes"] if n in nodes and nodes[n].timeline]
        if not members:
            continue
        out.append(f'<text x="2" y="{y + 10}" font-size="11" font-weight="600">batch {b["index"]}</text>')
        y += 14
        for name in members:
            shown = escape(name)
            out.append(f'<text x="8" y="{y + 11}" font-size="11">{shown}</text>')
            for s, a, e in spans[name]:
                if a is None:
                    continue    # a start that does not read as a time is drawn nowhere
                e = e or t1
                x = LEFT + (a - t0) * scale
                w = max((e - a) * scale, 2.0)
                key = (s["stage"], s["passed"], s["passed"] is False)
                look = looks.get(key)
                if look is None:
                    rb = s["stage"] == "rollback"
                    look = looks[key] = (
                        (ROLLBACK if rb else COLOURS)[s["passed"]], ' stroke="#000" stroke-dasharray="2,1"' if rb else "",
                        escape(f'{s["stage"]}: {"passed" if s["passed"] else "failed" if s["passed"] is False else "unfinished"}'))
                colour, stroke, label = look
                start = s["start"] or ""
                title = f'{shown} {label} {escape(start) if _MARKUP.search(start) else start}'
                out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{ROW - 4}" fill="{colour}"'
                           f'{stroke}><title>{title}</title></rect>')
            y += ROW
        y += LANE_GAP
    legend_y = y + 4
    legend = [("passed", COLOURS[True]), ("failed", COLOURS[False]), ("rollback", ROLLBACK[True]),
              ("rollback failed", ROLLBACK[False])]
    x = LEFT
    for text, colour in legend:
        out.append(f'<rect x="{x}" y="{legend_y}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14}" y="{legend_y + 9}" font-size="11">{text}</text>')
        x += 110
    out.append(f'<text x="{LEFT}" y="12" font-size="10" fill="#57606a">0 s</text>'
               f'<text x="{LEFT + WIDTH - 60}" y="12" font-size="10" fill="#57606a">{t1 - t0:.1f} s</text>')
    height = legend_y + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline-svg" width="{LEFT + WIDTH + 10}" '
            f'height="{height}" role="img" aria-label="run timeline" font-family="sans-serif">'
            + "".join(out) + "</svg>")
