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
