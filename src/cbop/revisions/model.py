"""The revision lifecycle's model: pure functions on parsed-JSON dicts, no client, no threads.

An import-linter contract keeps it pure. What it owns:

- the **mapping** a pod template carries (:data:`ANNOTATION_REVISIONS`:
  ``plain=revision`` pairs, sorted, comma-separated), its format and its parse, which
  is also the admission policy's (a revision must be ``<plain>-<10 hex>``), and the
  labels that mark a pinned template (:data:`LABEL_PINNED`) and the content a
  workload was last pinned at (:data:`LABEL_PINNED_BASELINE`);
- where a workload, ReplicaSet, ControllerRevision or pod keeps its template's
  metadata (:func:`template_metadata`) and which ConfigMaps a pod spec reads
  (:func:`configmap_references`);
- the **pin decision** of the rollout (:func:`wants_pin`);
- the **collection plan** of a bundle (:func:`collection_plan`);
- the **Pinned verdict** of a bundle (:func:`pinned_verdict`).

The act layers (:mod:`cbop.revisions.bundle`, :mod:`cbop.revisions.template`)
read the caches, call these and write.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from cbop.api.revisions import REVISION_HASH_DIGITS

__all__ = [
    "ANNOTATION_REVISIONS",
    "CONDITION_PINNED",
    "LABEL_PINNED",
    "LABEL_PINNED_BASELINE",
    "PINNED_SELECTOR",
    "Candidate",
    "Finding",
    "PinnedReason",
    "PinnedVerdict",
    "Plan",
    "Reference",
    "collection_plan",
    "configmap_references",
    "format_mapping",
    "mapping_of",
    "parse_mapping",
    "pinned_verdict",
    "pod_unpinned",
    "template_fingerprint",
    "template_metadata",
    "valid_pair",
    "wants_pin",
]

#: Pod template annotation the rollout writes with ``cbop.dev/config-hash``: the
#: revision each ConfigMap the template reads is pinned to. The admission policy reads
#: it from the pod being created (a pod carries its template's annotations).
ANNOTATION_REVISIONS: Final = "cbop.dev/revisions"
#: Pod template label of a template with :data:`ANNOTATION_REVISIONS` (value ``"true"``):
#: copied to the ReplicaSets, ControllerRevisions and pods of that template, so cbop's
#: informers of those select them on the server, and the policy matches only them.
LABEL_PINNED: Final = "cbop.dev/pinned"
#: The server-side label selector of pinned templates' ReplicaSets, ControllerRevisions
#: and pods.
PINNED_SELECTOR: Final = f"{LABEL_PINNED}=true"
#: Workload label (not a template label: an undo does not touch it): the baseline
#: (40 hex digits of the digest) whose revisions cbop last wrote into the template. A
#: template without a mapping at that baseline is one cbop pinned before (an undo, a
#: hand edit) and is not rolled again for it.
LABEL_PINNED_BASELINE: Final = "cbop.dev/pinned-baseline"
#: The bundle condition that tells whether the pods of the workloads reading the
#: bundle's ConfigMap read its revisions.
CONDITION_PINNED: Final = "Pinned"

_HEX: Final = frozenset("0123456789abcdef")
#: Distinct mapping values whose parse is kept (a few per template in use).
_PARSES_KEPT: Final = 4096
_CONTAINER_LISTS: Final = ("initContainers", "containers")


# -- the mapping ---------------------------------------------------------------------


def valid_pair(plain: str, revision: str) -> bool:
    """Whether ``revision`` is a revision name of ConfigMap ``plain``: ``<plain>-<10 hex>``.

    The admission policy pins a name only under the same rule, so a hand-edited
    annotation can never point a pod at another ConfigMap.
    """
    suffix = revision[len(plain) :]
    return (
        bool(plain)
        and revision.startswith(plain)
        and len(suffix) == REVISION_HASH_DIGITS + 1
        and suffix[0] == "-"
        and set(suffix[1:]) <= _HEX
    )


def format_mapping(mapping: Mapping[str, str]) -> str:
    """Return the :data:`ANNOTATION_REVISIONS` value of ``mapping`` (plain -> revision).

    ``plain=revision`` pairs sorted by the plain name, joined by commas: the same
    mapping always gives the same value (ConfigMap names hold neither ``,`` nor ``=``).
    """
    return ",".join(f"{plain}={revision}" for plain, revision in sorted(mapping.items()))


def parse_mapping(value: object) -> dict[str, str]:
    """Return plain -> revision of an :data:`ANNOTATION_REVISIONS` value, as the policy reads it.

    Pairs are split on commas and trimmed; a pair without ``=`` or without a plain name
    is skipped; of pairs naming the same plain ConfigMap the last one counts, and pins
    it only when its revision is :func:`valid_pair` of the plain name. Anything but a
    string gives ``{}``.
    """
    if not isinstance(value, str):
        return {}
    return dict(_parsed(value))


@functools.lru_cache(maxsize=_PARSES_KEPT)
def _parsed(value: str) -> tuple[tuple[str, str], ...]:
    """Return the pairs :func:`parse_mapping` keeps of ``value``, parsed once per value.

    Every ReplicaSet, ControllerRevision and pod of a template carries its template's
    value, and a bundle's reconcile reads it from every holder: a few distinct values,
    each read once per holder per reconcile. Kept as a tuple so no caller can change it.
    """
    last: dict[str, str] = {}
    for pair in value.split(","):
        plain, sep, revision = pair.strip().partition("=")
        if sep and plain:
            last[plain] = revision
    return tuple((plain, rev) for plain, rev in last.items() if valid_pair(plain, rev))


def template_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the metadata a pod of ``obj`` is created with (``{}`` when there is none).

    ``obj`` is a workload or ReplicaSet (``spec.template.metadata``), a
    ControllerRevision (``data.spec.template.metadata``, as the StatefulSet and
    DaemonSet controllers store the template) or a pod (its own ``metadata``).
    """
    data = obj.get("data")
    spec = data.get("spec") if isinstance(data, Mapping) else obj.get("spec")
    if not isinstance(spec, Mapping):
        return {}
    template = spec.get("template")
    if isinstance(template, Mapping):
        meta = template.get("metadata")
        return meta if isinstance(meta, Mapping) else {}
    if data is None and "containers" in spec:  # a pod
        meta = obj.get("metadata")
        return meta if isinstance(meta, Mapping) else {}
    return {}


def mapping_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """Return the mapping the template of ``obj`` carries (:func:`template_metadata`)."""
    annotations = template_metadata(obj).get("annotations") or {}
    return parse_mapping(annotations.get(ANNOTATION_REVISIONS))


def template_fingerprint(template: Mapping[str, Any]) -> str:
    """Return a digest of a pod template without cbop's own keys in it.

    The annotations ``cbop.dev/config-hash`` and :data:`ANNOTATION_REVISIONS` and the
    label :data:`LABEL_PINNED` are left out, so a template a tool wrote again without
    them has the fingerprint it had with them. Used to tell a template written back
    unchanged (a loop) from a new one.
    """
    meta = dict(template.get("metadata") or {})
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k not in (ANNOTATION_REVISIONS, "cbop.dev/config-hash")
    }
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != LABEL_PINNED}
    body = {"annotations": annotations, "labels": labels, "spec": template.get("spec")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# -- what a pod spec reads ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reference:
    """One ConfigMap name in a pod spec.

    Attributes:
        where: a path a person can read (``volumes[0].configMap``,
            ``containers[app].envFrom[1]``).
        name: the ConfigMap name.
    """

    where: str
    name: str


def configmap_references(pod_spec: Mapping[str, Any]) -> Iterator[Reference]:
    """Yield the ConfigMap names ``pod_spec`` reads, where the admission policy pins them.

    ``volumes[].configMap``, ``volumes[].projected.sources[].configMap`` and, in
    containers and init containers, ``envFrom[].configMapRef`` and
    ``env[].valueFrom.configMapKeyRef``. Empty names are left out.
    """
    for i, volume in enumerate(pod_spec.get("volumes") or ()):
        name = (volume.get("configMap") or {}).get("name")
        if name:
            yield Reference(f"volumes[{i}].configMap", str(name))
        for j, source in enumerate((volume.get("projected") or {}).get("sources") or ()):
            name = (source.get("configMap") or {}).get("name")
            if name:
                yield Reference(f"volumes[{i}].projected.sources[{j}].configMap", str(name))
    for field in _CONTAINER_LISTS:
        for container in pod_spec.get(field) or ():
            at = f"{field}[{container.get('name', '')}]"
            for j, env_from in enumerate(container.get("envFrom") or ()):
                name = (env_from.get("configMapRef") or {}).get("name")
                if name:
                    yield Reference(f"{at}.envFrom[{j}]", str(name))
            for j, env in enumerate(container.get("env") or ()):
                name = ((env.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name")
                if name:
                    yield Reference(f"{at}.env[{j}]", str(name))


def pod_unpinned(pod: Mapping[str, Any]) -> list[Reference]:
    """Return the references of a pod that its own mapping names and that still read the plain name.

    Empty for a pod without a mapping, and for one the admission policy pinned: it
    replaced every plain name of the mapping with the revision when the pod was created.
    """
    mapping = parse_mapping(
        ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_REVISIONS)
    )
    if not mapping:
        return []
    return [r for r in configmap_references(pod.get("spec") or {}) if r.name in mapping]


# -- the rollout: whether to write a template's mapping at unchanged content ----------


def wants_pin(
    *,
    desired: Mapping[str, str],
    carried: Mapping[str, str],
    baseline: str,
    digest_baseline: str,
    template_baseline: str,
    pinned_baseline: str,
    legacy_pinned: bool,
) -> bool:
    """Whether a workload whose content did not change must be rolled once to pin it.

    Called when the rollout has nothing else to write (the content its pods read is the
    baseline, or it is seen for the first time). The template then reads the plain
    ConfigMaps of ``desired`` without their revisions (revisions turned on after its
    last rollout, never rolled, opted in, or its template replaced by a tool that
    dropped cbop's keys), so its pods would read new content at the next change: only
    pods created from a template with the mapping are safe (docs/revisions.md).

    Args:
        desired: plain -> revision that exists for the content read now.
        carried: the template's mapping (:func:`mapping_of`).
        baseline: the workload's baseline label (``""``: none, first seen).
        digest_baseline: the baseline value of the digest of the content read now.
        template_baseline: the baseline value of the template's ``cbop.dev/config-hash``
            (``""``: none).
        pinned_baseline: the workload's :data:`LABEL_PINNED_BASELINE` (``""``: none).
        legacy_pinned: the template is pinned by 0.2.0's pins (its digest or workload
            has an entry): its pods are safe, and rolling it would restart them.

    Returns:
        True when some desired pair is missing from ``carried``, the template is not
        pinned the 0.2.0 way, cbop has not pinned this baseline before (a template
        without the mapping at the baseline cbop pinned is an undo or a hand edit,
        never rolled forward), and the template is the one made for the current
        content: the workload is seen for the first time, or its template carries the
        current digest, or none (never rolled). A template of another digest is a
        rollback (``kubectl rollout undo``) and is left alone.
    """
    if not desired or legacy_pinned:
        return False
    if all(carried.get(plain) == revision for plain, revision in desired.items()):
        return False
    if baseline and pinned_baseline == baseline:
        return False
    return not baseline or template_baseline in ("", digest_baseline)


# -- collection ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A revision of a bundle, as the collection sees it.

    Attributes:
        name: its name.
        created: its ``creationTimestamp`` (RFC 3339; compared as text).
        held: it carries the bundle's revision owner reference.
        others: it carries owner references of other objects (0.2.0's ReplicaSets and
            ControllerRevisions, or anything else): never deleted while they are there.
        named: a cached template (workload, ReplicaSet, ControllerRevision, pod) names
            it, or 0.2.0's pins do.
        idle: seconds since it was last seen current or named (0 when just now).
    """

    name: str
    created: str
    held: bool
    others: bool
    named: bool
    idle: float


@dataclass(frozen=True, slots=True)
class Plan:
    """What the collection does now.

    Attributes:
        delete: the revisions to delete (each with the preconditions of its UID and
            resourceVersion).
        adopt: revisions without any owner reference that are kept: the bundle's
            reference is put back.
        wait: seconds until the next revision becomes collectable (its grace has not
            passed), or None.
    """

    delete: tuple[str, ...] = ()
    adopt: tuple[str, ...] = ()
    wait: float | None = None


def collection_plan(
    candidates: Iterable[Candidate], *, current: str, keep: int, grace: float
) -> Plan:
    """Decide which revisions of a bundle to delete now.

    Kept: ``current`` (``status.revision`` to be), the ``keep - 1`` most recently
    created others (``creationTimestamp``, then name), every revision a template in the
    workloads' history names (or 0.2.0's pins), and every revision another object still
    owns. Of the rest, those idle for ``grace`` seconds are deleted and the others
    waited for. A revision with no owner reference at all is adopted when kept, and
    deleted (past its grace) when not.
    """
    others = sorted(
        (c for c in candidates if c.name != current),
        key=lambda c: (c.created, c.name),
        reverse=True,
    )
    newest, older = others[: max(keep - 1, 0)], others[max(keep - 1, 0) :]
    delete: list[str] = []
    adopt = [c.name for c in newest if not c.held and not c.others]
    wait: float | None = None
    for c in older:
        if c.others:
            continue
        if c.named:
            if not c.held:
                adopt.append(c.name)
            continue
        if c.idle >= grace:
            delete.append(c.name)
        else:
            left = grace - c.idle
            wait = left if wait is None else min(wait, left)
    return Plan(tuple(delete), tuple(sorted(adopt)), wait)


# -- the Pinned verdict -----------------------------------------------------------------


class PinnedReason(enum.StrEnum):
    """Reasons of the ``Pinned`` condition, most pressing last."""

    PINNED = "Pinned"
    NOTHING_TO_PIN = "NothingToPin"
    NOT_VERIFIED = "NotVerified"
    ROLLOUT_OFF = "RolloutOff"
    NOT_PINNED_YET = "NotPinnedYet"
    POD_NOT_PINNED = "PodNotPinned"
    REVISION_MISSING = "RevisionMissing"
    POLICY_MISSING = "PolicyMissing"
    POLICY_NOT_SERVED = "PolicyNotServed"


#: Findings by how pressing they are: the condition reports the first kind found.
_ORDER: Final = (
    PinnedReason.POLICY_NOT_SERVED,
    PinnedReason.POLICY_MISSING,
    PinnedReason.REVISION_MISSING,
    PinnedReason.POD_NOT_PINNED,
    PinnedReason.NOT_PINNED_YET,
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing that keeps a workload's pods from reading their revision.

    Attributes:
        reason: what it is.
        workload: ``Kind/name`` of the workload (or of the history entry when its
            workload is not known).
        detail: a clause for the message (``pod web-7d9-x reads web-conf in
            volumes[0].configMap``).
    """

    reason: PinnedReason
    workload: str
    detail: str


@dataclass(frozen=True, slots=True)
class PinnedVerdict:
    """The ``Pinned`` condition of one bundle.

    Attributes:
        status: ``True``, ``False``, or ``Unknown`` (nothing verified yet).
        reason: its reason.
        message: its message; names workloads, never counts that move during a rollout.
        findings: every finding, the reported ones first (for Events on the workloads).
    """

    status: Literal["True", "False", "Unknown"]
    reason: PinnedReason
    message: str
    findings: tuple[Finding, ...] = ()


_SHOWN: Final = 3


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown if len(items) <= _SHOWN else f"{shown} and {len(items) - _SHOWN} more"


def pinned_verdict(
    configmap: str,
    *,
    readers: Sequence[str],
    findings: Iterable[Finding],
    policy: str | None,
    policy_reason: PinnedReason = PinnedReason.POLICY_MISSING,
) -> PinnedVerdict:
    """Return the ``Pinned`` condition of a bundle whose ConfigMap is ``configmap``.

    Args:
        configmap: the plain ConfigMap's name.
        readers: ``Kind/name`` of the opted-in workloads whose template reads it, sorted.
        findings: what keeps some of their pods from reading their revision.
        policy: None when the pin policy is installed (or cbop cannot tell), else a
            sentence saying what is missing.
        policy_reason: :attr:`PinnedReason.POLICY_MISSING` or
            :attr:`PinnedReason.POLICY_NOT_SERVED`, for ``policy``.

    Returns:
        ``False`` with the most pressing reason (the policy first, then a revision
        missing, a pod not pinned, a workload not pinned yet), naming the workloads of
        that reason; else ``True``: ``Pinned`` naming the readers, or ``NothingToPin``.
    """
    found = sorted(set(findings), key=lambda f: (_ORDER.index(f.reason), f.workload, f.detail))
    if policy is not None:
        return PinnedVerdict(
            "False",
            policy_reason,
            f"{policy}: new pods read ConfigMap {configmap}, not its revisions",
            tuple(found),
        )
    if found:
        reason = found[0].reason
        first = [f for f in found if f.reason is reason]
        workloads = sorted({f.workload for f in first})
        message = f"{_names(workloads)}: {first[0].detail}"
        if len(first) > 1:
            message += f" (and {len(first) - 1} more)"
        return PinnedVerdict("False", reason, message, tuple(found))
    if not readers:
        return PinnedVerdict(
            "True",
            PinnedReason.NOTHING_TO_PIN,
            f"no workload labelled cbop.dev/rollout=true reads ConfigMap {configmap}",
        )
    return PinnedVerdict(
        "True",
        PinnedReason.PINNED,
        f"the pods of {_names(list(readers))} read the revisions of ConfigMap {configmap} "
        "their templates name",
    )
