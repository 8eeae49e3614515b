"""A run as Prometheus metrics, with the official client (prometheus_client).

One collector turns a ``LiveRun`` into metric families each time it is asked: served over
HTTP while the run goes (``run``/``resume``/``rollback --metrics-port``), or written once
for node_exporter's textfile collector (``k3rollout metrics RUN_DIR --textfile PATH``,
replaced atomically: the client writes a temporary file beside it and renames it). Counts
of nodes, replicas, batches, failures and rollbacks come from ``build_result``, the very
function that writes result.json, so at the end they are result.json's figures.

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

from k3rollout.live.state import LiveRun, ts
from k3rollout.report.result import build_result
from k3rollout.runlog.rundir import RESULT

NODE_STATES = ("upgraded", "rolled_back", "rollback_failed", "failed", "skipped", "pending", "quarantined")
REPLICA_STATES = ("serving", "rolled_back", "failed", "pending")
BATCH_STATES = ("passed", "failed", "rolled_back", "running", "not_started")
RUN_STATES = ("running", "completed", "halted", "aborted", "no_change", "rolled_back")
# stage durations run from seconds (a cordon) to an hour and more (a driver with reboot)
BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


def _counts(values: list[str], names: tuple[str, ...]) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def families(s: LiveRun, now: float) -> Iterator[Metric]:
    v = s.view
    res = build_result(v)
    g = GaugeMetricFamily("k3rollout_run_status", "1 for the run's status, 0 for the others", labels=["status"])
    for st in sorted({*RUN_STATES, v.status}):
        g.add_metric([st], 1.0 if st == v.status else 0.0)
    yield g
    g = GaugeMetricFamily("k3rollout_nodes", f"Nodes of the plan by state ({RESULT}'s final)", labels=["state"])
    for st, n in _counts([x["final"] for x in res["nodes"].values()], NODE_STATES).items():
        g.add_metric([st], n)
    yield g
    if res.get("replicas"):
        g = GaugeMetricFamily("k3rollout_replicas", f"Replicas of the plan by state ({RESULT}'s final)",
                              labels=["state"])
        for st, n in _counts([x["final"] for x in res["replicas"].values()], REPLICA_STATES).items():
            g.add_metric([st], n)
        yield g
    units = s.count(s.groups())
    g = GaugeMetricFamily("k3rollout_units", "The plan's units (replicas or nodes) by progress",
                          labels=["unit", "state"])
    for st, n in (("done", units.done), ("in_flight", units.in_flight),
                  ("not_started", units.total - units.done - units.in_flight)):
        g.add_metric([s.unit, st], n)
    yield g
    g = GaugeMetricFamily("k3rollout_nodes_in_stage", "Nodes in flight by their current stage", labels=["stage"])
    for st, n in _counts([x.stage or "-" for x in s.in_flight()], tuple(s.stages)).items():
        g.add_metric([st], n)
    yield g
    yield GaugeMetricFamily("k3rollout_batches_planned", "Batches in the plan", value=len(res["batches"]))
    yield GaugeMetricFamily("k3rollout_batches_done", "Batches that ended (passed, failed or rolled back)",
                            value=sum(1 for b in res["batches"] if b["status"] not in ("running", "not_started")))
    g = GaugeMetricFamily("k3rollout_batches", f"Batches by status ({RESULT}'s)", labels=["status"])
    for st, n in _counts([b["status"] for b in res["batches"]], BATCH_STATES).items():
        g.add_metric([st], n)
    yield g
    yield from _times(s, now)
    h = HistogramMetricFamily("k3rollout_stage_duration_seconds", "Stages that passed, by stage and hardware class",
                              labels=["stage", "hardware_class"])
    for (stage, hw), xs in sorted(s.samples.items()):
        buckets = [(str(b), float(sum(1 for x in xs if x <= b))) for b in BUCKETS] + [("+Inf", float(len(xs)))]
        h.add_metric([stage, hw], buckets, sum(xs))
    yield h
    c = CounterMetricFamily("k3rollout_failures", "Nodes that failed a stage, by triage category",
                            labels=["category"])
    for cat, n in sorted(_counts([x["triage"] or "untriaged" for x in res["nodes"].values()
                                  if x["failed_stage"]], ()).items()):
        c.add_metric([cat], n)
    yield c
    yield CounterMetricFamily("k3rollout_rollbacks", "Node rollbacks started (every attempt)",
                              value=sum(x["rollback"]["attempts"] for x in res["nodes"].values() if x["rollback"]))
    yield GaugeMetricFamily("k3rollout_pauses_waiting", "Gates waiting for `k3rollout approve`",
                            value=len(s.open_pauses()))
    yield GaugeMetricFamily("k3rollout_journal_records", "Journal records folded into these figures", value=s.seq)


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
    """Asks ``source`` for the current state each time it is collected."""

    def __init__(self, source: Callable[[], AbstractContextManager[LiveRun]], now: Callable[[], float] = time.time):
        self.source = source
        self.now = now

    def collect(self) -> Iterator[Metric]:
        with self.source() as s:
            out = list(families(s, self.now()))
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
