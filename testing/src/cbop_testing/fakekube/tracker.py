"""The fake API server's storage: objects, resourceVersions, list and watch.

This module owns :class:`ObjectTracker`, modelled on client-go's ``testing.ObjectTracker``
but closer to a real API server where cbop depends on it:

* one resourceVersion counter across every resource (as etcd's revision); a write that
  changes nothing (no field, and no field's owner) gets no new resourceVersion and
  sends no watch event;
* ``metadata.generation`` is 1 on create and grows on spec changes for resources with
  a status subresource (:data:`STATUS_SUBRESOURCES`); their main resource ignores
  ``status`` and their ``status`` subresource writes only ``status``;
* ``metadata.resourceVersion`` in an update (or in a patch) is a precondition (409
  Conflict); DELETE preconditions on ``uid`` and ``resourceVersion``;
* finalizers: a DELETE of an object with finalizers sets ``deletionTimestamp``; the
  update that removes the last finalizer deletes it;
* list with label selectors (``=``, ``!=``, ``in``, ``notin``, exists) and field selectors
  on ``metadata.name`` / ``metadata.namespace``, paged with ``limit`` and ``continue``;
* watch from a resourceVersion, replaying what happened since, BOOKMARK events on
  demand (:meth:`ObjectTracker.bookmark`), and ``410 Expired`` for a resourceVersion
  older than the last :meth:`ObjectTracker.compact`;
* dry runs answer as the write would and store nothing;
* with ``namespace_lifecycle``, creates in a namespace the tracker does not store are
  ``404 NotFound`` and in one being deleted ``403 Forbidden`` (cause
  ``NamespaceTerminating``), as the API server's NamespaceLifecycle admission plugin;
* server-side apply and field ownership as :mod:`cbop_testing.fakekube.fields` models it.

Tests seed objects with :meth:`ObjectTracker.add` and write as another client (kubectl,
another controller) with :meth:`ObjectTracker.put`.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    STATEFULSETS,
    Resource,
)
from cbop_testing.fakekube import errors
from cbop_testing.fakekube.fields import FieldOwnership, remove_path
from cbop_testing.fakekube.patch import JsonPatchError, apply_patch, merge_patch
from cbop_testing.fakekube.selectors import FieldSelector, LabelSelector
from cbop_testing.fakekube.watch import FakeWatch

__all__ = ["STATUS_SUBRESOURCES", "ObjectTracker"]

#: ``(group, plural)`` of the resources that have a ``status`` subresource by default.
STATUS_SUBRESOURCES: Final[frozenset[tuple[str, str]]] = frozenset(
    (r.group, r.plural)
    for r in (CONFIGBUNDLES, CLUSTERCONFIGBUNDLES, DEPLOYMENTS, STATEFULSETS, DAEMONSETS)
)

_GroupPlural = tuple[str, str]
_Key = tuple[str, str]  # (namespace or "", name)


def _gp(res: Resource) -> _GroupPlural:
    return (res.group, res.plural)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return the object without the fields a write sets by itself."""
    out = copy.deepcopy(dict(obj))
    meta = out.get("metadata") or {}
    for key in ("resourceVersion", "managedFields", "generation"):
        meta.pop(key, None)
    return out


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@dataclass
class _Watch:
    gp: _GroupPlural
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    stream: FakeWatch


@dataclass
class _Event:
    rv: int
    gp: _GroupPlural
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None = field(default=None)


class ObjectTracker:
    """Objects by resource, namespace and name, with one resourceVersion counter.

    Thread-safe: one lock guards the objects, the history and the watches; watch
    streams are fed under it, so every watch sees events in resourceVersion order.

    Args:
        status_subresources: ``(group, plural)`` of resources with a ``status``
            subresource (default :data:`STATUS_SUBRESOURCES`).
        now: wall-clock seconds for ``creationTimestamp`` and ``deletionTimestamp``
            (default ``time.time``; tests may pass a fake clock's ``now``).
        write_managed_fields: also write ``metadata.managedFields`` into objects
            (ownership is always tracked for apply conflicts; off by default so that
            objects compare equal to what tests build).
        namespace_lifecycle: refuse creates of namespaced objects in a namespace that
            is not stored or is being deleted (off by default, so tests need not seed
            Namespaces).
    """

    def __init__(
        self,
        *,
        status_subresources: Iterable[tuple[str, str]] = STATUS_SUBRESOURCES,
        now: Callable[[], float] = time.time,
        write_managed_fields: bool = False,
        namespace_lifecycle: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        self._namespace_lifecycle = namespace_lifecycle
        self._status = frozenset(status_subresources)
        self._now = now
        self._write_managed_fields = write_managed_fields
        self._rv = 0
        self._floor = 0
        self._uids = 0
        self._objects: dict[_GroupPlural, dict[_Key, dict[str, Any]]] = {}
        self._fields: dict[tuple[_GroupPlural, _Key], FieldOwnership] = {}
        self._history: list[_Event] = []
        self._watches: list[_Watch] = []

    # ------------------------------------------------------------------ reading

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out (``"0"`` before the first write)."""
        with self._lock:
            return str(self._rv)

    def has_status_subresource(self, res: Resource) -> bool:
        """Whether ``res`` has a ``status`` subresource here."""
        return _gp(res) in self._status

    def _key(self, res: Resource, namespace: str | None, name: str) -> _Key:
        return ((namespace or "") if res.namespaced else "", name)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """Return a copy of the object.

        Raises:
            ApiError: 404 NotFound.
        """
        with self._lock:
            obj = self._objects.get(_gp(res), {}).get(self._key(res, namespace, name))
            if obj is None:
                raise errors.not_found(res, name)
            return copy.deepcopy(obj)

    def objects(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Return copies of the objects of ``res`` (in ``namespace``), by namespace and name."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for key, obj in sorted(self._objects.get(_gp(res), {}).items())
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
        labels, fields = self._selectors(label_selector, field_selector)
        with self._lock:
            list_rv = self._rv
            start = ""
            if continue_:
                try:
                    token = json.loads(base64.urlsafe_b64decode(continue_.encode()))
                    list_rv, start = int(token["rv"]), str(token["start"])
                except (ValueError, KeyError, TypeError):
                    raise errors.bad_request(f"invalid continue token {continue_!r}") from None
                if list_rv < self._floor:
                    raise errors.status_error(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue "
                        "parameter, or use the continue token in this response to retrieve "
                        "the remainder of the results.",
                    )
            items = [
                obj
                for key, obj in sorted(self._objects.get(_gp(res), {}).items())
                if (namespace is None or key[0] == namespace)
                and "/".join(key) > start
                and labels.matches(obj)
                and fields.matches(obj)
            ]
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if limit and len(items) > limit:
                last = items[limit - 1]["metadata"]
                key = self._key(res, last.get("namespace"), last["name"])
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

    @staticmethod
    def _selectors(
        label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            return LabelSelector.parse(label_selector), FieldSelector.parse(field_selector)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None

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
        """Open a watch.

        ``resource_version`` ``None``/``""``/``"0"``: synthetic ADDED events for the
        matching objects, then what happens next. A number: every matching change after
        it, then what happens next; older than the last :meth:`compact`, the stream
        carries one ``ERROR`` event with ``410 Expired`` and ends, as a real server's
        watch cache answers. A label selector sees an object that stops matching as
        DELETED and one that starts matching as ADDED.

        Raises:
            ApiError: 400 for a selector that does not parse.
        """
        labels, fields = self._selectors(label_selector, field_selector)
        with self._lock:
            stream = FakeWatch(allow_bookmarks=allow_bookmarks)
            watch = _Watch(_gp(res), namespace if res.namespaced else None, labels, fields, stream)
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
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def watch_count(self, res: Resource | None = None) -> int:
        """How many watches are open (of ``res``, or of any resource)."""
        with self._lock:
            return sum(1 for w in self._watches if res is None or w.gp == _gp(res))

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
        event = _Event(self._rv, _gp(res), kind, copy.deepcopy(obj), copy.deepcopy(old))
        self._history.append(event)
        for watch in list(self._watches):
            self._send(watch, event)

    def bookmark(self, res: Resource | None = None) -> str:
        """Send a BOOKMARK with the current resourceVersion to the watches that asked.

        Returns the resourceVersion sent.
        """
        with self._lock:
            rv = str(self._rv)
            for watch in list(self._watches):
                if (res is None or watch.gp == _gp(res)) and watch.stream.allow_bookmarks:
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
        with self._lock:
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
        with self._lock:
            ended = [w for w in self._watches if res is None or w.gp == _gp(res)]
            for watch in ended:
                watch.stream.end()
                self._watches.remove(watch)
            return len(ended)

    # ------------------------------------------------------------------ writes

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _new_uid(self) -> str:
        self._uids += 1
        return f"{self._uids:08x}-fa6e-4000-8000-{self._uids:012x}"

    def _ownership(self, res: Resource, key: _Key) -> FieldOwnership:
        return self._fields.setdefault((_gp(res), key), FieldOwnership())

    def _finish(
        self,
        res: Resource,
        key: _Key,
        obj: dict[str, Any],
        ownership: FieldOwnership,
    ) -> None:
        if self._write_managed_fields:
            managed = ownership.managed_fields(res.api_version)
            if managed:
                obj["metadata"]["managedFields"] = managed
            else:
                obj["metadata"].pop("managedFields", None)

    def add(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Seed an object as it is (status, finalizers, deletionTimestamp included).

        A stored object of the same name is replaced. The object gets a new
        resourceVersion and, when missing, a uid, a creationTimestamp and (for
        resources with a status subresource) generation 1. Watches see it.
        Returns a copy of what is stored.
        """
        new = copy.deepcopy(dict(obj))
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        meta = new.setdefault("metadata", {})
        with self._lock:
            key = self._key(res, meta.get("namespace"), meta["name"])
            old = self._objects.get(_gp(res), {}).get(key)
            meta.setdefault("uid", self._new_uid())
            if "creationTimestamp" not in meta:
                meta["creationTimestamp"] = _rfc3339(self._now())
            if self.has_status_subresource(res):
                meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._next_rv()
            self._objects.setdefault(_gp(res), {})[key] = new
            self._emit(res, "MODIFIED" if old is not None else "ADDED", new, old)
            return copy.deepcopy(new)

    def put(
        self, res: Resource, obj: Mapping[str, Any], *, field_manager: str = "kubectl"
    ) -> dict[str, Any]:
        """Write as another client would (``kubectl apply``, another controller).

        Creates the object, or replaces the stored one (status included), keeping its
        uid and creationTimestamp. The write is unconditional: a
        ``metadata.resourceVersion`` in ``obj`` is ignored. The same rules as any write
        apply (no change: no new resourceVersion; generation; finalizers).
        """
        written = copy.deepcopy(dict(obj))
        written.setdefault("metadata", {}).pop("resourceVersion", None)
        obj = written
        meta = written["metadata"]
        with self._lock:
            key = self._key(res, meta.get("namespace"), meta["name"])
            current = self._objects.get(_gp(res), {}).get(key)
            if current is None:
                body = copy.deepcopy(dict(obj))
                body["metadata"].pop("resourceVersion", None)
                status = body.get("status")
                created = self.create(res, meta.get("namespace"), body, field_manager=field_manager)
                if status is not None and self.has_status_subresource(res):
                    created["status"] = status
                    return self.update(res, meta.get("namespace"), meta["name"], created, "status")
                return created
            new = copy.deepcopy(dict(obj))
            if not self.has_status_subresource(res) or "status" not in new:
                return self.update(
                    res, meta.get("namespace"), meta["name"], new, field_manager=field_manager
                )
            written = self.update(
                res, meta.get("namespace"), meta["name"], new, field_manager=field_manager
            )
            written["status"] = new["status"]
            return self.update(
                res,
                meta.get("namespace"),
                meta["name"],
                written,
                "status",
                field_manager=field_manager,
            )

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create an object, as POST.

        ``metadata.generateName`` makes a name; ``status`` is dropped for resources with
        a status subresource.

        Raises:
            ApiError: 409 AlreadyExists; 422 Invalid without a name; 400 when the body's
                namespace differs from ``namespace`` or it carries a resourceVersion.
        """
        new = copy.deepcopy(dict(body))
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        meta = new.setdefault("metadata", {})
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{self._uids + 1:05x}"
            if not meta.get("name"):
                raise errors.invalid(
                    res.kind,
                    "",
                    [("metadata.name", "Required value: name or generateName is required")],
                )
            if res.namespaced:
                if meta.get("namespace") not in (None, "", namespace):
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                meta["namespace"] = namespace
            if meta.get("resourceVersion"):
                raise errors.bad_request(
                    "resourceVersion should not be set on objects to be created"
                )
            if res.namespaced and self._namespace_lifecycle:
                self._admit_namespace(str(namespace))
            key = self._key(res, namespace, meta["name"])
            if key in self._objects.get(_gp(res), {}):
                raise errors.already_exists(res, meta["name"])
            meta["uid"] = self._new_uid()
            meta["creationTimestamp"] = _rfc3339(self._now())
            for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(transient, None)
            if self.has_status_subresource(res):
                meta["generation"] = 1
                new.pop("status", None)
            ownership = FieldOwnership()
            ownership.record_update(field_manager or "unknown", None, new)
            if dry_run:
                return copy.deepcopy(new)
            meta["resourceVersion"] = self._next_rv()
            self._fields[(_gp(res), key)] = ownership
            self._finish(res, key, new, ownership)
            self._objects.setdefault(_gp(res), {})[key] = new
            self._emit(res, "ADDED", new)
            return copy.deepcopy(new)

    def _admit_namespace(self, namespace: str) -> None:
        """Refuse a create in ``namespace`` as NamespaceLifecycle admission does."""
        stored = self._objects.get(_gp(NAMESPACES), {}).get(("", namespace))
        if stored is None:
            raise errors.not_found(NAMESPACES, namespace)
        if stored["metadata"].get("deletionTimestamp"):
            raise errors.namespace_terminating(namespace)

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (or its ``status``), as PUT.

        Raises:
            ApiError: 404 NotFound; 409 Conflict on a stale ``metadata.resourceVersion``.
        """
        with self._lock:
            current = self._current(res, namespace, name)
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(res, name)
            return self._write(
                res,
                current,
                copy.deepcopy(dict(body)),
                subresource,
                field_manager=field_manager,
                dry_run=dry_run,
            )

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch an object, as PATCH (``merge``, ``strategic``, ``json`` or ``apply``).

        A resourceVersion the patch sets is a precondition. ``apply`` creates a missing
        object, and refuses to change fields other managers own unless ``force``.

        Raises:
            ApiError: 404 NotFound (not for apply); 409 Conflict (stale
                resourceVersion, apply conflicts); 422 Invalid for a JSON patch that
                cannot be applied.
        """
        manager = field_manager or "unknown"
        with self._lock:
            key = self._key(res, namespace, name)
            if patch_type == "apply" and key not in self._objects.get(_gp(res), {}):
                applied = copy.deepcopy(dict(body))
                applied.setdefault("metadata", {})["name"] = name
                created = self.create(
                    res, namespace, applied, field_manager=manager, dry_run=dry_run
                )
                if not dry_run:
                    ownership = self._ownership(res, key)
                    ownership.owners.clear()
                    ownership.record_apply(manager, applied, subresource=subresource)
                    stored = self._objects[_gp(res)][key]
                    self._finish(res, key, stored, ownership)
                    created = copy.deepcopy(stored)
                return created
            current = self._current(res, namespace, name)
            ownership = self._ownership(res, key).copy()
            if patch_type == "apply":
                found = ownership.conflicts(manager, current, body, subresource=subresource)
                if found and not force:
                    raise errors.apply_conflict(res, name, found)
                patched = merge_patch(current, body)
                for path in ownership.record_apply(manager, body, subresource=subresource):
                    remove_path(patched, path)
            else:
                try:
                    patched = apply_patch(current, body, patch_type)
                except JsonPatchError as exc:
                    if exc.failed_test:
                        raise errors.status_error(422, "Invalid", str(exc)) from None
                    raise errors.invalid(res.kind, name, [("patch", str(exc))]) from None
            rv = (patched.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(res, name)
            record = patch_type != "apply"
            return self._write(
                res,
                current,
                patched,
                subresource,
                field_manager=manager,
                dry_run=dry_run,
                record_fields=record,
                ownership=ownership,
            )

    def _current(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._objects.get(_gp(res), {}).get(self._key(res, namespace, name))
        if obj is None:
            raise errors.not_found(res, name)
        return obj

    def _write(
        self,
        res: Resource,
        current: dict[str, Any],
        body: dict[str, Any],
        subresource: str | None,
        *,
        field_manager: str | None,
        dry_run: bool,
        record_fields: bool = True,
        ownership: FieldOwnership | None = None,
    ) -> dict[str, Any]:
        """Store ``body`` over ``current`` under the rules of the module docstring."""
        meta_now = current["metadata"]
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
        else:
            new = body
            new.setdefault("apiVersion", current.get("apiVersion"))
            new.setdefault("kind", current.get("kind"))
            meta = new.setdefault("metadata", {})
            for fixed in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if fixed in meta_now:
                    meta[fixed] = meta_now[fixed]
                else:
                    meta.pop(fixed, None)
            if self.has_status_subresource(res):
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
        key = self._key(res, meta_now.get("namespace"), meta_now["name"])
        owners = ownership if ownership is not None else self._ownership(res, key).copy()
        if record_fields:
            owners.record_update(field_manager or "unknown", current, new, subresource=subresource)
        # A write that changes nothing, not even who owns which field (an apply of the
        # values already there does: its manager takes them), is no write.
        if (
            _comparable(new) == _comparable(current)
            and owners.owners == self._ownership(res, key).owners
        ):
            return copy.deepcopy(current)
        if self.has_status_subresource(res) and _spec_of(new) != _spec_of(current):
            new["metadata"]["generation"] = int(meta_now.get("generation", 1)) + 1
        if dry_run:
            new["metadata"]["resourceVersion"] = meta_now["resourceVersion"]
            return copy.deepcopy(new)
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._fields[(_gp(res), key)] = owners
        self._finish(res, key, new, owners)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self._objects[_gp(res)][key]
            self._fields.pop((_gp(res), key), None)
            self._emit(res, "DELETED", new)
            return copy.deepcopy(new)
        self._objects[_gp(res)][key] = new
        self._emit(res, "MODIFIED", new, current)
        return copy.deepcopy(new)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete an object, as DELETE.

        With finalizers the object only gets a ``deletionTimestamp`` (and is returned);
        without, it goes, and a ``Status`` of success is returned.

        Raises:
            ApiError: 404 NotFound; 409 Conflict when a precondition fails.
        """
        with self._lock:
            current = self._current(res, namespace, name)
            meta = current["metadata"]
            for field_name in ("uid", "resourceVersion"):
                want = (preconditions or {}).get(field_name)
                if want is not None and want != meta.get(field_name):
                    raise errors.precondition_failed(
                        res, name, field_name, want, str(meta.get(field_name))
                    )
            key = self._key(res, namespace, name)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp") or dry_run:
                    return copy.deepcopy(current)
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = _rfc3339(self._now())
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._objects[_gp(res)][key] = new
                self._emit(res, "MODIFIED", new, current)
                return copy.deepcopy(new)
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": name,
                    "group": res.group,
                    "kind": res.plural,
                    "uid": meta.get("uid"),
                },
            }
            if dry_run:
                return status
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            del self._objects[_gp(res)][key]
            self._fields.pop((_gp(res), key), None)
            self._emit(res, "DELETED", gone)
            return status

    def remove(self, res: Resource, namespace: str | None, name: str) -> None:
        """Delete an object at once, finalizers or not (as the garbage collector's end).

        Raises:
            ApiError: 404 NotFound.
        """
        with self._lock:
            current = self._current(res, namespace, name)
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            key = self._key(res, namespace, name)
            del self._objects[_gp(res)][key]
            self._fields.pop((_gp(res), key), None)
            self._emit(res, "DELETED", gone)
