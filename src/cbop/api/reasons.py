"""What each reason of a ConfigBundle's ``Ready`` condition means to anyone reading it.

:class:`cbop.api.Reason` is the one registry of the reasons the ConfigBundle controller
sets (its status code takes a ``Reason``, never a string). This module classifies every
one of them, once, for the readers of a bundle's status: the ClusterConfigBundle
status (a stamp's namespace is ready, failed or pending) and the docs.

- ``READY``: the ConfigMap (or Secret) matches the spec.
- ``FAILING``: the ConfigMap is not kept up to date, and stays so until something
  outside the write changes (the spec, a source, a blocking ConfigMap, a quota or an
  admission policy): the reader reports it as a failure, with the bundle's message.
- ``TRANSIENT``: the copy is being made, updated or deleted; it passes by itself.

``tests/unit/test_reasons.py`` fails when a member of :class:`cbop.api.Reason` has no
entry here, so a reason added later cannot be read as "pending" by accident.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from cbop.api.types import Reason

__all__ = ["FAILING_REASONS", "READINESS", "TRANSIENT_REASONS", "Readiness", "readiness_of"]


class Readiness(enum.StrEnum):
    """How a reason reads from outside the bundle (see the module docstring)."""

    READY = "ready"
    FAILING = "failing"
    TRANSIENT = "transient"


#: Every :class:`cbop.api.Reason`, classified.
READINESS: Final[Mapping[Reason, Readiness]] = MappingProxyType(
    {
        Reason.SYNCED: Readiness.READY,
        # The spec cannot be served as written: only a spec change fixes it.
        Reason.INVALID_SPEC: Readiness.FAILING,
        Reason.CONFIGMAP_TOO_LARGE: Readiness.FAILING,
        Reason.SECRET_TOO_LARGE: Readiness.FAILING,
        # A ConfigMap or Secret cbop does not manage holds the name (or a Secret of
        # another type): it waits for its owner.
        Reason.CONFIGMAP_CONFLICT: Readiness.FAILING,
        Reason.SECRET_CONFLICT: Readiness.FAILING,
        # A Secret target while Secrets are off: served once they are turned on.
        Reason.SECRETS_DISABLED: Readiness.FAILING,
        # A source missing, not shared or unreadable: the ConfigMap keeps its last
        # good content until the source (or the spec) changes.
        Reason.SOURCE_NOT_FOUND: Readiness.FAILING,
        Reason.SOURCE_NOT_SHARED: Readiness.FAILING,
        Reason.INVALID_SOURCE: Readiness.FAILING,
        # A write the API server refused (a quota, an admission policy, RBAC) or did
        # not answer: retried with backoff, reported until a write goes through.
        Reason.RECONCILE_ERROR: Readiness.FAILING,
        # spec.revisions: the revision's create refused (a quota, an admission rule);
        # the ConfigMap has the content; retried with backoff until it goes through.
        Reason.REVISION_NOT_CREATED: Readiness.FAILING,
        # spec.suspend: cbop keeps no copy up to date until it is lifted.
        Reason.SUSPENDED: Readiness.FAILING,
        Reason.DELETING: Readiness.TRANSIENT,
    }
)

#: The reasons a reader reports as a failure (``Ready`` not ``True``, for good).
FAILING_REASONS: Final = frozenset(r for r, k in READINESS.items() if k is Readiness.FAILING)
#: The reasons that pass by themselves.
TRANSIENT_REASONS: Final = frozenset(r for r, k in READINESS.items() if k is Readiness.TRANSIENT)


def readiness_of(reason: str) -> Readiness | None:
    """Return how ``reason`` (a condition's ``reason`` string) reads, or None if unknown.

    An unknown reason (written by another release of cbop, say) is None: the caller
    treats it as not yet known, never as ready.
    """
    try:
        return READINESS.get(Reason(reason))
    except ValueError:
        return None
