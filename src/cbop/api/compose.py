"""Compose a bundle's content from its sources: layers, precedence, structured merge.

Pure, no I/O. :func:`compose` takes a parsed spec with ``sources`` or ``merge``, the
bundle's namespace and lookups of cached source ConfigMaps (and Secrets, for a Secret
target: :class:`SecretReads`), and returns the :class:`Composed` content (``data``,
``binaryData``, what was read, which layers made each key) or raises a
:class:`SourceError` naming the source; the reconciler writes what it returns. The rules
are docs/sources.md's: the sources in ``spec.sources`` order, then the spec's own keys,
a later layer winning a key; the keys of ``spec.merge`` merged deeply
(:mod:`cbop.api.structured`); a source must be cached (labelled ``cbop.dev/source``) and
shared with the bundle's namespace.

For a Secret target nothing composed from a Secret is written where ``view`` reads it:
a Secret source's digest in status is the caller's keyed one (:class:`SecretReads`),
and a merge error names the layer, the key and a line and column, never the text
(docs/secrets.md).

Why a ConfigMap cbop manages is refused as a source (:attr:`Reason.INVALID_SOURCE`): a
bundle's output never feeds a bundle, so chains and cycles of bundles cannot form.
Each source's content hash is computed once per source version and shared by its
readers (:class:`SourceDigests`). The same spec and sources give the same bytes and
provenance, whatever the order of the cache.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import cachetools

from cbop.api.content import content_hash, decode_binary
from cbop.api.ownership import controller_reference, is_bundle_reference
from cbop.api.spec import BundleSpec, MergeFormat, SourceRef, SpecError, TooLargeError
from cbop.api.structured import DOCUMENTS, Documents, StructuredError, merge_layers
from cbop.api.target import Kind
from cbop.api.types import (
    ANNOTATION_SHARE_WITH,
    LABEL_MANAGED_BY,
    LABEL_SOURCE,
    MANAGED_BY_VALUE,
    MAX_CONFIGMAP_BYTES,
    Reason,
)

__all__ = [
    "MAX_KEY_SOURCES",
    "SPEC_LAYER",
    "Composed",
    "SecretReads",
    "SourceError",
    "SourceStatus",
    "bounded_key_sources",
    "compose",
    "composed_spec",
    "shared_with",
]

#: The layer name of ``spec.data`` and ``spec.binaryData`` in ``status.keySources``.
SPEC_LAYER: Final = "spec"
#: At most this many keys are listed in ``status.keySources`` (the first by name).
MAX_KEY_SOURCES: Final = 100
#: ``fn(namespace, name) -> ConfigMap or None``: a source ConfigMap (or Secret) from the
#: cache.
Lookup = Callable[[str, str], Mapping[str, Any] | None]
#: A line and column in a parser's message (``line 3, column 5``, ``line 1 column 5``).
_POSITION = re.compile(r"line \d+,? column \d+")


@dataclass(frozen=True, slots=True)
class SecretReads:
    """How :func:`compose` reads Secret sources (only a Secret target has them).

    Attributes:
        lookup: the cached source Secrets (label ``cbop.dev/source=true``), never mutated.
        digest: ``fn(secret) -> str``: the keyed digest of a source Secret's whole
            content (:func:`cbop.api.content.keyed_content_hash`), for
            ``status.sources``.
    """

    lookup: Lookup
    digest: Callable[[Mapping[str, Any]], str]


class SourceError(SpecError):
    """A source cannot be used; the bundle's ConfigMap keeps its last good content.

    Attributes:
        reason: :attr:`Reason.SOURCE_NOT_FOUND`, :attr:`Reason.SOURCE_NOT_SHARED` or
            :attr:`Reason.INVALID_SOURCE`.
        source: ``namespace/name`` of the source, or ``spec`` for the spec's own layer.
    """

    def __init__(self, message: str, reason: Reason, source: str) -> None:
        super().__init__(message, reason)
        self.source = source


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One source as read: an entry of ``status.sources`` (``kind`` only for a Secret)."""

    namespace: str
    name: str
    content_hash: str
    kind: Kind = Kind.CONFIGMAP

    def as_status(self) -> dict[str, str]:
        """Return the entry as the status carries it."""
        entry = {"namespace": self.namespace, "name": self.name, "contentHash": self.content_hash}
        if self.kind is Kind.SECRET:
            entry["kind"] = self.kind.value
        return entry


@dataclass(frozen=True, slots=True)
class Composed:
    """A bundle's content composed from its layers.

    Attributes:
        data: key -> text, in key order.
        binary_data: key -> bytes, in key order.
        sources: the sources read, in spec order (a missing optional one is left out).
        key_sources: key -> the layers that made its value, ``+``-joined, every key.
        size: summed byte length of the text (UTF-8) and binary values.
    """

    data: Mapping[str, str]
    binary_data: Mapping[str, bytes]
    sources: tuple[SourceStatus, ...]
    key_sources: Mapping[str, str]
    size: int


def shared_with(configmap: Mapping[str, Any], namespace: str) -> bool:
    """Whether a source's ``cbop.dev/share-with`` lets bundles of ``namespace`` read it.

    The annotation is a comma-separated list of namespaces (spaces around them
    ignored), or ``*`` for every namespace. No annotation: nobody else.
    """
    annotations = (configmap.get("metadata") or {}).get("annotations") or {}
    names = _share_names(str(annotations.get(ANNOTATION_SHARE_WITH, "")))
    return "*" in names or namespace in names


@functools.lru_cache(maxsize=256)
def _share_names(value: str) -> frozenset[str]:
    """Return the namespaces of a ``cbop.dev/share-with`` value (split once per value)."""
    return frozenset(n.strip() for n in value.split(","))


def _managed_by_cbop(configmap: Mapping[str, Any], kind: Kind) -> str | None:
    """Return why ``configmap`` (a ConfigMap or Secret) is cbop's own output, or None."""
    meta = configmap.get("metadata") or {}
    ref = controller_reference(configmap)
    if ref is not None and is_bundle_reference(ref):
        return f"it is the {kind.value} of ConfigBundle {meta.get('namespace')}/{ref.get('name')}"
    if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE:
        return f"it carries {LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
    return None


def _scope_words(scope: Sequence[str]) -> str:
    return ", ".join(sorted(scope))


def _read(
    source: SourceRef,
    namespace: str,
    lookup: Lookup | None,
    scope: Sequence[str] | None,
    flag: str = "--namespace",
) -> Mapping[str, Any] | None:
    """Return the source object, None for a missing optional one; raise when unusable.

    ``lookup`` None: cbop reads no object of the source's kind (Secrets while they are
    off), so the source is missing. ``scope`` names the namespaces watched, by ``flag``.
    """
    what = source.describe()
    if scope is not None and source.namespace not in scope:
        if source.optional:
            return None
        raise SourceError(
            f"source {what} is outside the namespaces cbop watches "
            f"({flag} {_scope_words(scope)}); cbop reads sources only there",
            Reason.SOURCE_NOT_FOUND,
            source.key,
        )
    found = lookup(source.namespace, source.name) if lookup is not None else None
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    if found is None or labels.get(LABEL_SOURCE) != "true":
        if source.optional:
            return None
        raise SourceError(
            f"source {what} not found: it does not exist or is not labelled "
            f'{LABEL_SOURCE}: "true"; label it to use it as a source',
            Reason.SOURCE_NOT_FOUND,
            source.key,
        )
    managed = _managed_by_cbop(found, source.kind)
    if managed is not None:
        raise SourceError(
            f"{what} cannot be a source: {managed}, and what cbop writes is never read as "
            "a source (no chains of bundles)",
            Reason.INVALID_SOURCE,
            source.key,
        )
    if source.namespace != namespace and not shared_with(found, namespace):
        raise SourceError(
            f"source {what} is not shared with namespace {namespace}: "
            f'its annotation {ANNOTATION_SHARE_WITH} must name "{namespace}" or "*"',
            Reason.SOURCE_NOT_SHARED,
            source.key,
        )
    return found


class SourceDigests:
    """The content hash of each source version, computed once for all its readers.

    ``hash_of`` is what is computed (default: :func:`cbop.api.content.content_hash` of
    the whole content; a keyed digest for source Secrets). Keyed by the object's
    ``(uid, resourceVersion)``: the API server gives every change of an object a new
    resourceVersion, so an entry never outlives the content it was computed from. An
    object without both (built by hand) is hashed every time. At most ``size`` entries,
    the oldest out first (a ``cachetools.FIFOCache``). Safe to share between threads.
    """

    def __init__(
        self, size: int = 4096, hash_of: Callable[[Mapping[str, Any]], str] | None = None
    ) -> None:
        self._entries: cachetools.FIFOCache[tuple[str, str], str] = cachetools.FIFOCache(
            maxsize=size
        )
        self._lock = threading.Lock()
        self._hash_of = hash_of or _whole_digest

    def digest(self, configmap: Mapping[str, Any]) -> str:
        """Return :func:`cbop.api.content.content_hash` of ``configmap``'s whole content.

        Or what ``hash_of`` gives (a keyed digest, for source Secrets). ``binaryData``
        that is not valid base64 counts as empty (the caller refuses such a source
        before its hash is used).
        """
        meta = configmap.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return self._hash_of(configmap)
        key = (uid, version)
        with self._lock:
            found = self._entries.get(key)
        if found is not None:
            return found
        value = self._hash_of(configmap)
        with self._lock:
            self._entries[key] = value
        return value


def _whole_digest(configmap: Mapping[str, Any]) -> str:
    return content_hash(
        configmap.get("data") or {}, decode_binary(configmap.get("binaryData")) or {}
    )


#: The digests :func:`compose` uses unless given its own.
SOURCE_DIGESTS: Final = SourceDigests()


class SourceDecodes:
    """The bytes of each source's base64 field, decoded once per source version.

    A Secret's ``data`` (a ConfigMap's ``binaryData``) is decoded once for all the
    readers of a version, not once per reader and reconcile. Keyed by the object's uid
    and the field, an entry holds the decoded bytes of one resourceVersion: the next
    version replaces it, so no stale content is kept, and a lookup of another version
    decodes again. At most ``size`` sources, the least recently used out first (a
    ``cachetools.LRUCache``). An object without uid and resourceVersion (built by hand)
    is decoded every time. The mappings returned are shared: never mutate them. Safe to
    share between threads.
    """

    def __init__(self, size: int = 256) -> None:
        self._entries: cachetools.LRUCache[tuple[str, str], tuple[str, dict[str, bytes] | None]] = (
            cachetools.LRUCache(maxsize=size)
        )
        self._lock = threading.Lock()

    def decode(self, found: Mapping[str, Any], field: str) -> dict[str, bytes] | None:
        """Return :func:`cbop.api.content.decode_binary` of ``found[field]``.

        None when a value is not valid base64, as that function.
        """
        raw = found.get(field)
        meta = found.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not raw or not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return decode_binary(raw)
        key = (uid, field)
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = decode_binary(raw)
        with self._lock:
            self._entries[key] = (version, value)
        return value


#: The decodes :func:`compose` uses unless given its own.
SOURCE_DECODES: Final = SourceDecodes()


def _layer(
    source: SourceRef, found: Mapping[str, Any], decodes: SourceDecodes = SOURCE_DECODES
) -> dict[str, str | bytes]:
    """Return the keys ``source`` contributes: every key, or its ``items`` renamed.

    A ConfigMap's ``data`` gives text and its ``binaryData`` bytes; a Secret's ``data``
    gives bytes (decoded from the base64 the API carries).
    """
    secret = source.kind is Kind.SECRET
    data: Mapping[str, str] = {} if secret else (found.get("data") or {})
    binary = decodes.decode(found, "data" if secret else "binaryData")
    if binary is None:
        field = "data" if secret else "binaryData"
        raise SourceError(
            f"source {source.describe()} has {field} that is not valid base64",
            Reason.INVALID_SOURCE,
            source.key,
        )
    everything: dict[str, str | bytes] = {**binary, **data}
    if source.items is None:
        return everything
    out: dict[str, str | bytes] = {}
    for item in source.items:
        if item.key in everything:
            out[item.path] = everything[item.key]
        elif not source.optional:
            raise SourceError(
                f"source {source.describe()} has no key {item.key!r} (listed in its items)",
                Reason.INVALID_SOURCE,
                source.key,
            )
    return out


def _merged(
    key: str,
    fmt: MergeFormat,
    layers: Sequence[tuple[str, str | bytes]],
    documents: Documents,
    *,
    secret: bool = False,
) -> tuple[str, list[str]]:
    """Merge the layers' values of merge key ``key``; raise naming the layer and the key.

    ``secret``: the target is a Secret, so a parser's detail is cut to its position
    (:func:`_shown_detail`).
    """
    texts: list[str] = []
    for layer, value in layers:
        try:
            texts.append(value.decode("utf-8") if isinstance(value, bytes) else value)
        except UnicodeDecodeError as err:
            raise _invalid(layer, key, fmt, f"not UTF-8: {err.reason}") from None
    try:
        text, made_by = merge_layers(texts, fmt, documents)
    except StructuredError as err:
        detail = _shown_detail(err.detail, secret=secret)
        names = "+".join(layer for layer, _ in layers)
        if err.layer < 0:
            raise SourceError(
                f"key {key!r} merged from {names} cannot be written as {fmt.value}: {detail}",
                Reason.INVALID_SOURCE,
                names,
            ) from None
        raise _invalid(layers[err.layer][0], key, fmt, detail) from None
    return text, [layers[i][0] for i in made_by]


def _shown_detail(detail: str, *, secret: bool) -> str:
    """Return the part of a parser's ``detail`` that may be shown.

    For a ConfigMap target, all of it. For a Secret target only its line and column: a
    parser quotes what it found (a duplicate key's values, the token it choked on), and
    the message goes to status and Events, which ``view`` reads.
    """
    if not secret:
        return detail
    found = _POSITION.search(detail)
    where = f"at {found.group(0)}; " if found else ""
    return f"{where}the text is not shown: the target is a Secret"


def _invalid(layer: str, key: str, fmt: MergeFormat, detail: str) -> SourceError:
    """Return the error of a layer whose value of merge key ``key`` is not valid ``fmt``."""
    if layer == SPEC_LAYER:
        where = "spec.data"
    elif layer.startswith("secret:"):
        where = f"source Secret {layer.removeprefix('secret:')}"
    else:
        where = f"source ConfigMap {layer}"
    return SourceError(
        f"{where}: key {key!r} is not valid {fmt.value} ({detail}); spec.merge lists it",
        Reason.INVALID_SPEC if layer == SPEC_LAYER else Reason.INVALID_SOURCE,
        layer,
    )


def compose(
    spec: BundleSpec,
    namespace: str,
    lookup: Lookup,
    *,
    scope: Sequence[str] | None = None,
    digests: SourceDigests = SOURCE_DIGESTS,
    decodes: SourceDecodes = SOURCE_DECODES,
    documents: Documents = DOCUMENTS,
    secrets: SecretReads | None = None,
    secret_scope: Sequence[str] | None = None,
) -> Composed:
    """Compose the content of a bundle of ``namespace`` from its layers (module docstring).

    Args:
        spec: the bundle's parsed spec (its ``sources``, ``merge``, ``data``,
            ``binary_data``).
        namespace: the bundle's namespace.
        lookup: the cached source ConfigMaps (never mutated).
        scope: the namespaces cbop watches (``--namespace``), or None for all.
        digests: where each source version's content hash is computed once.
        decodes: where each source version's base64 content is decoded once.
        documents: where the values of merge keys are parsed once
            (:mod:`cbop.api.structured`).
        secrets: how Secret sources are read and digested; None: cbop reads no Secret,
            and a Secret source is missing.
        secret_scope: the namespaces whose Secrets cbop reads (``--secrets-namespace``),
            or None for every namespace in ``scope``.

    Returns:
        The :class:`Composed` content.

    Raises:
        SourceError: a required source is missing, not shared, managed by cbop, or a
            value of a merge key does not parse; the message names the source (and key).
        TooLargeError: the composed content is over 1,048,576 bytes.
    """
    secret_target = spec.target.is_secret
    values: dict[str, str | bytes] = {}
    provenance: dict[str, list[str]] = {}
    read: list[SourceStatus] = []
    spec_layer: dict[str, str | bytes] = {**spec.binary_data, **spec.data}
    layers: list[tuple[str, Mapping[str, str | bytes]]] = []
    for source in spec.sources:
        if source.kind is Kind.SECRET:
            found = _read(
                source,
                namespace,
                secrets.lookup if secrets is not None else None,
                secret_scope if secret_scope is not None else scope,
                "--secrets-namespace" if secret_scope is not None else "--namespace",
            )
            digest = secrets.digest if secrets is not None else _no_digest
        else:
            found = _read(source, namespace, lookup, scope)
            digest = digests.digest
        if found is None:
            continue
        picked = _layer(source, found, decodes)
        read.append(SourceStatus(source.namespace, source.name, digest(found), source.kind))
        layers.append((source.key, picked))
    layers.append((SPEC_LAYER, spec_layer))

    merging: dict[str, list[tuple[str, str | bytes]]] = {}
    for name, layer in layers:
        for key in sorted(layer):
            if key in spec.merge:
                merging.setdefault(key, []).append((name, layer[key]))
            else:
                values[key] = layer[key]
                provenance[key] = [name]
    for key, merged in sorted(merging.items()):
        values[key], provenance[key] = _merged(
            key, spec.merge[key], merged, documents, secret=secret_target
        )
    data = {k: v for k, v in sorted(values.items()) if isinstance(v, str)}
    binary = {k: v for k, v in sorted(values.items()) if isinstance(v, bytes)}
    size = sum(len(v.encode("utf-8", "surrogatepass")) for v in data.values())
    size += sum(len(v) for v in binary.values())
    if size > MAX_CONFIGMAP_BYTES:
        raise TooLargeError(size, spec.target.kind)
    key_sources = {k: "+".join(provenance[k]) for k in sorted(values)}
    return Composed(data, binary, tuple(read), key_sources, size)


def _no_digest(found: Mapping[str, Any]) -> str:
    raise RuntimeError("a Secret source was read without SecretReads (a bug)")


def bounded_key_sources(
    key_sources: Mapping[str, str], limit: int = MAX_KEY_SOURCES
) -> tuple[dict[str, str], int]:
    """Return the first ``limit`` entries of ``key_sources`` by key, and how many are left out."""
    keys = sorted(key_sources)
    return {k: key_sources[k] for k in keys[:limit]}, max(0, len(keys) - limit)


def composed_spec(spec: BundleSpec, composed: Composed) -> BundleSpec:
    """Return ``spec`` with ``composed`` as its content, and the status fields that say so.

    The result's ``data``, ``binary_data`` and ``size`` are the composed content;
    its ``provenance`` holds ``sources`` (list of ``{namespace, name, contentHash}``, and
    ``kind: Secret`` for a Secret),
    ``keySources`` (at most :data:`MAX_KEY_SOURCES` entries) and, when keys were left
    out, ``keySourcesOmitted``. Compose from the spec as parsed, never from this one.
    """
    shown, omitted = bounded_key_sources(composed.key_sources)
    provenance: dict[str, Any] = {
        "sources": [s.as_status() for s in composed.sources],
        "keySources": shown,
    }
    if omitted:
        provenance["keySourcesOmitted"] = omitted
    return dataclasses.replace(
        spec,
        data=composed.data,
        binary_data=composed.binary_data,
        size=composed.size,
        provenance=provenance,
    )
