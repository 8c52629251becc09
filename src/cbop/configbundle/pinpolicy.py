"""Whether the admission policy that points pods at revisions is installed.

Revisions are made and kept whether or not the MutatingAdmissionPolicy
:data:`cbop.api.revisions.PIN_POLICY_NAME` and its binding are installed; without them
every pod keeps reading the plain ConfigMap (docs/revisions.md). A platform engineer who
turned revisions on expects to be told. :class:`PinPolicyCheck` answers "is it
installed?" for the ConfigBundle reconcile, which then adds a sentence to the Ready
message of each bundle with revisions (``Ready`` stays ``True``: the plain ConfigMap is
right), and logs the finding once per change.

The answer comes from two LISTs (the policies and the bindings: a handful of
cluster-scoped objects), made at most once per ``interval`` seconds, and only when a
bundle with revisions asks: no informer, so an API server that does not serve the
resource (before Kubernetes 1.34, or 1.34-1.35 without the beta gate) costs two 404s a
minute and never holds up the caches' sync or readiness. The policy counts as installed
when a binding whose ``paramRef`` names the pins (:data:`cbop.api.revisions.PARAMS_NAME`)
names a policy that exists, whatever their names (the chart prefixes them with the
release name). A 404 means not installed, whether the objects or the resource are
missing; a 403 (cbop's ClusterRole lacks the rule: an older manifest) or any other
failure means unknown, and unknown reports nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final, Protocol

import structlog

from cbop.api.revisions import PARAMS_NAME, PIN_POLICY_NAME
from cbop.clock import Clock, RealClock
from cbop.kube import MUTATINGADMISSIONPOLICIES, MUTATINGADMISSIONPOLICYBINDINGS, ApiError, Resource

__all__ = ["DEFAULT_POLICY_INTERVAL", "Lists", "PinPolicyCheck", "missing_policy_note"]

log = structlog.get_logger("cbop.configbundle")

#: Seconds between two looks at the policy.
DEFAULT_POLICY_INTERVAL: Final = 60.0


class Lists(Protocol):
    """The one API call the check makes (:class:`cbop.kube.KubeClient` has it)."""

    def list(self, res: Resource, namespace: str | None = None) -> dict[str, Any]:
        """LIST one page of a collection (``is_not_found`` on 404: not served)."""
        ...


def missing_policy_note(missing: str) -> str:
    """Return the sentence added to a bundle's Ready message when the policy is missing.

    Args:
        missing: what is missing (``MutatingAdmissionPolicy cbop-pin-revisions``, ...).
    """
    return (
        f"pods are not pointed at revisions: {missing} not installed or not served "
        "(docs/revisions.md)"
    )


class PinPolicyCheck:
    """Tells whether the pin policy and its binding are installed; looks once a minute at most.

    Thread-safe: the reconcile's workers share one; a look in progress is not repeated
    by another worker (it waits for the answer).

    Args:
        client: the API client (two LISTs per look).
        interval: seconds an answer is reused.
        clock: the time source (tests: ``FakeClock``).
    """

    def __init__(
        self,
        client: Lists,
        *,
        interval: float = DEFAULT_POLICY_INTERVAL,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._interval = interval
        self._clock: Clock = clock or RealClock()
        self._lock = threading.Lock()
        self._looked_at: float | None = None
        self._missing: str | None = None
        self._reported: str | None = None

    def missing(self) -> str | None:
        """Return what is missing (a phrase naming the objects), or None when nothing is.

        None too while the answer is unknown (a 403 or another failure of the LISTs).
        Looks again when the last look is ``interval`` seconds old.
        """
        with self._lock:
            now = self._clock.now()
            if self._looked_at is None or now - self._looked_at >= self._interval:
                self._looked_at = now
                self._missing = self._look()
            return self._missing

    def _look(self) -> str | None:
        policies = self._names(MUTATINGADMISSIONPOLICIES)
        bindings = self._list(MUTATINGADMISSIONPOLICYBINDINGS)
        if policies is None or bindings is None:
            return None
        wanted = sorted(
            str((b.get("spec") or {}).get("policyName") or "")
            for b in bindings
            if ((b.get("spec") or {}).get("paramRef") or {}).get("name") == PARAMS_NAME
        )
        if not wanted:
            missing: str | None = (
                f"MutatingAdmissionPolicy {PIN_POLICY_NAME} and its binding "
                f"(paramRef {PARAMS_NAME})"
            )
        elif any(name in policies for name in wanted):
            missing = None
        else:
            missing = f"MutatingAdmissionPolicy {wanted[0]} (named by its binding)"
        if missing != self._reported:
            if missing is None:
                log.info("pin policy installed: new pods are pointed at their revisions")
            else:
                log.warning(
                    "pin policy missing: pods of workloads reading bundles with revisions "
                    "keep the plain ConfigMap names",
                    missing=missing,
                    install="kubectl apply -k manifests/revisions/ (or the chart's "
                    "revisions.pinPods=true)",
                )
            self._reported = missing
        return missing

    def _names(self, resource: Resource) -> set[str] | None:
        items = self._list(resource)
        if items is None:
            return None
        return {str((i.get("metadata") or {}).get("name") or "") for i in items}

    def _list(self, resource: Resource) -> list[Mapping[str, Any]] | None:
        """Return the objects of ``resource``, ``[]`` when it is not served (404).

        None when the answer is unknown (403, or any other failure).
        """
        try:
            answer = self._client.list(resource, None)
        except ApiError as err:
            if err.is_not_found:
                return []
            log.debug("pin policy: cannot tell", resource=resource.plural, error=str(err))
            return None
        return list(answer.get("items") or ())
