"""What cbop caches of the templates that name revisions, and how their events reach bundles.

A revision is kept while a template that may still create a pod names it: the template
of an opted-in workload, a ReplicaSet or ControllerRevision of its history, or a live
pod (docs/revisions.md). The rollout labels every template it pins
(:data:`cbop.revisions.model.LABEL_PINNED`), and the workload's controller copies the
label to the ReplicaSets, ControllerRevisions and pods of that template, so their
informers select them on the server (:data:`cbop.revisions.model.PINNED_SELECTOR`):
cbop caches none of the others. Each cached object also goes through a transform that
keeps only what is read here (:func:`strip_history`, :func:`strip_pod`: the
metadata, the template's labels and annotations, the ConfigMap names of a pod spec).

This module owns those informers' index functions and transforms, :class:`History`
(the listers, and the questions the bundle asks of them), and the map functions that
turn a template's, a pod's or a revision's events into the keys of the bundles
concerned. Lookups only: no API call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from cbop.api import is_bundle_reference
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.informers import SharedInformerFactory
from cbop.keys import CONFIGMAP_NAME_INDEX, key_of, object_key
from cbop.kube import (
    CONTROLLERREVISIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    Resource,
)
from cbop.revisions.legacy import (
    LEGACY_DIGEST_ANNOTATION,
    PARAMS_NAME,
    legacy_in_use,
    legacy_named,
)
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    PINNED_SELECTOR,
    configmap_references,
    mapping_of,
    pod_unpinned,
    template_metadata,
    valid_pair,
)
from cbop.revisions.objects import ownerless_revision
from cbop.runtime.predicates import UpdatePredicate
from cbop.runtime.seams import Lister

__all__ = [
    "HISTORY",
    "HISTORY_INDEXERS",
    "OPTED_IN_SELECTOR",
    "PLAIN_INDEX",
    "POD_INDEXERS",
    "READS_INDEX",
    "REVISION_INDEX",
    "REVISION_OF_INDEX",
    "TEMPLATE_CHANGED",
    "UNPINNED_INDEX",
    "WORKLOADS",
    "History",
    "HistoryLister",
    "bundles_of_legacy_pins",
    "bundles_of_reader",
    "bundles_of_template",
    "count_unpinned",
    "history_listers",
    "index_by_plain",
    "index_by_reads",
    "index_by_revision",
    "index_by_revision_of",
    "index_by_unpinned",
    "legacy_namespaces",
    "revision_owners",
    "strip_history",
    "strip_pod",
]

#: The pinned holders cbop caches besides the workloads: the history kinds and pods.
HISTORY: Final[tuple[Resource, ...]] = (REPLICASETS, CONTROLLERREVISIONS, PODS)
#: The workload kinds the rollout pins, and the selector of its informers (the rollout's
#: ``cbop.rollout.ROLLOUT_SELECTOR``: the same informers, shared).
WORKLOADS: Final[tuple[Resource, ...]] = (DEPLOYMENTS, STATEFULSETS, DAEMONSETS)
OPTED_IN_SELECTOR: Final = "cbop.dev/rollout=true"
#: Index of the pinned caches: ``namespace/<revision>`` of each revision a template names.
REVISION_INDEX: Final = "cbop.dev/revision"
#: Index of the pinned caches: ``namespace/<plain>`` of each ConfigMap a template pins.
PLAIN_INDEX: Final = "cbop.dev/pinned-configmap"
#: Index of the opted-in workloads: ``namespace/<configmap>`` of each ConfigMap their pod
#: template reads where a pod can be pinned (:func:`cbop.revisions.model.configmap_references`).
READS_INDEX: Final = "cbop.dev/reads-configmap"
#: Index of the pinned-pod cache: ``namespace/<plain>`` of each ConfigMap a pod pins and
#: still reads by its plain name (:func:`cbop.revisions.model.pod_unpinned`).
UNPINNED_INDEX: Final = "cbop.dev/unpinned-configmap"
#: Index of the managed-ConfigMap cache: ``namespace/<bundle label>`` of a revision.
REVISION_OF_INDEX: Final = "revision-of"


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def index_by_revision(obj: Mapping[str, Any]) -> list[str]:
    """Index function: a holder -> ``namespace/<revision>`` of each revision its template names."""
    namespace = _namespace(obj)
    return sorted({key_of(namespace, rev) for rev in mapping_of(obj).values()})


def index_by_plain(obj: Mapping[str, Any]) -> list[str]:
    """Index function: a holder -> ``namespace/<plain>`` of each ConfigMap its template pins."""
    namespace = _namespace(obj)
    return sorted(key_of(namespace, plain) for plain in mapping_of(obj))


def index_by_unpinned(pod: Mapping[str, Any]) -> list[str]:
    """Index function: a pinned pod -> ``namespace/<plain>`` of each pin it reads by name.

    The plain names of its mapping that :func:`cbop.revisions.model.pod_unpinned` finds
    in its spec (the policy did not rewrite them); ``[]`` for a pod being deleted.
    """
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return []
    mapping = mapping_of(pod)
    namespace = _namespace(pod)
    return sorted({key_of(namespace, r.name) for r in pod_unpinned(pod) if r.name in mapping})


#: The indexes of every cache of what names revisions (the history, pods, workloads).
HISTORY_INDEXERS: Final[Mapping[str, Callable[[Mapping[str, Any]], list[str]]]] = {
    REVISION_INDEX: index_by_revision,
    PLAIN_INDEX: index_by_plain,
}
#: The pinned-pod cache's own index, besides :data:`HISTORY_INDEXERS`.
POD_INDEXERS: Final[Mapping[str, Callable[[Mapping[str, Any]], list[str]]]] = {
    UNPINNED_INDEX: index_by_unpinned,
}


def index_by_reads(workload: Mapping[str, Any]) -> list[str]:
    """Index function: an opted-in workload -> ``namespace/<configmap>`` its template reads."""
    namespace = _namespace(workload)
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    return sorted({key_of(namespace, r.name) for r in configmap_references(spec)})


def index_by_revision_of(configmap: Mapping[str, Any]) -> list[str]:
    """Index function of the managed-ConfigMap cache: a revision -> ``namespace/<bundle label>``.

    The value is the :data:`cbop.api.revisions.LABEL_REVISION_OF` label (the bundle's
    name, cut and hashed past 63 characters as ``cbop.dev/bundle``) in the ConfigMap's
    namespace; ``[]`` for a ConfigMap without it.
    """
    meta = configmap.get("metadata") or {}
    label = (meta.get("labels") or {}).get(LABEL_REVISION_OF)
    if not isinstance(label, str):
        return []
    return [key_of(meta.get("namespace"), label)]


_META_KEPT: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "ownerReferences",
)
_OURS: Final = (ANNOTATION_REVISIONS, LEGACY_DIGEST_ANNOTATION)


def _meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: meta[k] for k in _META_KEPT if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in _OURS}
    if annotations:
        out["annotations"] = annotations
    return out


def strip_history(obj: dict[str, Any]) -> dict[str, Any]:
    """Transform of the ReplicaSet and ControllerRevision informers: keep what is read.

    The metadata (names, owner references, labels, times) and the template's metadata
    (its labels, and of its annotations :data:`ANNOTATION_REVISIONS` and
    ``cbop.dev/config-hash``), in the place it has in the object: ``spec.template`` of
    a ReplicaSet, ``data.spec.template`` of a ControllerRevision. The pod spec, often
    most of the object, is dropped.
    """
    template = {"metadata": _meta(template_metadata(obj))}
    out: dict[str, Any] = {"metadata": _meta(obj.get("metadata") or {})}
    if "data" in obj:
        out["data"] = {"spec": {"template": template}}
    else:
        out["spec"] = {"template": template}
    return out


def _strip_container(container: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": container.get("name", "")}
    env_from = [
        {"configMapRef": {"name": e["configMapRef"].get("name")}}
        for e in container.get("envFrom") or ()
        if isinstance(e.get("configMapRef"), Mapping)
    ]
    env = [
        {"valueFrom": {"configMapKeyRef": {"name": ref.get("name")}}}
        for e in container.get("env") or ()
        if isinstance(ref := (e.get("valueFrom") or {}).get("configMapKeyRef"), Mapping)
    ]
    if env_from:
        out["envFrom"] = env_from
    if env:
        out["env"] = env
    return out


def strip_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Transform of the pinned-pod informer: the metadata and the ConfigMap names it reads.

    What :func:`cbop.revisions.model.pod_unpinned` reads stays where it was (the
    references keep their places in their lists' order, other entries dropped: the
    paths of a verification's message then count among ConfigMap references only);
    environment values, images and everything else are dropped.
    """
    spec = pod.get("spec") or {}
    volumes = []
    for volume in spec.get("volumes") or ():
        kept: dict[str, Any] = {"name": volume.get("name", "")}
        if isinstance(volume.get("configMap"), Mapping):
            kept["configMap"] = {"name": volume["configMap"].get("name")}
        sources = [
            {"configMap": {"name": s["configMap"].get("name")}}
            for s in (volume.get("projected") or {}).get("sources") or ()
            if isinstance(s.get("configMap"), Mapping)
        ]
        if sources:
            kept["projected"] = {"sources": sources}
        if len(kept) > 1:
            volumes.append(kept)
    out_spec: dict[str, Any] = {
        "containers": [_strip_container(c) for c in spec.get("containers") or ()],
    }
    if spec.get("initContainers"):
        out_spec["initContainers"] = [_strip_container(c) for c in spec["initContainers"]]
    if volumes:
        out_spec["volumes"] = volumes
    return {"metadata": _meta(pod.get("metadata") or {}), "spec": out_spec}


#: Template or pod events that may change what a bundle sees: one created or deleted,
#: or an update that changes its template's mapping (a ReplicaSet's status, many per
#: rollout, or a pod's, pass by).
TEMPLATE_CHANGED: Final = UpdatePredicate(
    lambda old, new: mapping_of(old) != mapping_of(new), "template mapping changed"
)


class HistoryLister(Lister, Protocol):
    """A lister of a cache of what names revisions: also the keys and counts of an index.

    :class:`cbop.informers.MultiNamespaceLister` satisfies it.
    """

    def index_keys(self, index_name: str, value: str) -> Sequence[str]:
        """Return the keys (``namespace/name``) filed under ``value`` in ``index_name``."""
        ...

    def index_count(self, index_name: str, value: str) -> int:
        """Return how many objects are filed under ``value`` in ``index_name``."""
        ...


@dataclass(frozen=True)
class History:
    """The caches of what names revisions, with the questions the bundle asks of them.

    Attributes:
        replicasets: pinned ReplicaSets (:data:`PINNED_SELECTOR`, :func:`strip_history`).
        controllerrevisions: pinned ControllerRevisions (the same).
        pods: pinned pods (:func:`strip_pod`).
        workloads: kind -> the opted-in workloads of that kind (the rollout's
            informers, with :data:`READS_INDEX`); empty when the rollout is off.
        synced: whether every one of these caches has listed its collection (a cache
            refused by RBAC never has: it holds nothing, which says nothing).
    """

    replicasets: HistoryLister
    controllerrevisions: HistoryLister
    pods: HistoryLister
    workloads: Mapping[str, HistoryLister] = field(default_factory=dict)
    synced: Callable[[], bool] = lambda: True

    def _holders(self) -> Iterator[tuple[str, HistoryLister]]:
        yield "ReplicaSet", self.replicasets
        yield "ControllerRevision", self.controllerrevisions
        yield "Pod", self.pods
        yield from self.workloads.items()

    def named(self, namespace: str, revision: str) -> bool:
        """Whether a cached template or pod names revision ``revision``."""
        value = key_of(namespace, revision)
        return any(lister.index_count(REVISION_INDEX, value) for _, lister in self._holders())

    def naming(self, namespace: str, plain: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Yield ``(kind, holder)`` of each cached template or pod that pins ConfigMap ``plain``."""
        value = key_of(namespace, plain)
        for kind, lister in self._holders():
            for obj in lister.by_index(PLAIN_INDEX, value):
                yield kind, obj

    def naming_other(
        self, namespace: str, plain: str, revisions: Collection[str]
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Yield ``(kind, holder)`` of each holder pinning ``plain`` outside ``revisions``.

        As :meth:`naming`, less the holders of ``revisions``, without visiting them: per
        cache, when the holders of ``revisions`` (each holder pins ``plain`` to one
        revision) count as many as the holders of ``plain``, there is nothing to yield,
        for ``len(revisions) + 1`` index counts; else the holders' keys are told apart
        and only the others are read. The cost of a reconcile whose revisions are all
        in ``revisions`` then does not grow with the history.
        """
        value = key_of(namespace, plain)
        values = [key_of(namespace, r) for r in set(revisions) if valid_pair(plain, r)]
        for kind, lister in self._holders():
            total = lister.index_count(PLAIN_INDEX, value)
            if not total or total == sum(lister.index_count(REVISION_INDEX, v) for v in values):
                continue
            held = {key for v in values for key in lister.index_keys(REVISION_INDEX, v)}
            for key in lister.index_keys(PLAIN_INDEX, value):
                if key not in held:
                    holder_namespace, _, name = key.partition("/")
                    obj = lister.get(holder_namespace, name)
                    if obj is not None:
                        yield kind, obj

    def unpinned_pods(self, namespace: str, plain: str) -> Sequence[Mapping[str, Any]]:
        """Return the cached pods, not being deleted, that pin ``plain`` and read it by name."""
        return self.pods.by_index(UNPINNED_INDEX, key_of(namespace, plain))

    def readers(self, namespace: str, plain: str) -> list[tuple[str, Mapping[str, Any]]]:
        """Return ``(kind, workload)`` of the opted-in workloads whose template reads ``plain``."""
        value = key_of(namespace, plain)
        out = [
            (kind, w)
            for kind, lister in self.workloads.items()
            for w in lister.by_index(READS_INDEX, value)
        ]
        return sorted(out, key=lambda kw: (kw[0], str(kw[1]["metadata"]["name"])))

    def workload_of(self, kind: str, obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """Return ``(kind, object)`` of the workload a holder belongs to, as far as cached.

        A pod's controller (a ReplicaSet, then its Deployment; a StatefulSet or
        DaemonSet), a ReplicaSet's or ControllerRevision's controller; the holder itself
        when its workload is not cached (opted out, or another kind).
        """
        namespace = _namespace(obj)
        for _ in range(2):
            owner = _controller(obj)
            if owner is None:
                break
            owner_kind, owner_name = str(owner.get("kind")), str(owner.get("name"))
            lister = self.workloads.get(owner_kind) or (
                self.replicasets if owner_kind == "ReplicaSet" else None
            )
            found = lister.get(namespace, owner_name) if lister is not None else None
            if found is None:
                break
            kind, obj = owner_kind, found
            if kind in self.workloads:
                break
        return kind, obj


def history_listers(informers: SharedInformerFactory, *, workloads: bool) -> History:
    """Request the caches of what names revisions from ``informers``; return them.

    Call it before any watch of the same informers is wired: the first caller sets the
    transforms (:func:`strip_history`, :func:`strip_pod`).

    Args:
        informers: the shared informer factory (a scope's).
        workloads: also the opted-in workloads (the rollout runs).
    """
    indexers = dict(HISTORY_INDEXERS)
    caches = [
        (resource, PINNED_SELECTOR, {**indexers, **POD_INDEXERS}, strip_pod)
        if resource is PODS
        else (resource, PINNED_SELECTOR, indexers, strip_history)
        for resource in HISTORY
    ] + [
        (resource, OPTED_IN_SELECTOR, {**indexers, READS_INDEX: index_by_reads}, None)
        for resource in (WORKLOADS if workloads else ())
    ]
    listers: dict[Resource, HistoryLister] = {}
    synced: list[Callable[[], bool]] = []
    for resource, selector, indexes, transform in caches:
        kwargs: dict[str, Any] = {"transform": transform} if transform is not None else {}
        made = informers.informers_for(
            resource, label_selector=selector, indexers=indexes, **kwargs
        )
        synced.extend(informer.has_synced for informer in made.values())
        listers[resource] = informers.lister(resource, label_selector=selector, **kwargs)
    return History(
        replicasets=listers[REPLICASETS],
        controllerrevisions=listers[CONTROLLERREVISIONS],
        pods=listers[PODS],
        workloads={r.kind: listers[r] for r in (WORKLOADS if workloads else ())},
        synced=lambda: all(is_synced() for is_synced in synced),
    )


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def revision_owners(configmap: Mapping[str, Any]) -> list[str]:
    """Map function of the managed-ConfigMap informer: a revision -> its bundles' keys.

    Returns:
        ``["namespace/name"]`` of each ConfigBundle a non-controller owner reference of
        a ConfigMap labelled :data:`cbop.api.revisions.LABEL_REVISION_OF` names, sorted;
        for a revision with no owner reference at all (:func:`ownerless_revision`), the
        bundle its label names (the bundle's name, unless cut and hashed past 63
        characters: such a bundle finds it at its next resync); ``[]`` for any other
        ConfigMap.
    """
    meta = configmap.get("metadata") or {}
    label = (meta.get("labels") or {}).get(LABEL_REVISION_OF)
    if not isinstance(label, str):
        return []
    namespace = meta.get("namespace")
    if ownerless_revision(configmap):
        return [key_of(namespace, label)]
    return sorted(
        {
            key_of(namespace, str(ref.get("name", "")))
            for ref in meta.get("ownerReferences") or ()
            if is_bundle_reference(ref) and not ref.get("controller")
        }
    )


def bundles_of_template(
    bundles: Lister, configmaps: Lister
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: a pinned template or pod -> the bundles its mapping concerns.

    Args:
        bundles: the ConfigBundle cache, with :data:`cbop.keys.CONFIGMAP_NAME_INDEX`.
        configmaps: the managed-ConfigMap cache (the revisions).

    Returns:
        ``fn(obj) -> ["namespace/name", ...]``, sorted: for each pair of the mapping, the
        bundles that keep the plain ConfigMap and the owners of the revision
        (:func:`revision_owners`: a bundle whose ``configMapName`` changed since). The
        runtime maps the last state of a deleted object too, so a ReplicaSet the history
        limit deleted wakes the bundles whose revisions it named.
    """

    def map_template(obj: Mapping[str, Any]) -> list[str]:
        namespace = _namespace(obj)
        keys: set[str] = set()
        for plain, revision in mapping_of(obj).items():
            keys.update(
                object_key(b)
                for b in bundles.by_index(CONFIGMAP_NAME_INDEX, key_of(namespace, plain))
            )
            found = configmaps.get(namespace, revision)
            if found is not None:
                keys.update(revision_owners(found))
        return sorted(keys)

    return map_template


def bundles_of_reader(bundles: Lister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: an opted-in workload -> the bundles whose ConfigMaps it reads."""

    def map_workload(workload: Mapping[str, Any]) -> list[str]:
        keys: set[str] = set()
        for value in index_by_reads(workload):
            keys.update(object_key(b) for b in bundles.by_index(CONFIGMAP_NAME_INDEX, value))
        return sorted(keys)

    return map_workload


def count_unpinned(pods: Iterable[Mapping[str, Any]]) -> int:
    """Return how many of ``pods`` (a pinned-pod cache's) read a plain ConfigMap they pin.

    Pods being deleted are left out.
    """
    return sum(
        1
        for pod in pods
        if not (pod.get("metadata") or {}).get("deletionTimestamp") and pod_unpinned(pod)
    )


def legacy_namespaces(
    configmaps: Iterable[Mapping[str, Any]],
    workloads: Iterable[tuple[str, Mapping[str, Any]]],
) -> int:
    """Return the namespaces where something still relies on 0.2.0's pins.

    Args:
        configmaps: the managed ConfigMaps (0.2.0's pins and the revisions among them).
        workloads: ``(kind, workload)`` of the opted-in workloads.
    """
    params: dict[str, Mapping[str, Any]] = {}
    revisions: dict[str, list[Mapping[str, Any]]] = {}
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if meta.get("name") == PARAMS_NAME:
            params[namespace] = cm
        elif LABEL_REVISION_OF in (meta.get("labels") or {}):
            revisions.setdefault(namespace, []).append(cm)
    by_namespace: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for kind, workload in workloads:
        by_namespace.setdefault(_namespace(workload), []).append((kind, workload))
    return sum(
        1
        for namespace, pins in params.items()
        if legacy_in_use(pins, revisions.get(namespace, ()), by_namespace.get(namespace, ()))
    )


def bundles_of_legacy_pins(configmaps: Lister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: 0.2.0's pins -> the bundles holding the revisions they name.

    A revision the pins name is never collected; once they are gone (deleted by the user
    when nothing relies on them any more) or edited, the bundles must look again. The
    runtime maps both the old and the new object of an update, and a deletion's last
    state. Cache lookups only.
    """

    def map_pins(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        if meta.get("name") != PARAMS_NAME:
            return []
        namespace = str(meta.get("namespace") or "")
        keys: set[str] = set()
        for name in legacy_named(configmap):
            revision = configmaps.get(namespace, name)
            if revision is not None:
                keys.update(revision_owners(revision))
        return sorted(keys)

    return map_pins
