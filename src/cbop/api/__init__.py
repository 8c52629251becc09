"""The ConfigBundle API (``cbop.dev/v1beta1``; ``v1alpha1`` deprecated): names, spec parsing.

This package owns the contract between users and cbop: the group, version and kind,
the label and annotation keys cbop puts on the ConfigMaps it manages, and the typed,
validated view of a bundle's ``spec`` (:class:`BundleSpec`). It has no I/O and no
Kubernetes client; the reconciler and the CLI build on it.
"""

from cbop.api.content import content_hash, decode_binary, encode_binary
from cbop.api.ownership import controller_reference, is_bundle_reference
from cbop.api.spec import (
    BundleSpec,
    DeletionPolicy,
    SpecError,
    TooLargeError,
    config_map_name_of,
    parse_spec,
)
from cbop.api.types import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_MANAGED_ANNOTATIONS,
    ANNOTATION_MANAGED_LABELS,
    ANNOTATION_RELEASED_BY,
    API_VERSION,
    CONDITION_READY,
    DEPRECATED_VERSIONS,
    FINALIZER_ORPHAN,
    GROUP,
    KIND,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    MAX_CONFIGMAP_BYTES,
    PLURAL,
    RESERVED_ANNOTATIONS,
    RESERVED_LABELS,
    VERSION,
    Reason,
)

__all__ = [
    "ANNOTATION_CONTENT_HASH",
    "ANNOTATION_MANAGED_ANNOTATIONS",
    "ANNOTATION_MANAGED_LABELS",
    "ANNOTATION_RELEASED_BY",
    "API_VERSION",
    "CONDITION_READY",
    "DEPRECATED_VERSIONS",
    "FINALIZER_ORPHAN",
    "GROUP",
    "KIND",
    "LABEL_BUNDLE",
    "LABEL_MANAGED_BY",
    "MANAGED_BY_VALUE",
    "MANAGED_SELECTOR",
    "MAX_CONFIGMAP_BYTES",
    "PLURAL",
    "RESERVED_ANNOTATIONS",
    "RESERVED_LABELS",
    "VERSION",
    "BundleSpec",
    "DeletionPolicy",
    "Reason",
    "SpecError",
    "TooLargeError",
    "config_map_name_of",
    "content_hash",
    "controller_reference",
    "decode_binary",
    "encode_binary",
    "is_bundle_reference",
    "parse_spec",
]
