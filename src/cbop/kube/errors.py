"""Errors raised by :mod:`cbop.kube`.

This module owns the error model of the client adapter: :class:`ApiError` for every
non-2xx answer of the API server (decoded from the ``metav1.Status`` body when there is
one, as apimachinery's ``errors.FromObject``/``NewGenericServerResponse`` do),
:class:`ConnectionFailed` for transport failures (no HTTP status; the urllib3 and socket
errors of :data:`TRANSPORT_ERRORS` become one through :func:`connection_failed`), and
:class:`ConfigError` for a client that cannot be configured.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from typing import Any, Final

import urllib3

__all__ = [
    "TRANSPORT_ERRORS",
    "ApiError",
    "ConfigError",
    "ConnectionFailed",
    "LeaseNotHeld",
    "connection_failed",
    "is_timeout",
    "parse_retry_after",
    "reason_for_code",
]

#: Transport failures raised by urllib3 and the sockets under it. The generated REST
#: layer turns TLS errors into ApiException(status=0).
TRANSPORT_ERRORS: Final = (urllib3.exceptions.HTTPError, OSError)

# The reason apimachinery assigns to a bare HTTP status when the body is not a Status
# (k8s.io/apimachinery/pkg/api/errors NewGenericServerResponse).
_REASON_BY_CODE: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for_code(status: int) -> str:
    """Return apimachinery's generic ``StatusReason`` for an HTTP status (``"Unknown"``)."""
    return _REASON_BY_CODE.get(status, "Unknown")


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Parse an HTTP ``Retry-After`` header into seconds to wait.

    Args:
        value: the header value: delta-seconds (``"3"``; fractions are accepted) or an
            HTTP-date (RFC 9110 section 10.2.3).
        now: wall-clock time (``time.time()`` seconds) an HTTP-date is measured from;
            defaults to the current time.

    Returns:
        Seconds (>= 0), or ``None`` when the header is absent or unparseable.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        base = time.time() if now is None else now
        return max(0.0, when.timestamp() - base)
    if math.isnan(seconds) or seconds < 0:
        return None
    return seconds


class ApiError(Exception):
    """A request that the API server answered with a non-2xx status.

    Attributes:
        status: HTTP status code (``0`` for :class:`ConnectionFailed`).
        reason: ``metav1.Status.reason`` (``NotFound``, ``Conflict``, ``AlreadyExists``,
            ``Gone``, ``Expired``, ``Invalid``, ``Forbidden``, ``TooManyRequests``, ...);
            derived from the status code when the body carries none.
        message: human-readable message (``Status.message`` or the raw body).
        retry_after: seconds the server asked us to wait (``Retry-After`` header, or
            ``Status.details.retryAfterSeconds``), else ``None``.
        body: the decoded JSON body (usually a ``Status`` dict), else ``None``.
        request_bytes: the size in bytes of the request body that was refused, when
            the request had one (set by the client), else ``None``.
    """

    status: int
    reason: str
    message: str
    retry_after: float | None
    body: dict[str, Any] | None
    request_bytes: int | None = None

    def __init__(
        self,
        status: int,
        reason: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        text = f"{self.status} {self.reason}"
        if self.message:
            text += f": {self.message}"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, reason={self.reason!r})"

    @classmethod
    def from_status(
        cls, status_obj: Mapping[str, Any], *, http_status: int | None = None
    ) -> ApiError:
        """Build an error from a decoded ``metav1.Status`` object.

        Used for error responses and for watch ``ERROR`` events, whose object is a
        Status (as apimachinery's ``errors.FromObject``).

        Args:
            status_obj: the Status dict (``code``, ``reason``, ``message``, ``details``).
            http_status: the HTTP status of the response, used when ``code`` is missing.
        """
        code_raw = status_obj.get("code")
        code = code_raw if isinstance(code_raw, int) and code_raw > 0 else (http_status or 500)
        reason_raw = status_obj.get("reason")
        reason = reason_raw if isinstance(reason_raw, str) and reason_raw else reason_for_code(code)
        message_raw = status_obj.get("message")
        message = message_raw if isinstance(message_raw, str) else ""
        retry_after: float | None = None
        details = status_obj.get("details")
        if isinstance(details, Mapping):
            ras = details.get("retryAfterSeconds")
            if isinstance(ras, int | float) and ras > 0:
                retry_after = float(ras)
        return cls(code, reason, message, retry_after=retry_after, body=dict(status_obj))

    @classmethod
    def from_response(cls, status: int, headers: Mapping[str, str], data: bytes | None) -> ApiError:
        """Build an error from a raw HTTP response.

        Args:
            status: HTTP status code.
            headers: response headers (case-insensitive mapping as urllib3 gives them).
            data: the response body; decoded as a ``Status`` when it is one, else kept
                (truncated to 1 KiB) as the message.

        The ``Retry-After`` header wins over ``details.retryAfterSeconds``.
        """
        decoded: Any = None
        if data:
            try:
                decoded = json.loads(data)
            except ValueError:
                decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            err = cls.from_status(decoded, http_status=status)
            # The HTTP status is authoritative for the error class.
            err.status = status
        else:
            text = data[:1024].decode("utf-8", "replace").strip() if data else ""
            body = decoded if isinstance(decoded, dict) else None
            err = cls(status, reason_for_code(status), text, body=body)
        header_wait = parse_retry_after(headers.get("Retry-After"))
        if header_wait is not None:
            err.retry_after = header_wait
        return err

    def _is(self, reason: str, code: int) -> bool:
        if self.reason == reason:
            return True
        return self.status == code and self.reason in ("", "Unknown", reason_for_code(code))

    @property
    def is_not_found(self) -> bool:
        """``404 NotFound``."""
        return self._is("NotFound", 404)

    @property
    def is_conflict(self) -> bool:
        """``409 Conflict`` (a stale ``resourceVersion`` on update), not ``AlreadyExists``."""
        return self._is("Conflict", 409)

    @property
    def is_already_exists(self) -> bool:
        """``409 AlreadyExists`` (create of an existing name)."""
        return self.reason == "AlreadyExists"

    @property
    def is_gone(self) -> bool:
        """``410``: ``Gone`` or ``Expired`` (compacted resourceVersion, expired continue)."""
        return self.status == 410 or self.reason in ("Gone", "Expired")

    @property
    def is_invalid(self) -> bool:
        """``422 Invalid`` (validation or admission rejected the object)."""
        return self._is("Invalid", 422)

    @property
    def is_forbidden(self) -> bool:
        """``403 Forbidden`` (RBAC, or a namespace being terminated)."""
        return self._is("Forbidden", 403)

    @property
    def is_too_many_requests(self) -> bool:
        """``429 TooManyRequests`` (API priority and fairness, or an eviction budget)."""
        return self._is("TooManyRequests", 429)

    @property
    def is_request_entity_too_large(self) -> bool:
        """``413 RequestEntityTooLarge``: the request body is over the server's limit."""
        return self._is("RequestEntityTooLarge", 413)

    @property
    def is_server_error(self) -> bool:
        """A 5xx status: the request may succeed later."""
        return 500 <= self.status <= 599


class ConnectionFailed(ApiError):  # noqa: N818 - the name the callers use
    """The request never got an HTTP answer: connection refused/reset, DNS, TLS, timeout.

    ``status`` is ``0`` and ``reason`` is ``"ConnectionFailed"`` (or ``"Timeout"`` for a
    connect/read timeout, ``timed_out`` is then ``True``). ``cause`` is the underlying
    exception.
    """

    def __init__(
        self, message: str, *, cause: BaseException | None = None, timed_out: bool = False
    ):
        super().__init__(0, "Timeout" if timed_out else "ConnectionFailed", message)
        self.cause = cause
        self.timed_out = timed_out

    def __str__(self) -> str:
        # No HTTP status to show: "timed out: ..." or "connection failed: ...".
        return f"{'timed out' if self.timed_out else 'connection failed'}: {self.message}"


def is_timeout(exc: BaseException) -> bool:
    """Return whether a transport error is a connect or read timeout.

    urllib3's ``NewConnectionError`` (connection refused, no route) subclasses its
    ``ConnectTimeoutError`` for historical reasons; it is no timeout.
    """
    for err in (exc, getattr(exc, "reason", None)):
        if isinstance(err, urllib3.exceptions.NewConnectionError):
            return False
        if isinstance(err, urllib3.exceptions.TimeoutError | TimeoutError):
            return True
    return False


def connection_failed(exc: BaseException, what: str) -> ConnectionFailed:
    """Wrap a transport exception (one of :data:`TRANSPORT_ERRORS`) as :class:`ConnectionFailed`.

    ``timed_out`` is set for connect and read timeouts (:func:`is_timeout`).
    """
    return ConnectionFailed(f"{what}: {exc}", cause=exc, timed_out=is_timeout(exc))


class LeaseNotHeld(Exception):  # noqa: N818 - a state, named as the lease's
    """A mutating request was not sent: the client's fence says the leader lease is not held.

    Raised by a fenced :class:`cbop.kube.KubeClient` (see ``KubeClient.with_fence``)
    immediately before a create, update, patch or delete would go on the wire, when
    this process can no longer be sure it holds the leader lease. Deliberately not an
    :class:`ApiError`: nothing may retry it or report it in an object's status (that
    would be a write too); whoever catches it must stop working.
    """


class ConfigError(Exception):
    """No usable client configuration: no kubeconfig, an unknown context, bad files."""
