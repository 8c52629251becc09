"""The write verbs of the Kubernetes client: create, update, patch and delete.

This module owns :class:`WriteVerbs`, the part of :class:`cbop.kube.KubeClient` that
writes (POST, PUT, PATCH and DELETE with their ``fieldManager``, ``dryRun`` and
``DeleteOptions``), and :data:`PATCH_CONTENT_TYPES`. Every caller of the API reaches
them through :class:`~cbop.kube.KubeClient`, which supplies the
:class:`~cbop.kube.transport.Transport` they send through (where the write fence is
checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.kube.resources import Resource
from cbop.kube.transport import Transport

__all__ = ["PATCH_CONTENT_TYPES", "WriteVerbs"]

#: ``patch_type`` -> ``Content-Type`` of a PATCH request.
PATCH_CONTENT_TYPES: Final[Mapping[str, str]] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


class WriteVerbs:
    """POST, PUT, PATCH and DELETE over the client's transport (a base of :class:`KubeClient`).

    All verbs raise :class:`ApiError` for a non-2xx answer, :class:`ConnectionFailed`
    when no answer arrived, and :class:`LeaseNotHeld` when the client's write fence is
    closed.
    """

    _transport: Transport

    @staticmethod
    def _resource_name(res: Resource, subresource: str | None) -> str:
        return f"{res.plural}/{subresource}" if subresource else res.plural

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """POST a new object; returns the created object.

        ``kind``/``apiVersion`` are filled in from ``res`` when missing.

        Raises:
            ApiError: ``is_already_exists``, ``is_invalid``, ``is_forbidden``, ...
            ConnectionFailed: no answer.
        """
        obj = dict(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        return self._transport.call(
            "create",
            res.plural,
            "POST",
            res.path(namespace),
            query=_write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
        )

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
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """PUT a whole object (optimistic concurrency via ``metadata.resourceVersion``).

        Raises:
            ApiError: ``is_conflict`` for a stale resourceVersion, ``is_not_found``,
                ``is_invalid``, ...
            ConnectionFailed: no answer.
        """
        obj = dict(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        return self._transport.call(
            "update",
            self._resource_name(res, subresource),
            "PUT",
            res.path(namespace, name, subresource),
            query=_write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
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
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """PATCH an object; returns the patched object.

        Args:
            res: the collection.
            namespace: the object's namespace (``None`` if cluster-scoped).
            name: the object's name.
            body: a dict (merge, strategic, apply) or a list of operations (json).
            patch_type: ``merge`` (RFC 7386), ``json`` (RFC 6902), ``strategic``, or
                ``apply`` (server-side apply; needs ``field_manager``, default ``cbop``).
            subresource: e.g. ``"status"``.
            field_manager: ``fieldManager`` query parameter.
            force: server-side apply ``force`` (take ownership of conflicting fields).
            dry_run: validate and admit, but do not persist (``dryRun=All``).
            timeout: seconds for the connection and for each socket read.

        Raises:
            ValueError: unknown ``patch_type``.
            ApiError: ``is_not_found``, ``is_conflict`` (apply conflicts),
                ``is_invalid``, ...
            ConnectionFailed: no answer.
        """
        try:
            content_type = PATCH_CONTENT_TYPES[patch_type]
        except KeyError:
            raise ValueError(
                f"unknown patch_type {patch_type!r}; one of {sorted(PATCH_CONTENT_TYPES)}"
            ) from None
        if patch_type == "apply" and field_manager is None:
            field_manager = "cbop"
        query = _write_query(field_manager, dry_run)
        if force is not None:
            query["force"] = force
        return self._transport.call(
            "patch",
            self._resource_name(res, subresource),
            "PATCH",
            res.path(namespace, name, subresource),
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """DELETE an object with ``DeleteOptions``.

        Args:
            res: the collection.
            namespace: the object's namespace (``None`` if cluster-scoped).
            name: the object's name.
            preconditions: ``{"uid": ..., "resourceVersion": ...}``; a mismatch is a 409.
            propagation_policy: ``Foreground``, ``Background`` or ``Orphan``.
            grace_period_seconds: ``gracePeriodSeconds`` of the DeleteOptions.
            dry_run: validate, but do not delete (``dryRun=All``).
            timeout: seconds for the connection and for each socket read.

        Returns:
            The object (being deleted, e.g. with finalizers) or a ``Status``.

        Raises:
            ApiError: ``is_not_found``, ``is_conflict`` (precondition failed), ...
            ConnectionFailed: no answer.
        """
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if dry_run:
            options["dryRun"] = ["All"]
        return self._transport.call(
            "delete",
            res.plural,
            "DELETE",
            res.path(namespace, name),
            body=options,
            timeout=timeout,
        )


def _write_query(field_manager: str | None, dry_run: bool) -> dict[str, str | int | bool]:
    query: dict[str, str | int | bool] = {}
    if field_manager:
        query["fieldManager"] = field_manager
    if dry_run:
        query["dryRun"] = "All"
    return query
