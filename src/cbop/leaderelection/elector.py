"""Lease-based leader election, after client-go's ``tools/leaderelection`` with a LeaseLock.

This module owns :class:`LeaderElector`: one candidate's acquire and renew loops, its
leadership state and its write fence. The manager runs one with ``--leader-elect`` (the
shard coordinator, one per shard); it calls back when this process starts and stops
leading. Its Lease reads and writes are :class:`cbop.leaderelection.lock.LeaseLock`'s.

The fence, :meth:`LeaderElector.holds_lease`: this candidate leads and its last
successful renewal *began* less than ``renew_deadline`` ago, by its own monotonic
clock. Others wait ``lease_duration`` from when they saw that renewal land, so the
difference is the margin for clock rates and requests in flight, and a process that was
paused wakes with the fence closed. Where it departs from client-go, and why:

* acquire attempts are jittered by at most half a retry period, so a successor takes a
  released Lease within 1.5 retry periods;
* a renewal that finds another holder ends leadership at once: someone has provably
  taken over;
* the renew deadline counts from the start of the last successful renewal, so leading
  ends exactly when the fence closes, and the Lease is released only after that, and
  only on ``stop``, never after a lost renewal: the time left is this process's grace
  to stop its work;
* ``on_stopped_leading`` only after leading; ``on_new_leader`` never for an empty holder;
  the first renewal one retry period after acquiring.
"""

from __future__ import annotations

import enum
import random
import threading
from collections.abc import Callable

import structlog

from cbop import defaults
from cbop.clock import Clock, RealClock, wait_for
from cbop.kube import KubeInterface
from cbop.leaderelection.lock import Attempt, LeaseLock
from cbop.leaderelection.metrics import NO_METRICS, LeaderMetrics
from cbop.leaderelection.record import RELEASED_LEASE_DURATION_SECONDS, int_field, micro_time
from cbop.leaderelection.timing import (
    ACQUIRE_JITTER_FACTOR,
    EXPIRY_SLACK,
    JITTER_FACTOR,
    check_timings,
    renewal_request_timeout,
)
from cbop.stop import StopSignal

# The timing constants and the record format used to live here: still importable.
__all__ = [
    "ACQUIRE_JITTER_FACTOR",
    "JITTER_FACTOR",
    "RELEASED_LEASE_DURATION_SECONDS",
    "LeaderElector",
    "micro_time",
]

log = structlog.get_logger("cbop.leaderelection")


class _Ended(enum.Enum):
    """Why the renew loop returned."""

    STOPPED = "stopped"
    LOST = "lost"


class LeaderElector:
    """One candidate in a Lease-based leader election, as client-go's ``LeaderElector``.

    Args:
        client: the API client; it needs ``get``, ``create`` and ``update`` on
            ``coordination.k8s.io`` leases in ``namespace``.
        lease_name: name of the Lease (``--leader-election-id``).
        namespace: namespace of the Lease.
        identity: this candidate's unique identity, written as ``holderIdentity``.
        lease_duration: seconds a non-leader waits, from the moment it last saw the
            record change, before it may take the lease over. Written to the Lease as
            whole seconds (truncated, as client-go does).
        renew_deadline: seconds the leader keeps retrying a failing renewal before it
            gives up leadership.
        retry_period: seconds between attempts (acquire attempts are jittered up to
            ``ACQUIRE_JITTER_FACTOR`` times more).
        on_started_leading: called once, in a new thread, when this candidate becomes
            leader (as client-go's ``go OnStartedLeading(ctx)``), so it may block.
        on_stopped_leading: called in :meth:`run`'s thread when leadership ends, lost
            or released; after the Lease was released when ``release_on_cancel``.
        on_new_leader: called, in a new thread, with the identity of each new holder
            this candidate observes (itself included).
        metrics: where leadership (0 when :meth:`run` starts, 1 while leading, 0
            afterwards) and slow-path renewals are reported (default: nowhere).
        clock: monotonic time source for every wait and for expiry (default real time).
            The Lease's timestamps are always wall-clock UTC.
        release_on_cancel: when ``stop`` is set while leading, write an empty holder and
            ``leaseDurationSeconds: 1`` so a successor can take over at once. Only set
            ``stop`` once the work guarded by the lease has finished.
        may_acquire: called before each attempt to acquire (never while leading);
            a string it returns is why this candidate must wait, and the attempt is
            skipped until the next retry period (logged at warning when the reason
            changes). ``None`` (the default) always allows the attempt. cbop's
            single leader passes :class:`cbop.sharding.ShardedGroupCheck`, so it waits
            while a sharded group of its id is at work. Not in client-go.

    Raises:
        ValueError: unless ``lease_duration > renew_deadline > JITTER_FACTOR *
            retry_period > 0`` (client-go's rule), ``lease_duration >= 1`` (the Lease
            stores whole seconds and the API server requires at least 1), and
            ``lease_name``, ``namespace`` and ``identity`` are not empty.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        lease_duration: float = defaults.LEASE_DURATION,
        renew_deadline: float = defaults.RENEW_DEADLINE,
        retry_period: float = defaults.RETRY_PERIOD,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        on_new_leader: Callable[[str], None] | None = None,
        metrics: LeaderMetrics = NO_METRICS,
        clock: Clock | None = None,
        release_on_cancel: bool = True,
        may_acquire: Callable[[], str | None] | None = None,
    ) -> None:
        check_timings(lease_duration, renew_deadline, retry_period)
        for what, value in (("lease name", lease_name), ("namespace", namespace)):
            if not value:
                raise ValueError(f"the {what} must not be empty")
        if not identity:
            raise ValueError("the candidate identity must not be empty")
        self._identity = identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._metrics = metrics
        self._clock: Clock = clock if clock is not None else RealClock()
        self._release_on_cancel = release_on_cancel
        self._may_acquire = may_acquire
        self._waiting_for = ""  # the may_acquire reason last logged
        # A single API call may take at most this long (real seconds per socket
        # operation), so one hung request cannot use up the whole renew deadline.
        self._request_timeout = renew_deadline / 2

        # The run loop waits on _wakeup (with the clock's deadlines); the caller's stop
        # signal notifies it when set.
        self._wakeup = threading.Condition(threading.Lock())
        # Guards _leading, _renewed_at and _running, read by is_leader() and
        # holds_lease() from any thread.
        self._state_lock = threading.Lock()
        self._leading = False
        self._running = False
        # Clock time at which the last successful acquire or renewal attempt began;
        # None while not leading (or once a release began).
        self._renewed_at: float | None = None
        # While renewing: the clock time by which a renewal must have succeeded; the
        # timeout of each Lease request is bounded by it.
        self._attempt_deadline: float | None = None
        # Only the run() thread touches the rest.
        self._lease_lock = LeaseLock(
            client,
            lease_name=lease_name,
            namespace=namespace,
            identity=identity,
            lease_duration=lease_duration,
            clock=self._clock,
            metrics=metrics,
            request_timeout=self._request_timeout_now,
        )
        self._reported_leader = ""

    # ------------------------------------------------------------------ public

    @property
    def identity(self) -> str:
        """Return the identity this candidate writes as ``holderIdentity``."""
        return self._identity

    def is_leader(self) -> bool:
        """Return whether this candidate currently leads (acquired, not yet lost or released).

        Safe to call from any thread.
        """
        with self._state_lock:
            return self._leading

    def holds_lease(self) -> bool:
        """Return whether this candidate may still write as the leader (the write fence).

        True while leading and less than ``renew_deadline`` seconds (on the monotonic
        clock) have passed since the last successful acquire or renewal *began*; False
        once leadership ended or a release began. Safe to call from any thread; cheap
        enough to call before every request.
        """
        with self._state_lock:
            renewed = self._renewed_at
            leading = self._leading
        return (
            leading and renewed is not None and self._clock.now() < renewed + self._renew_deadline
        )

    def run(self, stop: StopSignal) -> None:
        """Take part in the election until leadership ends or ``stop`` is set.

        Blocks. Tries to acquire the lease every ``retry_period`` seconds (jittered up to
        ``ACQUIRE_JITTER_FACTOR`` times more) until it succeeds or ``stop`` is set. Once leading,
        starts ``on_started_leading`` in a new thread and renews every ``retry_period``;
        a renewal that keeps failing until ``renew_deadline`` seconds after the last
        successful one began, or that finds another
        holder in the Lease, ends leadership (lost). When ``stop`` is set while leading,
        releases the Lease if ``release_on_cancel``. Either way ``on_stopped_leading`` is
        then called and this method returns. A candidate that never led returns without
        calling it. Follows client-go's ``LeaderElector.Run`` (see the module docstring
        for the differences).

        API errors are logged and retried, never raised.

        Raises:
            RuntimeError: :meth:`run` is already running on this elector.
            Exception: anything unexpected from the client or a callback propagates,
                after leadership was ended (``on_stopped_leading`` called) if it was held.
        """
        with self._state_lock:
            if self._running:
                raise RuntimeError("LeaderElector.run is already running")
            self._running = True
        unregister = stop.wake(self._wakeup)
        self._metrics.set_leading(False)
        try:
            if not self._acquire(stop):
                return
            self._become_leader()
            ended = self._renew(stop)
            if ended is _Ended.STOPPED and self._release_on_cancel:
                self._release()
        finally:
            try:
                if self.is_leader():
                    self._end_leadership()
            finally:
                unregister()
                with self._state_lock:
                    self._running = False

    # ------------------------------------------------------------------ loops

    def _acquire(self, stop: StopSignal) -> bool:
        """Try until acquired (True) or ``stop`` is set (False), as client-go's ``acquire``."""
        log.info(
            "attempting to acquire the leader lease",
            lease=self._lease_lock.describe(),
            identity=self._identity,
        )
        while not stop.is_set():
            began = self._clock.now()
            attempt: Attempt | None = None
            if self._acquire_allowed():
                attempt = self._lease_lock.try_acquire_or_renew(renewing=False)
                self._maybe_report_transition()
                if attempt is Attempt.SUCCEEDED:
                    with self._state_lock:
                        self._renewed_at = began
                    return True
            # Waiting after each attempt, with fresh jitter each time, keeps candidates
            # that started together from hitting the API server in lock step.
            wait = self._retry_period * (1.0 + random.random() * ACQUIRE_JITTER_FACTOR)
            # But never sleep past the moment the observed lease expires on the local
            # clock: a candidate that polled just before expiry would otherwise add up
            # to 3 s to every failover (client-go waits the full jittered period).
            # Only when this attempt found the Lease held: after a failed request, or
            # while ``may_acquire`` holds it back, the candidate waits the full period
            # (an expiry long past would otherwise make it retry every 50 ms).
            if attempt is Attempt.HELD:
                wait = min(wait, max(self._lease_lock.expires_in(), 0.0) + EXPIRY_SLACK)
            if self._wait(stop, self._clock.now() + wait):
                return False
        return False

    def _acquire_allowed(self) -> bool:
        """Ask ``may_acquire``; log when its reason to wait begins, changes or ends."""
        reason = (self._may_acquire() or "") if self._may_acquire is not None else ""
        if reason != self._waiting_for:
            if reason:
                log.warning(
                    "not acquiring the leader lease for now",
                    lease=self._lease_lock.describe(),
                    reason=reason,
                )
            else:
                log.info(
                    "no reason to wait any more for the leader lease",
                    lease=self._lease_lock.describe(),
                )
            self._waiting_for = reason
        return not reason

    def _renew(self, stop: StopSignal) -> _Ended:
        """Renew every ``retry_period`` until lost or stopped, as client-go's ``renew``.

        A round of attempts must succeed before ``renew_deadline`` seconds have passed
        since the last successful renewal began (the moment the write fence closes);
        each attempt starts at most every ``retry_period`` and its requests' timeouts
        are bounded by that deadline (see :meth:`_request_timeout_now`).
        """
        try:
            while True:
                if self._wait(stop, self._clock.now() + self._retry_period):
                    return _Ended.STOPPED
                with self._state_lock:
                    renewed = self._renewed_at
                deadline = (renewed if renewed is not None else 0.0) + self._renew_deadline
                while True:
                    began = self._clock.now()
                    if began >= deadline:
                        log.error(
                            "could not renew the leader lease within the renew deadline; "
                            "leadership lost",
                            lease=self._lease_lock.describe(),
                            renew_deadline=self._renew_deadline,
                            late=round(began - deadline, 3),
                        )
                        return _Ended.LOST
                    self._attempt_deadline = deadline
                    attempt = self._lease_lock.try_acquire_or_renew(renewing=True)
                    self._maybe_report_transition()
                    if attempt is Attempt.SUCCEEDED:
                        with self._state_lock:
                            self._renewed_at = began
                        break
                    if attempt is Attempt.HELD:
                        log.error(
                            "the leader lease names another holder; leadership lost",
                            lease=self._lease_lock.describe(),
                            holder=self._lease_lock.holder() or None,
                        )
                        return _Ended.LOST
                    # A failed attempt that already took a retry period (a timeout) is
                    # retried at once: the time left is what a retry needs.
                    if self._wait(stop, min(began + self._retry_period, deadline)):
                        return _Ended.STOPPED
        finally:
            self._attempt_deadline = None

    def _request_timeout_now(self) -> float:
        """Seconds one Lease request may take now.

        Acquiring: ``renew_deadline / 2``. Renewing: half the time left before the renew
        deadline, but at least one retry period (see
        :func:`cbop.leaderelection.timing.renewal_request_timeout`).
        """
        deadline = self._attempt_deadline
        if deadline is None:
            return self._request_timeout
        return renewal_request_timeout(deadline - self._clock.now(), self._retry_period)

    def _wait(self, stop: StopSignal, deadline: float) -> bool:
        """Sleep on the clock until ``deadline``; return True early if ``stop`` is set."""
        with self._wakeup:
            return wait_for(self._clock, self._wakeup, stop.is_set, deadline=deadline)

    # ------------------------------------------------------------------ transitions

    def _become_leader(self) -> None:
        with self._state_lock:
            self._leading = True
        self._metrics.set_leading(True)
        spec = self._lease_lock.seen_record()
        log.info(
            "acquired the leader lease",
            lease=self._lease_lock.describe(),
            identity=self._identity,
            transitions=int_field(spec, "leaseTransitions"),
        )
        threading.Thread(
            target=self._on_started_leading, name="cbop-leader-started", daemon=True
        ).start()

    def _end_leadership(self) -> None:
        with self._state_lock:
            self._leading = False
            self._renewed_at = None
        self._metrics.set_leading(False)
        log.info("stopped leading", lease=self._lease_lock.describe(), identity=self._identity)
        self._on_stopped_leading()

    def _maybe_report_transition(self) -> None:
        """Report a holder different from the last one reported (client-go's namesake)."""
        holder = self._lease_lock.holder()
        if holder == self._reported_leader:
            return
        self._reported_leader = holder
        if not holder:
            return
        log.info("new leader observed", lease=self._lease_lock.describe(), leader=holder)
        callback = self._on_new_leader
        if callback is not None:
            threading.Thread(
                target=callback, args=(holder,), name="cbop-leader-new", daemon=True
            ).start()

    def _release(self) -> None:
        """Close the write fence, then hand the lease back (see :meth:`LeaseLock.release`).

        No write of this process may follow the release.
        """
        with self._state_lock:
            self._renewed_at = None
        self._lease_lock.release()
