"""InflightLimit: a slow start, then AIMD on requests in flight after a 429 (fake clock).

Most tests start without the slow start (``initial=None``) to look at what follows a
``429``; the slow start has its own tests at the end.
"""

from __future__ import annotations

import threading

import pytest

from cbop.kube.inflight import DEFAULT_CEILING, DEFAULT_INITIAL, InflightLimit
from cbop_testing.clock import FakeClock

PATIENCE = 5.0


def limit_of(clock: FakeClock, *, probe: float = 2.0, recovery: float = 30.0) -> InflightLimit:
    return InflightLimit(clock=clock, initial=None, probe=probe, recovery=recovery)


def _send_one(gate: InflightLimit) -> tuple[threading.Thread, threading.Event]:
    """Start a thread that acquires one request (and keeps it); the event is set once it has."""
    sent = threading.Event()

    def send() -> None:
        gate.acquire()
        sent.set()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, sent


def test_without_a_slow_start_unlimited_until_a_429() -> None:
    gate = limit_of(FakeClock(0.0))
    cuts = [gate.acquire() for _ in range(100)]
    assert gate.limit is None
    assert gate.in_flight == 100
    for cut in cuts:
        gate.release(cut, throttled=False)
    assert gate.limit is None
    assert gate.in_flight == 0


def test_a_429_halves_the_requests_in_flight_once_per_cut() -> None:
    """32 requests turned away together cut the limit once, to 16; a 429 to a request
    sent after that cut halves it again."""
    gate = limit_of(FakeClock(0.0))
    cuts = [gate.acquire() for _ in range(32)]
    for cut in cuts:
        gate.release(cut, throttled=True)
    assert gate.limit == 16
    later = [gate.acquire() for _ in range(16)]
    gate.release(later[0], throttled=True)
    assert gate.limit == 8
    for cut in later[1:]:
        gate.release(cut, throttled=True)
    assert gate.limit == 8
    one = gate.acquire()
    gate.release(one, throttled=True)
    assert gate.limit == 1  # half of the 1 in flight, rounded up, at least 1


def test_a_full_limit_makes_the_next_request_wait_for_a_release() -> None:
    clock = FakeClock(0.0)
    gate = limit_of(clock)
    first, second = gate.acquire(), gate.acquire()
    gate.release(first, throttled=True)
    assert gate.limit == 1
    sent = threading.Event()

    def send() -> None:
        gate.release(gate.acquire(), throttled=False)
        sent.set()

    thread = threading.Thread(target=send)
    thread.start()
    assert clock.wait_for_waiter(timeout=PATIENCE)  # parked: one is in flight already
    assert not sent.is_set()
    gate.release(second, throttled=False)
    assert sent.wait(PATIENCE)
    thread.join(PATIENCE)


def test_the_limit_grows_by_one_per_probe_period_while_it_is_used() -> None:
    clock = FakeClock(0.0)
    gate = limit_of(clock, probe=2.0, recovery=30.0)
    cuts = [gate.acquire() for _ in range(4)]
    gate.release(cuts[0], throttled=True)  # limit 2 (half of 4)
    for cut in cuts[1:]:
        gate.release(cut, throttled=False)
    assert gate.limit == 2
    # Used to the full, but within the probe period: no growth.
    clock.step(1.0)
    a, b = gate.acquire(), gate.acquire()
    gate.release(a, throttled=False)
    gate.release(b, throttled=False)
    assert gate.limit == 2
    # Not used to the full: no growth even after the probe period.
    clock.step(1.5)
    gate.release(gate.acquire(), throttled=False)
    assert gate.limit == 2
    # Used to the full after the probe period: one more.
    a, b = gate.acquire(), gate.acquire()
    gate.release(a, throttled=False)
    assert gate.limit == 3
    gate.release(b, throttled=False)
    assert gate.limit == 3  # at most one per probe period


def test_the_limit_is_lifted_after_the_recovery_period_without_a_429() -> None:
    clock = FakeClock(0.0)
    gate = limit_of(clock, probe=2.0, recovery=30.0)
    gate.release(gate.acquire(), throttled=True)
    assert gate.limit == 1
    clock.step(29.0)
    assert gate.limit == 1
    clock.step(1.0)
    assert gate.limit is None
    cuts = [gate.acquire() for _ in range(10)]
    assert gate.in_flight == 10
    for cut in cuts:
        gate.release(cut, throttled=False)


def test_a_waiter_is_let_through_when_the_limit_is_lifted() -> None:
    """Requests stuck in flight do not hold the others back past the recovery period."""
    clock = FakeClock(0.0)
    gate = limit_of(clock, probe=2.0, recovery=30.0)
    stuck = gate.acquire()
    gate.release(gate.acquire(), throttled=True)
    assert gate.limit == 1
    thread, sent = _send_one(gate)
    assert clock.wait_for_waiter(deadline=30.0, timeout=PATIENCE)
    assert not sent.is_set()
    clock.step(30.0)
    assert sent.wait(PATIENCE)
    thread.join(PATIENCE)
    gate.release(stuck, throttled=False)


@pytest.mark.parametrize(("probe", "recovery"), [(0.0, 30.0), (-1.0, 30.0), (5.0, 5.0)])
def test_bad_periods_are_refused(probe: float, recovery: float) -> None:
    with pytest.raises(ValueError, match="probe < recovery"):
        InflightLimit(clock=FakeClock(0.0), probe=probe, recovery=recovery)


def _fill(gate: InflightLimit, n: int) -> list[int]:
    return [gate.acquire() for _ in range(n)]


def _turn_one_away(gate: InflightLimit, n: int) -> None:
    """``n`` requests in flight; the first is answered 429, the rest 200."""
    cuts = _fill(gate, n)
    gate.release(cuts[0], throttled=True)
    for cut in cuts[1:]:
        gate.release(cut, throttled=False)


def _seconds_to_growth(gate: InflightLimit, clock: FakeClock) -> float:
    """Use the limit to the full every 0.5 s until it grows; return the seconds taken."""
    before, waited = gate.limit, 0.0
    while gate.limit == before:
        assert before is not None
        assert waited < 60.0
        clock.step(0.5)
        waited += 0.5
        for cut in _fill(gate, before):
            gate.release(cut, throttled=False)
    return waited


def test_a_429_after_a_growth_steps_back_by_one_and_probes_less_often() -> None:
    """4 workers against a level of 3 seats: the limit settles at 3 instead of falling
    to 2 at every probe, and a level that stays full is probed ever less often."""
    clock = FakeClock(0.0)
    gate = limit_of(clock, probe=2.0, recovery=30.0)
    _turn_one_away(gate, 4)
    assert gate.limit == 2
    assert _seconds_to_growth(gate, clock) == 2.0
    periods = []
    for _ in range(5):
        periods.append(_seconds_to_growth(gate, clock))
        assert gate.limit == 4
        _turn_one_away(gate, 4)  # the probe: the level is full
        assert gate.limit == 3, "back to what the level took, not halved"
    assert periods == [2.0, 4.0, 8.0, 15.0, 15.0]  # doubled, at most recovery / 2
    assert gate.limit == 3  # never lifted: a probe is turned away every 15 s


def test_a_429_at_a_limit_that_held_halves_it_and_resets_the_probe_period() -> None:
    clock = FakeClock(0.0)
    gate = limit_of(clock, probe=2.0, recovery=30.0)
    _turn_one_away(gate, 8)
    assert gate.limit == 4
    _seconds_to_growth(gate, clock)
    _turn_one_away(gate, 5)  # a failed probe: back to 4, probe period 4 s
    assert gate.limit == 4
    clock.step(1.0)
    _turn_one_away(gate, 4)  # someone else took seats: 4 no longer holds
    assert gate.limit == 2
    assert _seconds_to_growth(gate, clock) == 2.0


# ------------------------------------------------------------------ the slow start


def _answer_one_and_refill(gate: InflightLimit, cuts: list[int]) -> None:
    """One request in flight is answered 200 and workers with work waiting fill the limit."""
    gate.release(cuts.pop(0), throttled=False)
    while gate.limit is not None and gate.in_flight < gate.limit:
        cuts.append(gate.acquire())


def test_the_slow_start_doubles_the_limit_every_round_trip_then_lifts_it() -> None:
    gate = InflightLimit(clock=FakeClock(0.0))
    assert gate.limit == DEFAULT_INITIAL == 8
    cuts = [gate.acquire() for _ in range(8)]
    for _ in range(8):  # one round trip: each of the 8 answered, the limit kept full
        _answer_one_and_refill(gate, cuts)
    assert gate.limit == 16
    answers = 0
    while gate.limit is not None:
        _answer_one_and_refill(gate, cuts)
        answers += 1
    assert answers == DEFAULT_CEILING - 16  # one more per answer, lifted at 64
    more = [gate.acquire() for _ in range(100)]  # unlimited: none of these blocks
    assert gate.in_flight == len(cuts) + 100
    for cut in cuts + more:
        gate.release(cut, throttled=False)
    assert gate.limit is None


def test_the_slow_start_does_not_grow_a_limit_that_is_not_used_to_the_full() -> None:
    gate = InflightLimit(clock=FakeClock(0.0))
    for _ in range(50):
        a, b = gate.acquire(), gate.acquire()
        gate.release(a, throttled=False)
        gate.release(b, throttled=False)
    assert gate.limit == 8


def test_32_workers_starting_at_once_are_held_to_8_and_a_429_ends_the_slow_start() -> None:
    """A level of 3 seats turns away 5 of the first 8, not 29 of 32; the limit is then
    halved once and grows only by the probe."""
    clock = FakeClock(0.0)
    gate = InflightLimit(clock=clock, probe=2.0, recovery=30.0)
    cuts = [gate.acquire() for _ in range(8)]
    waiting = threading.Thread(target=lambda: gate.release(gate.acquire(), throttled=False))
    waiting.start()
    assert clock.wait_for_waiter(timeout=PATIENCE)  # the 9th waits
    for cut in cuts[3:]:
        gate.release(cut, throttled=True)
    assert gate.limit == 4  # half of the 8 in flight, once for the 5 turned away together
    for cut in cuts[:3]:
        gate.release(cut, throttled=False)
    waiting.join(PATIENCE)
    assert not waiting.is_alive()
    for _ in range(10):  # used to the full within the probe period: no slow-start growth
        four = _fill(gate, 4)
        for cut in four:
            gate.release(cut, throttled=False)
    assert gate.limit == 4
    assert _seconds_to_growth(gate, clock) == 2.0


def test_a_request_waits_for_the_slow_start_at_most_the_probe_period() -> None:
    """8 slow requests (large lists, say) in flight: a 9th goes after 2 s, the limit one
    higher, instead of waiting for one of them to finish."""
    clock = FakeClock(0.0)
    gate = InflightLimit(clock=clock, probe=2.0, recovery=30.0)
    slow = [gate.acquire() for _ in range(8)]
    thread, sent = _send_one(gate)
    assert clock.wait_for_waiter(deadline=2.0, timeout=PATIENCE)
    clock.step(1.5)
    assert not sent.is_set()
    clock.step(0.5)
    assert sent.wait(PATIENCE)
    thread.join(PATIENCE)
    assert gate.limit == 9
    assert gate.in_flight == 9
    for cut in slow:
        gate.release(cut, throttled=False)


@pytest.mark.parametrize(("initial", "ceiling"), [(0, 64), (64, 64), (65, 64)])
def test_bad_slow_start_bounds_are_refused(initial: int, ceiling: int) -> None:
    with pytest.raises(ValueError, match="initial < ceiling"):
        InflightLimit(clock=FakeClock(0.0), initial=initial, ceiling=ceiling)


def test_a_request_failed_without_an_answer_does_not_grow_the_limit() -> None:
    """A refused connection or a timeout says nothing about the level's seats."""
    gate = InflightLimit(clock=FakeClock(0.0))
    cuts = [gate.acquire() for _ in range(8)]
    for cut in cuts:
        gate.release(cut, throttled=False, answered=False)
    assert gate.limit == 8
    clock = FakeClock(0.0)
    probing = limit_of(clock, probe=2.0, recovery=30.0)
    _turn_one_away(probing, 4)
    clock.step(5.0)
    a, b = probing.acquire(), probing.acquire()
    probing.release(a, throttled=False, answered=False)
    probing.release(b, throttled=False, answered=False)
    assert probing.limit == 2


# The deadlines below are ones where ``began + period - began < period`` in floats.


def _sent_at_its_own_deadline(gate: InflightLimit, clock: FakeClock) -> bool:
    """A request parks in ``acquire``; the clock is set to exactly the deadline it
    asked for: whether it was sent then (rather than spinning, lock held)."""
    thread, sent = _send_one(gate)
    assert clock.wait_for_waiter(timeout=PATIENCE)
    (deadline,) = clock.waiter_deadlines()
    clock.set(deadline)
    went = sent.wait(PATIENCE)
    thread.join(PATIENCE)
    return went


def test_the_slow_start_wait_ends_at_its_own_deadline() -> None:
    clock = FakeClock(15.5434)
    gate = InflightLimit(clock=clock, probe=2.0, recovery=30.0)
    slow = [gate.acquire() for _ in range(8)]
    assert _sent_at_its_own_deadline(gate, clock)
    for cut in slow:
        gate.release(cut, throttled=False)


def test_the_recovery_wait_ends_at_its_own_deadline() -> None:
    clock = FakeClock(125.2)
    gate = InflightLimit(clock=clock, initial=None, probe=2.0, recovery=30.0)
    stuck = gate.acquire()
    gate.release(gate.acquire(), throttled=True)
    assert gate.limit == 1
    assert _sent_at_its_own_deadline(gate, clock)
    assert gate.limit is None
    gate.release(stuck, throttled=False)
