"""Waiting for what another thread does, in unit tests.

This module owns :func:`wait_until`, the poll a test uses when a condition is made true
by a thread it started (an informer, a worker), not by time passing: time-dependent
waits step a :class:`cbop_testing.clock.FakeClock` instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

__all__ = ["WAIT", "wait_until"]

#: Real seconds a test waits for another thread before it fails (guards a hung test).
WAIT: Final = 5.0


def wait_until(pred: Callable[[], bool], timeout: float = WAIT) -> None:
    """Poll ``pred`` every millisecond until it is true.

    Raises:
        AssertionError: still false after ``timeout`` real seconds ("condition not
            reached"), so the test fails where it waited.
    """
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)
