"""A Lease server for unit tests of leader election and shard coordination.

This module owns :class:`LeaseServer`, a :class:`~cbop_testing.fakekube.FakeKube` whose
tracker holds ``coordination.k8s.io/v1`` Leases (get, create, update, list by label,
delete with preconditions: the tracker's rules, as the API server's), plus what those
tests script around it: an outage (:attr:`LeaseServer.down`), a call that fails once
(:attr:`LeaseServer.explode`), a server slower than the caller's timeout
(:attr:`LeaseServer.slow_until` on a fake clock), hooks run just before a call of a verb
or a create of a name (so another party acts in between), and the validation a real
server does (``leaseDurationSeconds`` must be positive: 422).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from cbop.kube import LEASES, ConnectionFailed
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import Action, FakeKube, ObjectTracker, errors

__all__ = ["LeaseServer"]

#: creationTimestamps count seconds from this day: a Lease created through the API gets
#: second 100 + n for the n-th create; one the test writes gets second 0.
_DAY: Final = datetime(2026, 12, 1, tzinfo=UTC).timestamp()


class LeaseServer(FakeKube):
    """Leases in one namespace, served by a tracker, with scripted faults.

    Args:
        namespace: the namespace the helpers write in.

    Attributes:
        down: every call fails to connect while True.
        explode: raised by the next call, whatever it is, then cleared.
        hooks: ``verb -> callable`` run once just before the next call of that verb.
        before_create: ``lease name -> callable`` run once before the next create of it.
        slow_until: with :attr:`clock`, the server answers nothing before this clock
            time: a call steps the clock there, or, when its timeout runs out first,
            steps the clock by its timeout and fails (timed out).
        clock: the fake clock :attr:`slow_until` is measured on.
        timeouts: ``(verb, timeout)`` of every call, in order.
    """

    def __init__(self, namespace: str = "cbop-system") -> None:
        self._created = 0
        self._creating = False
        super().__init__(ObjectTracker(now=self._creation_time))
        self.namespace = namespace
        self.down = False
        self.explode: BaseException | None = None
        self.hooks: dict[str, Callable[[], None]] = {}
        self.before_create: dict[str, Callable[[], None]] = {}
        self.slow_until: float | None = None
        self.clock: FakeClock | None = None
        self.timeouts: list[tuple[str, float | None]] = []
        self.prepend_reactor("create", "leases", self._validate)
        self.prepend_reactor("update", "leases", self._validate)

    def _creation_time(self) -> float:
        return _DAY + (100 + self._created if self._creating else 0)

    # ------------------------------------------------------------------ faults

    def _invoke(self, action: Action, serve: Callable[[], Any]) -> Any:
        hook = self.hooks.pop(action.verb, None)
        if hook is not None:
            hook()
        if action.verb == "create":
            name = str(((action.body or {}).get("metadata") or {}).get("name"))
            before = self.before_create.pop(name, None)
            if before is not None:
                before()

        def faulty() -> Any:
            timeout = action.options.get("timeout")
            self.timeouts.append((action.verb, timeout))
            if self.slow_until is not None and self.clock is not None:
                wait = self.slow_until - self.clock.now()
                if wait > 0:
                    if timeout is not None and timeout < wait:
                        self.clock.step(timeout)
                        raise ConnectionFailed("read timed out (fake)", timed_out=True)
                    self.clock.step(wait)
            if self.explode is not None:
                exc, self.explode = self.explode, None
                raise exc
            if self.down:
                raise ConnectionFailed("connection refused (fake)")
            if action.verb != "create":
                return serve()
            self._created += 1
            self._creating = True
            try:
                return serve()
            finally:
                self._creating = False

        return super()._invoke(action, faulty)

    @staticmethod
    def _validate(action: Action) -> Any:
        duration = ((action.body or {}).get("spec") or {}).get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            name = ((action.body or {}).get("metadata") or {}).get("name") or action.name or ""
            raise errors.invalid(
                "Lease",
                name,
                [
                    (
                        "spec.leaseDurationSeconds",
                        f"Invalid value: {duration}: must be greater than 0",
                    )
                ],
            )
        return None

    # ------------------------------------------------------------------ helpers

    @property
    def calls(self) -> list[str]:
        """The verbs of every call, in order."""
        return [a.verb for a in self.actions]

    def writes(self) -> list[str]:
        """Return the verbs of the create and update calls, in order."""
        return [v for v in self.calls if v in ("create", "update")]

    def lease(self, name: str) -> dict[str, Any] | None:
        """Return a copy of Lease ``name``, or None."""
        found = [
            o for o in self.tracker.objects(LEASES, self.namespace) if o["metadata"]["name"] == name
        ]
        return found[0] if found else None

    def spec(self, name: str) -> dict[str, Any]:
        """Return the spec of Lease ``name``.

        Raises:
            ApiError: 404 when there is no such Lease.
        """
        spec: dict[str, Any] = self.tracker.get(LEASES, self.namespace, name)["spec"]
        return spec

    def resource_version(self, name: str) -> str:
        """Return the resourceVersion of Lease ``name``."""
        rv: str = self.tracker.get(LEASES, self.namespace, name)["metadata"]["resourceVersion"]
        return rv

    def put(self, name: str, **spec: Any) -> None:
        """Write Lease ``name`` with ``spec`` as another party would (creating it if need be)."""
        obj = self.lease(name) or {"metadata": {"name": name, "namespace": self.namespace}}
        obj["spec"] = spec
        self.tracker.put(LEASES, obj)

    def touch(self, name: str) -> None:
        """Write Lease ``name`` keeping its record: an annotation and the resourceVersion change.

        As another client's write that leaves the holder record alone (a real server
        gives a write that changes nothing no new resourceVersion).
        """
        obj = self.tracker.get(LEASES, self.namespace, name)
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations["touched"] = str(int(annotations.get("touched", "0")) + 1)
        self.tracker.put(LEASES, obj)

    def remove(self, name: str) -> None:
        """Delete Lease ``name`` by hand."""
        self.tracker.remove(LEASES, self.namespace, name)

    def remove_all(self) -> None:
        """Delete every Lease by hand."""
        for lease in self.tracker.objects(LEASES, self.namespace):
            self.tracker.remove(LEASES, self.namespace, lease["metadata"]["name"])
