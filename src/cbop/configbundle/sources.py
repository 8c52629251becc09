"""The source ConfigMaps a bundle reads (``spec.sources``), for its reconcile.

This module owns :class:`SourceReader`, the part of the reconciler that reads the
source cache: the versions of the sources a bundle names (part of every memo key, so a
changed, created or deleted source never finds a stale entry) and the spec with their
content composed in (:func:`cbop.api.compose.compose`). docs/sources.md says what a
source is and when one is refused.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from cbop.api import BundleSpec, SpecError
from cbop.api.compose import compose, composed_spec
from cbop.configbundle.interfaces import Lister

__all__ = ["SourceReader"]


class SourceReader:
    """Reads the sources of bundles from the source-ConfigMap cache (thread-safe).

    Args:
        sources: lister over the source-ConfigMap cache (label ``cbop.dev/source=true``,
            every namespace in scope, never shard-filtered); None: no source is found.
        scope: the namespaces cbop watches (``--namespace``), None for all; a source
            elsewhere is reported as not found, naming them.
    """

    def __init__(self, sources: Lister | None = None, scope: Sequence[str] | None = None) -> None:
        self._sources = sources
        self._scope = tuple(scope) if scope else None

    def inputs(self, bundle: Mapping[str, Any]) -> Hashable:
        """Return the versions of the sources ``bundle`` reads, or None when it reads none.

        For each ``spec.sources`` entry, in order: ``(namespace, name, uid,
        resourceVersion)`` of the cached source, or ``(namespace, name)`` when it is not
        in the cache. A lookup per source, from the raw spec (nothing parsed): the memo
        keys of :class:`cbop.configbundle.memo.DecisionMemo` include it.
        """
        raw = (bundle.get("spec") or {}).get("sources")
        if not raw or not isinstance(raw, list):
            return None
        namespace = bundle["metadata"]["namespace"]
        out: list[tuple[Any, ...]] = []
        for entry in raw:
            ref = entry.get("configMap") if isinstance(entry, Mapping) else None
            if not isinstance(ref, Mapping):
                continue
            ns, name = ref.get("namespace") or namespace, ref.get("name")
            found = (
                self._sources.get(ns, name)
                if self._sources is not None and isinstance(ns, str) and isinstance(name, str)
                else None
            )
            if found is None:
                out.append((ns, name))
            else:
                meta = found["metadata"]
                out.append((ns, name, meta.get("uid"), meta.get("resourceVersion")))
        return tuple(out)

    def compose(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError
    ) -> BundleSpec | SpecError:
        """Return ``spec`` with its sources composed in, or why that cannot be done.

        A spec without sources and merge keys, an invalid one and a suspended one come
        back as they are. A source that is missing, not shared, managed by cbop or
        holds a merge key that does not parse comes back as the
        :class:`cbop.api.compose.SourceError` (a content over the size limit as the
        :class:`cbop.api.TooLargeError`): the decision then writes nothing, so the
        ConfigMap keeps its last good content (or is not created) and status names it.
        The error carries ``spec`` (:attr:`cbop.api.SpecError.spec`), whose
        ``deletionPolicy`` is still honoured.
        """
        if not isinstance(spec, BundleSpec) or not spec.composed or spec.suspend:
            return spec
        sources = self._sources

        def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
            return sources.get(namespace, name) if sources is not None else None

        try:
            composed = compose(spec, bundle["metadata"]["namespace"], lookup, scope=self._scope)
        except SpecError as err:
            err.spec = spec
            return err.with_traceback(None)
        return composed_spec(spec, composed)
