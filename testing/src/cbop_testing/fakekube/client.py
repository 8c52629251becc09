"""The fake API server's client: a :class:`cbop.kube.KubeInterface` that never sends anything.

This module owns :class:`FakeKube`, what unit tests hand to the code under test wherever
it takes a client (as client-go's fake clientset): every call is recorded as an
:class:`~cbop_testing.fakekube.Action`, offered to the test's reactions (newest first),
and, when none answers, served by the :class:`~cbop_testing.fakekube.ObjectTracker`
(client-go's ``ObjectReaction``). Reads, writes, watches and raw requests all pass
through the same chain.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from cbop.kube import KubeInterface, LeaseNotHeld, Resource, RestClientMetrics
from cbop.kube.accounting import infer_verb_resource
from cbop.kube.client import WriteFence
from cbop.kube.jsonstream import ItemHook
from cbop_testing.fakekube import errors
from cbop_testing.fakekube.reactions import Action, Reaction
from cbop_testing.fakekube.tracker import ObjectTracker
from cbop_testing.fakekube.watch import FakeWatch

__all__ = ["FakeKube"]


class _Shared:
    """What every view of one fake server shares: tracker, actions, reactions, streams."""

    def __init__(self, tracker: ObjectTracker) -> None:
        self.tracker = tracker
        self.cond = threading.Condition()
        self.actions: list[Action] = []
        self.reactors: list[tuple[str, str, Reaction]] = []
        self.streams: list[tuple[Action, FakeWatch]] = []
        self.refused: list[Action] = []


class FakeKube:
    """A :class:`~cbop.kube.KubeInterface` over an in-memory :class:`ObjectTracker`.

    It implements the protocol, as client-go's fakes implement ``kubernetes.Interface``,
    rather than inheriting :class:`~cbop.kube.KubeClient`: a client method it lacks is a
    type error, not a real request at run time.

    Args:
        tracker: the objects served (default: a new, empty tracker).
        fence: a write fence, as :meth:`cbop.kube.KubeClient.with_fence`.

    Thread-safe. Views made by :meth:`with_fence` and :meth:`with_limits` share the
    tracker, the recorded actions and the reactions.

    Attributes:
        tracker: the :class:`ObjectTracker` behind it.
    """

    def __init__(
        self, tracker: ObjectTracker | None = None, *, fence: WriteFence | None = None
    ) -> None:
        self._shared = _Shared(tracker if tracker is not None else ObjectTracker())
        self._fence = fence
        self.tracker = self._shared.tracker

    def _view(self, fence: WriteFence | None) -> FakeKube:
        """Return a client over the same fake server with ``fence`` as its write fence."""
        view = FakeKube(self.tracker, fence=fence)
        view._shared = self._shared
        return view

    # ------------------------------------------------------------------ test helpers

    def prepend_reactor(self, verb: str, resource: str, reaction: Reaction) -> Reaction:
        """Put ``reaction`` first for ``verb`` on ``resource`` (``*`` matches any).

        ``resource`` may name a subresource (``"configbundles/status"``). Returns the
        reaction, so a test can keep a handle on a :class:`Script` or :class:`Stall`.
        """
        with self._shared.cond:
            self._shared.reactors.insert(0, (verb, resource, reaction))
        return reaction

    def remove_reactor(self, reaction: Reaction) -> None:
        """Take ``reaction`` out of the chain."""
        with self._shared.cond:
            self._shared.reactors = [r for r in self._shared.reactors if r[2] is not reaction]

    @property
    def actions(self) -> list[Action]:
        """A snapshot of every call made, in order."""
        with self._shared.cond:
            return list(self._shared.actions)

    def write_actions(self) -> list[Action]:
        """Return the recorded create, update, patch and delete calls."""
        return [a for a in self.actions if a.is_write]

    def clear_actions(self) -> None:
        """Forget the recorded calls (the objects stay)."""
        with self._shared.cond:
            self._shared.actions.clear()

    @property
    def refused(self) -> list[Action]:
        """Writes the fence refused (never sent, not in :attr:`actions`)."""
        with self._shared.cond:
            return list(self._shared.refused)

    def wait_for_actions(
        self,
        predicate: Callable[[list[Action]], bool] | int,
        *,
        timeout: float = 5.0,
    ) -> list[Action]:
        """Wait (real time) until the recorded actions satisfy ``predicate``.

        Args:
            predicate: a function of the action list, or a count to reach.
            timeout: real seconds to wait for other threads.

        Returns:
            The actions at that moment.

        Raises:
            TimeoutError: not satisfied within ``timeout``.
        """
        check: Callable[[list[Action]], bool]
        if isinstance(predicate, int):
            count = predicate

            def check(actions: list[Action]) -> bool:
                return len(actions) >= count
        else:
            check = predicate
        with self._shared.cond:
            if not self._shared.cond.wait_for(lambda: check(self._shared.actions), timeout):
                raise TimeoutError(f"actions not reached; have {self._shared.actions}")
            return list(self._shared.actions)

    def stream(self, resource: str, namespace: str | None = None) -> FakeWatch:
        """Return the newest watch stream opened on ``resource`` in ``namespace``.

        Raises:
            LookupError: no such watch was opened.
        """
        with self._shared.cond:
            for action, stream in reversed(self._shared.streams):
                if action.resource == resource and action.namespace == namespace:
                    return stream
        raise LookupError(f"no watch of {resource} in {namespace!r}")

    def watching(self, resource: str, namespace: str | None = None) -> bool:
        """Whether a watch of ``resource`` in ``namespace`` has been opened."""
        try:
            self.stream(resource, namespace)
        except LookupError:
            return False
        return True

    def wait_watching(
        self, resource: str, namespace: str | None = None, *, count: int = 1, timeout: float = 5.0
    ) -> FakeWatch:
        """Wait (real time) for ``count`` watches of the collection; return the newest.

        Raises:
            TimeoutError: not reached within ``timeout``.
        """

        def opened() -> int:
            return sum(
                1
                for a, _ in self._shared.streams
                if a.resource == resource and a.namespace == namespace
            )

        with self._shared.cond:
            if not self._shared.cond.wait_for(lambda: opened() >= count, timeout):
                raise TimeoutError(f"{count} watch(es) of {resource} in {namespace!r} not opened")
        return self.stream(resource, namespace)

    # ------------------------------------------------------------------ the chain

    def _invoke(self, action: Action, serve: Callable[[], Any]) -> Any:
        if action.is_write and self._fence is not None and not self._fence():
            with self._shared.cond:
                self._shared.refused.append(action)
            raise LeaseNotHeld(f"{action.verb} {action.resource}: the lease is not held")
        with self._shared.cond:
            self._shared.actions.append(action)
            self._shared.cond.notify_all()
            reactors = list(self._shared.reactors)
        for verb, resource, reaction in reactors:
            if not action.matches(verb, resource):
                continue
            answer = reaction(action)
            if answer is not None:
                return answer
        return serve()

    # ------------------------------------------------------------------ KubeInterface

    def with_fence(self, fence: WriteFence) -> FakeKube:
        """Return a view whose writes raise :class:`LeaseNotHeld` once ``fence()`` is False.

        As :meth:`cbop.kube.KubeClient.with_fence`: checked before every write; reads are
        never fenced; refused writes are not recorded as actions (they never went out)
        but listed in :attr:`refused`.
        """
        return self._view(fence)

    def with_limits(self, *, qps: float, burst: int, max_retries: int) -> FakeKube:
        """Return an unfenced view (a fake has no rate limits)."""
        return self._view(None)

    def throttled_for(self) -> float:
        """Return 0.0: the fake never answers 429 by itself."""
        return 0.0

    def wait_while_throttled(self) -> float:
        """Return 0.0 at once."""
        return 0.0

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Ignore the metrics (nothing goes on a wire)."""

    @property
    def host(self) -> str:
        """A placeholder URL."""
        return "https://fakekube.invalid"

    def close(self) -> None:
        """Nothing to close."""

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Count the calls made by ``(verb, resource[/subresource])``, as the real client."""
        counts: Counter[tuple[str, str]] = Counter()
        for action in self.actions:
            full = (
                f"{action.resource}/{action.subresource}" if action.subresource else action.resource
            )
            counts[(action.verb, full)] += 1
        return dict(counts)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """Record a raw request; a reaction must answer it, else it is ``404 NotFound``."""
        verb, resource = infer_verb_resource(method, path, query)
        plural, _, sub = resource.partition("/")
        action = Action(
            verb,
            plural,
            subresource=sub or None,
            body=body,
            options={"method": method.upper(), "path": path, "query": dict(query or {})},
        )

        def serve() -> dict[str, Any]:
            raise errors.status_error(
                404, "NotFound", "the server could not find the requested resource"
            )

        return cast(dict[str, Any], self._invoke(action, serve))

    def get(
        self, res: Resource, namespace: str | None, name: str, *, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        """GET from the tracker (after the reactions)."""
        action = Action("get", res.plural, namespace, name, options={"timeout": timeout}, res=res)
        return cast(
            dict[str, Any], self._invoke(action, lambda: self.tracker.get(res, namespace, name))
        )

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = 60.0,
        item_hook: ItemHook | None = None,
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        """LIST from the tracker (after the reactions); ``item_hook`` shapes each item.

        ``shard_selector`` is recorded and ignored, as by a server without the gate.
        """
        options = {
            "label_selector": label_selector,
            "field_selector": field_selector,
            "limit": limit,
            "continue_": continue_,
            "resource_version": resource_version,
            "resource_version_match": resource_version_match,
            "shard_selector": shard_selector,
            "timeout": timeout,
        }
        action = Action("list", res.plural, namespace, options=options, res=res)

        def serve() -> dict[str, Any]:
            return self.tracker.list(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_=continue_,
            )

        answer = cast(dict[str, Any], self._invoke(action, serve))
        if item_hook is not None:
            answer = {**answer, "items": [item_hook(item) for item in answer.get("items", [])]}
        return answer

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int,
        allow_bookmarks: bool = True,
        read_timeout: float,
        shard_selector: str | None = None,
    ) -> FakeWatch:
        """WATCH the tracker (after the reactions, which may answer with a :class:`FakeWatch`)."""
        options = {
            "resource_version": resource_version,
            "label_selector": label_selector,
            "field_selector": field_selector,
            "timeout_seconds": timeout_seconds,
            "allow_bookmarks": allow_bookmarks,
            "read_timeout": read_timeout,
            "shard_selector": shard_selector,
        }
        action = Action("watch", res.plural, namespace, options=options, res=res)

        def serve() -> FakeWatch:
            return self.tracker.watch(
                res,
                namespace,
                resource_version=resource_version,
                label_selector=label_selector,
                field_selector=field_selector,
                allow_bookmarks=allow_bookmarks,
            )

        stream = cast(FakeWatch, self._invoke(action, serve))
        with self._shared.cond:
            self._shared.streams.append((action, stream))
            self._shared.cond.notify_all()
        return stream

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
        """POST to the tracker (after the reactions)."""
        options = {"field_manager": field_manager, "dry_run": dry_run, "timeout": timeout}
        name = (body.get("metadata") or {}).get("name")
        action = Action("create", res.plural, namespace, name, None, body, options, res)
        return cast(
            dict[str, Any],
            self._invoke(
                action,
                lambda: self.tracker.create(
                    res, namespace, body, field_manager=field_manager, dry_run=dry_run
                ),
            ),
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
        """PUT to the tracker (after the reactions)."""
        options = {"field_manager": field_manager, "dry_run": dry_run, "timeout": timeout}
        action = Action("update", res.plural, namespace, name, subresource, body, options, res)
        return cast(
            dict[str, Any],
            self._invoke(
                action,
                lambda: self.tracker.update(
                    res,
                    namespace,
                    name,
                    body,
                    subresource,
                    field_manager=field_manager,
                    dry_run=dry_run,
                ),
            ),
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
        """PATCH the tracker (after the reactions).

        Raises:
            ValueError: an unknown ``patch_type`` (as the real client, before sending).
        """
        if patch_type not in ("merge", "json", "strategic", "apply"):
            raise ValueError(f"unknown patch_type {patch_type!r}")
        if patch_type == "apply" and field_manager is None:
            field_manager = "cbop"
        options = {
            "patch_type": patch_type,
            "field_manager": field_manager,
            "force": force,
            "dry_run": dry_run,
            "timeout": timeout,
        }
        action = Action("patch", res.plural, namespace, name, subresource, body, options, res)
        return cast(
            dict[str, Any],
            self._invoke(
                action,
                lambda: self.tracker.patch(
                    res,
                    namespace,
                    name,
                    body,
                    patch_type=patch_type,
                    subresource=subresource,
                    field_manager=field_manager,
                    force=force,
                    dry_run=dry_run,
                ),
            ),
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
        """DELETE from the tracker (after the reactions)."""
        options = {
            "preconditions": dict(preconditions) if preconditions else None,
            "propagation_policy": propagation_policy,
            "grace_period_seconds": grace_period_seconds,
            "dry_run": dry_run,
            "timeout": timeout,
        }
        action = Action("delete", res.plural, namespace, name, None, None, options, res)
        return cast(
            dict[str, Any],
            self._invoke(
                action,
                lambda: self.tracker.delete(
                    res, namespace, name, preconditions=preconditions, dry_run=dry_run
                ),
            ),
        )


if TYPE_CHECKING:  # FakeKube implements the client's protocol, member by member
    _CLIENT: type[KubeInterface] = FakeKube
