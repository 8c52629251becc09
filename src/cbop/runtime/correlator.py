"""Event correlation, as client-go's ``EventCorrelator``: repeats, aggregation, spam.

This module owns :class:`EventCorrelator`, which the Event recorder
(:mod:`cbop.runtime.events`) runs on its sink thread before each write:

* a repeat (same involved object, type, reason, message and source) is not a new Event:
  the existing one is PATCHed with ``count + 1``, a new ``lastTimestamp`` and the
  message, so ``kubectl describe`` shows ``x4 over 3m``;
* after 10 different messages with the same object, type and reason within 10 minutes,
  further ones are combined into one Event "(combined from similar events): ...",
  itself counted;
* a spam filter, a token bucket per source and involved object (burst 25, refilled one
  every 5 minutes), drops what exceeds it, so a hot loop cannot flood the API server;
  the counts keep accruing meanwhile, and the next write carries them.

Not thread-safe: one thread (the sink's) owns a correlator.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cachetools

from cbop.tokenbucket import TokenBucket

__all__ = [
    "AGGREGATE_INTERVAL",
    "AGGREGATE_MAX_EVENTS",
    "SPAM_BURST",
    "SPAM_QPS",
    "Correlated",
    "EventCorrelator",
    "WallClock",
    "event_timestamp",
]

#: Entries of each correlation cache (client-go's maxLruCacheEntries).
_CACHE_ENTRIES = 4096
#: Spam filter: burst and refill rate (tokens/second) per source and involved object
#: (client-go's defaultSpamBurst and defaultSpamQPS, one token per 5 minutes).
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
#: Aggregation: this many distinct messages per object, type and reason within
#: ``AGGREGATE_INTERVAL`` seconds start the combined Event (client-go's defaults).
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
_COMBINED_PREFIX = "(combined from similar events): "

WallClock = Callable[[], datetime.datetime]


@dataclass(frozen=True, slots=True)
class Correlated:
    """What to write for one Event after correlation.

    Attributes:
        event: the full Event body (for a create; carries the correlated count).
        patch: for a repeat, the strategic merge patch of the existing Event (``count``,
            ``lastTimestamp``, ``message``), else None (create ``event``).
        key: the correlation key, to record the written Event's name under.
    """

    event: dict[str, Any]
    patch: dict[str, Any] | None
    key: tuple[str, ...]


@dataclass(slots=True)
class _Observation:
    count: int
    first_timestamp: str
    name: str


@dataclass(slots=True)
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last_seen: float = float("-inf")


class _WallSeconds:
    """A ``TimeSource`` over a wall clock returning datetimes (for :class:`TokenBucket`)."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock().timestamp()


def event_timestamp(moment: datetime.datetime) -> str:
    """Return ``moment`` as an Event's ``firstTimestamp``/``lastTimestamp`` (RFC 3339, s)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _object_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    source = event.get("source") or {}
    obj = event["involvedObject"]
    return (
        str(source.get("component", "")),
        str(source.get("host", "")),
        str(obj.get("kind", "")),
        str(obj.get("namespace", "")),
        str(obj.get("name", "")),
        str(obj.get("uid", "")),
        str(obj.get("apiVersion", "")),
    )


class EventCorrelator:
    """Counts, combines and rate-limits Events as client-go's EventCorrelator does.

    Not thread-safe: the recorder's one sink thread owns it. Every cache holds at most
    4,096 entries (least recently used go first).

    Args:
        clock: wall clock returning aware datetimes (timestamps, the 10-minute
            aggregation window and the spam filter's refill).
        spam_burst: Events per source and involved object written at once.
        spam_qps: refill of that budget (tokens/second).
        max_events: distinct messages per object, type and reason before combining.
        max_interval: seconds after which an object's messages are forgotten.
    """

    def __init__(
        self,
        clock: WallClock,
        *,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
        max_events: int = AGGREGATE_MAX_EVENTS,
        max_interval: float = AGGREGATE_INTERVAL,
    ) -> None:
        self._clock = clock
        self._seconds = _WallSeconds(clock)
        self._spam_burst = spam_burst
        self._spam_qps = spam_qps
        self._max_events = max_events
        self._max_interval = max_interval
        self._spam: cachetools.LRUCache[tuple[str, ...], TokenBucket] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )
        self._aggregates: cachetools.LRUCache[tuple[str, ...], _Aggregate] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )
        self._observed: cachetools.LRUCache[tuple[str, ...], _Observation] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )

    def correlate(self, event: Mapping[str, Any]) -> Correlated | None:
        """Correlate a new Event; return what to write, or None when the spam filter drops it.

        Args:
            event: a complete core/v1 Event body with ``count`` 1.
        """
        now = self._clock()
        event, key = self._aggregate(dict(event), now)
        correlated = self._observe(event, key, now)
        bucket = self._spam.get(_object_key(event))
        if bucket is None:
            bucket = TokenBucket(self._spam_qps, self._spam_burst, clock=self._seconds)
            self._spam[_object_key(event)] = bucket
        if not bucket.try_take():
            return None
        return correlated

    def written(self, key: tuple[str, ...], event: Mapping[str, Any]) -> None:
        """Remember the name of the Event the API server stored for ``key``."""
        seen = self._observed.get(key)
        name = (event.get("metadata") or {}).get("name")
        if seen is not None and isinstance(name, str):
            seen.name = name

    def _aggregate(
        self, event: dict[str, Any], now: datetime.datetime
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Return ``event`` keyed by itself, or the combined Event keyed by its group."""
        group = (
            *_object_key(event),
            str(event.get("type", "")),
            str(event.get("reason", "")),
            str(event.get("reportingComponent", "")),
            str(event.get("reportingInstance", "")),
        )
        seconds = now.timestamp()
        record = self._aggregates.get(group)
        if record is None or seconds - record.last_seen > self._max_interval:
            record = _Aggregate()
        record.messages.add(event["message"])
        record.last_seen = seconds
        self._aggregates[group] = record
        if len(record.messages) < self._max_events:
            return event, (*group, event["message"])
        record.messages.pop()  # the set never grows past max_events
        combined = dict(event)
        combined["message"] = (_COMBINED_PREFIX + event["message"])[:1024]
        return combined, group

    def _observe(
        self, event: dict[str, Any], key: tuple[str, ...], now: datetime.datetime
    ) -> Correlated:
        seen = self._observed.get(key)
        stamp = event_timestamp(now)
        if seen is None:
            event["count"] = 1
            event["firstTimestamp"] = event["lastTimestamp"] = stamp
            self._observed[key] = _Observation(1, stamp, event["metadata"]["name"])
            return Correlated(event, None, key)
        seen.count += 1
        event["metadata"] = {**event["metadata"], "name": seen.name}
        event["count"] = seen.count
        event["firstTimestamp"] = seen.first_timestamp
        event["lastTimestamp"] = stamp
        patch = {"count": seen.count, "lastTimestamp": stamp, "message": event["message"]}
        return Correlated(event, patch, key)
