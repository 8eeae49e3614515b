"""A load-ladder level's client timings checked against the server's own histograms.

vLLM 0.33 observes every request's time to first token and end-to-end latency, from the
request's arrival at the API server, in ``vllm:time_to_first_token_seconds`` and
``vllm:e2e_request_latency_seconds`` (vllm/v1/metrics/loggers.py; the times in
vllm/v1/metrics/stats.py). The change of a histogram's sum and count across one level is the
server's mean for that level's requests. The client's mean may exceed it by the network and
the HTTP layers, never by much: a gap beyond the tolerance means the client measured itself
(threads, locks, a loaded controller), which is a measurement problem, not a server failure.
Pure: the /metrics texts are read by the caller.
"""

from __future__ import annotations

from typing import Any

from k3rollout.checks.parsers import ParseError, parse_histogram

TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
# the stated tolerance: the client's mean may differ from the server's by this much
ABS_TOL_S = 0.1
REL_TOL = 0.25


def histograms(text: str) -> dict[str, dict[str, Any] | None]:
    try:
        return {name: parse_histogram(text, name) for name in (TTFT, E2E)}
    except ParseError:
        return {TTFT: None, E2E: None}


def _delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    was = dict(before["buckets"])
    return {"count": after["count"] - before["count"], "sum": after["sum"] - before["sum"],
            "buckets": [(le, n - was.get(le, 0.0)) for le, n in after["buckets"]]}


def bucket_quantile(delta: dict[str, Any], q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (Prometheus' resolution)."""
    if delta["count"] <= 0:
        return None
    for le, n in delta["buckets"]:
        if n >= q * delta["count"]:
            return float(le)
    return None


def compare(client: list[float], delta: dict[str, Any] | None) -> dict[str, Any]:
    """The client's mean against the server's mean over the same requests."""
    out: dict[str, Any] = {"client_n": len(client), "client_mean_s": round(sum(client) / len(client), 4)
                           if client else None}
    if delta is None or delta["count"] <= 0:
        return {**out, "server_n": 0, "agree": None, "reason": "the server's histogram did not move"}
    server_mean = delta["sum"] / delta["count"]
    tol = max(ABS_TOL_S, REL_TOL * server_mean)
    out.update(server_n=int(delta["count"]), server_mean_s=round(server_mean, 4),
               server_p95_le_s=bucket_quantile(delta, 0.95), tolerance_s=round(tol, 4))
    if out["client_mean_s"] is None:
        return {**out, "agree": None, "reason": "no client figure"}
    gap = out["client_mean_s"] - server_mean
    out["gap_s"] = round(gap, 4)
    agree = abs(gap) <= tol
    reason = "" if agree else (f"client mean {out['client_mean_s']}s vs server {server_mean:.4f}s "
                               f"(gap {gap:+.4f}s > {tol:.4f}s)")
    if int(delta["count"]) != len(client):
        reason = (reason + "; " if reason else "") + f"server counted {int(delta['count'])} requests, client {len(client)}"
    return {**out, "agree": agree, "reason": reason}


def timing_check(client_ttft: list[float], client_e2e: list[float], before: str, after: str) -> dict[str, Any]:
    """One level's agreement: ``{"ttft", "e2e", "tolerance", "agree", "reason"}``; ``agree`` is
    None when the server gave no histogram to compare with."""
    b, a = histograms(before), histograms(after)
    rows = {"ttft": compare(client_ttft, _delta(b[TTFT], a[TTFT])), "e2e": compare(client_e2e, _delta(b[E2E], a[E2E]))}
    verdicts = [r["agree"] for r in rows.values() if r["agree"] is not None]
    agree = None if not verdicts else all(verdicts)
    reason = "; ".join(f"{k}: {r['reason']}" for k, r in rows.items() if r.get("agree") is False)
    return {**rows, "tolerance": {"abs_s": ABS_TOL_S, "rel": REL_TOL}, "agree": agree, "reason": reason}
