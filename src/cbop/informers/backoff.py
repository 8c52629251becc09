"""Exponential backoff with jitter and reset, for re-listing and re-watching.

This module owns the retry schedule of the informers, after client-go's reflector
(``wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0, clock)``): the first
delay is 0.8 s, each further consecutive failure doubles it up to a 30 s ceiling, and
after 2 minutes without a failure the schedule starts again from 0.8 s.

Jitter differs from client-go on purpose: client-go multiplies by ``1 + rand`` (so up to
2x, 60 s at the cap); here each delay is scaled by a factor drawn uniformly from
``[1 - jitter, 1]`` (default ``jitter = 0.25``), so the 30 s ceiling really is the
ceiling while clients that failed together still spread out, at the cap too.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from cbop.clock import Clock

__all__ = ["Backoff"]


class Backoff:
    """A thread-safe exponential backoff schedule read from a clock.

    Args:
        clock: time source (seconds).
        initial: first delay, seconds (0.8).
        factor: growth per consecutive failure (2.0).
        cap: largest delay before jitter, seconds (30).
        jitter: fraction in ``[0, 1)``; a delay ``d`` becomes ``d * (1 - jitter * u)``,
            ``u`` uniform in ``[0, 1)``.
        reset_after: seconds of health (no failure since the end of the last delay)
            after which the schedule restarts at ``initial`` (120).
        rand: source of ``u`` (``random.random``); tests pass a constant.

    Raises:
        ValueError: non-positive ``initial``/``cap``, ``factor < 1``, or jitter outside
            ``[0, 1)``.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        initial: float = 0.8,
        factor: float = 2.0,
        cap: float = 30.0,
        jitter: float = 0.25,
        reset_after: float = 120.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or cap <= 0 or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("invalid backoff parameters")
        self._clock = clock
        self._initial = initial
        self._factor = factor
        self._cap = cap
        self._jitter = jitter
        self._reset_after = reset_after
        self._rand = rand
        self._lock = threading.Lock()
        self._failures = 0
        self._healthy_from: float | None = None  # end of the last delay

    def next_delay(self) -> float:
        """Record a failure now and return the seconds to wait before the next attempt."""
        with self._lock:
            now = self._clock.now()
            if self._healthy_from is not None and now - self._healthy_from >= self._reset_after:
                self._failures = 0
            base = min(self._cap, self._initial * self._factor**self._failures)
            if base < self._cap:
                self._failures += 1
            delay = base * (1.0 - self._jitter * self._rand())
            self._healthy_from = now + delay
            return delay
