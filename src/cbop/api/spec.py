"""Typed, validated view of a ConfigBundle's ``spec``.

:func:`parse_spec` turns the raw ``spec`` dict (as the informer cache holds it) into a
frozen :class:`BundleSpec`, or raises :class:`SpecError` / :class:`TooLargeError` with a
message a user can act on. The CRD's schema and CEL rules reject most invalid input at
admission; these checks are the second line of defence (a CRD installed by an older
cbop, or objects written before a rule existed) and the only check of the ConfigMap size
limit, which depends on decoded byte counts that CEL cannot see cheaply.

The rules are kube-apiserver's own validation of ConfigMaps and of object metadata
(``k8s.io/apimachinery/pkg/util/validation``), so a spec that passes here produces a
ConfigMap the API server accepts.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cbop.api.target import Kind, Target, TargetError, parse_target, target_of
from cbop.api.types import MAX_CONFIGMAP_BYTES, RESERVED_ANNOTATIONS, RESERVED_LABELS, Reason

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_MAX_KEY_LENGTH = 253
_MAX_NAME_PART_LENGTH = 63
_MAX_LABEL_VALUE_LENGTH = 63
_DNS1123_LABEL_ONLY = re.compile(rf"^{_DNS1123_LABEL}$")
#: At most this many sources, items per source and merge keys (the CRD's maxItems).
MAX_SOURCES = 16
MAX_SOURCE_ITEMS = 64
MAX_MERGE_KEYS = 64
#: kube-apiserver's limit on the total size of an object's annotations (256 KiB).
_MAX_ANNOTATIONS_BYTES = 256 * 1024


class DeletionPolicy(enum.StrEnum):
    """What happens to the ConfigMap when its bundle is deleted."""

    DELETE = "Delete"
    ORPHAN = "Orphan"


class SpecError(ValueError):
    """The spec cannot be turned into a ConfigMap; only a spec change can fix it.

    Attributes:
        reason: the ``Ready`` condition reason to report (a :class:`Reason`).
        message: a sentence naming the offending field and value.
        spec: the parsed spec when the spec itself is valid and only composing it failed
            (a source missing, not shared or unparsable, a composed content over the size
            limit; :mod:`cbop.api.compose`), else None. Its ``deletionPolicy`` and name
            still hold, and the ConfigMap keeps the last good content.
    """

    def __init__(self, message: str, reason: Reason = Reason.INVALID_SPEC) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.spec: BundleSpec | None = None


class TooLargeError(SpecError):
    """The target would exceed kube-apiserver's 1,048,576-byte content limit.

    The limit is the same for a ConfigMap (``data`` values plus decoded ``binaryData``
    values) and a Secret (decoded ``data`` values); keys and metadata do not count.

    Attributes:
        size: the summed byte length of the values.
        kind: the kind of the target (the reason is ``ConfigMapTooLarge`` or
            ``SecretTooLarge``).
    """

    def __init__(self, size: int, kind: Kind = Kind.CONFIGMAP) -> None:
        values = (
            "decoded data values"
            if kind is Kind.SECRET
            else "data values plus decoded binaryData values"
        )
        super().__init__(
            f"the {kind.value} content would be {size:,} bytes ({values}), over the API "
            f"server's limit of {MAX_CONFIGMAP_BYTES:,} bytes by "
            f"{size - MAX_CONFIGMAP_BYTES:,}; split the bundle or shrink its values",
            Reason.SECRET_TOO_LARGE if kind is Kind.SECRET else Reason.CONFIGMAP_TOO_LARGE,
        )
        self.size = size
        self.kind = kind


class MergeFormat(enum.StrEnum):
    """How the values of a ``spec.merge`` key are parsed and written."""

    YAML = "yaml"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One entry of a source's ``items``: the source's ``key``, written as ``path``."""

    key: str
    path: str


@dataclass(frozen=True, slots=True)
class SourceRef:
    """One entry of ``spec.sources``: a ConfigMap or Secret whose content is a layer.

    Attributes:
        namespace: the object's namespace (the bundle's own when the spec omits it).
        name: the object's name.
        items: the keys to take and the keys they become, or None for every key as is.
        optional: a missing source counts as empty instead of failing the bundle.
        kind: a ConfigMap (``spec.sources[].configMap``) or a Secret (``.secret``, only
            into a Secret target).
    """

    namespace: str
    name: str
    items: tuple[SourceItem, ...] | None = None
    optional: bool = False
    kind: Kind = Kind.CONFIGMAP

    @property
    def ref(self) -> str:
        """``namespace/name`` of the object."""
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """How ``status.keySources`` and the source index name the source.

        ``namespace/name`` for a ConfigMap (as ever), ``secret:namespace/name`` for a
        Secret, so a ConfigMap and a Secret of one name are two sources.
        """
        return self.ref if self.kind is Kind.CONFIGMAP else f"secret:{self.ref}"

    def describe(self) -> str:
        """Return ``ConfigMap namespace/name`` or ``Secret namespace/name``, for messages."""
        return f"{self.kind.value} {self.ref}"


@dataclass(frozen=True, slots=True)
class BundleSpec:
    """A validated ConfigBundle spec.

    Attributes:
        config_map_name: name of the managed ConfigMap (same namespace as the bundle);
            ``""`` for a Secret target.
        target: the object the bundle keeps (:class:`cbop.api.target.Target`): a
            ConfigMap named ``config_map_name``, or a Secret of ``target.name``, whose
            content comes from sources only.
        data: key -> UTF-8 text, exactly as the ConfigMap's ``data``.
        binary_data: key -> raw bytes (decoded from the spec's base64).
        labels: labels cbop puts on the ConfigMap (besides its own).
        annotations: annotations cbop puts on the ConfigMap (besides its own).
        immutable: create the ConfigMap with ``immutable: true``.
        deletion_policy: what happens to the ConfigMap when the bundle goes.
        suspend: while True, cbop makes no writes for this bundle.
        size: summed byte length of data values and binary_data values.
        sources: the ConfigMaps and Secrets laid under ``data``/``binary_data``, in order
            (:mod:`cbop.api.compose`).
        merge: key -> format of the keys whose values are merged across the layers.
        provenance: for a spec whose sources are composed into ``data`` and
            ``binary_data`` (:func:`cbop.api.compose.composed_spec`), the status fields
            that say so (``sources``, ``keySources``, ``keySourcesOmitted``); None for
            a spec as parsed.
    """

    config_map_name: str
    target: Target
    data: Mapping[str, str]
    binary_data: Mapping[str, bytes]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    immutable: bool
    deletion_policy: DeletionPolicy
    suspend: bool
    size: int
    sources: tuple[SourceRef, ...] = ()
    merge: Mapping[str, MergeFormat] = field(default_factory=dict)
    provenance: Mapping[str, Any] | None = None

    @property
    def composed(self) -> bool:
        """Whether the content is composed from layers (sources or merge keys are given)."""
        return bool(self.sources or self.merge)

    @property
    def key_count(self) -> int:
        """Number of keys in ``data`` plus ``binaryData``."""
        return len(self.data) + len(self.binary_data)


#: Keys whose verdict is remembered: bundles of one cluster share most of their keys.
_VERDICTS_KEPT = 4096


@functools.lru_cache(maxsize=_VERDICTS_KEPT)
def configmap_key_error(key: str) -> str | None:
    """Return why ``key`` is not a valid ConfigMap key, or None when it is.

    Rules as kube-apiserver's ``IsConfigMapKey``: ``^[-._a-zA-Z0-9]+$``, at most 253
    characters, not ``.``, not ``..`` and not starting with ``..``. Verdicts are
    memoised (a bounded LRU): a restart validates every bundle's keys again.
    """
    if not key:
        return "a key must not be empty"
    if len(key) > _MAX_KEY_LENGTH:
        return f"key {_show(key)} is {len(key)} characters long, more than {_MAX_KEY_LENGTH}"
    if not _CONFIGMAP_KEY.match(key):
        return (
            f"key {_show(key)} may only contain letters, digits, '-', '_' and '.' "
            "(a Kubernetes ConfigMap key)"
        )
    if key in (".", "..") or key.startswith(".."):
        return f"key {_show(key)} must not be '.' or '..' or start with '..'"
    return None


@functools.lru_cache(maxsize=_VERDICTS_KEPT)
def qualified_name_error(key: str) -> str | None:
    """Return why ``key`` is not a valid label/annotation key, or None when it is.

    Rules as kube-apiserver's ``IsQualifiedName``: an optional DNS-1123 subdomain prefix
    and ``/``, then a name of at most 63 characters of alphanumerics, ``-``, ``_``, ``.``
    that starts and ends alphanumeric. Verdicts are memoised, as
    :func:`configmap_key_error`'s.
    """
    prefix, sep, name = key.rpartition("/")
    if sep and (
        not prefix or len(prefix) > _MAX_KEY_LENGTH or not _DNS1123_SUBDOMAIN.match(prefix)
    ):
        return f"key {_show(key)} has an invalid prefix (must be a lowercase DNS subdomain)"
    if not name or len(name) > _MAX_NAME_PART_LENGTH or not _QUALIFIED_NAME_PART.match(name):
        return (
            f"key {_show(key)}: the name part must be 1-63 characters of letters, digits, "
            "'-', '_', '.', starting and ending with a letter or digit"
        )
    return None


def _label_value_error(key: str, value: str) -> str | None:
    if value and (len(value) > _MAX_LABEL_VALUE_LENGTH or not _QUALIFIED_NAME_PART.match(value)):
        return (
            f"label {_show(key)} has value {_show(value)}; a label value is at most 63 "
            "characters of letters, digits, '-', '_', '.', starting and ending alphanumeric"
        )
    return None


def _show(text: str, limit: int = 60) -> str:
    """Quote ``text`` for a message, shortened to ``limit`` characters."""
    if len(text) > limit:
        return repr(text[: limit - 3] + "...")
    return repr(text)


def _string_map(spec: Mapping[str, Any], field: str) -> dict[str, str]:
    raw = spec.get(field)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(f"spec.{field} must be a map of strings, not {type(raw).__name__}")
    types = set(map(type, raw))
    types.update(map(type, raw.values()))
    if types <= {str}:  # what JSON decodes to: one copy, no check per entry
        return dict(raw)
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str):
            raise SpecError(f"spec.{field}[{_show(str(key))}] must be a string")
        out[str(key)] = value
    return out


def _check_keys(field: str, keys: list[str]) -> None:
    errors = [e for e in map(configmap_key_error, keys) if e]
    if errors:
        raise SpecError(f"spec.{field}: " + "; ".join(errors[:5]) + _more(len(errors) - 5))


def _check_metadata(field: str, values: Mapping[str, str], reserved: frozenset[str]) -> None:
    errors = [e for e in map(qualified_name_error, values) if e]
    if field == "labels":
        errors += [e for k, v in values.items() if (e := _label_value_error(k, v))]
    taken = sorted(reserved.intersection(values))
    if taken:
        errors.append(f"{', '.join(map(_show, taken))} reserved for cbop's own use")
    if errors:
        raise SpecError(f"spec.{field}: " + "; ".join(errors[:5]) + _more(len(errors) - 5))


def _more(count: int) -> str:
    return f" (and {count} more)" if count > 0 else ""


def _bool(spec: Mapping[str, Any], field: str) -> bool:
    value = spec.get(field, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SpecError(f"spec.{field} must be true or false")
    return value


def config_map_name_of(bundle: Mapping[str, Any]) -> str | None:
    """Return the ConfigMap name cbop uses for ``bundle``, even if the rest of its spec is invalid.

    ``spec.configMapName``, else ``metadata.name``; None when that name is not a valid
    ConfigMap name (or the spec is not an object), and for a bundle whose target is a
    Secret (it keeps no ConfigMap; :func:`cbop.api.target.target_of` names its Secret).
    Status and ``--once`` show it while a bundle is invalid, so the user sees which
    ConfigMap it is about.
    """
    target = target_of(bundle)
    if target is None or target.kind is not Kind.CONFIGMAP:
        return None
    return target.name


def parse_spec(bundle: Mapping[str, Any]) -> BundleSpec:
    """Validate a ConfigBundle object and return its typed spec.

    Args:
        bundle: the whole ConfigBundle object as a dict (``metadata`` and ``spec``).

    Returns:
        The :class:`BundleSpec`; ``config_map_name`` defaults to ``metadata.name``
        (``""`` for a Secret target, whose name defaults to it).

    Raises:
        TooLargeError: the content exceeds 1,048,576 bytes (counted in bytes, UTF-8).
        SpecError: any other rule is broken; the message names the field and the value.
    """
    raw_spec = bundle.get("spec") or {}
    if not isinstance(raw_spec, Mapping):
        raise SpecError("spec must be an object")
    try:
        target = parse_target(raw_spec, str(bundle.get("metadata", {}).get("name", "")))
    except TargetError as err:
        raise SpecError(str(err)) from None
    if target.is_secret:
        _check_secret_target(raw_spec)
    name = "" if target.is_secret else target.name

    data = _string_map(raw_spec, "data")
    encoded = _string_map(raw_spec, "binaryData")
    _check_keys("data", list(data))
    _check_keys("binaryData", list(encoded))
    both = sorted(set(data).intersection(encoded))
    if both:
        raise SpecError(
            ("key " if len(both) == 1 else "keys ")
            + ", ".join(map(_show, both[:5]))
            + _more(len(both) - 5)
            + (" appears" if len(both) == 1 else " appear")
            + " in both spec.data and spec.binaryData; a key may be in only one"
        )
    binary: dict[str, bytes] = {}
    for key, value in encoded.items():
        try:
            binary[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SpecError(f"spec.binaryData[{_show(key)}] is not valid base64") from None

    labels = _string_map(raw_spec, "labels")
    annotations = _string_map(raw_spec, "annotations")
    _check_metadata("labels", labels, RESERVED_LABELS)
    _check_metadata("annotations", annotations, RESERVED_ANNOTATIONS)
    annotation_bytes = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if annotation_bytes > _MAX_ANNOTATIONS_BYTES:
        raise SpecError(
            f"spec.annotations total {annotation_bytes:,} bytes, over the API server's "
            f"limit of {_MAX_ANNOTATIONS_BYTES:,}"
        )

    policy_raw = raw_spec.get("deletionPolicy") or DeletionPolicy.DELETE.value
    try:
        policy = DeletionPolicy(policy_raw)
    except ValueError:
        raise SpecError(
            f"spec.deletionPolicy {_show(str(policy_raw))} must be 'Delete' or 'Orphan'"
        ) from None

    size = sum(
        len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass")) for v in data.values()
    )
    size += sum(len(v) for v in binary.values())
    if size > MAX_CONFIGMAP_BYTES:
        raise TooLargeError(size)

    namespace = str(bundle.get("metadata", {}).get("namespace") or "")
    return BundleSpec(
        config_map_name=name,
        target=target,
        data=data,
        binary_data=binary,
        labels=labels,
        annotations=annotations,
        immutable=_bool(raw_spec, "immutable"),
        deletion_policy=policy,
        suspend=_bool(raw_spec, "suspend"),
        size=size,
        sources=_sources(raw_spec.get("sources"), namespace, target),
        merge=_merge(raw_spec.get("merge")),
    )


def _list(raw: Any, field: str, limit: int) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SpecError(f"{field} must be a list, not {type(raw).__name__}")
    if len(raw) > limit:
        raise SpecError(f"{field} has {len(raw)} entries, more than {limit}")
    return raw


def _check_secret_target(raw_spec: Mapping[str, Any]) -> None:
    """Refuse what a Secret target may not have (the CRD refuses it at admission too).

    Inline content: ``view`` reads a ConfigBundle, so secret material does not belong
    in one. Revisions: not supported for Secret targets yet.
    """
    for name in ("data", "binaryData"):
        if raw_spec.get(name):
            raise SpecError(
                f"spec.{name} is not allowed with a Secret target: anyone who may view "
                "the bundle would read it; a Secret's content comes from spec.sources only"
            )
    revisions = raw_spec.get("revisions")
    if isinstance(revisions, Mapping) and revisions.get("enabled"):
        raise SpecError("spec.revisions are not supported for a Secret target yet")


def _sources(raw: Any, namespace: str, target: Target) -> tuple[SourceRef, ...]:
    """Parse ``spec.sources`` (see :class:`SourceRef`); the CRD checks the same at admission."""
    out = []
    for i, entry in enumerate(_list(raw, "spec.sources", MAX_SOURCES)):
        given = [f for f in ("configMap", "secret") if isinstance(entry, Mapping) and f in entry]
        if len(given) != 1:
            raise SpecError(f"spec.sources[{i}] must name exactly one of configMap and secret")
        kind = Kind.SECRET if given[0] == "secret" else Kind.CONFIGMAP
        where = f"spec.sources[{i}].{given[0]}"
        if kind is Kind.SECRET and not target.is_secret:
            raise SpecError(
                f"{where}: a Secret may only be a source of a Secret target "
                "(spec.target.kind: Secret); a Secret never flows into a ConfigMap"
            )
        ref = entry[given[0]]
        if not isinstance(ref, Mapping):
            raise SpecError(f"{where} must be an object")
        name = ref.get("name")
        if not isinstance(name, str) or not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
            raise SpecError(f"{where}.name {_show(str(name))} is not a valid {kind.value} name")
        ns = ref.get("namespace") or namespace
        if not isinstance(ns, str) or not _DNS1123_LABEL_ONLY.match(ns) or len(ns) > 63:
            raise SpecError(f"{where}.namespace {_show(str(ns))} is not a valid namespace")
        items = None
        if ref.get("items") is not None:
            items = tuple(_items(ref.get("items"), f"{where}.items"))
        optional = ref.get("optional", False)
        if not isinstance(optional, bool):
            raise SpecError(f"{where}.optional must be true or false")
        out.append(SourceRef(ns, name, items, optional, kind))
    return tuple(out)


def _items(raw: Any, where: str) -> list[SourceItem]:
    items = []
    paths: set[str] = set()
    for j, item in enumerate(_list(raw, where, MAX_SOURCE_ITEMS)):
        key = item.get("key") if isinstance(item, Mapping) else None
        path = item.get("path") if isinstance(item, Mapping) else None
        if not isinstance(key, str) or not isinstance(path, str):
            raise SpecError(f"{where}[{j}] needs a key and a path (strings)")
        for part, value in (("key", key), ("path", path)):
            error = configmap_key_error(value)
            if error:
                raise SpecError(f"{where}[{j}].{part}: {error}")
        if path in paths:
            raise SpecError(f"{where}: path {_show(path)} appears more than once")
        paths.add(path)
        items.append(SourceItem(key, path))
    return items


def _merge(raw: Any) -> dict[str, MergeFormat]:
    """Parse ``spec.merge``: key -> :class:`MergeFormat`, each key once."""
    out: dict[str, MergeFormat] = {}
    for i, entry in enumerate(_list(raw, "spec.merge", MAX_MERGE_KEYS)):
        key = entry.get("key") if isinstance(entry, Mapping) else None
        fmt = entry.get("format") if isinstance(entry, Mapping) else None
        if not isinstance(key, str) or configmap_key_error(key):
            raise SpecError(f"spec.merge[{i}].key {_show(str(key))} is not a ConfigMap key")
        if key in out:
            raise SpecError(f"spec.merge: key {_show(key)} appears more than once")
        try:
            out[key] = MergeFormat(str(fmt))
        except ValueError:
            raise SpecError(
                f"spec.merge[{i}].format {_show(str(fmt))} must be 'yaml' or 'json'"
            ) from None
    return out
