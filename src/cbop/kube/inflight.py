"""A cap on requests in flight: a slow start, then one that only a throttling API server keeps.

This module owns :class:`InflightLimit`, which :class:`cbop.kube.transport.Transport`
takes around every request but watches. client-go has nothing like it: each of its
goroutines sleeps its own ``429``'s ``Retry-After`` and comes back, so a client with
more workers than its API Priority and Fairness level has seats keeps the level
overloaded. cbop sends no more at a time than the level has lately been taking, as
TCP's congestion window does:

* a slow start: ``initial`` (8) in flight, doubling every round trip, lifted at
  ``ceiling`` (64); no request waits for it more than ``probe`` seconds;
* a ``429`` halves the limit (once for the requests turned away together);
* while the limit is full and nothing is turned away for a probe period, it grows by
  one; a ``429`` right after such a growth steps back by one and doubles the period,
  so a full level is not probed into a rejection every few seconds;
* after ``recovery`` seconds without a ``429`` the limit is lifted.

A request waiting here is not sent, so it cannot be turned away: its worker waits as it
would have waited out the ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import Final

import structlog

from cbop.clock import Clock
from cbop.locks import YieldingLock, condition

__all__ = [
    "DEFAULT_CEILING",
    "DEFAULT_INITIAL",
    "DEFAULT_PROBE",
    "DEFAULT_RECOVERY",
    "InflightLimit",
]

#: Requests in flight at first, before any answer has been read.
DEFAULT_INITIAL: Final = 8
#: The slow start lifts the limit when it reaches this many requests in flight.
DEFAULT_CEILING: Final = 64

#: Seconds without a 429, with the limit in use, before it grows by one.
DEFAULT_PROBE: Final = 2.0
#: Seconds without a 429 after which the limit is lifted.
DEFAULT_RECOVERY: Final = 30.0

log = structlog.get_logger("cbop.kube")


class InflightLimit:
    """How many requests may be in flight at once: a slow start, then AIMD on ``429``.

    Thread-safe. Call :meth:`acquire` before sending a request and :meth:`release` with
    its outcome once its answer has been read (or it failed).

    Args:
        clock: time source of the probe and recovery periods and of the waits.
        initial: requests (>= 1) in flight at first, or ``None`` for no limit until the
            first ``429``.
        ceiling: requests (> ``initial``) in flight at which the slow start lifts the
            limit.
        probe: seconds (> 0) without a ``429``, with the limit reached, before the limit
            grows by one; doubled after each probe that is turned away (up to
            ``recovery / 2``), and reset by a halving cut.
        recovery: seconds (> ``probe``) without a ``429`` after which the limit is lifted.

    Raises:
        ValueError: ``probe <= 0``, ``recovery <= probe``, ``initial < 1`` or
            ``ceiling <= initial``.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        initial: int | None = DEFAULT_INITIAL,
        ceiling: int = DEFAULT_CEILING,
        probe: float = DEFAULT_PROBE,
        recovery: float = DEFAULT_RECOVERY,
    ) -> None:
        if not 0 < probe < recovery:
            raise ValueError(f"need 0 < probe < recovery, got {probe} and {recovery}")
        if initial is not None and not 1 <= initial < ceiling:
            raise ValueError(f"need 1 <= initial < ceiling, got {initial} and {ceiling}")
        self._clock = clock
        self._probe = probe
        self._recovery = recovery
        # Every request takes this lock twice: a YieldingLock keeps the workers off a
        # lock convoy (see cbop.locks).
        self._cond = condition(YieldingLock())
        self._waiting = 0  # threads in acquire() waiting for room
        self._ceiling = ceiling
        self._in_flight = 0
        self._limit: int | None = initial
        self._slow_start = initial is not None  # grow on every answer, lift at the ceiling
        self._cut = 0  # counts the cuts; a request remembers the count it was sent under
        self._last_throttled = -math.inf  # clock time of the last 429
        self._changed_at = -math.inf  # clock time of the last cut or growth
        self._grew = False  # the last change was a growth (a probe not yet answered)
        self._probe_wait = probe  # the current probe period, doubled by failed probes

    @property
    def limit(self) -> int | None:
        """The current limit, or ``None`` when unlimited."""
        with self._cond:
            self._lift_if_recovered(self._clock.now())
            return self._limit

    @property
    def in_flight(self) -> int:
        """Requests acquired and not yet released."""
        with self._cond:
            return self._in_flight

    def acquire(self) -> int:
        """Block until one more request may be in flight; return the cut it is sent under.

        Pass the returned value to :meth:`release`. Never raises. Waits while the limit
        is full: until releases make room (another waiter may take it first), or, after
        a ``429``, at most until the limit is lifted ``recovery`` seconds after the last
        one; during the slow start at most ``probe`` seconds (then the limit grows by
        one for it).
        """
        with self._cond:
            began = self._clock.now()
            while True:
                now = self._clock.now()
                self._lift_if_recovered(now)
                if self._limit is None or self._in_flight < self._limit:
                    break
                if self._slow_start:
                    deadline = began + self._probe
                    if now >= deadline:
                        self._grow_slow_start()  # waited long enough behind slow requests
                        continue
                else:
                    deadline = self._last_throttled + self._recovery
                # An absolute deadline, compared as _lift_if_recovered compares it: a
                # timeout recomputed from it can round to 0 and spin at the deadline.
                self._waiting += 1
                try:
                    self._clock.wait_until(self._cond, deadline)
                finally:
                    self._waiting -= 1
            self._in_flight += 1
            return self._cut

    def release(self, cut: int, *, throttled: bool, answered: bool = True) -> None:
        """Take one request out of flight; ``throttled`` when its answer was ``429``.

        Args:
            cut: what :meth:`acquire` returned for this request.
            throttled: the answer was ``429 Too Many Requests``.
            answered: the server answered (``False``: the request was not sent, or the
                connection failed or timed out). Only answers grow the limit: a failure
                says nothing about the seats the level has.
        """
        with self._cond:
            before = self._in_flight
            self._in_flight = max(0, before - 1)
            now = self._clock.now()
            if throttled:
                self._last_throttled = now
                if cut == self._cut:
                    self._cut_limit(before, now)
            else:
                self._lift_if_recovered(now)
                if answered and self._limit is not None and before >= self._limit:
                    if self._slow_start:
                        self._grow_slow_start()
                    elif now - self._changed_at >= self._probe_wait:
                        self._limit += 1
                        self._changed_at = now
                        self._grew = True
            if self._waiting:
                self._cond.notify_all()

    def _grow_slow_start(self) -> None:
        if self._limit is None:
            raise RuntimeError("slow start grew a limit that is not set")
        self._limit += 1
        if self._limit >= self._ceiling:
            self._limit = None
            self._slow_start = False
        self._cond.notify_all()

    def _cut_limit(self, in_flight: int, now: float) -> None:
        engaged = self._limit is None or self._slow_start
        self._slow_start = False
        if self._limit is not None and self._grew:
            # The probe found the level full: back to what it took, probe less often.
            self._limit = max(1, self._limit - 1)
            self._probe_wait = min(2 * self._probe_wait, self._recovery / 2)
        else:
            base = in_flight if self._limit is None else min(self._limit, in_flight)
            self._limit = max(1, math.ceil(base / 2))
            self._probe_wait = self._probe
        self._grew = False
        self._cut += 1
        self._changed_at = now
        if engaged:
            log.info(
                "the API server is turning requests away (429); limiting requests in flight",
                limit=self._limit,
                in_flight=in_flight,
            )
        else:
            log.debug("429: fewer requests in flight", limit=self._limit, in_flight=in_flight)

    def _lift_if_recovered(self, now: float) -> None:
        if (
            self._limit is not None
            and not self._slow_start
            and now >= self._last_throttled + self._recovery
        ):
            log.info(
                "no 429 for a while; requests in flight are no longer limited",
                seconds=self._recovery,
            )
            self._limit = None
            self._grew = False
            self._probe_wait = self._probe
            self._cond.notify_all()
