"""The shard coordinator: balances ``N`` shard Leases over the live replicas of a group.

This module owns :class:`ShardCoordinator` and the :class:`ShardHandler` protocol it
calls; the runtime runs one instead of the single leader elector when ``--shards`` is
above 1. Every tick (a jittered retry period) it renews its membership Lease, lists the
group's Leases once, asks :func:`cbop.sharding.assign.decide` what to go for and what
to let go, runs a :class:`cbop.leaderelection.LeaderElector` per shard it goes for
(on ``<group>-shard-<i>``, created with the group's labels; one seen unrenewed for its
duration is first emptied, so the elector need not wait a duration of its own), and
releases at most one shard: ``handler.release`` drains first, and only then is the
elector stopped, so the Lease goes back after the shard's last write. While the group
shows another shard count at work (:attr:`cbop.sharding.view.GroupView.conflict`) it
holds nothing: newcomers wait for the incumbents.

Electors call back from their own threads; the coordinator only records the change,
and every handler call is made from the thread running :meth:`ShardCoordinator.run`. A
helper thread keeps the membership Lease renewed while a shard drains, so a long drain
does not make this replica look dead.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

import structlog

from cbop.clock import Clock, RealClock, wait_for
from cbop.kube import ApiError, KubeInterface
from cbop.leaderelection import ACQUIRE_JITTER_FACTOR, JITTER_FACTOR, LeaderElector
from cbop.sharding.assign import decide
from cbop.sharding.leases import shard_lease_name
from cbop.sharding.membership import Membership
from cbop.sharding.metrics import NO_SHARD_METRICS, ShardEvent, ShardMetrics
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal

__all__ = ["ShardCoordinator", "ShardHandler"]

log = structlog.get_logger("cbop.sharding")

#: Seconds a tick waits past a Lease's local expiry (as the elector's slack).
_EXPIRY_SLACK: Final = 0.05
#: The shortest wait between ticks, as a fraction of the retry period.
_MIN_TICK_FRACTION: Final = 0.1


class ShardHandler(Protocol):
    """What the coordinator tells the process about its shards.

    Every call comes from the thread running :meth:`ShardCoordinator.run`, one at a
    time, and for one shard always in the order acquired, then release or lost.
    """

    def acquired(self, shard: ShardRange, fence: Callable[[], bool]) -> None:
        """Start work on ``shard``; return quickly (start threads, do not block).

        ``fence()`` is True while the shard's Lease is held (the elector's
        ``holds_lease``): check it before every write of this shard's work.
        """
        ...

    def release(self, shard: ShardRange) -> None:
        """Stop taking work for ``shard`` and block until its in-flight work finished.

        The shard's Lease is handed back only after this returns; ``fence()`` stays
        True meanwhile (unless the Lease is lost). May block up to a shutdown timeout.
        """
        ...

    def lost(self, shard: ShardRange) -> None:
        """Stop work on ``shard`` at once, without draining: its Lease is gone."""
        ...


@dataclass(eq=False)
class _Slot:
    """One shard's elector and what the handler has been told about it.

    ``started``, ``ended`` and ``finished`` are set by the elector's threads with the
    coordinator's lock held; the rest belongs to the coordinator's thread.
    """

    shard: ShardRange
    stop: StopSignal = field(default_factory=StopSignal)
    elector: LeaderElector | None = None
    thread: threading.Thread | None = None
    started: bool = False  # on_started_leading ran
    ended: bool = False  # on_stopped_leading ran
    finished: bool = False  # the elector's run returned
    told: bool = False  # handler.acquired was called, release/lost not yet
    letting_go: bool = False  # stopped by the coordinator: lost is not reported


class ShardCoordinator:
    """Holds a balanced share of ``shards`` shard Leases for one replica of ``group``.

    Args:
        client: API client with get, list, create, update and delete on Leases
            in ``namespace`` (no write fence: it writes the Leases themselves).
        group: the group's name (``--leader-election-id``); Leases are
            ``<group>-shard-<i>`` and ``<group>-member-<identity>``.
        namespace: the Leases' namespace (``--leader-election-namespace``).
        identity: this replica's unique identity (its Leases' ``holderIdentity``).
        shards: the shard count ``N`` (>= 1); shard ``i`` is ``ShardRange.of(i, N)``.
        lease_duration, renew_deadline, retry_period: seconds, as for
            :class:`cbop.leaderelection.LeaderElector` (each shard's elector uses
            them; membership is renewed every retry period and live for a lease
            duration).
        handler: told when shards are acquired, must be released, or were lost.
        metrics: where shards held and transitions are reported (default: nowhere).
        clock: monotonic time source for ticks and expiry (default real time).

    Raises:
        ValueError: ``shards < 1``, an empty ``group``, ``namespace`` or ``identity``,
            or timings that break ``lease_duration > renew_deadline > JITTER_FACTOR x
            retry_period > 0`` with ``lease_duration >= 1``.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        group: str,
        namespace: str,
        identity: str,
        shards: int,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        handler: ShardHandler,
        metrics: ShardMetrics = NO_SHARD_METRICS,
        clock: Clock | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shard count must be at least 1, got {shards}")
        for what, value in (("group", group), ("namespace", namespace), ("identity", identity)):
            if not value:
                raise ValueError(f"the {what} must not be empty")
        if not (
            lease_duration > renew_deadline > JITTER_FACTOR * retry_period > 0
            and lease_duration >= 1
        ):
            raise ValueError(
                "need lease duration > renew deadline > "
                f"{JITTER_FACTOR} x retry period > 0 and lease duration >= 1s; got "
                f"{lease_duration}, {renew_deadline}, {retry_period}"
            )
        self._client = client
        self._group = group
        self._namespace = namespace
        self._identity = identity
        self._shards = shards
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._handler = handler
        self._metrics = metrics
        self._clock: Clock = clock if clock is not None else RealClock()
        self._membership = Membership(
            client,
            group=group,
            namespace=namespace,
            identity=identity,
            shards=shards,
            lease_duration=lease_duration,
            request_timeout=renew_deadline / 2,
            clock=self._clock,
        )
        # One lock guards the slots and the flags the electors' threads set; the
        # coordinator's thread waits on the condition for them (and for stop).
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._slots: dict[int, _Slot] = {}
        self._changed = False
        self._running = False
        self._announced = False  # the membership Lease was written in this run
        self._conflict: str | None = None  # why no shard is held now, as last logged

    # ------------------------------------------------------------------ public

    @property
    def identity(self) -> str:
        """Return this replica's identity."""
        return self._identity

    def held(self) -> list[ShardRange]:
        """Return the shards the handler works on now (acquired, not released or lost).

        Ascending by index; safe to call from any thread.
        """
        with self._lock:
            return sorted(s.shard for s in self._slots.values() if s.told)

    def holds(self, index: int) -> bool:
        """Return whether shard ``index`` may be written for now (the per-shard fence).

        True while the handler holds the shard and its elector's ``holds_lease()`` is
        True. Safe to call from any thread; cheap enough before every request.
        """
        with self._lock:
            slot = self._slots.get(index)
            elector = slot.elector if slot is not None and slot.told else None
        return elector is not None and elector.holds_lease()

    def run(self, stop: StopSignal) -> None:
        """Take part in the group until ``stop`` is set; then let go of everything.

        Blocks. Ticks every retry period (see the module docstring); API errors are
        logged and retried at the next tick, never raised. Exceptions raised by the
        handler are logged: one from ``acquired`` makes the coordinator hand the
        shard's Lease back. On ``stop``: releases every held shard gracefully, stops
        the other electors, deletes the membership Lease, returns.

        Raises:
            RuntimeError: :meth:`run` is already running on this coordinator.
        """
        with self._lock:
            if self._running:
                raise RuntimeError("ShardCoordinator.run is already running")
            self._running = True
        self._announced = False
        unregister = stop.wake(self._wakeup)
        log.info(
            "joining the shard group",
            group=self._group,
            identity=self._identity,
            shards=self._shards,
            member_lease=f"{self._namespace}/{self._membership.lease_name}",
        )
        try:
            next_tick = self._clock.now()
            while not stop.is_set():
                if self._clock.now() >= next_tick:
                    next_tick = self._tick()
                self._deliver()
                with self._wakeup:
                    wait_for(
                        self._clock,
                        self._wakeup,
                        lambda: stop.is_set() or self._changed,
                        deadline=next_tick,
                    )
        finally:
            try:
                self._leave()
            finally:
                unregister()
                with self._lock:
                    self._running = False

    # ------------------------------------------------------------------ the tick

    def _tick(self) -> float:
        """Renew membership, list the group, decide, act; return the next tick's time.

        The next tick comes one retry period later, jittered by up to
        ``ACQUIRE_JITTER_FACTOR``, or just after the earliest moment a Lease of another
        member expires unless renewed (a dead member's shards are taken over then,
        not up to a retry period later), whichever is sooner.

        Until its membership Lease has been written once, a replica only announces
        itself: replicas started together then see each other at their second tick,
        instead of the first one taking every shard and handing most of them back.
        """
        jitter = 1.0 + random.random() * ACQUIRE_JITTER_FACTOR
        announced = self._announced
        self._announced = self._membership.renew() or announced
        view = self._membership.observe()
        next_tick = self._clock.now() + self._retry_period * jitter
        if view is None or not announced:
            return next_tick
        if view.next_expiry is not None:
            soonest = self._clock.now() + self._retry_period * _MIN_TICK_FRACTION
            next_tick = min(next_tick, max(view.next_expiry + _EXPIRY_SLACK, soonest))
        self._deliver()
        if self._yield_to_conflict(view.conflict):
            return next_tick
        with self._lock:
            slots = dict(self._slots)
        held = [
            i
            for i, s in slots.items()
            if not s.letting_go and s.elector is not None and s.elector.is_leader()
        ]
        decision = decide(
            shards=self._shards,
            identity=self._identity,
            members=view.members,
            observed=view.shards,
            held=held,
        )
        for index in decision.acquire:
            if index not in slots:
                state = view.shards[index]
                expired = bool(state.holder) and not state.valid
                if expired and not self._membership.clear_expired_shard_lease(index):
                    continue  # renewed or taken since the listing
                self._start(index, labelled=index in view.labelled)
        for index, slot in slots.items():
            if slot.letting_go or index in decision.acquire or index == decision.release:
                continue
            if slot.elector is not None and slot.elector.is_leader():
                continue  # won since the listing: the next tick decides
            log.info(
                "no longer going for shard",
                group=self._group,
                shard=str(slot.shard),
                holder=view.shards[index].holder or None,
            )
            self._let_go(slot)
        if decision.release is not None:
            log.info(
                "above target; releasing shard",
                group=self._group,
                shard=str(slots[decision.release].shard),
                target=decision.target,
                held=len(held),
                members=len(view.members | {self._identity}),
            )
            self._release(slots[decision.release])
        return next_tick

    def _yield_to_conflict(self, conflict: str | None) -> bool:
        """Hold no shard while ``conflict`` (another shard count at work) lasts.

        Releases every held shard gracefully, highest index first, and stops every
        elector still trying; logs a warning when a conflict begins or changes and an
        info line when it ends. Returns whether there is a conflict.
        """
        if conflict != self._conflict:
            if conflict is not None:
                log.warning(
                    "another shard count is at work in this group; holding no shard",
                    group=self._group,
                    shards=self._shards,
                    reason=conflict,
                )
            else:
                log.info("no other shard count is at work any more", group=self._group)
            self._conflict = conflict
        if conflict is None:
            return False
        with self._lock:
            slots = sorted(self._slots.values(), key=lambda s: s.shard.index, reverse=True)
        for slot in slots:
            if slot.letting_go:
                continue
            if slot.told:
                self._release(slot)
            else:
                self._let_go(slot)
        return True

    def _start(self, index: int, *, labelled: bool) -> None:
        """Start an elector for shard ``index`` (labelling its Lease first if needed)."""
        if not labelled:
            try:
                self._membership.label_shard_lease(index)
            except ApiError as err:
                log.warning(
                    "cannot label the shard lease; retrying next tick",
                    lease=shard_lease_name(self._group, index),
                    error=str(err),
                )
                return
        slot = _Slot(ShardRange.of(index, self._shards))
        slot.elector = LeaderElector(
            self._client,
            lease_name=shard_lease_name(self._group, index),
            namespace=self._namespace,
            identity=self._identity,
            lease_duration=self._lease_duration,
            renew_deadline=self._renew_deadline,
            retry_period=self._retry_period,
            on_started_leading=lambda: self._flag(slot, "started"),
            on_stopped_leading=lambda: self._flag(slot, "ended"),
            clock=self._clock,
            release_on_cancel=True,
        )
        slot.thread = threading.Thread(
            target=self._run_elector, args=(slot,), name=f"cbop-shard-elector-{index}", daemon=True
        )
        with self._lock:
            self._slots[index] = slot
        slot.thread.start()

    def _run_elector(self, slot: _Slot) -> None:
        if slot.elector is None:
            raise RuntimeError(f"shard {slot.shard} has no elector to run")
        try:
            slot.elector.run(slot.stop)
        except Exception:
            log.exception("the shard elector failed", shard=str(slot.shard))
        finally:
            self._flag(slot, "finished")

    def _flag(self, slot: _Slot, name: str) -> None:
        """Set ``slot.<name>`` (an elector's thread) and wake the coordinator."""
        with self._wakeup:
            setattr(slot, name, True)
            self._changed = True
            self._wakeup.notify_all()

    # ------------------------------------------------------------------ transitions

    def _deliver(self) -> None:
        """Tell the handler what the electors did since the last call; drop dead slots."""
        with self._lock:
            self._changed = False
            slots = list(self._slots.values())
        for slot in slots:
            with self._lock:
                started, ended, finished = slot.started, slot.ended, slot.finished
            if slot.letting_go:
                if finished:
                    self._forget(slot)
                continue
            if started and not ended and not slot.told:
                self._acquired(slot)
            elif (ended or finished) and slot.told:
                self._lost(slot)
            if ended or finished:
                slot.letting_go = True
                if finished:
                    self._forget(slot)
        self._metrics.set_held(len(self.held()))

    def _lost(self, slot: _Slot) -> None:
        """Tell the handler that ``slot``'s shard, which it was told of, is lost."""
        with self._lock:
            slot.told = False
        log.warning("lost shard", group=self._group, shard=str(slot.shard))
        try:
            self._handler.lost(slot.shard)
        except Exception:
            log.exception("the shard handler failed to stop", shard=str(slot.shard))
        self._metrics.transition(slot.shard.index, ShardEvent.LOST)

    def _acquired(self, slot: _Slot) -> None:
        if slot.elector is None:
            raise RuntimeError(f"shard {slot.shard} was acquired without an elector")
        with self._lock:
            slot.told = True
        log.info("acquired shard", group=self._group, shard=str(slot.shard))
        try:
            self._handler.acquired(slot.shard, slot.elector.holds_lease)
        except Exception:
            log.exception("the shard handler failed to start; handing the shard back")
            with self._lock:
                slot.told = False
            self._let_go(slot)
            return
        self._metrics.transition(slot.shard.index, ShardEvent.ACQUIRED)

    def _release(self, slot: _Slot) -> None:
        """Drain ``slot``'s shard through the handler, then hand its Lease back."""
        if slot.elector is None or slot.thread is None:
            raise RuntimeError(f"shard {slot.shard} has no running elector to release")
        slot.letting_go = True
        told = slot.told
        if told:
            try:
                with self._renewing_membership():
                    self._handler.release(slot.shard)
            except Exception:
                log.exception("the shard handler failed to drain", shard=str(slot.shard))
        lost = not slot.elector.is_leader()
        with self._lock:
            slot.told = False
        slot.stop.set()
        slot.thread.join(self._lease_duration)
        if told:
            event = ShardEvent.LOST if lost else ShardEvent.RELEASED
            log.info(f"{event.value} shard", group=self._group, shard=str(slot.shard))
            self._metrics.transition(slot.shard.index, event)
        with self._lock:
            finished = slot.finished
        if finished:
            self._forget(slot)
        self._metrics.set_held(len(self.held()))

    @contextlib.contextmanager
    def _renewing_membership(self) -> Iterator[None]:
        """Renew the membership Lease every retry period in a helper thread meanwhile.

        The tick loop, which renews it otherwise, is blocked in ``handler.release``;
        the helper is joined before this returns, so renewals never overlap.
        """
        done = False
        cond = threading.Condition()

        def renew() -> None:
            while True:
                with cond:
                    if wait_for(self._clock, cond, lambda: done, self._retry_period):
                        return
                self._membership.renew()

        helper = threading.Thread(target=renew, name="cbop-shard-membership", daemon=True)
        helper.start()
        try:
            yield
        finally:
            with cond:
                done = True
                cond.notify_all()
            helper.join()

    def _let_go(self, slot: _Slot) -> None:
        """Stop ``slot``'s elector, without a drain.

        A shard the handler was told of is reported lost first: its elector stopped
        leading after the last :meth:`_deliver` (between that and this tick's decision)
        and its ``ended`` flag has not been delivered yet.
        """
        if slot.told:
            self._lost(slot)
        slot.letting_go = True
        slot.stop.set()

    def _forget(self, slot: _Slot) -> None:
        with self._lock:
            if self._slots.get(slot.shard.index) is slot:
                del self._slots[slot.shard.index]

    def _leave(self) -> None:
        """Release every held shard, stop every elector, delete the membership Lease."""
        self._deliver()
        with self._lock:
            slots = sorted(self._slots.values(), key=lambda s: s.shard.index, reverse=True)
        for slot in slots:
            if slot.told:
                self._release(slot)
            else:
                self._let_go(slot)
        for slot in slots:
            if slot.thread is not None:
                slot.thread.join(self._lease_duration)
        self._deliver()
        self._membership.leave()
        self._metrics.set_held(0)
        log.info("left the shard group", group=self._group, identity=self._identity)
