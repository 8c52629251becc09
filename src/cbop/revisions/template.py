"""The rollout's share of revisions: the mapping a pod template carries, written with it.

:class:`TemplatePins` tells the rollout, for one workload, which revision of each
ConfigMap its template reads exists now (the mapping of ``cbop.dev/revisions``),
whether a workload whose content did not change must still be rolled once so that its
pods read revisions (:func:`cbop.revisions.model.wants_pin`), and adds the mapping,
the template label and the workload's pinned baseline to the server-side apply body
the rollout sends anyway: one request, no other object written. A ConfigMap whose
revision does not exist (yet) stays on its plain name in that template: the plain
ConfigMap is right for the new template, so pinning never holds up a rollout.

Loops: a tool that writes the template back without cbop's keys after cbop pinned it
(a replace on every sync) would have it rolled again and again. A workload is pinned
at most once per (baseline, template without cbop's keys) in a process; after that
:meth:`TemplatePins.plan` answers ``refused`` and the rollout reports it instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import cachetools

from cbop.api.revisions import LABEL_REVISION_OF, revision_name
from cbop.revisions.legacy import PARAMS_NAME, legacy_pinned
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    LABEL_PINNED_BASELINE,
    format_mapping,
    mapping_of,
    template_fingerprint,
    wants_pin,
)
from cbop.runtime.seams import Lister

__all__ = ["Content", "TemplatePin", "TemplatePins", "add_mapping", "pin_message"]

#: Workloads whose last pin this process remembers (the loop guard).
_REMEMBERED: Final = 100_000


class Content(Protocol):
    """A managed ConfigMap a template reads (the rollout's ``ManagedObject``)."""

    @property
    def name(self) -> str:
        """The plain ConfigMap's name."""
        ...

    @property
    def content_hash(self) -> str:
        """``sha256:<hex>`` of its content as the pods read it."""
        ...


@dataclass(frozen=True, slots=True)
class TemplatePin:
    """What the revisions ask of one rollout reconcile.

    Attributes:
        mapping: plain -> revision for the content read now (the revisions that exist);
            empty when no ConfigMap the template reads has one.
        pin: roll the workload once at unchanged content to write ``mapping``.
        refused: ``pin`` was wanted but this process pinned the same template at the
            same baseline before and it lost the mapping again: not rolled (a loop);
            a sentence for the Warning Event, else None.
    """

    mapping: Mapping[str, str]
    pin: bool = False
    refused: str | None = None


def add_mapping(body: dict[str, Any], mapping: Mapping[str, str], baseline: str) -> dict[str, Any]:
    """Return the rollout's apply ``body`` with the mapping added (``body`` is not changed).

    With a non-empty ``mapping``: the template annotation :data:`ANNOTATION_REVISIONS`,
    the template label :data:`LABEL_PINNED` and the workload label
    :data:`LABEL_PINNED_BASELINE` (``baseline``). With an empty one, ``body`` as it is:
    the apply then drops those keys if cbop's field manager set them before (a bundle
    whose revisions were turned off).

    Args:
        body: a rollout apply body that sets the template annotation (a roll).
        mapping: plain -> revision.
        baseline: the baseline label value the apply writes.
    """
    if not mapping:
        return body
    out = {**body, "metadata": {**body["metadata"]}, "spec": {**body["spec"]}}
    out["metadata"]["labels"] = {**body["metadata"]["labels"], LABEL_PINNED_BASELINE: baseline}
    template = dict(body["spec"]["template"])
    meta = dict(template["metadata"])
    meta["annotations"] = {**meta["annotations"], ANNOTATION_REVISIONS: format_mapping(mapping)}
    meta["labels"] = {**(meta.get("labels") or {}), LABEL_PINNED: "true"}
    template["metadata"] = meta
    out["spec"]["template"] = template
    return out


def pin_message(mapping: Mapping[str, str]) -> str:
    """Return the Event message of a pin at unchanged content (reason ``RevisionsPinned``)."""
    names = ", ".join(f"{plain} -> {revision}" for plain, revision in sorted(mapping.items()))
    return (
        "the pod template read ConfigMaps whose bundles keep revisions by their plain "
        f"names; rolled once, content unchanged, to pin its pods to {names}"
    )


class TemplatePins:
    """The rollout's view of revisions (one per rollout reconciler; thread-safe).

    Args:
        configmaps: the managed-ConfigMap cache (revisions carry cbop's label; 0.2.0's
            pins too).
        kind: the workload kind (``Deployment``, ``StatefulSet``, ``DaemonSet``).
    """

    def __init__(self, configmaps: Lister, kind: str) -> None:
        self._configmaps = configmaps
        self._kind = kind
        self._lock = threading.Lock()
        # Workload UID -> (baseline, template fingerprint) of this process's last pin.
        self._pinned: cachetools.LRUCache[str, tuple[str, str]] = cachetools.LRUCache(_REMEMBERED)

    def mapping(self, namespace: str, managed: Iterable[Content]) -> dict[str, str]:
        """Return plain -> revision for the ``managed`` ConfigMaps whose revision exists.

        A revision exists when the cache holds a ConfigMap of its name
        (:func:`cbop.api.revisions.revision_name` of the name and content hash) with
        the ``cbop.dev/revision-of`` label: its bundle keeps revisions, and made the one
        of this content. Empty when no bundle the template reads keeps revisions.
        """
        out = {}
        for cm in managed:
            try:
                name = revision_name(cm.name, cm.content_hash)
            except ValueError:
                continue
            revision = self._configmaps.get(namespace, name)
            labels = ((revision or {}).get("metadata") or {}).get("labels") or {}
            if LABEL_REVISION_OF in labels:
                out[cm.name] = name
        return out

    def plan(
        self,
        workload: Mapping[str, Any],
        managed: Iterable[Content],
        *,
        baseline: str,
        digest_baseline: str,
        template_baseline: str,
    ) -> TemplatePin:
        """Return what the revisions ask of a reconcile of ``workload``.

        Args:
            workload: the cached workload.
            managed: the managed ConfigMaps its template reads, with their content now.
            baseline: its baseline label (``""``: none yet).
            digest_baseline: the baseline value of the digest of ``managed``.
            template_baseline: the baseline value of its template's
                ``cbop.dev/config-hash`` (``""``: none).
        """
        meta = workload.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        mapping = self.mapping(namespace, managed)
        labels = meta.get("labels") or {}
        template = (workload.get("spec") or {}).get("template") or {}
        pin = wants_pin(
            desired=mapping,
            carried=mapping_of(workload),
            baseline=baseline,
            digest_baseline=digest_baseline,
            template_baseline=template_baseline,
            pinned_baseline=str(labels.get(LABEL_PINNED_BASELINE) or ""),
            legacy_pinned=legacy_pinned(
                self._configmaps.get(namespace, PARAMS_NAME),
                self._kind,
                str(meta.get("name") or ""),
                template,
            ),
        )
        if not pin:
            return TemplatePin(mapping)
        mark = (digest_baseline, template_fingerprint(template))
        with self._lock:
            again = self._pinned.get(str(meta.get("uid") or "")) == mark
        if again:
            return TemplatePin(
                mapping,
                refused=(
                    f"the pod template lost its {ANNOTATION_REVISIONS} again after cbop "
                    "pinned it at this content (a tool writes the workload back without "
                    "it); cbop does not roll it again: its new pods read the plain "
                    "ConfigMaps until the next content change"
                ),
            )
        return TemplatePin(mapping, pin=True)

    def pinned(self, workload: Mapping[str, Any], digest_baseline: str) -> None:
        """Note that a pin of ``workload`` (as cached before it) at ``digest_baseline`` was sent."""
        meta = workload.get("metadata") or {}
        template = (workload.get("spec") or {}).get("template") or {}
        with self._lock:
            self._pinned[str(meta.get("uid") or "")] = (
                digest_baseline,
                template_fingerprint(template),
            )
