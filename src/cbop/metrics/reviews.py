"""The API server's verdict on a bearer token: TokenReviews and SubjectAccessReviews.

This module owns how ``--metrics-secure`` asks the API server who a caller is and what
the caller may do, as controller-runtime's delegating authenticator and authorizer do:
:class:`ReviewClient` is the seam (two questions, :class:`UserInfo` for the answer to
the first, :class:`ReviewError` when either cannot be asked), and
:class:`KubeReviewClient` asks them by creating a ``TokenReview``
(``authentication.k8s.io/v1``) and a ``SubjectAccessReview``
(``authorization.k8s.io/v1``) with :class:`cbop.kube.KubeClient`. Used by
:class:`cbop.metrics.delegatingauth.DelegatingAuth`, which caches the answers, and by
:func:`cbop.metrics.secure.start_secure_metrics_server`, which makes the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cbop.kube import ApiError, ConnectionFailed, KubeInterface, Resource

__all__ = [
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "KubeReviewClient",
    "ReviewClient",
    "ReviewError",
    "UserInfo",
]

#: authentication.k8s.io/v1 TokenReviews (create only; cluster-scoped).
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
#: authorization.k8s.io/v1 SubjectAccessReviews (create only; cluster-scoped).
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)

#: Seconds a review request may take.
_REVIEW_TIMEOUT = 10.0


@dataclass(frozen=True)
class UserInfo:
    """The user a TokenReview authenticated (``status.user``).

    Attributes:
        username: e.g. ``system:serviceaccount:monitoring:prometheus``.
        uid: the user's UID ('' when the authenticator gave none).
        groups: the user's groups.
        extra: extra attributes (e.g. the service-account token's pod name).
    """

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewError(Exception):
    """A review could not be made.

    Attributes:
        transient: True when trying again may work (API server unreachable, 429, 5xx):
            the request answers 503; otherwise 500.
    """

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class ReviewClient(Protocol):
    """Makes the two reviews the API server decides (the seam for tests)."""

    def authenticate(self, token: str) -> UserInfo | None:
        """Return the user ``token`` authenticates as, or None when it does not.

        Raises:
            ReviewError: the review could not be made.
        """

    def authorize(self, user: UserInfo, path: str, verb: str) -> tuple[bool, str]:
        """Return whether ``user`` may ``verb`` the non-resource URL ``path``, and why.

        Raises:
            ReviewError: the review could not be made.
        """


class KubeReviewClient:
    """:class:`ReviewClient` that creates TokenReviews and SubjectAccessReviews.

    Args:
        client: cbop's API client; needs ``create`` on ``tokenreviews``
            (authentication.k8s.io) and ``subjectaccessreviews`` (authorization.k8s.io).
    """

    def __init__(self, client: KubeInterface) -> None:
        self._client = client

    def _create(self, resource: Resource, spec: Mapping[str, Any]) -> dict[str, Any]:
        try:
            review = self._client.create(
                resource, None, {"spec": dict(spec)}, timeout=_REVIEW_TIMEOUT
            )
        except ConnectionFailed as err:
            raise ReviewError(f"creating a {resource.kind}: {err}", transient=True) from err
        except ApiError as err:
            transient = err.status == 429 or err.status >= 500
            raise ReviewError(f"creating a {resource.kind}: {err}", transient=transient) from err
        status: dict[str, Any] = review.get("status") or {}
        return status

    def authenticate(self, token: str) -> UserInfo | None:
        """Create a TokenReview of ``token``; see :meth:`ReviewClient.authenticate`."""
        status = self._create(TOKEN_REVIEWS, {"token": token})
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return UserInfo(
            username=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(user.get("groups") or ()),
            extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())),
        )

    def authorize(self, user: UserInfo, path: str, verb: str) -> tuple[bool, str]:
        """Create a SubjectAccessReview; see :meth:`ReviewClient.authorize`."""
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        status = self._create(SUBJECT_ACCESS_REVIEWS, spec)
        return bool(status.get("allowed")), str(status.get("reason") or "")
