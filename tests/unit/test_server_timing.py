"""A ladder level's client timings against the server's histograms (checks/server_timing.py)."""

from types import SimpleNamespace

from k3rollout.checks.server_timing import ABS_TOL_S, timing_check
from k3rollout.stages.features import concurrency_step
from k3rollout.transport.http import HttpResult


def _metrics(ttft: list[float], e2e: list[float]) -> str:
    out = []
    for name, values in (("vllm:time_to_first_token_seconds", ttft), ("vllm:e2e_request_latency_seconds", e2e)):
        out += [f"# HELP {name} h", f"# TYPE {name} histogram"]
        for le in ("0.1", "0.5", "1.0", "5.0", "+Inf"):
            n = sum(1 for v in values if le == "+Inf" or v <= float(le))
            out.append(f'{name}_bucket{{engine="0",le="{le}",model_name="m"}} {float(n)}')
        out += [f'{name}_count{{engine="0",model_name="m"}} {float(len(values))}',
                f'{name}_sum{{engine="0",model_name="m"}} {float(sum(values))}']
    return "\n".join(out) + "\n"


BEFORE = _metrics([0.05], [0.4])


def test_client_and_server_agree_within_the_tolerance():
    after = _metrics([0.05, 0.2, 0.2], [0.4, 0.9, 0.9])
    check = timing_check([0.21, 0.22], [0.93, 0.95], BEFORE, after)
    assert check["agree"] is True and check["reason"] == ""
    assert check["ttft"]["server_n"] == 2 and check["ttft"]["server_mean_s"] == 0.2
    assert check["e2e"]["server_p95_le_s"] == 1.0 and check["tolerance"]["abs_s"] == ABS_TOL_S


def test_a_client_slower_than_the_server_beyond_the_tolerance_is_a_measurement_problem():
    after = _metrics([0.05, 0.2, 0.2], [0.4, 0.9, 0.9])
    check = timing_check([0.2, 0.2], [1.6, 1.7], BEFORE, after)      # 0.75 s the server never saw
    assert check["agree"] is False and check["ttft"]["agree"] is True and check["e2e"]["agree"] is False
    assert "e2e: client mean 1.65s vs server 0.9000s" in check["reason"]


def test_no_histograms_leave_the_question_open():
    check = timing_check([0.2], [0.9], "", "")
    assert check["agree"] is None and check["ttft"]["reason"] == "the server's histogram did not move"


# The ladder row's verdict on either answer (stages/features.py concurrency_step), with the
# controller's requests answered by a fake node: the client's figures and the server's
# histograms are given, so the row's logic is held apart from this machine's load.
class _Node:
    def __init__(self, client: list[tuple[float, float]], server: list[tuple[float, float]], failed: int = 0):
        self.metrics = [BEFORE, _metrics([0.05] + [t for t, _ in server], [0.4] + [e for _, e in server])]
        self.results = [HttpResult("POST", "/v1/chat/completions", status=200, elapsed_s=e, ttft_s=t,
                                   ttft_channel="reasoning") for t, e in client]
        self.results += [HttpResult("POST", "/v1/chat/completions", status=500, error="HTTP 500")] * failed
        self.workload = SimpleNamespace(server_restarts=lambda ctx, name, step: ("running", 0))

    def api(self, name, method, port, path, body=None, **kw):
        return HttpResult(method, path, status=200, text=self.metrics.pop(0))

    def api_many(self, name, port, path, bodies, **kw):
        assert len(bodies) == len(self.results)
        return self.results

    def read_gpu(self):
        return {"gpu_mem_used_mib": 1000, "gpu_mem_total_mib": 80000}


PARAMS = SimpleNamespace(model="k3", ladder_max_tokens=64, request_timeout=60, port=8000, max_error_rate=0.0,
                         p95_latency_max_s=1.0, ttft_p95_max_s=0.5, max_restarts=0, gpu_mem_max_pct=None)


def test_a_slow_level_the_server_confirms_fails_on_the_figures():
    slow = [(0.6, 1.5), (0.6, 1.6)]
    row = concurrency_step(_Node(slow, slow), PARAMS, 2, 0)
    assert row["server_timing"]["agree"] is True and "measurement_problem" not in row
    assert row["passed"] is False and "inconclusive" not in row
    assert row["reason"] == "p95 latency 1.6s > 1.0s; p95 time to first token 0.6s > 0.5s", row


def test_a_slow_level_only_the_client_saw_is_a_measurement_problem_for_a_person():
    # the client's figures are 1.2 s behind the server's own: the client timed itself
    row = concurrency_step(_Node([(0.6, 1.5), (0.6, 1.6)], [(0.1, 0.3), (0.1, 0.4)]), PARAMS, 2, 0)
    assert row["server_timing"]["agree"] is False
    assert row["measurement_problem"] == row["server_timing"]["reason"] and "e2e: client mean" in row["reason"]
    assert row["passed"] is False and row["inconclusive"] is True
    assert row["reason"].startswith("measurement problem, client and server timings disagree"), row
    assert "not judged on the client's figures: p95 latency 1.6s > 1.0s" in row["reason"]


def test_a_measurement_problem_does_not_excuse_failed_requests():
    row = concurrency_step(_Node([(0.6, 1.5), (0.6, 1.6)], [(0.1, 0.3), (0.1, 0.4)], failed=1), PARAMS, 3, 0)
    assert row["errors"] == 1 and row["passed"] is False and row["inconclusive"] is False
    assert row["reason"].startswith("1/3 requests failed"), row


def test_a_fast_level_with_a_measurement_problem_passes_and_says_so():
    row = concurrency_step(_Node([(0.3, 0.9), (0.3, 0.9)], [(0.01, 0.2), (0.01, 0.2)]), PARAMS, 2, 0)
    assert row["passed"] is True and row["measurement_problem"] and "inconclusive" not in row, row
