"""The shared informer factory: one informer per resource, scope and selector.

As client-go's ``SharedInformerFactory`` (and controller-runtime's shared cache): every
controller asks the factory for the informers of a resource, and gets the same
:class:`~cbop.informers.informer.SharedInformer` another controller got for the same
(resource, namespace, label selector), so each collection is listed and watched once per
process however many controllers read it. An operator scoped to some namespaces gets one
informer per namespace, an unscoped one a single cluster-wide informer; callers read
them through one :class:`~cbop.informers.listers.MultiNamespaceLister`.

The factory also answers for its informers as a whole: start, wait for the first lists
(:meth:`SharedInformerFactory.wait_for_cache_sync`), the refusals that need a change in
the cluster, one readiness check per informer, liveness, and stop. Whoever owns the
process (the manager) calls those; controllers only add event handlers and read listers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from cbop.clock import Clock
from cbop.informers.indexfuncs import IndexFunc
from cbop.informers.informer import (
    DEFAULT_RESYNC_PERIOD,
    SharedInformer,
    Transform,
    strip_managed_fields,
    wait_for_cache_sync,
)
from cbop.informers.listers import MultiNamespaceLister
from cbop.informers.problems import ListWatchProblem
from cbop.kube import KubeInterface, Resource
from cbop.shardrange import ShardRange

__all__ = ["InformerKey", "SharedInformerFactory"]

#: What identifies a shared informer: (resource, namespace or None for all, selector,
#: the slice of a sharded factory it holds: ``"shard"``, ``"whole"`` or ``"name"``).
InformerKey = tuple[Resource, str | None, str | None, str]


class SharedInformerFactory:
    """Hands out shared informers and runs them.

    Args:
        client: the API client the informers list and watch with (as client-go's
            factory takes ``kubernetes.Interface``; each informer uses its ``list`` and
            ``watch`` only).
        namespaces: the namespaces in scope; empty or None means all namespaces (one
            cluster-wide informer per resource).
        resync_period: every informer's resync period in seconds (0 disables).
        read_timeout: every informer's watch socket read timeout in seconds.
        clock: every informer's clock (tests: ``FakeClock``; default: the real one).
        shard: every informer lists and watches only this shard of its collection
            (objects whose namespace hashes into the range: server-side ``shardSelector``,
            client-side check; see :mod:`cbop.informers.shardfilter`); informer names get
            `` shard <i>/<n>``. ``None`` or the whole hash space: no sharding.

    Thread safety: informers are meant to be requested while wiring, before
    :meth:`start`; an informer requested later is started by the next :meth:`start`.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        namespaces: Sequence[str] | None = None,
        resync_period: float = DEFAULT_RESYNC_PERIOD,
        read_timeout: float = 90.0,
        clock: Clock | None = None,
        shard: ShardRange | None = None,
    ) -> None:
        self._client = client
        self._clock = clock
        self.shard = shard if shard is not None and not shard.everything else None
        """The shard every informer holds, ``None`` when unsharded."""
        self.scopes: tuple[str | None, ...] = tuple(namespaces) if namespaces else (None,)
        self._resync_period = resync_period
        self._read_timeout = read_timeout
        self._lock = threading.Lock()
        self._informers: dict[InformerKey, SharedInformer] = {}
        self._index_funcs: dict[InformerKey, dict[str, IndexFunc]] = {}
        self._transforms: dict[InformerKey, Transform] = {}
        self._started: set[InformerKey] = set()

    def informers_for(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        whole: bool = False,
        by_name: bool = False,
        transform: Transform = strip_managed_fields,
    ) -> dict[str | None, SharedInformer]:
        """Return the informer of ``resource`` for each namespace in scope (created once).

        Args:
            resource: the collection.
            label_selector: server-side label selector (``"a=b"``); a different
                selector is a different informer.
            indexers: index name -> index function the caller will query; added to the
                shared informer's cache unless an index of that name is there already
                with the same function.
            whole: in a sharded factory, an informer of the whole collection (no shard
                selector, no check), for what one shard must see of all of them (the
                ClusterConfigBundles, every Namespace); a different informer from the
                sharded one. Its name carries no shard; :meth:`is_whole` tells it apart.
                No effect in an unsharded factory.
            by_name: in a sharded factory, the objects whose own *name* hashes into the
                shard's range (the shard's Namespaces; client-side only, see
                :meth:`cbop.shardrange.ShardRange.by_object_name`); its name ends in
                ``by name``. No effect in an unsharded factory, or with ``whole``. Where
                a ``whole`` informer of the same collection was handed out already,
                that one is returned: a superset for one list and watch instead of two
                (by-name readers check names against the range themselves).
            transform: what each object goes through before it is cached (client-go's
                ``SetTransform``), set by the first caller of a new informer: one that
                keeps only the fields its readers use makes a large collection cheap to
                cache. A later caller passes the same one, or the default (any).

        Returns:
            namespace (``None``: all namespaces) -> informer.

        Raises:
            ValueError: an index of the same name was registered with another function,
                or the informer exists with another transform than a non-default one.
        """
        out: dict[str | None, SharedInformer] = {}
        with self._lock:
            mode = "shard"
            shard = self.shard
            if shard is not None and whole:
                mode, shard = "whole", None
            elif shard is not None and by_name:
                mode, shard = "name", shard.by_object_name()
                if all(
                    (resource, ns, label_selector, "whole") in self._informers for ns in self.scopes
                ):
                    mode, shard = "whole", None
            for ns in self.scopes:
                key: InformerKey = (resource, ns, label_selector, mode)
                informer = self._informers.get(key)
                if (
                    informer is not None
                    and transform is not strip_managed_fields
                    and self._transforms[key] is not transform
                ):
                    raise ValueError(f"informer {informer.name} exists with another transform")
                if informer is None:
                    informer = SharedInformer(
                        self._client,
                        resource,
                        namespace=ns,
                        label_selector=label_selector,
                        resync_period=self._resync_period,
                        read_timeout=self._read_timeout,
                        clock=self._clock,
                        name=self._name(resource, ns, label_selector, mode=mode),
                        shard=shard,
                        transform=transform,
                    )
                    self._informers[key] = informer
                    self._transforms[key] = transform
                    self._index_funcs[key] = {}
                self._add_indexers(key, informer, indexers or {})
                out[ns] = informer
        return out

    def lister(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        whole: bool = False,
        by_name: bool = False,
        transform: Transform = strip_managed_fields,
    ) -> MultiNamespaceLister:
        """Return one lister over the informers of :meth:`informers_for` (same arguments).

        Raises:
            ValueError: as :meth:`informers_for`.
        """
        informers = self.informers_for(
            resource,
            label_selector=label_selector,
            indexers=indexers,
            whole=whole,
            by_name=by_name,
            transform=transform,
        )
        return MultiNamespaceLister({ns: inf.lister() for ns, inf in informers.items()})

    def _name(
        self, resource: Resource, namespace: str | None, selector: str | None, *, mode: str
    ) -> str:
        """Return an informer's name: ``configmaps/ns`` (``*``: all namespaces).

        ``[selector]`` is appended when another informer of the same resource and scope
        already has that name, then `` shard <i>/<n>`` for a sharded factory (not for a
        ``whole`` informer; `` shard <i>/<n> by name`` for a ``by_name`` one). Called
        with the lock held.
        """
        name = f"{resource.plural}/{namespace or '*'}"
        if any(inf.name.split(" shard ")[0] == name for inf in self._informers.values()):
            name += f"[{selector or ''}]"
        if self.shard is not None and mode != "whole":
            name += f" shard {self.shard}"
            if mode == "name":
                name += " by name"
        return name

    def is_whole(self, informer: SharedInformer) -> bool:
        """Whether ``informer`` is a ``whole`` informer of a sharded factory."""
        with self._lock:
            return any(i is informer and k[3] == "whole" for k, i in self._informers.items())

    def _add_indexers(
        self, key: InformerKey, informer: SharedInformer, indexers: Mapping[str, IndexFunc]
    ) -> None:
        """Register the indexes ``informer`` lacks. Called with the lock held."""
        known = self._index_funcs[key]
        new: dict[str, IndexFunc] = {}
        for name, fn in indexers.items():
            if name not in known:
                new[name] = fn
            elif known[name] is not fn:
                raise ValueError(
                    f"informer {informer.name}: index {name!r} is already defined "
                    "with another function"
                )
        if new:
            informer.indexer().add_indexers(new)
            known.update(new)

    @property
    def informers(self) -> list[SharedInformer]:
        """Every informer handed out so far, in creation order."""
        with self._lock:
            return list(self._informers.values())

    def object_counts(self) -> dict[str, int]:
        """Return objects cached now per resource plural (``configbundles``), for gauges.

        Summed over the namespaces in scope; two informers of one resource with different
        label selectors are both counted (an object matching both, twice).
        """
        counts: dict[str, int] = {}
        for informer in self.informers:
            plural = informer.resource.plural
            counts[plural] = counts.get(plural, 0) + informer.object_count()
        return counts

    def start(self) -> None:
        """Start every informer not started yet (each on its own daemon thread)."""
        with self._lock:
            pending = [(k, i) for k, i in self._informers.items() if k not in self._started]
            self._started.update(k for k, _ in pending)
        for _, informer in pending:
            informer.start()

    def shutdown(self) -> None:
        """Stop every informer and wait for its thread (bounded per informer)."""
        for informer in self.informers:
            informer.stop()

    def wait_for_cache_sync(
        self,
        timeout: float = 120.0,
        *,
        stop: threading.Event | None = None,
        wait_out_refusals: bool = False,
        poll: float = 0.1,
        informers: Sequence[SharedInformer] | None = None,
    ) -> bool:
        """Block until every informer (or every one of ``informers``) has synced.

        Args:
            timeout: seconds to wait at most; with ``wait_out_refusals``, seconds without
                a refusal (the clock restarts whenever one is seen), so an operator
                waits as long as it takes for its CRD or its RBAC to be applied.
            stop: returns ``False`` soon after this event is set.
            wait_out_refusals: keep waiting while an informer's list/watch is refused
                (404: the CRD is not installed; 403: see :meth:`refusals`); otherwise return
                ``False`` as soon as one is (``cbop --once`` fails fast).
            poll: seconds between checks of ``stop`` and the refusals.
            informers: wait for these only (a controller's own caches); None: all.

        Returns:
            ``True`` once synced; ``False`` on timeout, on ``stop``, or on a refusal.
        """
        chosen = list(self.informers if informers is None else informers)
        deadline = time.monotonic() + timeout
        while not wait_for_cache_sync(*chosen, timeout=poll, poll=poll):
            if stop is not None and stop.is_set():
                return False
            if self.refusals(chosen):
                if not wait_out_refusals:
                    return False
                deadline = time.monotonic() + timeout
            elif time.monotonic() >= deadline:
                return False
        return True

    def refusals(self, informers: Sequence[SharedInformer] | None = None) -> list[ListWatchProblem]:
        """Return the refused list/watch requests of informers not synced yet.

        A refusal (404: a CRD is not installed; 403: RBAC) needs a change in the
        cluster, not a retry; see :mod:`cbop.informers.problems`.

        Args:
            informers: look at these only; None: every informer of the factory.
        """
        out = []
        for informer in self.informers if informers is None else informers:
            problem = informer.problem()
            if problem is not None and problem.refused and not informer.has_synced():
                out.append(problem)
        return out

    def readiness_checks(self) -> dict[str, Callable[[], str | None]]:
        """Return one readiness check per informer, for ``/readyz``.

        Keys are ``informer <name>`` (``informer configmaps/ns``); each check returns
        ``None`` when its informer has synced and its watch is up (or down only briefly),
        else one line saying why not: the failing request (:attr:`ListWatchProblem.message`:
        a missing CRD or a 403 naming verb, resource and scope, at once; an unreachable API
        server once the watch has been down longer than the informer's ``unhealthy_after``)
        or the first list still in progress.
        """

        def check(informer: SharedInformer) -> Callable[[], str | None]:
            def ready() -> str | None:
                problem = informer.problem()
                # A refusal (missing CRD, 403) fails at once; any other failure only
                # before the first list or once the watch has been down for longer than
                # the informer's ``unhealthy_after``: a watch that times out and is
                # re-established at once must not make the replica flap out of service.
                if problem is not None and (
                    problem.refused or not informer.has_synced() or not informer.healthy()
                ):
                    return problem.message
                if not informer.has_synced():
                    return "the first list is in progress"
                return None

            return ready

        return {f"informer {inf.name}": check(inf) for inf in self.informers}

    def alive(self) -> bool:
        """Liveness: whether every informer's threads run (says nothing of the server)."""
        return all(informer.alive() for informer in self.informers)

    def connected(self) -> bool:
        """Readiness: whether every informer's watch is up (or down only briefly).

        False while the API server is unreachable or refuses the list/watch for longer
        than the informers' ``unhealthy_after``; true again once the watches are back.
        """
        return all(informer.healthy() for informer in self.informers)

    def connection_states(self) -> dict[str, bool]:
        """Return informer name -> :meth:`SharedInformer.healthy`, for metrics."""
        return {informer.name: informer.healthy() for informer in self.informers}
