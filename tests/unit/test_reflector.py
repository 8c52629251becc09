"""The Reflector alone: list and watch into callbacks, with no informer and no handlers."""

from __future__ import annotations

import queue
import random
import threading
from typing import Any

from cbop.informers.indexer import Indexer
from cbop.informers.reflector import (
    LIST_PAGE_SIZE,
    MIN_WATCH_TIMEOUT,
    Reflector,
    strip_managed_fields,
)
from cbop.informers.staging import IndexStaging
from cbop.kube import CONFIGMAPS, ApiError
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import FakeWatch
from cbop_testing.informerharness import ScriptedListWatch
from cbop_testing.objects import bookmark, cm, ev, page
from cbop_testing.waiting import WAIT


class Sink:
    """Collects what a reflector hands over, in order, from its thread.

    Each event is recorded with the indexer's resourceVersion at the moment it is handed
    over (the reflector records an event's own resourceVersion after handing it over).
    """

    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer
        self.items: queue.Queue[tuple[str, Any, Any]] = queue.Queue()

    def replace(self, staging: IndexStaging, rv: str) -> None:
        self.items.put(("replace", staging, rv))

    def event(self, typ: str, obj: dict[str, Any]) -> None:
        self.items.put(("event", typ, (obj, self.indexer.resource_version)))

    def next(self) -> tuple[str, Any, Any]:
        return self.items.get(timeout=WAIT)


def start(fake: ScriptedListWatch, clock: FakeClock) -> tuple[Reflector, Sink, threading.Thread]:
    indexer = Indexer()
    sink = Sink(indexer)
    reflector = Reflector(
        fake,
        CONFIGMAPS,
        indexer=indexer,
        on_replace=sink.replace,
        on_event=sink.event,
        name="configmaps/ns",
        namespace="ns",
        label_selector=None,
        field_selector=None,
        read_timeout=90.0,
        clock=clock,
        rng=random.Random(0),
        transform=strip_managed_fields,
        page_size=LIST_PAGE_SIZE,
        min_watch_timeout=MIN_WATCH_TIMEOUT,
    )
    reflector.reset()
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    return reflector, sink, thread


def test_reflector_hands_lists_and_events_to_its_owner_and_tracks_the_resource_version() -> None:
    fake, clock = ScriptedListWatch(), FakeClock()
    stream = FakeWatch()
    fake.list_answers.put(page(cm("a", "5"), rv="10"))
    fake.watch_answers.put(stream)
    reflector, sink, thread = start(fake, clock)

    kind, staging, rv = sink.next()
    assert (kind, rv) == ("replace", "10")
    assert sorted(staging.items) == ["ns/a"]
    listed = staging.items["ns/a"]
    # Transformed and given kind/apiVersion before it is handed over.
    assert "managedFields" not in listed["metadata"]
    assert (listed["kind"], listed["apiVersion"]) == ("ConfigMap", "v1")
    fake.wait_watches(1)
    assert fake.watches[0]["resource_version"] == "10"

    stream.push(ev("MODIFIED", cm("a", "11")), bookmark("12"), ev("ADDED", cm("c", "13")))
    kind, typ, (obj, rv_then) = sink.next()
    assert (kind, typ, obj["metadata"]["resourceVersion"], rv_then) == (
        "event",
        "MODIFIED",
        "11",
        "10",
    )
    # Events are handed over only once the watch is up.
    assert reflector.down_since is None
    assert reflector.problem() is None
    # The bookmark advanced the resourceVersion but handed nothing over.
    kind, typ, (obj, rv_then) = sink.next()
    assert (kind, typ, obj["metadata"]["resourceVersion"], rv_then) == (
        "event",
        "ADDED",
        "13",
        "12",
    )

    reflector.stop()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert stream.closed.is_set()
    assert reflector.last_sync_resource_version() == "13"


def test_reflector_relists_consistently_after_gone_and_reports_a_failing_watch() -> None:
    fake, clock = ScriptedListWatch(), FakeClock()
    stream = FakeWatch()
    fake.list_answers.put(page(cm("a", "5"), rv="10"))
    fake.watch_answers.put(stream)
    reflector, sink, thread = start(fake, clock)
    sink.next()
    fake.wait_watches(1)

    fake.list_answers.put(page(cm("b", "15"), rv="20"))
    fake.watch_answers.put(ApiError(500, "InternalError", "etcd is down"))
    stream.push(ApiError.from_status({"kind": "Status", "code": 410, "reason": "Expired"}))
    assert clock.wait_for_waiter()
    clock.step(1.0)  # the relist backoff's first step is at most 0.8 s
    kind, staging, rv = sink.next()
    assert (kind, rv, sorted(staging.items)) == ("replace", "20", ["ns/b"])
    assert fake.lists[1]["resource_version"] is None

    # The next watch fails: the reflector is down and says why.
    assert clock.wait_for_waiter()
    problem = reflector.problem()
    assert problem is not None
    assert problem.status == 500
    assert reflector.down_since is not None

    reflector.stop()
    thread.join(WAIT)
    assert not thread.is_alive()
