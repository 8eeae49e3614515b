"""The step runner's settle path, through the strict fake executor."""

from __future__ import annotations

from k3rollout.errors import ConnectionLost


def test_a_once_step_whose_connection_dropped_and_did_not_take_effect_is_probed_once_and_run_again(
        stage_harness, fake_executor):
    """The connection drops under a destructive step; the probe says it did not take
    effect, so the step runs once more. The probe runs once and the journal holds one
    `step_settled` record for it (the re-run is not settled a second time)."""
    h = stage_harness()
    ctx = h.ctx("driver_upgrade")
    probes: list[dict] = []

    def probe(_ctx, meta):
        probes.append(meta)
        return False

    fake_executor.expect(["apt-mark", "hold", "x"], raises=ConnectionLost("connection lost", host="gpu-01"))
    fake_executor.expect_wait(0.1)
    fake_executor.expect(["apt-mark", "hold", "x"], stdout="x set on hold.\n")
    res = h.engine.steps.step(ctx, "hold", ["apt-mark", "hold", "x"], once=True, probe=probe, meta={"pkg": "x"})
    assert res.rc == 0 and res.stdout == "x set on hold.\n"
    assert probes == [{"pkg": "x"}]
    settled = h.steps("step_settled")
    assert [(r["step"], r["took_effect"], r["how"]) for r in settled] == \
        [("hold", False, "probe after the connection dropped")]
    assert [r["type"] for r in h.journal() if r.get("step") == "hold"] == \
        ["step_started", "step_error", "step_settled", "step_started", "step_done"]


def test_ladder_streams_wait_for_the_process_budget_and_a_level_above_it_runs_alone():
    """Two levels of 64 fill a budget of 128; a third waits until one ends. A level larger
    than the budget still runs, alone, once nothing else is open."""
    import threading

    from k3rollout.engine.steps import StreamBudget

    budget = StreamBudget(128)
    budget.acquire(64)
    budget.acquire(64)
    third = threading.Event()
    waiter = threading.Thread(target=lambda: (budget.acquire(64), third.set()), daemon=True)
    waiter.start()
    assert not third.wait(0.2)            # full: the third level has not started
    budget.release(64)
    assert third.wait(60)                 # one ended: it starts
    budget.release(64)
    budget.release(64)
    assert budget.acquire(512) >= 0.0     # nothing open: a level above the budget runs
    big_done = threading.Event()
    blocked = threading.Thread(target=lambda: (budget.acquire(1), big_done.set()), daemon=True)
    blocked.start()
    assert not big_done.wait(0.2)         # and nothing joins it until it ends
    budget.release(512)
    assert big_done.wait(60)
