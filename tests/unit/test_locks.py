"""YieldingLock: a mutex like threading.Lock whose contended acquire yields the GIL first."""

from __future__ import annotations

import threading

import pytest

from cbop.locks import YieldingLock, condition

JOIN = 10.0


def test_it_excludes_other_threads_while_held() -> None:
    lock = YieldingLock()
    inside = 0
    most = 0
    counted = 0

    def work() -> None:
        nonlocal inside, most, counted
        for _ in range(2_000):
            with lock:
                inside += 1
                most = max(most, inside)
                counted += 1
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
    assert (most, counted) == (1, 8_000)


def test_a_held_lock_is_refused_without_blocking_and_with_a_zero_timeout() -> None:
    lock = YieldingLock()
    assert lock.acquire()
    refused: list[bool] = []
    t = threading.Thread(
        target=lambda: refused.extend([lock.acquire(False), lock.acquire(True, 0)])
    )
    t.start()
    t.join(JOIN)
    assert refused == [False, False]
    lock.release()
    assert lock.acquire(False)
    lock.release()


def test_a_waiter_gets_the_lock_once_a_long_holder_releases_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held past the spinning (one try here): the waiter then waits on the lock itself.
    monkeypatch.setattr("cbop.locks.SPINS", 1)
    lock = YieldingLock()
    lock.acquire()
    got = threading.Event()

    def waiter() -> None:
        with lock:
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert not got.is_set()
    lock.release()
    assert got.wait(JOIN)
    t.join(JOIN)


def test_releasing_a_lock_not_held_raises() -> None:
    with pytest.raises(RuntimeError):
        YieldingLock().release()


def test_over_an_rlock_the_holder_may_take_it_again() -> None:
    lock = YieldingLock(threading.RLock())
    with lock, lock:
        refused: list[bool] = []
        t = threading.Thread(target=lambda: refused.append(lock.acquire(False)))
        t.start()
        t.join(JOIN)
        assert refused == [False]
    assert lock.acquire(False)
    lock.release()


def test_a_condition_waits_and_is_notified_under_it() -> None:
    lock = YieldingLock()
    cond = condition(lock)
    items: list[int] = []
    taken: list[int] = []

    def consumer() -> None:
        with cond:
            cond.wait_for(lambda: bool(items), JOIN)
            taken.append(items.pop())

    t = threading.Thread(target=consumer)
    t.start()
    with cond:
        items.append(7)
        cond.notify()
    t.join(JOIN)
    assert taken == [7]
    # The waiter released the lock inside wait() and took it back after.
    assert lock.acquire(False)
    lock.release()


@pytest.mark.parametrize(
    ("blocking", "timeout"),
    [(False, 1.0), (True, -5.0), (True, float("nan"))],
    ids=["timeout-without-blocking", "negative", "nan"],
)
def test_a_timeout_threading_lock_refuses_is_refused(blocking: bool, timeout: float) -> None:
    lock = YieldingLock()
    with pytest.raises(ValueError, match="timeout"):
        lock.acquire(blocking, timeout)
    assert lock.acquire(False)  # nothing was taken
    lock.release()
