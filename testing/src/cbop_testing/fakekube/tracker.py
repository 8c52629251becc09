"""The fake API server: the rules of its writes, over its storage.

This module owns :class:`ObjectTracker`, modelled on client-go's ``testing.ObjectTracker``
but closer to a real API server where cbop depends on it: the verbs, their
preconditions, finalizers, admission and apply. What it stores, and the lists and
watches it serves, are :mod:`~cbop_testing.fakekube.storage`'s; what a write's body may
set is :mod:`~cbop_testing.fakekube.strategy`'s. Together:

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

import copy
import time
from collections.abc import Callable, Iterable, Mapping
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
from cbop_testing.fakekube.storage import Key, Storage, group_plural
from cbop_testing.fakekube.strategy import (
    deleted_status,
    next_generation,
    prepare_create,
    prepare_update,
    rfc3339,
    same_object,
    validate_create,
)
from cbop_testing.fakekube.watch import FakeWatch

__all__ = ["STATUS_SUBRESOURCES", "ObjectTracker"]

#: ``(group, plural)`` of the resources that have a ``status`` subresource by default.
STATUS_SUBRESOURCES: Final[frozenset[tuple[str, str]]] = frozenset(
    (r.group, r.plural)
    for r in (CONFIGBUNDLES, CLUSTERCONFIGBUNDLES, DEPLOYMENTS, STATEFULSETS, DAEMONSETS)
)


class ObjectTracker:
    """Objects by resource, namespace and name, with one resourceVersion counter.

    Thread-safe: each write holds the lock of its :class:`Storage` from its checks to
    its stored outcome, so every watch sees events in resourceVersion order.

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
        self._storage = Storage()
        self._lock = self._storage.lock
        self._namespace_lifecycle = namespace_lifecycle
        self._status = frozenset(status_subresources)
        self._now = now
        self._write_managed_fields = write_managed_fields
        self._uids = 0

    # ------------------------------------------------------------------ reading

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out (``"0"`` before the first write)."""
        return self._storage.resource_version

    def has_status_subresource(self, res: Resource) -> bool:
        """Whether ``res`` has a ``status`` subresource here."""
        return group_plural(res) in self._status

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """Return a copy of the object.

        Raises:
            ApiError: 404 NotFound.
        """
        return self._storage.get(res, namespace, name)

    def objects(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Return copies of the objects of ``res`` (in ``namespace``), by namespace and name."""
        return self._storage.objects(res, namespace)

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
        """Return one page of a list object, as :meth:`Storage.list`.

        Raises:
            ApiError: 400 for a selector that does not parse; 410 Expired for a
                compacted continue token.
        """
        return self._storage.list(
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_=continue_,
        )

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
        return self._storage.watch(
            res,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            allow_bookmarks=allow_bookmarks,
        )

    def watch_count(self, res: Resource | None = None) -> int:
        """How many watches are open (of ``res``, or of any resource)."""
        return self._storage.watch_count(res)

    def bookmark(self, res: Resource | None = None) -> str:
        """Send a BOOKMARK to the watches that asked; return its resourceVersion."""
        return self._storage.bookmark(res)

    def compact(self, *, expire_watches: bool = True) -> str:
        """Forget the history up to now, as :meth:`Storage.compact`; return the oldest RV."""
        return self._storage.compact(expire_watches=expire_watches)

    def end_watches(self, res: Resource | None = None) -> int:
        """End open watches as the server does at ``timeoutSeconds``; return how many."""
        return self._storage.end_watches(res)

    # ------------------------------------------------------------------ writes

    def _new_uid(self) -> str:
        self._uids += 1
        return f"{self._uids:08x}-fa6e-4000-8000-{self._uids:012x}"

    def _finish(
        self,
        res: Resource,
        key: Key,
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
            key = self._storage.key(res, meta.get("namespace"), meta["name"])
            old = self._storage.stored(res, key)
            meta.setdefault("uid", self._new_uid())
            if "creationTimestamp" not in meta:
                meta["creationTimestamp"] = rfc3339(self._now())
            if self.has_status_subresource(res):
                meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._storage.next_rv()
            self._storage.store(res, key, new, old)
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
            key = self._storage.key(res, meta.get("namespace"), meta["name"])
            current = self._storage.stored(res, key)
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
            validate_create(res, namespace, meta)
            if res.namespaced and self._namespace_lifecycle:
                self._admit_namespace(str(namespace))
            key = self._storage.key(res, namespace, meta["name"])
            if self._storage.stored(res, key) is not None:
                raise errors.already_exists(res, meta["name"])
            prepare_create(
                res,
                namespace,
                new,
                uid=self._new_uid(),
                created=self._now(),
                has_status=self.has_status_subresource(res),
            )
            ownership = FieldOwnership()
            ownership.record_update(field_manager or "unknown", None, new)
            if dry_run:
                return copy.deepcopy(new)
            meta["resourceVersion"] = self._storage.next_rv()
            self._finish(res, key, new, ownership)
            self._storage.store(res, key, new, ownership=ownership)
            return copy.deepcopy(new)

    def _admit_namespace(self, namespace: str) -> None:
        """Refuse a create in ``namespace`` as NamespaceLifecycle admission does."""
        stored = self._storage.stored(NAMESPACES, ("", namespace))
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
            key = self._storage.key(res, namespace, name)
            if patch_type == "apply" and self._storage.stored(res, key) is None:
                applied = copy.deepcopy(dict(body))
                applied.setdefault("metadata", {})["name"] = name
                created = self.create(
                    res, namespace, applied, field_manager=manager, dry_run=dry_run
                )
                if not dry_run:
                    ownership = self._storage.ownership(res, key)
                    ownership.owners.clear()
                    ownership.record_apply(manager, applied, subresource=subresource)
                    stored = self._current(res, namespace, name)
                    self._finish(res, key, stored, ownership)
                    created = copy.deepcopy(stored)
                return created
            current = self._current(res, namespace, name)
            ownership = self._storage.ownership(res, key).copy()
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
        obj = self._storage.stored(res, self._storage.key(res, namespace, name))
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
        has_status = self.has_status_subresource(res)
        new = prepare_update(current, body, subresource, has_status=has_status)
        key = self._storage.key(res, meta_now.get("namespace"), meta_now["name"])
        owners = ownership if ownership is not None else self._storage.ownership(res, key).copy()
        if record_fields:
            owners.record_update(field_manager or "unknown", current, new, subresource=subresource)
        # A write that changes nothing, not even who owns which field (an apply of the
        # values already there does: its manager takes them), is no write.
        if same_object(new, current) and owners.owners == self._storage.ownership(res, key).owners:
            return copy.deepcopy(current)
        next_generation(new, current, has_status=has_status)
        if dry_run:
            new["metadata"]["resourceVersion"] = meta_now["resourceVersion"]
            return copy.deepcopy(new)
        new["metadata"]["resourceVersion"] = self._storage.next_rv()
        self._finish(res, key, new, owners)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._storage.drop(res, key, new)
            return copy.deepcopy(new)
        self._storage.store(res, key, new, current, ownership=owners)
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
            key = self._storage.key(res, namespace, name)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp") or dry_run:
                    return copy.deepcopy(current)
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = rfc3339(self._now())
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._storage.next_rv()
                self._storage.store(res, key, new, current)
                return copy.deepcopy(new)
            status = deleted_status(res, name, meta.get("uid"))
            if dry_run:
                return status
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._storage.next_rv()
            self._storage.drop(res, key, gone)
            return status

    def remove(self, res: Resource, namespace: str | None, name: str) -> None:
        """Delete an object at once, finalizers or not (as the garbage collector's end).

        Raises:
            ApiError: 404 NotFound.
        """
        with self._lock:
            current = self._current(res, namespace, name)
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._storage.next_rv()
            key = self._storage.key(res, namespace, name)
            self._storage.drop(res, key, gone)
