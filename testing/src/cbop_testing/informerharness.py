"""A scripted list/watch server and a harness for unit tests of one informer.

This module owns :class:`ScriptedListWatch`, a :class:`~cbop_testing.fakekube.FakeKube`
whose LIST and WATCH answers the test queues one by one (pages, errors, watch streams),
so a test decides exactly what each request of a reflector gets and when; and
:class:`Harness`, one :class:`cbop.informers.SharedInformer` of ConfigMaps on it with a
:class:`~cbop_testing.clock.FakeClock` and a :class:`Recorder` of its notifications.
Tests of many informers at once serve them from the tracker of a plain ``FakeKube``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any

from cbop.informers import (
    Backoff,
    DeletedFinalStateUnknown,
    SharedInformer,
    meta_namespace_key,
)
from cbop.kube import CONFIGMAPS, Resource
from cbop.kube.jsonstream import ItemHook
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import Action, FakeKube, FakeWatch, Script
from cbop_testing.objects import page
from cbop_testing.waiting import WAIT

__all__ = ["Harness", "Recorder", "ScriptedListWatch"]

#: Options a real client leaves off the request when they are not set.
_OMITTED_WHEN_UNSET = ("shard_selector", "resource_version_match")


def _request(action: Action) -> dict[str, Any]:
    """Return the request as a dict: namespace and the options the informer set."""
    sent = {
        k: v
        for k, v in action.options.items()
        if k != "timeout" and (v is not None or k not in _OMITTED_WHEN_UNSET)
    }
    return {"namespace": action.namespace, **sent}


class ScriptedListWatch(FakeKube):
    """A fake API server whose LIST and WATCH answers are queued by the test.

    ``list_answers`` takes list pages (dicts) or exceptions, ``watch_answers`` takes
    :class:`FakeWatch` streams or exceptions; a request waits up to :data:`WAIT` real
    seconds for its answer. Every request is recorded (:attr:`lists`, :attr:`watches`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.list_answers = Script(wait=WAIT)
        self.watch_answers = Script(wait=WAIT)
        self.prepend_reactor("list", "*", self.list_answers)
        self.prepend_reactor("watch", "*", self.watch_answers)

    @property
    def lists(self) -> list[dict[str, Any]]:
        """The LIST requests: ``{"namespace": ..., "limit": ..., "continue_": ..., ...}``.

        ``shard_selector`` and ``resource_version_match`` appear only when sent.
        """
        return [_request(a) for a in self.actions if a.verb == "list"]

    @property
    def watches(self) -> list[dict[str, Any]]:
        """The WATCH requests, as :attr:`lists`."""
        return [_request(a) for a in self.actions if a.verb == "watch"]

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = 60.0,
        item_hook: ItemHook | None = None,
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        """LIST, answered from :attr:`list_answers`.

        Raises:
            AssertionError: no ``item_hook`` (an informer shapes items while they are
                decoded).
        """
        if item_hook is None:
            raise AssertionError("an informer lists with an item hook")
        return super().list(
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_=continue_,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            timeout=timeout,
            item_hook=item_hook,
            shard_selector=shard_selector,
        )

    def wait_watches(self, n: int) -> None:
        """Wait (real time) until ``n`` watches were requested."""
        self.wait_for_actions(lambda acts: sum(a.verb == "watch" for a in acts) >= n, timeout=WAIT)

    def wait_lists(self, n: int) -> None:
        """Wait (real time) until ``n`` lists were requested."""
        self.wait_for_actions(lambda acts: sum(a.verb == "list" for a in acts) >= n, timeout=WAIT)


class Recorder:
    """An event handler that records notifications as ``(kind, key, rv-or-marker)`` tuples.

    ``kind`` is ``add``, ``update`` or ``delete``; the third item is the resourceVersion,
    ``(old rv, new rv)`` for updates, or ``"tombstone"``. :attr:`raw` keeps the objects.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.raw: list[tuple[str, Any, Any]] = []
        self.cond = threading.Condition()

    def _add(self, kind: str, key: str, info: Any, a: Any, b: Any = None) -> None:
        with self.cond:
            self.events.append((kind, key, info))
            self.raw.append((kind, a, b))
            self.cond.notify_all()

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Record an add."""
        self._add("add", meta_namespace_key(obj), obj["metadata"]["resourceVersion"], obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Record an update."""
        info = (old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
        self._add("update", meta_namespace_key(new), info, old, new)

    def on_delete(self, obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> None:
        """Record a delete (a tombstone as ``"tombstone"``)."""
        if isinstance(obj, DeletedFinalStateUnknown):
            self._add("delete", obj.key, "tombstone", obj)
        else:
            self._add("delete", meta_namespace_key(obj), obj["metadata"]["resourceVersion"], obj)

    def wait(self, n: int) -> list[tuple[str, str, Any]]:
        """Wait (real time) for ``n`` notifications; return them all.

        Raises:
            AssertionError: fewer arrived within :data:`WAIT`.
        """
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.events) >= n, WAIT):
                raise AssertionError(f"{n} notifications not reached: {self.events}")
            return list(self.events)


class Harness:
    """One ConfigMap informer on a :class:`ScriptedListWatch`, a FakeClock at 1000 s.

    Keyword arguments go to :class:`SharedInformer` (default: no resync, a backoff
    without jitter: 0.8, 1.6, 3.2 s, ...).
    """

    def __init__(self, **kwargs: Any) -> None:
        self.clock = FakeClock(1000.0)
        self.fake = ScriptedListWatch()
        self.rec = Recorder()
        kwargs.setdefault("resync_period", 0)
        kwargs.setdefault("backoff", Backoff(self.clock, rand=lambda: 0.0))
        self.informer = SharedInformer(
            self.fake,
            CONFIGMAPS,
            clock=self.clock,
            rng=random.Random(1),
            **kwargs,
        )
        self.informer.add_event_handler(self.rec)

    def start(self, *items: dict[str, Any], rv: str = "10") -> FakeWatch:
        """Start the informer: its list gets ``items`` at ``rv``; return its watch stream."""
        self.fake.list_answers.put(page(*items, rv=rv))
        stream = FakeWatch()
        self.fake.watch_answers.put(stream)
        self.informer.start()
        self.fake.wait_watches(1)
        return stream

    def stop(self) -> None:
        """Stop the informer."""
        self.informer.stop()
