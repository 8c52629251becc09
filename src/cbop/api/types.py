"""Names and constants of the ConfigBundle API and of the ConfigMaps cbop manages."""

from __future__ import annotations

import enum
from typing import Final

GROUP: Final = "cbop.dev"
#: The storage version, and the version cbop reads, writes and names in owner
#: references. ``v1alpha1`` is served too, deprecated, with the same schema
#: (docs/api-versions.md).
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
#: Versions still served for old clients and manifests, deprecated.
DEPRECATED_VERSIONS: Final = ("v1alpha1",)
KIND: Final = "ConfigBundle"
PLURAL: Final = "configbundles"

#: Label every managed ConfigMap carries; cbop's ConfigMap informer selects on it.
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "cbop"
#: The server-side label selector of the ConfigMaps cbop manages (every controller that
#: caches them selects on it, so they share one informer).
MANAGED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
#: Label naming the bundle (same namespace) that a managed ConfigMap belongs to.
LABEL_BUNDLE: Final = "cbop.dev/bundle"
#: ``sha256:<hex>`` of the ConfigMap's data and binaryData, as written by cbop.
ANNOTATION_CONTENT_HASH: Final = "cbop.dev/content-hash"
#: Comma-separated, sorted keys of ``spec.labels`` that cbop set on the ConfigMap, so
#: that a key removed from the spec is removed from the ConfigMap while labels that
#: other actors set are left alone.
ANNOTATION_MANAGED_LABELS: Final = "cbop.dev/managed-labels"
#: Likewise for ``spec.annotations``.
ANNOTATION_MANAGED_ANNOTATIONS: Final = "cbop.dev/managed-annotations"
#: ``<namespace>/<name>`` of the bundle whose deletion (``deletionPolicy: Orphan``)
#: released the ConfigMap. A bundle of that namespace and name takes the ConfigMap back
#: while it carries this annotation and no controller owner reference; remove the
#: annotation to keep the ConfigMap out of cbop's hands.
ANNOTATION_RELEASED_BY: Final = "cbop.dev/released-by"

#: Labels and annotations cbop owns itself; ``spec.labels``/``spec.annotations`` may
#: not set them (the CRD rejects it at admission, and parsing rejects it again).
RESERVED_LABELS: Final = frozenset({LABEL_MANAGED_BY, LABEL_BUNDLE})
RESERVED_ANNOTATIONS: Final = frozenset(
    {
        ANNOTATION_CONTENT_HASH,
        ANNOTATION_MANAGED_LABELS,
        ANNOTATION_MANAGED_ANNOTATIONS,
        ANNOTATION_RELEASED_BY,
    }
)

#: Label a ConfigMap carries to be readable as a bundle's source (value ``"true"``);
#: cbop caches only ConfigMaps with it (docs/sources.md).
LABEL_SOURCE: Final = "cbop.dev/source"
#: The server-side label selector of the source ConfigMaps cbop caches.
SOURCE_SELECTOR: Final = f"{LABEL_SOURCE}=true"
#: Annotation of a source naming the other namespaces whose bundles may read it: a
#: comma-separated list of namespaces, or ``*`` for every namespace.
ANNOTATION_SHARE_WITH: Final = "cbop.dev/share-with"

#: Finalizer cbop puts on a bundle whose ``deletionPolicy`` is ``Orphan``: before the
#: bundle goes, cbop strips its owner reference and labels from the ConfigMap.
FINALIZER_ORPHAN: Final = "cbop.dev/orphan"

#: kube-apiserver's limit on the summed byte length of a ConfigMap's data values and
#: decoded binaryData values (keys and metadata not counted): 1 MiB.
MAX_CONFIGMAP_BYTES: Final = 1_048_576

CONDITION_READY: Final = "Ready"


class Reason(enum.StrEnum):
    """Reasons of the ``Ready`` condition (CamelCase, as metav1.Condition requires)."""

    SYNCED = "Synced"
    INVALID_SPEC = "InvalidSpec"
    CONFIGMAP_CONFLICT = "ConfigMapConflict"
    CONFIGMAP_TOO_LARGE = "ConfigMapTooLarge"
    SOURCE_NOT_FOUND = "SourceNotFound"
    SOURCE_NOT_SHARED = "SourceNotShared"
    INVALID_SOURCE = "InvalidSource"
    #: A Secret target while cbop runs without ``--secrets`` (or outside
    #: ``--secrets-namespace``): nothing is read or written for the bundle.
    SECRETS_DISABLED = "SecretsDisabled"
    #: A Secret of the target's name that cbop does not manage, or of another type.
    SECRET_CONFLICT = "SecretConflict"
    SECRET_TOO_LARGE = "SecretTooLarge"
    RECONCILE_ERROR = "ReconcileError"
    #: ``spec.revisions``: the API server refused the revision of the content (a quota,
    #: an admission rule); the plain ConfigMap has the content all the same.
    REVISION_NOT_CREATED = "RevisionNotCreated"
    SUSPENDED = "Suspended"
    DELETING = "Deleting"
