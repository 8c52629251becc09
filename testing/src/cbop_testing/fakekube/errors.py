"""API errors as the API server words them, for the fake API server and its tests.

This module builds :class:`cbop.kube.ApiError` values carrying the ``metav1.Status``
body, reason, code and message that apimachinery's ``k8s.io/apimachinery/pkg/api/errors``
constructors (``NewNotFound``, ``NewAlreadyExists``, ``NewConflict``, ``NewInvalid``,
``NewResourceExpired``, ...) produce, so code under test sees exactly what a real
server would send.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cbop.kube import ApiError, ConnectionFailed, Resource

__all__ = [
    "already_exists",
    "apply_conflict",
    "bad_request",
    "conflict",
    "connection_refused",
    "expired",
    "forbidden",
    "internal_error",
    "invalid",
    "namespace_terminating",
    "not_found",
    "precondition_failed",
    "status_error",
    "too_many_requests",
]


def _qualified(res: Resource) -> str:
    """``configmaps`` or ``configbundles.cbop.dev``: how apimachinery names a resource."""
    return str(res)


def status_error(
    code: int,
    reason: str,
    message: str,
    *,
    details: dict[str, Any] | None = None,
    retry_after: float | None = None,
) -> ApiError:
    """Return an :class:`ApiError` whose ``body`` is the ``metav1.Status`` a server sends.

    Args:
        code: HTTP status code (404, 409, ...).
        reason: ``StatusReason`` (``NotFound``, ``Conflict``, ...).
        message: the Status message.
        details: ``StatusDetails`` (``name``, ``group``, ``kind``, ``causes``, ...).
        retry_after: seconds, also written as ``details.retryAfterSeconds``.
    """
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    details = dict(details or {})
    if retry_after is not None:
        details["retryAfterSeconds"] = int(retry_after)
    if details:
        body["details"] = details
    return ApiError.from_status(body, http_status=code)


def _details(res: Resource, name: str) -> dict[str, Any]:
    return {"name": name, "group": res.group, "kind": res.plural}


def not_found(res: Resource, name: str) -> ApiError:
    """``404 NotFound``: ``configmaps "name" not found``."""
    return status_error(
        404, "NotFound", f'{_qualified(res)} "{name}" not found', details=_details(res, name)
    )


def already_exists(res: Resource, name: str) -> ApiError:
    """``409 AlreadyExists``: ``configmaps "name" already exists``."""
    return status_error(
        409,
        "AlreadyExists",
        f'{_qualified(res)} "{name}" already exists',
        details=_details(res, name),
    )


def conflict(res: Resource, name: str, why: str | None = None) -> ApiError:
    """``409 Conflict``: the object changed since it was read (a stale resourceVersion).

    ``why`` replaces apimachinery's ``OptimisticLockErrorMsg``.
    """
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return status_error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(res)} "{name}": {why}',
        details=_details(res, name),
    )


def precondition_failed(res: Resource, name: str, field: str, want: str, have: str) -> ApiError:
    """``409 Conflict`` for a DELETE whose ``uid``/``resourceVersion`` precondition fails."""
    label = "UID" if field == "uid" else "ResourceVersion"
    return conflict(
        res,
        name,
        f"Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}",
    )


def apply_conflict(res: Resource, name: str, conflicts: Sequence[tuple[str, str]]) -> ApiError:
    """``409 Conflict`` of server-side apply: fields owned by other managers.

    Args:
        res: the collection.
        name: the object's name.
        conflicts: ``(manager, field path)`` pairs, e.g. ``("kubectl", ".data.key")``.
    """
    n = len(conflicts)
    lines = "\n".join(f'- conflict with "{m}": {path}' for m, path in conflicts)
    message = f"Apply failed with {n} conflict{'s' if n != 1 else ''}: {lines}"
    if n == 1:
        m, path = conflicts[0]
        message = f'Apply failed with 1 conflict: conflict with "{m}": {path}'
    causes = [
        {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": path}
        for m, path in conflicts
    ]
    details = {**_details(res, name), "causes": causes}
    return status_error(409, "Conflict", message, details=details)


def invalid(kind: str, name: str, causes: Sequence[tuple[str, str]]) -> ApiError:
    """``422 Invalid``: ``ConfigMap "name" is invalid: field: detail``.

    Args:
        kind: the object's kind (``ConfigMap``).
        name: the object's name.
        causes: ``(field path, detail)`` pairs, e.g. ``("data", "Too long: ...")``.
    """
    text = ", ".join(f"{field}: {detail}" for field, detail in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    return status_error(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": detail, "field": field}
                for field, detail in causes
            ],
        },
    )


def expired(requested: int | str, current: int | str) -> ApiError:
    """``410 Expired``: ``too old resource version: 5 (10)`` (a compacted resourceVersion)."""
    return status_error(410, "Expired", f"too old resource version: {requested} ({current})")


def forbidden(res: Resource, verb: str, namespace: str | None, user: str = "test") -> ApiError:
    """``403 Forbidden`` as the RBAC authorizer words it."""
    scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    group = f' in API group "{res.group}"'
    message = (
        f'{res.plural} is forbidden: User "{user}" cannot {verb} resource "{res.plural}"'
        f"{group}{scope}"
    )
    return status_error(403, "Forbidden", message, details={"group": res.group, "kind": res.plural})


def namespace_terminating(namespace: str) -> ApiError:
    """``403 Forbidden`` with cause ``NamespaceTerminating``, as NamespaceLifecycle admission."""
    return status_error(
        403,
        "Forbidden",
        f"unable to create new content in namespace {namespace} because it is being terminated",
        details={
            "name": namespace,
            "kind": "namespaces",
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
    )


def bad_request(message: str) -> ApiError:
    """``400 BadRequest`` with ``message``."""
    return status_error(400, "BadRequest", message)


def internal_error(message: str = "an error on the server has prevented the request") -> ApiError:
    """``500 InternalError``."""
    return status_error(500, "InternalError", f"Internal error occurred: {message}")


def too_many_requests(retry_after: float = 1.0) -> ApiError:
    """``429 TooManyRequests`` as API Priority and Fairness rejects a request."""
    return status_error(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        retry_after=retry_after,
    )


def connection_refused(what: str = "dial tcp 127.0.0.1:6443") -> ConnectionFailed:
    """Return a transport failure: no HTTP answer at all (connection refused)."""
    return ConnectionFailed(
        f"{what}: connect: connection refused", cause=ConnectionRefusedError(what)
    )
