from __future__ import annotations

import pytest

from cbop.informers import Backoff
from cbop_testing.clock import FakeClock


def test_schedule_doubles_from_0_8_to_a_30_second_cap() -> None:
    clock = FakeClock()
    b = Backoff(clock, rand=lambda: 0.0)
    delays = [b.next_delay() for _ in range(9)]
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0])


def test_jitter_shrinks_each_delay_by_at_most_a_quarter_and_never_exceeds_the_cap() -> None:
    clock = FakeClock()
    low = Backoff(clock, rand=lambda: 0.999999)
    assert [round(low.next_delay(), 4) for _ in range(8)] == pytest.approx(
        [0.6, 1.2, 2.4, 4.8, 9.6, 19.2, 22.5, 22.5], abs=1e-3
    )
    import random

    rng = random.Random(7)
    b = Backoff(clock, rand=rng.random)
    seen = [b.next_delay() for _ in range(40)]
    assert all(0.6 <= d <= 30.0 for d in seen)
    capped = seen[10:]
    assert all(22.5 <= d <= 30.0 for d in capped)
    assert len({round(d, 6) for d in capped}) > 20  # spread out at the cap too


def test_schedule_resets_after_two_minutes_of_health() -> None:
    clock = FakeClock()
    b = Backoff(clock, rand=lambda: 0.0)
    for expected in (0.8, 1.6, 3.2):
        assert b.next_delay() == pytest.approx(expected)
        clock.step(expected)  # the wait happens
    # Healthy for a little under 2 minutes: the schedule continues.
    clock.step(119.0)
    assert b.next_delay() == pytest.approx(6.4)
    clock.step(6.4)
    # Healthy for 2 minutes after the end of the last wait: back to the start.
    clock.step(120.0)
    assert b.next_delay() == pytest.approx(0.8)


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="invalid"):
        Backoff(FakeClock(), jitter=1.0)
    with pytest.raises(ValueError, match="invalid"):
        Backoff(FakeClock(), initial=0)
