"""The source ConfigMaps (and Secrets) a bundle reads (``spec.sources``), for its reconcile.

This module owns :class:`SourceReader`, the part of the reconciler that reads the
source caches: the versions of the sources a bundle names (part of every memo key, so a
changed, created or deleted source never finds a stale entry) and the spec with their
content composed in (:func:`cbop.api.compose.compose`). docs/sources.md says what a
source is and when one is refused; docs/secrets.md what differs for a Secret target:
Secret sources are read from their own cache, their digests in status are keyed, and
a composed Secret of a built-in type must hold the keys that type requires.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from cbop.api import BundleSpec, SpecError, keyed_content_hash
from cbop.api.compose import SecretReads, SourceDigests, compose, composed_spec
from cbop.configbundle import secret
from cbop.configbundle.interfaces import Lister

__all__ = ["SourceReader"]


class SourceReader:
    """Reads the sources of bundles from the source-ConfigMap cache (thread-safe).

    Args:
        sources: lister over the source-ConfigMap cache (label ``cbop.dev/source=true``,
            every namespace in scope, never shard-filtered); None: no source is found.
        scope: the namespaces cbop watches (``--namespace``), None for all; a source
            elsewhere is reported as not found, naming them.
        secrets: lister over the source-Secret cache (the same label); None: cbop reads
            no Secret (Secrets are off).
        secret_scope: the namespaces whose Secrets cbop reads (``--secrets-namespace``),
            None for every namespace of ``scope``.
        key: ``fn() -> the digest key`` of the keyed digests of source Secrets.
    """

    def __init__(
        self,
        sources: Lister | None = None,
        scope: Sequence[str] | None = None,
        *,
        secrets: Lister | None = None,
        secret_scope: Sequence[str] | None = None,
        key: Callable[[], bytes] | None = None,
    ) -> None:
        self._sources = sources
        self._scope = tuple(scope) if scope else None
        self._secrets = secrets
        self._secret_scope = tuple(secret_scope) if secret_scope else None
        self._key = key
        # Each source Secret's keyed digest, once per version (the key lives as long).
        self._secret_digests = SourceDigests(hash_of=self._keyed)

    def _keyed(self, found: Mapping[str, Any]) -> str:
        if self._key is None:
            raise RuntimeError("a source Secret digested without a digest key (a bug)")
        return keyed_content_hash(self._key(), {}, secret.decode_data(found))

    def inputs(self, bundle: Mapping[str, Any]) -> Hashable:
        """Return the versions of the sources ``bundle`` reads, or None when it reads none.

        For each ``spec.sources`` entry, in order: ``(namespace, name, uid,
        resourceVersion)`` of the cached source, or ``(namespace, name)`` when it is not
        in the cache (a Secret's namespace prefixed ``secret:``). A lookup per source,
        from the raw spec (nothing parsed): the memo keys of
        :class:`cbop.configbundle.memo.DecisionMemo` include it.
        """
        raw = (bundle.get("spec") or {}).get("sources")
        if not raw or not isinstance(raw, list):
            return None
        namespace = bundle["metadata"]["namespace"]
        out: list[tuple[Any, ...]] = []
        for entry in raw:
            if not isinstance(entry, Mapping):
                continue
            field, cache, prefix = "configMap", self._sources, ""
            if "secret" in entry:
                field, cache, prefix = "secret", self._secrets, "secret:"
            ref = entry.get(field)
            if not isinstance(ref, Mapping):
                continue
            ns, name = ref.get("namespace") or namespace, ref.get("name")
            found = (
                cache.get(ns, name)
                if cache is not None and isinstance(ns, str) and isinstance(name, str)
                else None
            )
            if found is None:
                out.append((f"{prefix}{ns}", name))
            else:
                meta = found["metadata"]
                out.append((f"{prefix}{ns}", name, meta.get("uid"), meta.get("resourceVersion")))
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
        ``deletionPolicy`` is still honoured. A composed Secret of a built-in type that
        lacks a key the type requires is ``InvalidSpec`` the same way
        (:func:`cbop.configbundle.secret.spec_error`).

        Raises:
            DigestKeyError, ApiError, ConnectionFailed: a Secret target's digest key
                cannot be read.
        """
        if not isinstance(spec, BundleSpec) or spec.suspend:
            return spec
        if not spec.composed:
            return (secret.spec_error(spec) or spec) if spec.target.is_secret else spec
        sources, secrets = self._sources, self._secrets

        def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
            return sources.get(namespace, name) if sources is not None else None

        def lookup_secret(namespace: str, name: str) -> Mapping[str, Any] | None:
            return secrets.get(namespace, name) if secrets is not None else None

        reads = None
        if spec.target.is_secret and secrets is not None:
            reads = SecretReads(lookup_secret, self._secret_digests.digest)
        try:
            composed = compose(
                spec,
                bundle["metadata"]["namespace"],
                lookup,
                scope=self._scope,
                secrets=reads,
                secret_scope=self._secret_scope,
            )
        except SpecError as err:
            err.spec = spec
            return err.with_traceback(None)
        done = composed_spec(spec, composed)
        return (secret.spec_error(done) or done) if spec.target.is_secret else done
