"""Whether the admission policy that points pods at revisions is installed and served.

Revisions are made and kept whether or not the shipped MutatingAdmissionPolicy
(``manifests/revisions/pin_pods.yaml``, the chart's ``revisions.pinPods``) is there;
without it every pod reads the plain ConfigMap. The bundle's ``Pinned`` condition says
so before any pod shows it (:class:`PolicyCheck`), and what pods show is verified
anyway (:mod:`cbop.revisions.bundle`).

The answer comes from two LISTs (the policies and the bindings: a handful of
cluster-scoped objects), at most once a minute (every 10 s while it finds the policy
missing, so that an install shows soon), and only while bundles with revisions
reconcile: no informer, so an API server that does not serve the
resource (Kubernetes before 1.36) costs two 404s a minute and never holds up the
caches. The policy counts as installed when a binding names a policy labelled
``app.kubernetes.io/component: pin-pods`` (:data:`POLICY_LABEL`), whatever their names
(the chart prefixes them with the release name). A 404 means not served; a 403 (an
older ClusterRole) or any other failure means unknown, and unknown reports nothing.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog

from cbop.clock import Clock, RealClock
from cbop.kube import MUTATINGADMISSIONPOLICIES, MUTATINGADMISSIONPOLICYBINDINGS, ApiError, Resource

__all__ = [
    "DEFAULT_POLICY_INTERVAL",
    "MISSING_POLICY_INTERVAL",
    "POLICY_LABEL",
    "POLICY_NAME",
    "Lists",
    "PolicyCheck",
    "PolicyState",
    "Served",
]

log = structlog.get_logger("cbop.revisions")

#: Seconds between two looks at the policy; while it is missing or not served.
DEFAULT_POLICY_INTERVAL: Final = 60.0
MISSING_POLICY_INTERVAL: Final = 10.0
#: The shipped policy's and binding's name (``manifests/revisions/pin_pods.yaml``).
POLICY_NAME: Final = "cbop-pin-pods"
#: The label that marks the shipped policy, whatever its name: ``(key, value)``.
POLICY_LABEL: Final = ("app.kubernetes.io/component", "pin-pods")


class Served(enum.StrEnum):
    """What the last look found."""

    INSTALLED = "installed"
    MISSING = "missing"
    NOT_SERVED = "not-served"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PolicyState:
    """The pin policy as last seen.

    Attributes:
        served: see :class:`Served`.
    """

    served: Served

    def problem(self) -> str | None:
        """Return the sentence the ``Pinned`` condition says, or None when pods can be pinned."""
        if self.served is Served.NOT_SERVED:
            return (
                "this API server does not serve MutatingAdmissionPolicy in "
                "admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later do), so no pod "
                "is pointed at a revision"
            )
        if self.served is Served.MISSING:
            return (
                f"the MutatingAdmissionPolicy {POLICY_NAME} or its binding is not installed "
                "(kubectl apply -k manifests/revisions/, or the chart's revisions.pinPods)"
            )
        return None


class Lists(Protocol):
    """The one API call the check makes (:class:`cbop.kube.KubeClient` has it)."""

    def list(self, res: Resource, namespace: str | None = None) -> dict[str, Any]:
        """LIST one page of a collection (``is_not_found`` on 404: not served)."""
        ...


class PolicyCheck:
    """Looks at the pin policy once a minute at most (thread-safe).

    Args:
        client: the API client (two LISTs per look).
        interval: seconds an answer is reused.
        missing_interval: seconds an answer "missing" or "not served" is reused.
        clock: the time source (tests: ``FakeClock``).
    """

    def __init__(
        self,
        client: Lists,
        *,
        interval: float = DEFAULT_POLICY_INTERVAL,
        missing_interval: float = MISSING_POLICY_INTERVAL,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._interval = interval
        self._missing_interval = missing_interval
        self._clock: Clock = clock or RealClock()
        self._lock = threading.Lock()
        self._looked_at: float | None = None
        self._state = PolicyState(Served.UNKNOWN)

    def state(self) -> PolicyState:
        """Return the policy as last seen; looks again when that is ``interval`` seconds old."""
        with self._lock:
            now = self._clock.now()
            interval = (
                self._missing_interval
                if self._state.served in (Served.MISSING, Served.NOT_SERVED)
                else self._interval
            )
            if self._looked_at is None or now - self._looked_at >= interval:
                self._looked_at = now
                state = self._look()
                if state.served != self._state.served:
                    log.info("pin policy", state=state.served.value)
                self._state = state
            return self._state

    def _look(self) -> PolicyState:
        policies = self._list(MUTATINGADMISSIONPOLICIES)
        bindings = self._list(MUTATINGADMISSIONPOLICYBINDINGS)
        if policies is None or bindings is None:
            return PolicyState(Served.UNKNOWN)
        if policies is _NOT_SERVED or bindings is _NOT_SERVED:
            return PolicyState(Served.NOT_SERVED)
        ours = {_name(p) for p in policies if _labelled(p)}
        bound = {str((b.get("spec") or {}).get("policyName") or "") for b in bindings}
        return PolicyState(Served.INSTALLED if ours & bound else Served.MISSING)

    def _list(self, resource: Resource) -> list[Mapping[str, Any]] | None:
        """Return the objects of ``resource``, :data:`_NOT_SERVED` on 404, None when unknown."""
        try:
            answer = self._client.list(resource, None)
        except ApiError as err:
            if err.is_not_found:
                return _NOT_SERVED
            log.debug("pin policy: cannot tell", resource=resource.plural, error=str(err))
            return None
        return list(answer.get("items") or ())


#: What :meth:`PolicyCheck._list` returns for a resource the API server does not serve.
_NOT_SERVED: Final[list[Mapping[str, Any]]] = []


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _labelled(obj: Mapping[str, Any]) -> bool:
    key, value = POLICY_LABEL
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key) == value
