"""Why an informer's list or watch fails: one classified, one-line account per failure.

This module owns :class:`ListWatchProblem`, what an informer reports while its list or
watch keeps failing (for ``/readyz``, logs and ``cbop --once``), and the rule that
decides which failures a retry alone cannot cure:

* ``404 NotFound`` on a list or watch: the API server does not serve the resource, i.e.
  its CustomResourceDefinition is not installed (yet, or any more).
* ``403 Forbidden``: RBAC does not grant the verb on the resource in that scope.

Those are *refusals*: the cluster has to change (apply the CRD, the Role), so a
one-shot run gives up at once while the long-running operator keeps retrying, not
ready, and never counts them as a dead watch. Every other failure (transport, 429, 5xx)
is an outage that retrying cures; so is ``401 Unauthorized`` as far as this module is
concerned (credentials are re-read on restart, which a liveness failure brings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cbop.kube import ApiError, Resource

__all__ = ["REFUSALS", "ListWatchProblem", "describe_scope"]

#: ``ApiError.reason`` values that a retry alone cannot fix (see the module docstring).
REFUSALS: Final = frozenset({"NotFound", "Forbidden"})


def describe_scope(namespace: str | None) -> str:
    """Return ``in namespace "ns"`` or ``at cluster scope (all namespaces)``."""
    return f'in namespace "{namespace}"' if namespace else "at cluster scope (all namespaces)"


@dataclass(frozen=True)
class ListWatchProblem:
    """A failing list or watch request of an informer.

    Attributes:
        verb: the request that failed: ``"list"`` or ``"watch"``.
        resource: the collection the informer mirrors.
        namespace: the informer's namespace, ``None`` for all namespaces.
        reason: ``ApiError.reason`` (``NotFound``, ``Forbidden``, ``ConnectionFailed``,
            ``TooManyRequests``, ...), or the exception's class name for anything else.
        status: the HTTP status, ``0`` without an answer.
        detail: the server's message (or the exception's text), one line.
    """

    verb: str
    resource: Resource
    namespace: str | None
    reason: str
    status: int
    detail: str

    @classmethod
    def of(
        cls, verb: str, resource: Resource, namespace: str | None, error: BaseException
    ) -> ListWatchProblem:
        """Classify ``error`` raised by a ``verb`` request of an informer."""
        if isinstance(error, ApiError):
            reason = "NotFound" if error.is_not_found else error.reason
            if error.is_forbidden:
                reason = "Forbidden"
            status, detail = error.status, error.message or str(error)
        else:
            reason, status, detail = type(error).__name__, 0, str(error)
        return cls(verb, resource, namespace, reason, status, " ".join(detail.split()))

    @property
    def refused(self) -> bool:
        """Whether only a change in the cluster (the CRD, RBAC) can cure it."""
        return self.reason in REFUSALS

    @property
    def message(self) -> str:
        """One line naming what is wrong: verb, resource, scope and the server's words.

        For a 404 it names the CustomResourceDefinition (``<plural>.<group>``) to install;
        for a 403 the verb, resource and scope RBAC must grant.
        """
        scope = describe_scope(self.namespace)
        res = self.resource
        if self.reason == "NotFound":
            crd = f"; install the CustomResourceDefinition {res}" if res.group else ""
            return (
                f"the API server does not serve {res.plural} of {res.api_version} "
                f"(404 on {self.verb} {scope}){crd}"
            )
        if self.reason == "Forbidden":
            return f"forbidden to {self.verb} {res} {scope} (403): {self.detail}"
        code = f"{self.status} " if self.status else ""
        return f"{self.verb} {res} {scope} failed: {code}{self.reason}: {self.detail}"
