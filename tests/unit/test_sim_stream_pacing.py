"""The simulated vLLM server's stream pacing (k3sim/netd_daemon.py ``Daemon.pace``), on a
clock the test drives: the same events and bytes whether its event loop runs on time or
late, each chunk written at its due time or after, never before, and a late loop does not
draw the stream out by its lateness once per token."""

from __future__ import annotations

import asyncio

from k3sim.netd_daemon import Daemon


class Writer:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.writes = clock, []

    def write(self, data: bytes) -> None:
        self.writes.append((self.clock.t, data))

    async def drain(self) -> None:
        return None


class Clock:
    """Time that moves only when the code under test sleeps: by what it asked, plus ``late``."""

    def __init__(self, late: float) -> None:
        self.t, self.late = 100.0, late

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.t += s + self.late


def _stream(n: int, per: float, late: float, tick: float = 0.0) -> tuple[Writer, list[float]]:
    clock = Clock(late)
    w = Writer(clock)
    firsts: list[float] = []
    chunks = [{"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]} for i in range(n)]
    asyncio.run(Daemon.pace(w, chunks, per, lambda: firsts.append(clock.t), clock=clock, sleep=clock.sleep,
                            tick=tick))
    return w, firsts


def _events(w: Writer) -> list[bytes]:
    body = b"".join(d for _, d in w.writes)
    out, rest = [], body
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        k = int(size, 16)
        if k == 0:
            break
        out.append(rest[:k])
        rest = rest[k + 2:]
    return out


def test_on_time_each_chunk_is_its_own_write_at_its_due_time():
    w, firsts = _stream(5, 0.01, 0.0)
    assert [round(t - 100, 6) for t, _ in w.writes] == [0.0, 0.01, 0.02, 0.03, 0.04, 0.05]
    assert firsts == [w.writes[1][0]]
    ev = _events(w)
    assert len(ev) == 6 and ev[-1] == b"data: [DONE]\n\n" and ev[1].startswith(b'data: {"choices"')
    assert w.writes[-1][1].endswith(b"0\r\n\r\n")


def test_a_late_loop_sends_the_same_bytes_in_fewer_writes_and_ends_near_its_due_time():
    on_time, _ = _stream(50, 0.002, 0.0)
    late, firsts = _stream(50, 0.002, 0.009)       # every wake-up 9 ms late: 4.5 tokens' worth
    assert _events(late) == _events(on_time)
    assert b"".join(d for _, d in late.writes) == b"".join(d for _, d in on_time.writes)
    assert len(late.writes) < len(on_time.writes) / 3
    # no chunk before its due time; the last within one wake-up's lateness of [DONE]'s
    t0, sent = 100.0, 0
    for t, data in late.writes:
        assert t >= t0 + sent * 0.002 - 1e-9
        sent += data.count(b"data: ")
    assert late.writes[-1][0] <= t0 + 50 * 0.002 + 0.009 + 0.002 + 1e-9
    assert len(firsts) == 1 and firsts[0] >= t0 + 0.002


def test_with_a_tick_the_first_token_and_the_end_keep_their_times_and_the_rest_come_in_bursts():
    plain, firsts_plain = _stream(50, 0.002, 0.0)
    ticked, firsts = _stream(50, 0.002, 0.0, tick=0.02)
    assert _events(ticked) == _events(plain)
    assert firsts == firsts_plain == [100.0 + 0.002]
    assert ticked.writes[-1][0] == plain.writes[-1][0] == 100.0 + 50 * 0.002
    times = [t for t, _ in ticked.writes]
    assert len(times) <= 2 + 50 * 0.002 / 0.02 + 1
    assert all(b - a >= 0.02 - 1e-9 for a, b in zip(times[1:-1], times[2:-1], strict=False))
    sent = 0
    for t, data in ticked.writes:              # never a chunk before its due time
        assert t >= 100.0 + sent * 0.002 - 1e-9
        sent += data.count(b"data: ")


def test_a_single_chunk_has_no_first_token_and_ends_with_done():
    w, firsts = _stream(1, 0.01, 0.0)
    assert firsts == [] and _events(w)[-1] == b"data: [DONE]\n\n"
