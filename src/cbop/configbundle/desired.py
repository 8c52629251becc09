"""The desired ConfigMap of a bundle, and how it is laid over the ConfigMap that exists.

Pure functions, no I/O: :func:`desired_configmap` computes what a bundle declares, and
:func:`render` produces the exact ConfigMap body cbop would write given the current
object (or None), preserving metadata that other actors own: labels and annotations
cbop did not set, finalizers, and other owner references. "In sync" is defined as
"rendering changes nothing" (:func:`in_sync`), so the comparison and the write can never
disagree.

cbop remembers which label and annotation keys it set from the spec in two annotations
on the ConfigMap itself (``cbop.dev/managed-labels``, ``cbop.dev/managed-annotations``),
so a key removed from the spec is removed from the ConfigMap, and a key someone else
added is kept (case 9 of the field cases).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_MANAGED_ANNOTATIONS,
    ANNOTATION_MANAGED_LABELS,
    ANNOTATION_RELEASED_BY,
    KIND,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    BundleSpec,
    Kind,
    label_value,
)
from cbop.api.content import content_hash, decode_binary, encode_binary
from cbop.api.ownership import controller_reference, is_bundle_reference, owner_reference_to

JSON = dict[str, Any]


class Managed(Protocol):
    """What cbop sets on any object it keeps: :class:`DesiredConfigMap` or a desired Secret."""

    @property
    def labels(self) -> Mapping[str, str]:
        """Every label cbop sets, its own included."""
        ...

    @property
    def annotations(self) -> Mapping[str, str]:
        """Every annotation cbop sets, its own included."""
        ...

    @property
    def owner_reference(self) -> Mapping[str, Any]:
        """The controller owner reference to the bundle."""
        ...


@dataclass(frozen=True, slots=True)
class DesiredConfigMap:
    """What a bundle declares its ConfigMap (or, with ``kind`` Secret, its Secret) to be.

    Attributes:
        namespace: the bundle's (and so the object's) namespace.
        name: the object's name.
        labels: every label cbop sets, its own included.
        annotations: every annotation cbop sets, its own included.
        data: key -> text (empty for a Secret).
        binary_data: key -> bytes (all of a Secret's content).
        immutable: whether the object is immutable.
        owner_reference: the controller owner reference to the bundle.
        content_hash: ``sha256:<hex>`` of data and binary_data (:func:`content_hash`);
            for a Secret the keyed ``hmac-sha256:<hex>``
            (:func:`cbop.api.keyed_content_hash`).
        kind: ConfigMap, or Secret (:mod:`cbop.configbundle.secret` makes those).
        secret_type: the Secret's ``type``; None for a ConfigMap.
        encoded: a Secret's ``binary_data`` as its ``data`` carries it (key -> standard
            base64), encoded once for every comparison and write; None for a ConfigMap.
    """

    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    data: Mapping[str, str]
    binary_data: Mapping[str, bytes]
    immutable: bool
    owner_reference: Mapping[str, Any]
    content_hash: str
    kind: Kind = Kind.CONFIGMAP
    secret_type: str | None = None
    encoded: Mapping[str, str] | None = None

    @property
    def key_count(self) -> int:
        """Number of keys of the content."""
        return len(self.data) + len(self.binary_data)


def owner_reference(bundle: Mapping[str, Any]) -> JSON:
    """Return the controller owner reference (a dict) pointing at ``bundle``.

    ``blockOwnerDeletion: true`` makes foreground deletion of the bundle wait for the
    ConfigMap; under the OwnerReferencesPermissionEnforcement admission plugin setting
    it needs ``update`` on ``configbundles/finalizers``, which cbop's RBAC grants.
    """
    return owner_reference_to(bundle, KIND)


def is_controlled_by(obj: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s controller owner reference is ``bundle`` (compared by UID)."""
    ref = controller_reference(obj)
    return (
        ref is not None and is_bundle_reference(ref) and ref.get("uid") == bundle["metadata"]["uid"]
    )


def desired_configmap(bundle: Mapping[str, Any], spec: BundleSpec) -> DesiredConfigMap:
    """Compute the ConfigMap ``bundle`` declares.

    Args:
        bundle: the ConfigBundle object (dict with ``metadata.name/namespace/uid``).
        spec: its validated spec (:func:`cbop.api.parse_spec`).

    Returns:
        The :class:`DesiredConfigMap`. The bundle's own labels and annotations are never
        copied; only ``spec.labels``/``spec.annotations`` and cbop's own keys are set.
    """
    meta = bundle["metadata"]
    digest = content_hash(spec.data, spec.binary_data)
    labels, annotations = own_metadata(bundle, spec, digest)
    return DesiredConfigMap(
        namespace=meta["namespace"],
        name=spec.config_map_name,
        labels=labels,
        annotations=annotations,
        data=dict(spec.data),
        binary_data=dict(spec.binary_data),
        immutable=spec.immutable,
        owner_reference=owner_reference(bundle),
        content_hash=digest,
    )


def own_metadata(
    bundle: Mapping[str, Any], spec: BundleSpec, digest: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Return the labels and annotations cbop sets on the object ``bundle`` keeps.

    ``spec.labels`` and ``spec.annotations``, cbop's own labels (managed-by, the
    bundle's name), the content digest ``digest`` and the lists of the keys it set
    from the spec; never the bundle's own metadata (case 10).
    """
    labels = dict(spec.labels)
    labels[LABEL_MANAGED_BY] = MANAGED_BY_VALUE
    labels[LABEL_BUNDLE] = label_value(bundle["metadata"]["name"])
    annotations = dict(spec.annotations)
    annotations[ANNOTATION_CONTENT_HASH] = digest
    if spec.labels:
        annotations[ANNOTATION_MANAGED_LABELS] = ",".join(sorted(spec.labels))
    if spec.annotations:
        annotations[ANNOTATION_MANAGED_ANNOTATIONS] = ",".join(sorted(spec.annotations))
    return labels, annotations


def _managed_keys(annotations: Mapping[str, str], key: str) -> set[str]:
    value = annotations.get(key, "")
    return {k for k in value.split(",") if k}


def _overlay(
    current: Mapping[str, str], desired: Mapping[str, str], previously_managed: Iterable[str]
) -> dict[str, str]:
    """Keep foreign keys, drop keys cbop set before but no longer wants, set desired."""
    out = {k: v for k, v in current.items() if k not in previously_managed}
    out.update(desired)
    return out


def managed_metadata(
    desired: Managed, cur_meta: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, str], list[Any]]:
    """Return the labels, annotations and owner references a write of ``desired`` leaves.

    ``cur_meta`` is the existing object's metadata (never mutated); the containers
    returned are new. Labels and annotations cbop did not set, and owner references
    to others, are kept (case 9); the same for a ConfigMap and a Secret.
    """
    cur_labels: Mapping[str, str] = cur_meta.get("labels") or {}
    cur_annotations: Mapping[str, str] = cur_meta.get("annotations") or {}
    managed_labels = _managed_keys(cur_annotations, ANNOTATION_MANAGED_LABELS)
    managed_annotations = _managed_keys(cur_annotations, ANNOTATION_MANAGED_ANNOTATIONS)
    # The release mark goes as soon as cbop manages the ConfigMap again.
    managed_annotations.update(
        (ANNOTATION_MANAGED_LABELS, ANNOTATION_MANAGED_ANNOTATIONS, ANNOTATION_RELEASED_BY)
    )
    refs = [
        r
        for r in cur_meta.get("ownerReferences") or ()
        if r.get("uid") != desired.owner_reference["uid"]
        and not (r.get("controller") and is_bundle_reference(r))
    ]
    refs.append(_kept_reference(desired.owner_reference, cur_meta))
    return (
        _overlay(cur_labels, desired.labels, managed_labels),
        _overlay(cur_annotations, desired.annotations, managed_annotations),
        refs,
    )


def _kept_reference(wanted: Mapping[str, Any], cur_meta: Mapping[str, Any]) -> JSON:
    """Return the reference to write: an existing one to the same bundle, or ``wanted``.

    A reference that names the same bundle (uid, name, kind and group) as the
    controller, with ``blockOwnerDeletion``, is kept whatever its version: one written
    as ``cbop.dev/v1alpha1`` before the upgrade stays as it is (the garbage collector
    resolves any served version), so an upgrade rewrites no ConfigMap.
    """
    for ref in cur_meta.get("ownerReferences") or ():
        if (
            ref.get("uid") == wanted["uid"]
            and ref.get("name") == wanted["name"]
            and is_bundle_reference(ref)
            and ref.get("controller") is True
            and ref.get("blockOwnerDeletion") is True
        ):
            return dict(ref)
    return dict(wanted)


def render(desired: DesiredConfigMap, current: Mapping[str, Any] | None) -> JSON:
    """Return the ConfigMap body cbop writes to make ``current`` what ``desired`` says.

    Args:
        desired: the bundle's desired ConfigMap.
        current: the ConfigMap as it exists (never mutated), or None to create one.

    Returns:
        A full ConfigMap dict for create (``current`` None) or update (PUT, carrying
        ``current``'s resourceVersion for optimistic concurrency). Data and binaryData
        are rebuilt from the spec every time; labels, annotations, finalizers and owner
        references that others set are kept.
    """
    cur_meta: Mapping[str, Any] = (current or {}).get("metadata", {})
    # Every container of the metadata is copied (a list of finalizers, say); labels,
    # annotations and owner references are rebuilt below, managedFields are left out.
    meta: JSON = {
        k: copy.copy(v) if isinstance(v, dict | list) else v
        for k, v in cur_meta.items()
        if k != "managedFields"
    }
    meta["name"] = desired.name
    meta["namespace"] = desired.namespace
    meta["labels"], meta["annotations"], meta["ownerReferences"] = managed_metadata(
        desired, cur_meta
    )

    body: JSON = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if desired.data:
        body["data"] = dict(desired.data)
    if desired.binary_data:
        body["binaryData"] = encode_binary(desired.binary_data)
    if desired.immutable:
        body["immutable"] = True
    return body


def owner_refs_equal(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Whether two lists of owner references are the same, in any order."""
    if a == b:  # the same references, the same fields (what cbop wrote and reads back)
        return True

    def norm(refs: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (
                r.get("apiVersion"),
                r.get("kind"),
                r.get("name"),
                r.get("uid"),
                bool(r.get("controller")),
                bool(r.get("blockOwnerDeletion")),
            )
            for r in refs
        ]

    return sorted(norm(a)) == sorted(norm(b))


def content_matches(desired: DesiredConfigMap, current: Mapping[str, Any]) -> bool:
    """Whether ``current``'s data and binaryData equal the desired content, byte for byte."""
    return (current.get("data") or {}) == dict(desired.data) and decode_binary(
        current.get("binaryData")
    ) == dict(desired.binary_data)


def in_sync(desired: DesiredConfigMap, current: Mapping[str, Any]) -> bool:
    """Whether writing :func:`render` ``(desired, current)`` would change nothing.

    Compares content (bytes), ``immutable``, labels, annotations and owner references.
    """
    if not content_matches(desired, current):
        return False
    if bool(current.get("immutable")) != desired.immutable:
        return False
    meta = current.get("metadata", {})
    # What render would write, without copying the rest of the metadata.
    labels, annotations, refs = managed_metadata(desired, meta)
    return (
        (meta.get("labels") or {}) == labels
        and (meta.get("annotations") or {}) == annotations
        and owner_refs_equal(meta.get("ownerReferences") or (), refs)
    )
