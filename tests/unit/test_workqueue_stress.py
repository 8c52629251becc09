"""Concurrency stress: many producers and workers on one RateLimitingQueue or PriorityQueue.

The priority queue runs with random priorities per add and ``max_wait=0`` (ageing on
every other hand-out), so promotion, stale entries and aged picks are all exercised.

Checks the queue's two promises under contention (real threads, real clock), plus drain:

- one key is never held by two workers at once;
- no add is lost: each producer bumps the key's version *before* adding it, and each
  worker reads the version right after ``get``; once everything has settled, the last
  version any worker saw for a key equals the key's final version;
- ``shut_down_with_drain`` returns only after every item handed out before it started
  has been passed to ``done``.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from cbop.workqueue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue, RateLimitingQueue

PRODUCERS = 50
WORKERS = 10
KEYS = 300
ADDS_PER_PRODUCER = 400
JOIN = 10.0  # real seconds; only bounds a hung test


class Ledger:
    """What producers and workers did, guarded by one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sequence = itertools.count()
        self.version: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.holders: set[str] = set()
        self.overlaps: list[str] = []
        self.processings: list[tuple[int, int]] = []  # (got, done) sequence numbers

    def bump(self, key: str) -> None:
        with self.lock:
            self.version[key] = self.version.get(key, 0) + 1

    def start(self, key: str) -> int:
        with self.lock:
            if key in self.holders:
                self.overlaps.append(key)
            self.holders.add(key)
            self.seen[key] = max(self.seen.get(key, 0), self.version.get(key, 0))
            return next(self.sequence)

    def finish(self, key: str, got: int) -> None:
        with self.lock:
            self.holders.discard(key)
            self.processings.append((got, next(self.sequence)))

    def tick(self) -> int:
        with self.lock:
            return next(self.sequence)


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    """Make the interpreter switch threads ~100x more often, to provoke interleavings."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    yield
    sys.setswitchinterval(previous)


PRIORITIES = (LOW_PRIORITY, NORMAL_PRIORITY, 5)


def plain_adds(q: RateLimitingQueue[str], rng: random.Random) -> Callable[[str, bool], None]:
    def add(key: str, delayed: bool) -> None:
        if delayed:
            q.add_after(key, 0.001 * rng.random())
        else:
            q.add(key)

    return add


def prioritised_adds(q: PriorityQueue[str], rng: random.Random) -> Callable[[str, bool], None]:
    def add(key: str, delayed: bool) -> None:
        priority = rng.choice(PRIORITIES)
        if delayed:
            q.add_after(key, 0.001 * rng.random(), priority)
        else:
            q.add(key, priority)

    return add


@pytest.mark.parametrize("kind", ["ratelimiting", "priority"])
def test_no_overlap_no_lost_add_and_drain_waits_for_in_flight_items(kind: str) -> None:
    q: RateLimitingQueue[str]
    if kind == "priority":
        pq = PriorityQueue[str](max_wait=0.0)
        q = pq

        def adder(rng: random.Random) -> Callable[[str, bool], None]:
            return prioritised_adds(pq, rng)
    else:
        q = RateLimitingQueue[str]()

        def adder(rng: random.Random) -> Callable[[str, bool], None]:
            return plain_adds(q, rng)

    ledger = Ledger()
    keys = [f"ns/bundle-{i}" for i in range(KEYS)]
    finals = [f"final-{i}" for i in range(WORKERS)]
    holding_final = threading.Semaphore(0)
    release_finals = threading.Event()

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        add = adder(rng)
        for n in range(ADDS_PER_PRODUCER):
            key = rng.choice(keys)
            ledger.bump(key)
            add(key, n % 10 == 0)

    def worker() -> None:
        while True:
            key, shutdown = q.get()
            if shutdown:
                return
            assert key is not None
            got = ledger.start(key)
            if key in finals:
                holding_final.release()
                release_finals.wait(JOIN)
            else:
                time.sleep(0)  # yield, so other workers run while this key is held
            ledger.finish(key, got)
            q.done(key)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
    producers = [
        threading.Thread(target=producer, args=(seed,), daemon=True) for seed in range(PRODUCERS)
    ]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(JOIN)
        assert not thread.is_alive()

    # Let delayed adds land and the workers settle: every key's latest version seen.
    deadline = time.monotonic() + JOIN
    while True:
        with ledger.lock:
            settled = ledger.seen == ledger.version
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.001)
    assert settled, "some adds were never followed by a processing of their key"

    # Park every worker on a "final" item, then drain while they hold them.
    for key in finals:
        ledger.bump(key)
        q.add(key)
    for _ in finals:
        assert holding_final.acquire(timeout=JOIN)
    drain_span: list[int] = []

    def drainer() -> None:
        drain_span.append(ledger.tick())
        q.shut_down_with_drain()
        drain_span.append(ledger.tick())

    drain_thread = threading.Thread(target=drainer, daemon=True)
    drain_thread.start()
    while not q.shutting_down():
        time.sleep(0.001)
    assert drain_thread.is_alive(), "drain returned while workers held items"
    release_finals.set()
    drain_thread.join(JOIN)
    assert not drain_thread.is_alive()
    for thread in workers:
        thread.join(JOIN)
        assert not thread.is_alive()

    assert ledger.overlaps == []
    assert ledger.seen == ledger.version
    started, ended = drain_span
    late = [(got, done) for got, done in ledger.processings if got < started and done > ended]
    assert late == [], "drain returned before items handed out earlier were done"
    assert len(ledger.processings) >= KEYS  # the workers really did work
