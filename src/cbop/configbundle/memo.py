"""Memoised parts of the reconcile decision, so a no-op reconcile does little work.

A resync reconciles every bundle, and every event of a managed ConfigMap reconciles its
bundle; almost all find nothing to do. This module owns :class:`DecisionMemo`, LRU
caches of what those reconciles compute, each keyed so that a change never finds a
stale entry: the parsed spec and the desired ConfigMap by the bundle's
``(uid, generation)`` (the API server bumps ``generation`` on every spec change), the
in-sync verdict by the ConfigMap's ``(uid, resourceVersion)`` as well, and, with
``spec.sources``, by the ``inputs`` of the sources read. A fourth cache keeps per bundle
the outcome of its last full reconcile that wrote nothing, so a resync that finds the
bundle and its ConfigMap unchanged returns it without parsing or deciding again.

Why the first three hold only a working set, filled only by reconciles that will be
followed by others (one that writes, and the reconciles its watch events bring): a
converged operator then keeps no second copy of every bundle's content, and a restart
does not fill them with entries evicted before anyone asks again (:meth:`DecisionMemo.keep`,
:meth:`DecisionMemo.lookup`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import cachetools

from cbop.api import BundleSpec, SpecError, parse_spec
from cbop.configbundle.decision import Decision, decide
from cbop.configbundle.desired import DesiredConfigMap, desired_configmap, in_sync
from cbop.locks import YieldingLock, absent

#: Default stored outcomes: room for this many converged bundles before a resync
#: evicts entries it will need again.
DEFAULT_MAXSIZE = 65_536

#: Default parsed specs, desired ConfigMaps and verdicts kept: the bundles of the most
#: recent full reconciles (a create is followed by two more full reconciles, for its
#: ConfigMap's and its status's watch events, within seconds).
DEFAULT_WORKING_SET = 1_024


def _bundle_key(bundle: Mapping[str, Any], inputs: Hashable = None) -> tuple[Any, ...] | None:
    meta = bundle.get("metadata") or {}
    uid, generation = meta.get("uid"), meta.get("generation")
    if not isinstance(uid, str) or not uid or not isinstance(generation, int):
        return None
    return (uid, generation) if inputs is None else (uid, generation, inputs)


def _object_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = obj.get("metadata") or {}
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if not isinstance(uid, str) or not uid or not isinstance(rv, str) or not rv:
        return None
    return uid, rv


class DecisionMemo:
    """Parsed specs, desired ConfigMaps and in-sync verdicts, memoised (see module docs).

    Args:
        maxsize: stored no-op outcomes, one per bundle (least recently used go first).
        working_set: parsed specs, desired ConfigMaps and in-sync verdicts, each
            (least recently used go first); at most ``maxsize``.

    Thread-safe: a lock guards each cache; a value is computed outside the lock, so two
    threads may compute the same entry once each (the results are equal).
    """

    def __init__(
        self, maxsize: int = DEFAULT_MAXSIZE, working_set: int = DEFAULT_WORKING_SET
    ) -> None:
        working_set = min(working_set, maxsize)
        self._specs: cachetools.LRUCache[Hashable, BundleSpec | SpecError] = cachetools.LRUCache(
            working_set
        )
        self._desired: cachetools.LRUCache[Hashable, DesiredConfigMap] = cachetools.LRUCache(
            working_set
        )
        self._synced: cachetools.LRUCache[Hashable, bool] = cachetools.LRUCache(working_set)
        # Bundle UID -> (bundle resourceVersion, ConfigMap UID, ConfigMap
        # resourceVersion, sources' inputs, the outcome); only bundles whose last full
        # reconcile wrote nothing.
        self._noops: cachetools.LRUCache[str, tuple[str, str, str, Hashable, Any]] = (
            cachetools.LRUCache(maxsize)
        )
        self._lock = YieldingLock()
        #: Lookups answered from a cache, and computed, over all three caches (exact
        #: with one thread; a miss is counted without the lock).
        self.hits = 0
        self.misses = 0

    def _get(self, cache: cachetools.LRUCache[Hashable, Any], key: Hashable | None) -> Any:
        if key is None:
            return None
        if absent(cache, key):
            self.misses += 1
            return None
        with self._lock:
            value = cache.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
            return value

    def _put(
        self, cache: cachetools.LRUCache[Hashable, Any], key: Hashable | None, value: Any
    ) -> None:
        if key is not None:
            with self._lock:
                cache[key] = value

    def spec(self, bundle: Mapping[str, Any], *, keep: bool = True) -> BundleSpec | SpecError:
        """Return :func:`cbop.api.parse_spec` of ``bundle``, or the SpecError it raises.

        The returned SpecError carries no traceback (it is kept, and a traceback would
        keep the frames of the first parse alive).

        Args:
            bundle: the bundle as cached.
            keep: put a spec that had to be parsed into the working set.
        """
        return self.lookup(bundle, keep=keep)[0]

    def lookup(
        self, bundle: Mapping[str, Any], *, keep: bool = False
    ) -> tuple[BundleSpec | SpecError, bool]:
        """Return ``(spec, known)``: the parsed spec as :meth:`spec`, and whether it was memoised.

        ``known`` tells whether the bundle's ``(uid, generation)`` is in the working set,
        i.e. whether a reconcile of this bundle version kept its entries lately (see
        :meth:`keep`). A spec that had to be parsed is put into the working set only
        with ``keep``.
        """
        key = _bundle_key(bundle)
        got: BundleSpec | SpecError | None = self._get(self._specs, key)
        if got is not None:
            return got, True
        try:
            got = parse_spec(bundle)
        except SpecError as err:
            got = err.with_traceback(None)
        if keep:
            self._put(self._specs, key, got)
        return got, False

    def desired(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec,
        *,
        keep: bool = True,
        inputs: Hashable = None,
    ) -> DesiredConfigMap:
        """Return :func:`cbop.configbundle.desired.desired_configmap` ``(bundle, spec)``.

        ``spec`` must be the parsed spec of ``bundle`` (as :meth:`spec` returns it, with
        its sources composed for ``inputs``); one that had to be rendered is put into
        the working set only with ``keep``.
        """
        key = _bundle_key(bundle, inputs)
        got: DesiredConfigMap | None = self._get(self._desired, key)
        if got is None:
            got = desired_configmap(bundle, spec)
            if keep:
                self._put(self._desired, key, got)
        return got

    def decide(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        current: Mapping[str, Any] | None,
        *,
        keep: bool = True,
        inputs: Hashable = None,
    ) -> Decision:
        """Return :func:`cbop.configbundle.decision.decide` ``(bundle, spec, current)``.

        The same decision, with the desired ConfigMap and the in-sync verdict looked up
        in the working set; what had to be computed is put into it only with ``keep``.
        ``inputs``: the sources' versions (module docstring), None without sources.
        """
        bundle_key = _bundle_key(bundle, inputs)

        def desired_of(bundle: Mapping[str, Any], spec: BundleSpec) -> DesiredConfigMap:
            return self.desired(bundle, spec, keep=keep, inputs=inputs)

        def synced(desired: DesiredConfigMap, cm: Mapping[str, Any]) -> bool:
            cm_key = _object_key(cm)
            key = None if bundle_key is None or cm_key is None else (*bundle_key, *cm_key)
            verdict: bool | None = self._get(self._synced, key)
            if verdict is None:
                verdict = in_sync(desired, cm)
                if keep:
                    self._put(self._synced, key, verdict)
            return verdict

        return decide(bundle, spec, current, desired_of=desired_of, synced=synced)

    def keep(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        decision: Decision,
        *,
        inputs: Hashable = None,
    ) -> None:
        """Put ``bundle``'s parsed spec and ``decision``'s desired ConfigMap in the working set.

        For a reconcile that looked them up without ``keep`` and then wrote: the watch
        events of its writes bring the bundle back within seconds, and those reconciles
        find them here. ``spec`` is the spec as parsed (never one with its sources
        composed into it); ``inputs`` as for :meth:`decide`.
        """
        self._put(self._specs, _bundle_key(bundle), spec)
        if decision.desired is not None:
            self._put(self._desired, _bundle_key(bundle, inputs), decision.desired)

    def noop(
        self,
        bundle: Mapping[str, Any],
        configmap: Mapping[str, Any] | None,
        inputs: Hashable = None,
    ) -> Any:
        """Return the outcome :meth:`remember_noop` stored for ``bundle``, or None.

        Args:
            bundle: the bundle as cached now.
            configmap: the cached ConfigMap the bundle names now, or None.
            inputs: the sources' versions now (module docstring), None without sources.

        Returns:
            The outcome, when the bundle's last full reconcile wrote nothing and was
            computed from the same bundle resourceVersion, the same ConfigMap (UID,
            resourceVersion) and the same ``inputs``; else None.
        """
        meta = bundle.get("metadata") or {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or configmap is None:
            return None
        if not absent(self._noops, uid):
            with self._lock:
                entry = self._noops.get(uid)
        else:
            entry = None
        if entry is None or entry[0] != meta.get("resourceVersion") or entry[3] != inputs:
            return None
        if _object_key(configmap) != entry[1:3]:
            return None
        return entry[4]

    def remember_noop(
        self,
        bundle: Mapping[str, Any],
        configmap: Mapping[str, Any],
        outcome: Any,
        inputs: Hashable = None,
    ) -> None:
        """Store ``outcome`` of a full reconcile of ``bundle`` that wrote nothing.

        ``configmap`` is the ConfigMap it was decided against, ``inputs`` the sources'
        versions it read. Objects without a UID or resourceVersion are not stored.
        """
        bundle_key = _object_key(bundle)
        key = _object_key(configmap)
        if bundle_key is not None and key is not None:
            with self._lock:
                self._noops[bundle_key[0]] = (bundle_key[1], *key, inputs, outcome)

    def forget_noop(self, bundle: Mapping[str, Any]) -> None:
        """Drop the stored outcome of ``bundle`` (a full reconcile of it begins)."""
        uid = (bundle.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and not absent(self._noops, uid):
            with self._lock:
                self._noops.pop(uid, None)
