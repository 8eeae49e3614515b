"""Journal timestamps: iso_utc gives datetime's own text for every instant (its rounding of
microseconds, half to even, then cut to milliseconds), across second boundaries too."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from k3rollout.engine.clock import iso_utc


def _reference(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False))
def test_iso_utc_is_datetimes_text(t):
    assert iso_utc(t) == _reference(t)


def test_iso_utc_near_second_and_millisecond_boundaries():
    rng = random.Random(7)
    for _ in range(20000):
        whole = rng.randrange(0, 4_000_000_000)
        frac = rng.choice([0.0, 0.0005, 0.9995, 0.9999995, 0.9999996, 0.4999995, 0.0000005, 0.001, 0.999])
        t = whole + frac + rng.choice([0.0, 1e-7, -1e-7, 1e-9])
        if t >= 0:
            assert iso_utc(t) == _reference(t), t
    # out of the cached range: datetime's own way
    assert iso_utc(253402300799.5) == _reference(253402300799.5)
