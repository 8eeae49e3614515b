"""A run as Prometheus metrics, with the official client (prometheus_client).

One collector turns a ``LiveRun`` into metric families each time it is asked: served over
HTTP while the run goes (``run``/``resume``/``rollback --metrics-port``), or written once
for node_exporter's textfile collector (``k3rollout metrics RUN_DIR --textfile PATH``,
replaced atomically: the client writes a temporary file beside it and renames it). Counts
of nodes, replicas, batches, failures and rollbacks come from ``tallies``, beside
``build_result`` (the function that writes result.json) and made of the same parts, so at the
end they are result.json's figures.

Names follow the Prometheus conventions: the ``k3rollout_`` prefix, seconds and Unix
timestamps in seconds, ``_total`` on counters (the client adds it), one metric per meaning
with the varying part in labels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from k3rollout.live.state import BUCKETS, LiveRun, ts
from k3rollout.report.result import tallies
from k3rollout.runlog.rundir import RESULT

NODE_STATES = ("upgraded", "rolled_back", "rollback_failed", "failed", "skipped", "pending", "quarantined")
REPLICA_STATES = ("serving", "rolled_back", "failed", "pending")
BATCH_STATES = ("passed", "failed", "rolled_back", "running", "not_started")
RUN_STATES = ("running", "completed", "halted", "aborted", "no_change", "rolled_back")


def _counts(values: list[str], names: tuple[str, ...]) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def families(s: LiveRun, now: float, of_records: tuple[list[Metric], list[Metric]] | None = None) -> list[Metric]:
    """Every family of ``s`` at ``now`` (``of_records``: ``_of_records(s)``, when it is kept)."""
    before, after = of_records or _of_records(s)
    return [*before, *_times(s, now), *after, _records(s)]


def _of_records(s: LiveRun) -> tuple[list[Metric], list[Metric]]:
    """The families that change only with a record the view shows (``LiveRun.shown``): those
    before the times, and those after them."""
    v = s.view
    res = tallies(v)
    before: list[Metric] = []
    g = GaugeMetricFamily("k3rollout_run_status", "1 for the run's status, 0 for the others", labels=["status"])
    for st in sorted({*RUN_STATES, v.status}):
        g.add_metric([st], 1.0 if st == v.status else 0.0)
    before.append(g)
    g = GaugeMetricFamily("k3rollout_nodes", f"Nodes of the plan by state ({RESULT}'s final)", labels=["state"])
    for st, n in _counts(res["nodes"], NODE_STATES).items():
        g.add_metric([st], n)
    before.append(g)
    if res["replicas"]:
        g = GaugeMetricFamily("k3rollout_replicas", f"Replicas of the plan by state ({RESULT}'s final)",
                              labels=["state"])
        for st, n in _counts(res["replicas"], REPLICA_STATES).items():
            g.add_metric([st], n)
        before.append(g)
    units = s.count(s.groups())
    g = GaugeMetricFamily("k3rollout_units", "The plan's units (replicas or nodes) by progress",
                          labels=["unit", "state"])
    for st, n in (("done", units.done), ("in_flight", units.in_flight),
                  ("not_started", units.total - units.done - units.in_flight)):
        g.add_metric([s.unit, st], n)
    before.append(g)
    g = GaugeMetricFamily("k3rollout_nodes_in_stage", "Nodes in flight by their current stage", labels=["stage"])
    for st, n in _counts([x.stage or "-" for x in s.in_flight()], tuple(s.stages)).items():
        g.add_metric([st], n)
    before.append(g)
    before.append(GaugeMetricFamily("k3rollout_batches_planned", "Batches in the plan", value=len(res["batches"])))
    before.append(GaugeMetricFamily("k3rollout_batches_done", "Batches that ended (passed, failed or rolled back)",
                                    value=sum(1 for b in res["batches"] if b not in ("running", "not_started"))))
    g = GaugeMetricFamily("k3rollout_batches", f"Batches by status ({RESULT}'s)", labels=["status"])
    for st, n in _counts(res["batches"], BATCH_STATES).items():
        g.add_metric([st], n)
    before.append(g)
    after: list[Metric] = []
    h = HistogramMetricFamily("k3rollout_stage_duration_seconds", "Stages that passed, by stage and hardware class",
                              labels=["stage", "hardware_class"])
    for stage, hw, counts, k, total in s.histogram():
        buckets = [(str(b), float(c)) for b, c in zip(BUCKETS, counts, strict=True)] + [("+Inf", float(k))]
        h.add_metric([stage, hw], buckets, total)
    after.append(h)
    c = CounterMetricFamily("k3rollout_failures", "Nodes that failed a stage, by triage category",
                            labels=["category"])
    for cat, n in sorted(_counts([x or "untriaged" for x in res["failures"]], ()).items()):
        c.add_metric([cat], n)
    after.append(c)
    after.append(CounterMetricFamily("k3rollout_rollbacks", "Node rollbacks started (every attempt)",
                                     value=res["rollbacks"]))
    after.append(GaugeMetricFamily("k3rollout_pauses_waiting", "Gates waiting for `k3rollout approve`",
                                   value=len(s.open_pauses())))
    return before, after


def _records(s: LiveRun) -> Metric:
    return GaugeMetricFamily("k3rollout_journal_records", "Journal records folded into these figures", value=s.seq)


def _times(s: LiveRun, now: float) -> Iterator[Metric]:
    v = s.view
    for name, what, value in (
            ("k3rollout_start_timestamp_seconds", "When the run started", s.started_at()),
            ("k3rollout_planned_end_timestamp_seconds", "The run's start plus the plan's estimate", s.planned_end()),
            ("k3rollout_estimated_end_timestamp_seconds",
             "When the run is expected to end, from the stage times measured so far (its end, once it ended)",
             s.estimated_end(now)),
            ("k3rollout_window_end_timestamp_seconds", "The end of the booked window", v.window_end),
            ("k3rollout_last_record_timestamp_seconds", "When the journal's last record was written", ts(v.last_ts))):
        if value is not None:
            yield GaugeMetricFamily(name, what, value=value)
    if v.started is not None:
        yield GaugeMetricFamily("k3rollout_remaining_seconds", "The estimate of the run's time left",
                                value=s.remaining(now))


class RunCollector(Collector):
    """Asks ``source`` for the current state each time it is collected. The families that
    change only with the records are kept from one scrape to the next until a record the view
    shows comes (a run waiting on a reboot or an approval); the times are worked out anew."""

    def __init__(self, source: Callable[[], AbstractContextManager[LiveRun]], now: Callable[[], float] = time.time):
        self.source = source
        self.now = now
        self._kept: tuple[LiveRun, int, tuple[list[Metric], list[Metric]]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self.source() as s:
            kept = self._kept
            if kept is None or kept[0] is not s or kept[1] != s.shown:
                kept = self._kept = (s, s.shown, _of_records(s))
            out = families(s, self.now(), kept[2])
        yield from out


def registry(source: Callable[[], AbstractContextManager[LiveRun]],
             now: Callable[[], float] = time.time) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RunCollector(source, now))
    return reg


def text(reg: CollectorRegistry) -> str:
    return generate_latest(reg).decode("utf-8")


def write_textfile(path: str, reg: CollectorRegistry) -> None:
    """For node_exporter's textfile collector: written beside ``path`` and renamed over it."""
    write_to_textfile(path, reg)


def serve(port: int, address: str, reg: CollectorRegistry) -> tuple[Any, int]:
    """Serve ``/metrics`` on a daemon thread; the server and the port it bound (``port`` 0:
    any free one). A scraper that goes away costs the server one request, never the run."""
    server, _thread = start_http_server(port, addr=address, registry=reg)
    return server, int(server.server_address[1])
