"""A ladder level's client timings against the server's histograms (checks/server_timing.py)."""

from k3rollout.checks.server_timing import ABS_TOL_S, timing_check


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
