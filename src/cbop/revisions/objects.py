"""A revision ConfigMap as an object: what it carries, and how cbop tells its own.

A revision is immutable, carries cbop's labels (so the managed-ConfigMap cache holds
it), the label :data:`cbop.api.revisions.LABEL_REVISION_OF`, the content hash
annotation, and one owner reference, to its bundle, that is not a controller reference
(:func:`revision_reference`): it goes with its bundle, and stays out of what cbop does
with the ConfigMaps a bundle controls. Nothing else ever adds an owner reference to it.
Pure: no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_MANAGED_ANNOTATIONS,
    ANNOTATION_MANAGED_LABELS,
    API_VERSION,
    KIND,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    Reason,
    encode_binary,
    is_bundle_reference,
)
from cbop.api.revisions import LABEL_REVISION_OF

__all__ = [
    "Content",
    "body_from",
    "bundle_label",
    "held_by",
    "is_revision_of",
    "owned_by",
    "ownerless_revision",
    "revision_body",
    "revision_reference",
    "taken_problem",
]


class Content(Protocol):
    """The content a bundle declares (:class:`cbop.configbundle.desired.DesiredConfigMap`)."""

    @property
    def namespace(self) -> str: ...  # noqa: D102
    @property
    def name(self) -> str: ...  # noqa: D102
    @property
    def labels(self) -> Mapping[str, str]: ...  # noqa: D102
    @property
    def annotations(self) -> Mapping[str, str]: ...  # noqa: D102
    @property
    def data(self) -> Mapping[str, str]: ...  # noqa: D102
    @property
    def binary_data(self) -> Mapping[str, bytes]: ...  # noqa: D102
    @property
    def content_hash(self) -> str: ...  # noqa: D102


def revision_reference(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """Return the owner reference a revision carries to ``bundle``: not a controller.

    ``controller: false`` keeps revisions out of what cbop does with the ConfigMaps a
    bundle controls (deleting those under a name the spec no longer declares), and
    ``blockOwnerDeletion: false`` needs no permission on the bundle's ``finalizers``.
    The reference makes a revision go with its bundle; nothing else adds one.
    """
    meta = bundle["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }


def ownerless_revision(configmap: Mapping[str, Any]) -> bool:
    """Whether ``configmap`` is a revision cbop made that has no owner reference left.

    cbop's labels, the content hash annotation, ``immutable: true`` and no owner
    reference (taken off by hand, or its bundle deleted with ``--cascade=orphan``): the
    garbage collector never deletes such an object, so the bundle its label names takes
    it back (kept: held again; else deleted).
    """
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        not meta.get("ownerReferences")
        and isinstance(labels.get(LABEL_REVISION_OF), str)
        and labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE
        and ANNOTATION_CONTENT_HASH in (meta.get("annotations") or {})
        and configmap.get("immutable") is True
    )


def owned_by(configmap: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    """Whether ``configmap`` carries an owner reference to ``bundle`` (any kind of reference)."""
    uid = bundle["metadata"]["uid"]
    return any(
        r.get("uid") == uid and is_bundle_reference(r)
        for r in configmap.get("metadata", {}).get("ownerReferences") or ()
    )


def held_by(configmap: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    """Whether ``configmap`` carries the bundle's revision reference (never a controller one).

    A ConfigMap the bundle controls (its plain ConfigMap, even with the revision label
    set through ``spec.labels``) is never taken for a revision.
    """
    uid = bundle["metadata"]["uid"]
    refs = configmap.get("metadata", {}).get("ownerReferences") or ()
    if any(r.get("uid") == uid and r.get("controller") for r in refs):
        return False
    return any(r.get("uid") == uid and is_bundle_reference(r) for r in refs)


def is_revision_of(configmap: Mapping[str, Any], content_hash: str, label: str) -> bool:
    """Whether ``configmap`` is the bundle's (``label``) revision of ``content_hash``."""
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        labels.get(LABEL_REVISION_OF) == label
        and labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE
        and (meta.get("annotations") or {}).get(ANNOTATION_CONTENT_HASH) == content_hash
        and configmap.get("immutable") is True
    )


def bundle_label(bundle: Mapping[str, Any], desired: Content) -> str:
    """Return the bundle's name as a label value (``cbop.dev/bundle``: cut and hashed past 63)."""
    return str(desired.labels.get(LABEL_BUNDLE, bundle["metadata"]["name"]))


def taken_problem(name: str, content_hash: str) -> tuple[Reason, str]:
    """Return the Ready condition of a revision name taken by a ConfigMap that is not it."""
    return (
        Reason.CONFIGMAP_CONFLICT,
        f"ConfigMap {name}, the name of the revision of {content_hash}, exists and is not "
        "that revision of this ConfigBundle; cbop will not modify it. Delete it, or choose "
        "another spec.configMapName",
    )


def revision_body(
    bundle: Mapping[str, Any], desired: Content, name: str, label: str
) -> dict[str, Any]:
    """Return the revision ConfigMap ``name`` of ``desired``'s content, ready to create.

    Its labels are the plain ConfigMap's (``spec.labels`` and cbop's) plus
    :data:`cbop.api.revisions.LABEL_REVISION_OF`; its annotations the plain ConfigMap's
    without cbop's bookkeeping of managed keys (a revision's metadata is never updated);
    ``immutable: true``; the owner reference of :func:`revision_reference`.
    """
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": desired.namespace,
            "labels": {**desired.labels, LABEL_REVISION_OF: label},
            "annotations": {
                k: v
                for k, v in desired.annotations.items()
                if k not in (ANNOTATION_MANAGED_LABELS, ANNOTATION_MANAGED_ANNOTATIONS)
            },
            "ownerReferences": [revision_reference(bundle)],
        },
        "immutable": True,
    }
    if desired.data:
        out["data"] = dict(desired.data)
    if desired.binary_data:
        out["binaryData"] = encode_binary(desired.binary_data)
    return out


def body_from(
    bundle: Mapping[str, Any],
    desired: Content,
    name: str,
    label: str,
    source: Mapping[str, Any],
) -> dict[str, Any]:
    """Return revision ``name`` made again from ``source``'s content (its hash and data)."""
    out = revision_body(bundle, desired, name, label)
    out.pop("data", None)
    out.pop("binaryData", None)
    content = source["metadata"]["annotations"][ANNOTATION_CONTENT_HASH]
    out["metadata"]["annotations"][ANNOTATION_CONTENT_HASH] = content
    if source.get("data"):
        out["data"] = dict(source["data"])
    if source.get("binaryData"):
        out["binaryData"] = dict(source["binaryData"])
    return out
