"""What a Kubernetes client offers, as protocols: the type every caller takes.

This module owns :class:`KubeInterface` and :class:`WatchInterface`, as client-go's
``kubernetes.Interface`` and ``watch.Interface``: code that is handed a client
(scopes, informers, the leader elector, sharding, the command) takes
:class:`KubeInterface`, which :class:`cbop.kube.KubeClient` and the unit tests'
``cbop_testing.fakekube.FakeKube`` both implement, neither by inheritance. A method
added to the client is added here first, so mypy names every implementation that lacks it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, Self

from cbop.kube.jsonstream import ItemHook
from cbop.kube.metrics import RestClientMetrics
from cbop.kube.resources import Resource
from cbop.kube.transport import WriteFence

__all__ = ["KubeInterface", "WatchInterface"]


class WatchInterface(Protocol):
    """An open watch: an iterator of event dicts that any thread may close.

    As :class:`cbop.kube.WatchStream`: each item is ``{"type": ..., "object": {...}}``;
    ``__next__`` raises :class:`cbop.kube.ApiError` for an ``ERROR`` event and
    :class:`cbop.kube.ConnectionFailed` when the connection breaks or goes silent.
    """

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Return the stream itself."""
        ...

    def __next__(self) -> dict[str, Any]:
        """Return the next event, blocking; ``StopIteration`` once ended or closed."""
        ...

    def close(self) -> None:
        """End the stream from any thread; a blocked reader wakes and stops."""
        ...

    def __enter__(self) -> Self:
        """Return the stream itself."""
        ...

    def __exit__(self, *exc_info: object) -> None:
        """Close the stream."""
        ...


class KubeInterface(Protocol):
    """The calls of a Kubernetes client; see :class:`cbop.kube.KubeClient` for each.

    Dicts in, dicts out. Every verb raises :class:`cbop.kube.ApiError` for a non-2xx
    answer and :class:`cbop.kube.ConnectionFailed` when none arrived; a write through a
    fenced client raises :class:`cbop.kube.LeaseNotHeld` once the fence is closed.
    """

    def get(
        self, res: Resource, namespace: str | None, name: str, *, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        """GET one object (:meth:`cbop.kube.KubeClient.get`)."""
        ...

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
        """LIST one page (:meth:`cbop.kube.KubeClient.list`)."""
        ...

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
    ) -> WatchInterface:
        """Open a WATCH (:meth:`cbop.kube.KubeClient.watch`)."""
        ...

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
        """POST an object (:meth:`cbop.kube.KubeClient.create`)."""
        ...

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
        """PUT an object (:meth:`cbop.kube.KubeClient.update`)."""
        ...

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
        """PATCH an object (:meth:`cbop.kube.KubeClient.patch`); ``ValueError`` on a bad type."""
        ...

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
        """DELETE an object (:meth:`cbop.kube.KubeClient.delete`)."""
        ...

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
        """Send one raw request (:meth:`cbop.kube.KubeClient.request`)."""
        ...

    def with_fence(self, fence: WriteFence) -> KubeInterface:
        """Return a view whose writes check ``fence()`` first (see ``KubeClient.with_fence``)."""
        ...

    def with_limits(self, *, qps: float, burst: int, max_retries: int) -> KubeInterface:
        """Return a view with limits of its own (:meth:`cbop.kube.KubeClient.with_limits`)."""
        ...

    def throttled_for(self) -> float:
        """Seconds until the last 429's ``Retry-After`` runs out (0.0: not throttled)."""
        ...

    def wait_while_throttled(self) -> float:
        """Sleep until :meth:`throttled_for` is 0; return the seconds slept."""
        ...

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Report client-go's REST client metrics to ``metrics`` from now on."""
        ...

    @property
    def host(self) -> str:
        """The API server URL."""
        ...

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Exchanges made so far by ``(verb, resource[/subresource])``."""
        ...

    def close(self) -> None:
        """Close idle connections (later requests open new ones)."""
        ...
