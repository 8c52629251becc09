"""The fake API server's storage: versioned objects, paged lists, and the watches on them.

This module owns :class:`Storage`, where :class:`~cbop_testing.fakekube.ObjectTracker`
keeps what its writes decide to store, as the API server keeps it in etcd with the
watch cache in front: one resourceVersion counter across every resource (etcd's
revision), each object's field owners, lists paged with continue tokens, and watches
that replay the history from a resourceVersion until :meth:`Storage.compact` forgets it
(``410 Expired`` after that). The rules of a write (preconditions, generation,
finalizers, apply) are the tracker's; the storage stores the outcome and tells the
watches.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cbop.kube import Resource
from cbop_testing.fakekube import errors
from cbop_testing.fakekube.fields import FieldOwnership
from cbop_testing.fakekube.selectors import FieldSelector, LabelSelector
from cbop_testing.fakekube.watch import FakeWatch

__all__ = ["GroupPlural", "Key", "Storage", "group_plural"]

#: A resource's ``(group, plural)``: what objects are stored under.
GroupPlural = tuple[str, str]
#: An object's ``(namespace or "", name)``.
Key = tuple[str, str]


def group_plural(res: Resource) -> GroupPlural:
    """Return ``(res.group, res.plural)``."""
    return (res.group, res.plural)


@dataclass
class _Watch:
    gp: GroupPlural
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    stream: FakeWatch


@dataclass
class _Event:
    rv: int
    gp: GroupPlural
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None = field(default=None)


class Storage:
    """Objects by resource and key, one resourceVersion counter, the history and watches.

    Thread-safe: every method takes :attr:`lock` (re-entrant), and the tracker holds it
    across the steps of one write. Watch streams are fed under it, so every watch sees
    events in resourceVersion order. Objects handed out are copies, except those of
    :meth:`stored` and :meth:`ownership`, which the caller changes under the lock.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._rv = 0
        self._floor = 0
        self._objects: dict[GroupPlural, dict[Key, dict[str, Any]]] = {}
        self._fields: dict[tuple[GroupPlural, Key], FieldOwnership] = {}
        self._history: list[_Event] = []
        self._watches: list[_Watch] = []

    # ------------------------------------------------------------------ writing

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out (``"0"`` before the first write)."""
        with self.lock:
            return str(self._rv)

    def next_rv(self) -> str:
        """Hand out the next resourceVersion."""
        with self.lock:
            self._rv += 1
            return str(self._rv)

    @staticmethod
    def key(res: Resource, namespace: str | None, name: str) -> Key:
        """Return the key of ``namespace/name`` (the namespace is ignored if cluster-scoped)."""
        return ((namespace or "") if res.namespaced else "", name)

    def stored(self, res: Resource, key: Key) -> dict[str, Any] | None:
        """Return the stored object itself (not a copy), or None."""
        return self._objects.get(group_plural(res), {}).get(key)

    def ownership(self, res: Resource, key: Key) -> FieldOwnership:
        """Return the object's field owners (made empty on first use), not a copy."""
        with self.lock:
            return self._fields.setdefault((group_plural(res), key), FieldOwnership())

    def store(
        self,
        res: Resource,
        key: Key,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        ownership: FieldOwnership | None = None,
    ) -> None:
        """Store ``obj`` (its resourceVersion already set) and tell the watches.

        Args:
            res: the object's resource.
            key: the object's key.
            obj: what to store; kept as given.
            old: what it replaces (a MODIFIED event), or None (ADDED).
            ownership: its field owners from now on (default: unchanged).
        """
        with self.lock:
            self._objects.setdefault(group_plural(res), {})[key] = obj
            if ownership is not None:
                self._fields[(group_plural(res), key)] = ownership
            self._emit(res, "MODIFIED" if old is not None else "ADDED", obj, old)

    def drop(self, res: Resource, key: Key, gone: dict[str, Any]) -> None:
        """Remove the object and its field owners; the watches see ``gone`` DELETED."""
        with self.lock:
            del self._objects[group_plural(res)][key]
            self._fields.pop((group_plural(res), key), None)
            self._emit(res, "DELETED", gone)

    # ------------------------------------------------------------------ reading

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """Return a copy of the object.

        Raises:
            ApiError: 404 NotFound.
        """
        with self.lock:
            obj = self.stored(res, self.key(res, namespace, name))
            if obj is None:
                raise errors.not_found(res, name)
            return copy.deepcopy(obj)

    def objects(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Return copies of the objects of ``res`` (in ``namespace``), by namespace and name."""
        with self.lock:
            return [
                copy.deepcopy(obj)
                for key, obj in sorted(self._objects.get(group_plural(res), {}).items())
                if namespace is None or key[0] == namespace
            ]

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
    ) -> dict[str, Any]:
        """Return a list object (``items`` sorted by namespace and name), one page of it.

        ``continue`` tokens carry the list's resourceVersion and the last key served;
        a later page shows the objects as they are then (a real server shows the
        snapshot), and a token older than the last :meth:`compact` is ``410 Expired``.

        Raises:
            ApiError: 400 for a selector that does not parse; 410 Expired for a
                compacted continue token.
        """
        labels, fields = _selectors(label_selector, field_selector)
        with self.lock:
            list_rv = self._rv
            start = ""
            if continue_:
                list_rv, start = self._continue_from(continue_)
            items = [
                obj
                for key, obj in sorted(self._objects.get(group_plural(res), {}).items())
                if (namespace is None or key[0] == namespace)
                and "/".join(key) > start
                and labels.matches(obj)
                and fields.matches(obj)
            ]
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if limit and len(items) > limit:
                last = items[limit - 1]["metadata"]
                key = self.key(res, last.get("namespace"), last["name"])
                token_text = json.dumps({"rv": list_rv, "start": "/".join(key)})
                meta["continue"] = base64.urlsafe_b64encode(token_text.encode()).decode()
                meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
            return {
                "apiVersion": res.api_version,
                "kind": f"{res.kind}List",
                "metadata": meta,
                "items": copy.deepcopy(items),
            }

    def _continue_from(self, token: str) -> tuple[int, str]:
        """Return the resourceVersion and the last key of a continue token."""
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            list_rv, start = int(decoded["rv"]), str(decoded["start"])
        except (ValueError, KeyError, TypeError):
            raise errors.bad_request(f"invalid continue token {token!r}") from None
        if list_rv < self._floor:
            raise errors.status_error(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue "
                "parameter, or use the continue token in this response to retrieve "
                "the remainder of the results.",
            )
        return list_rv, start

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
    ) -> FakeWatch:
        """Open a watch (see :meth:`cbop_testing.fakekube.ObjectTracker.watch`).

        Raises:
            ApiError: 400 for a selector that does not parse.
        """
        labels, fields = _selectors(label_selector, field_selector)
        with self.lock:
            stream = FakeWatch(allow_bookmarks=allow_bookmarks)
            watch = _Watch(
                group_plural(res), namespace if res.namespaced else None, labels, fields, stream
            )
            stream.on_close(lambda: self._unwatch(watch))
            if resource_version in (None, "", "0"):
                for obj in self.objects(res, watch.namespace):
                    if labels.matches(obj) and fields.matches(obj):
                        stream.push({"type": "ADDED", "object": obj})
            else:
                since = int(resource_version)
                if since < self._floor:
                    stream.push(self._expired_event(since))
                    stream.end()
                    return stream
                for event in self._history:
                    if event.rv > since:
                        self._send(watch, event)
            self._watches.append(watch)
            return stream

    def _expired_event(self, since: int) -> dict[str, Any]:
        err = errors.expired(since, self._floor)
        return {"type": "ERROR", "object": err.body}

    def _unwatch(self, watch: _Watch) -> None:
        with self.lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def watch_count(self, res: Resource | None = None) -> int:
        """How many watches are open (of ``res``, or of any resource)."""
        with self.lock:
            return sum(1 for w in self._watches if res is None or w.gp == group_plural(res))

    def _send(self, watch: _Watch, event: _Event) -> None:
        if watch.gp != event.gp:
            return
        meta = event.obj.get("metadata") or {}
        if watch.namespace is not None and meta.get("namespace") != watch.namespace:
            return

        def match(obj: Mapping[str, Any] | None) -> bool:
            return obj is not None and watch.labels.matches(obj) and watch.fields.matches(obj)

        now, before = match(event.obj), match(event.old)
        kind = event.type
        if kind == "MODIFIED":
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                kind = "DELETED"
            elif not now:
                return
        elif not now:
            return
        watch.stream.push({"type": kind, "object": copy.deepcopy(event.obj)})

    def _emit(
        self, res: Resource, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        event = _Event(self._rv, group_plural(res), kind, copy.deepcopy(obj), copy.deepcopy(old))
        self._history.append(event)
        for watch in list(self._watches):
            self._send(watch, event)

    def bookmark(self, res: Resource | None = None) -> str:
        """Send a BOOKMARK with the current resourceVersion to the watches that asked.

        Returns the resourceVersion sent.
        """
        with self.lock:
            rv = str(self._rv)
            for watch in list(self._watches):
                if (res is None or watch.gp == group_plural(res)) and watch.stream.allow_bookmarks:
                    watch.stream.push(
                        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": rv}}}
                    )
            return rv

    def compact(self, *, expire_watches: bool = True) -> str:
        """Forget the history up to now, as etcd compaction with the watch cache behind it.

        A watch or a continue token from an older resourceVersion then gets ``410
        Expired``. With ``expire_watches`` every open watch also receives that ERROR
        event and ends (as a watch that fell behind the cache), which sends an
        informer to relist. Returns the new oldest resourceVersion.
        """
        with self.lock:
            self._floor = self._rv
            self._history.clear()
            if expire_watches:
                for watch in list(self._watches):
                    watch.stream.push(self._expired_event(max(self._floor - 1, 0)))
                    watch.stream.end()
                self._watches.clear()
            return str(self._floor)

    def end_watches(self, res: Resource | None = None) -> int:
        """End open watches as the server does at ``timeoutSeconds``; return how many."""
        with self.lock:
            ended = [w for w in self._watches if res is None or w.gp == group_plural(res)]
            for watch in ended:
                watch.stream.end()
                self._watches.remove(watch)
            return len(ended)


def _selectors(
    label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, FieldSelector]:
    try:
        return LabelSelector.parse(label_selector), FieldSelector.parse(field_selector)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None
