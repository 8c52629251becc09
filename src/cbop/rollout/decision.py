"""The rollout decision: a workload and the managed ConfigMaps it reads -> one action.

Pure functions on parsed-JSON dicts; no client, no threads (an import-linter contract).
The act layer (:mod:`cbop.rollout.reconcile`) performs what they decide, and the dry
run's plan (:mod:`cbop.cli.plan`) asks them too. :func:`referenced_configmaps` finds
what a pod template reads, :func:`config_digest` digests the content of the managed ones
(the value of ``cbop.dev/config-hash``, from the same content hash the ConfigBundle
controller writes), :func:`baseline` reads what the pods run with, and :func:`decide`
returns none, record, skip or apply (docs/rollout.md). Why the baseline is a workload
label and not the template annotation: ``kubectl rollout undo`` brings back an old
annotation while the pods it starts read today's content.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api import (
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    content_hash,
    controller_reference,
    decode_binary,
    is_bundle_reference,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, LABEL_PINNED_BASELINE

__all__ = [
    "ANNOTATION_CONFIG_HASH",
    "BASELINE_DIGITS",
    "EMPTY_DIGEST",
    "FIELD_MANAGER",
    "LABEL_CONFIG_BASELINE",
    "LABEL_ROLLOUT",
    "ROLLOUT_SELECTOR",
    "Action",
    "Decision",
    "FieldOwner",
    "ManagedConfigMap",
    "apply_body",
    "baseline",
    "baseline_value",
    "config_digest",
    "current_digest",
    "decide",
    "in_last_applied",
    "is_managed",
    "managed_references",
    "may_take_back",
    "other_owners",
    "referenced_configmaps",
    "required_configmaps",
]

#: Label that opts a workload in (value ``"true"``).
LABEL_ROLLOUT: Final = "cbop.dev/rollout"
#: The server-side label selector of the workload informers: only opted-in workloads.
ROLLOUT_SELECTOR: Final = f"{LABEL_ROLLOUT}=true"
#: Pod template annotation cbop writes; a new value makes the workload's controller roll.
ANNOTATION_CONFIG_HASH: Final = "cbop.dev/config-hash"
#: Workload label holding the baseline: the digest of the configuration the workload's
#: pods run with, cut to :data:`BASELINE_DIGITS` hex digits (a label value holds at most
#: 63 characters). A label, not an annotation: a Deployment's annotations are copied to
#: its ReplicaSets, so writing one bumps the Deployment's generation; labels of the
#: three kinds do not.
LABEL_CONFIG_BASELINE: Final = "cbop.dev/config-baseline"
#: Hex digits of the digest kept in the baseline label (160 bits).
BASELINE_DIGITS: Final = 40
#: Field manager of the server-side apply (its own, apart from the ConfigMap writes).
FIELD_MANAGER: Final = "cbop-rollout"

_CONTAINER_LISTS: Final = ("initContainers", "containers", "ephemeralContainers")


class Action(enum.StrEnum):
    """What the rollout reconcile does to the workload.

    NONE: nothing. RECORD: write the baseline label only (a label write does not touch
    the pod template, so nothing rolls). SKIP: a paused Deployment, reported. APPLY:
    write the annotation and the baseline, which rolls the workload.
    """

    NONE = "none"
    RECORD = "record"
    SKIP = "skip"
    APPLY = "apply"


@dataclass(frozen=True, slots=True)
class ManagedConfigMap:
    """A referenced ConfigMap that cbop manages.

    Attributes:
        name: the ConfigMap's name.
        bundle: the name of the ConfigBundle that controls it (same namespace).
        content_hash: ``sha256:<hex>`` of its data and binaryData.
    """

    name: str
    bundle: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class Decision:
    """One rollout decision.

    Attributes:
        action: what to do.
        digest: the digest the annotation should carry (:data:`EMPTY_DIGEST` when the
            template reads no managed ConfigMap; ``""`` when nothing is to be written
            because the workload is not opted in, is being deleted, or reads no managed
            ConfigMap any more).
        current: the annotation's value now (``""`` when absent).
        baseline: the workload's baseline (:func:`baseline`; ``""`` when it has none).
        configmaps: the managed ConfigMaps the digest covers, sorted by name.
        message: a sentence for the user (for SKIP: the Event message).
    """

    action: Action
    digest: str = ""
    current: str = ""
    baseline: str = ""
    configmaps: tuple[ManagedConfigMap, ...] = ()
    message: str = ""


def _pod_spec(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = (
        ((workload.get("spec") or {}).get("template") or {}).get("spec")
    ) or {}
    return spec


def _references(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, bool]]:
    """Yield ``(name, optional)`` for every ConfigMap reference of ``pod_spec``."""
    for volume in pod_spec.get("volumes") or ():
        yield _reference(volume.get("configMap"))
        for source in (volume.get("projected") or {}).get("sources") or ():
            yield _reference(source.get("configMap"))
    for field in _CONTAINER_LISTS:
        for container in pod_spec.get(field) or ():
            for env_from in container.get("envFrom") or ():
                yield _reference(env_from.get("configMapRef"))
            for env in container.get("env") or ():
                yield _reference((env.get("valueFrom") or {}).get("configMapKeyRef"))


def _reference(ref: Mapping[str, Any] | None) -> tuple[str, bool]:
    ref = ref or {}
    return str(ref.get("name") or ""), bool(ref.get("optional"))


def referenced_configmaps(workload: Mapping[str, Any]) -> list[str]:
    """Return the sorted, distinct ConfigMap names ``workload``'s pod template references.

    Args:
        workload: a Deployment, StatefulSet or DaemonSet dict (``spec.template.spec``).

    Returns:
        Names from ``volumes[].configMap``, ``volumes[].projected.sources[].configMap``,
        and ``envFrom[].configMapRef`` and ``env[].valueFrom.configMapKeyRef`` of every
        container, init container and ephemeral container. ``optional`` references count
        too. Empty names are dropped.
    """
    return sorted({name for name, _ in _references(_pod_spec(workload)) if name})


def required_configmaps(workload: Mapping[str, Any]) -> list[str]:
    """Return the sorted, distinct names ``workload``'s pod template cannot start without.

    The references of :func:`referenced_configmaps` whose ``optional`` is unset or
    false: a pod whose required ConfigMap does not exist waits for it (volume mount or
    container configuration error) and starts with the content it finds.
    """
    return sorted({n for n, optional in _references(_pod_spec(workload)) if n and not optional})


def is_managed(configmap: Mapping[str, Any]) -> bool:
    """Whether cbop manages ``configmap``.

    True when it carries ``app.kubernetes.io/managed-by: cbop`` (what cbop's ConfigMap
    informer selects on) and a controller owner reference to a ConfigBundle (group and
    kind; any version), both as :func:`cbop.configbundle.desired.render` writes them. A
    ConfigMap released with ``deletionPolicy: Orphan`` has neither.
    """
    labels = configmap.get("metadata", {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_VALUE:
        return False
    ref = controller_reference(configmap)
    return ref is not None and is_bundle_reference(ref)


def _configmap_hash(configmap: Mapping[str, Any]) -> str | None:
    binary = decode_binary(configmap.get("binaryData"))
    if binary is None:
        return None
    return content_hash(configmap.get("data") or {}, binary)


def managed_references(
    workload: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, Any]]
) -> tuple[ManagedConfigMap, ...]:
    """Return the managed ConfigMaps among ``workload``'s references, sorted by name.

    Args:
        workload: the workload dict.
        configmaps: name -> ConfigMap, for the ConfigMaps of the workload's namespace
            that are at hand (a referenced name missing here is not managed, or does
            not exist: either way it is ignored). Objects are never mutated.
    """
    out = []
    for name in referenced_configmaps(workload):
        cm = configmaps.get(name)
        if cm is None or not is_managed(cm):
            continue
        digest = _configmap_hash(cm)
        ref = controller_reference(cm)
        if digest is None or ref is None:  # binaryData the API server would not store
            continue
        out.append(ManagedConfigMap(name, str(ref.get("name", "")), digest))
    return tuple(out)


def config_digest(configmaps: Iterable[ManagedConfigMap]) -> str:
    """Return ``sha256:<hex>`` of the sorted (name, content hash) pairs.

    Each pair is framed by the 8-byte big-endian lengths of its parts, so no two lists
    of pairs share a byte stream. The order of ``configmaps`` does not matter.
    """
    digest = hashlib.sha256()
    for name, value in sorted((cm.name, cm.content_hash) for cm in configmaps):
        for part in (name.encode(), value.encode()):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return "sha256:" + digest.hexdigest()


#: The digest of no managed ConfigMap (``sha256:`` of zero bytes): the baseline of a
#: workload whose pods read none. Every pair adds at least 16 framing bytes, so no list
#: of pairs has this digest: content that appears later always differs from it.
EMPTY_DIGEST: Final = config_digest(())


def current_digest(workload: Mapping[str, Any]) -> str:
    """Return the pod template's ``cbop.dev/config-hash`` annotation, ``""`` if absent."""
    meta = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return str((meta.get("annotations") or {}).get(ANNOTATION_CONFIG_HASH, ""))


def baseline_value(digest: str) -> str:
    """Return the baseline label's value for ``digest`` (``sha256:<hex>``).

    That is its first :data:`BASELINE_DIGITS` hex digits.
    """
    return digest.removeprefix("sha256:")[:BASELINE_DIGITS]


def baseline(workload: Mapping[str, Any]) -> str:
    """Return the baseline of ``workload`` as :func:`baseline_value` gives it, ``""`` if none.

    The label ``cbop.dev/config-baseline`` when set; else the pod template annotation
    ``cbop.dev/config-hash`` (a workload that cbop rolled before it wrote the label:
    its pods were started for that digest); else ``""``: cbop has not seen the workload
    yet. A workload first seen reading no managed ConfigMap has the baseline of
    :data:`EMPTY_DIGEST`, not ``""``.
    """
    labels = (workload.get("metadata") or {}).get("labels") or {}
    recorded = labels.get(LABEL_CONFIG_BASELINE)
    if recorded:
        return str(recorded)
    current = current_digest(workload)
    return baseline_value(current) if current else ""


def decide(
    workload: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, Any]],
    absent: Collection[str] = frozenset(),
) -> Decision:
    """Decide whether to write ``workload``'s ``cbop.dev/config-hash`` annotation.

    Args:
        workload: a Deployment, StatefulSet or DaemonSet dict (``kind`` set or not),
            never mutated.
        configmaps: name -> ConfigMap of the workload's namespace (see
            :func:`managed_references`).
        absent: names of ConfigMaps known not to exist (asked only while the workload
            has no baseline, :mod:`cbop.rollout.references`); a required reference
            among them holds the baseline back until it appears.

    Returns:
        A :class:`Decision`, by the first check that holds: not opted in or being
        deleted -> none; no baseline yet -> none while a required reference
        (:func:`required_configmaps`) does not exist (in ``absent``: the pods wait for
        it and start with what appears), else record (of :data:`EMPTY_DIGEST` when the
        template reads no managed ConfigMap: pods that start after the content exists
        already read it, so opting in is no reason to roll); digest equal to the
        baseline -> none; no managed reference left -> none (the annotation and the
        baseline stay: removing them would roll the workload for nothing); a paused
        Deployment -> skip; else apply.
    """
    meta = workload.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_ROLLOUT) != "true":
        return Decision(Action.NONE, message=f"no {LABEL_ROLLOUT}: true label")
    if meta.get("deletionTimestamp"):
        return Decision(Action.NONE, message="the workload is being deleted")
    current = current_digest(workload)
    managed = managed_references(workload, configmaps)
    digest = config_digest(managed)
    known = baseline(workload)
    if not known:
        awaited = sorted(set(required_configmaps(workload)) & set(absent))
        if awaited:
            return Decision(
                Action.NONE,
                current=current,
                message=(
                    f"first seen waiting for ConfigMap(s) {', '.join(awaited)} that it "
                    "cannot start without: its pods will read what appears, so the "
                    "baseline is recorded then"
                ),
            )
        read = "this content" if managed else "no managed ConfigMap"
        return Decision(
            Action.RECORD,
            digest,
            current,
            configmaps=managed,
            message=f"first seen: its pods already read {read}; the baseline is recorded",
        )
    if baseline_value(digest) == known:
        return Decision(Action.NONE, digest, current, known, managed)
    if not managed:
        return Decision(
            Action.NONE,
            current=current,
            baseline=known,
            message="the pod template reads no managed ConfigMap now; the baseline stays",
        )
    if (workload.get("spec") or {}).get("paused"):
        bundles = ", ".join(sorted({cm.bundle for cm in managed}))
        return Decision(
            Action.SKIP,
            digest,
            current,
            known,
            managed,
            message=(
                f"the Deployment is paused; cbop rolls it for ConfigBundle(s) {bundles} "
                "once it is resumed"
            ),
        )
    return Decision(Action.APPLY, digest, current, known, managed)


def apply_body(
    workload: Mapping[str, Any], api_version: str, kind: str, digest: str, *, roll: bool = True
) -> dict[str, Any]:
    """Return the server-side apply body that sets the baseline and, to roll, the annotation.

    Args:
        workload: the workload (its ``metadata.name`` and ``namespace`` are used).
        api_version: e.g. ``"apps/v1"``.
        kind: ``Deployment``, ``StatefulSet`` or ``DaemonSet``.
        digest: the configuration digest (``sha256:<hex>``).
        roll: also set the pod template annotation to ``digest`` (a rollout); False
            records the baseline only (:attr:`Action.RECORD`, sent only while the
            template has no annotation, so the apply never drops one this field
            manager owns).

    Returns:
        ``apiVersion``, ``kind``, ``metadata.name/namespace``, the label
        ``cbop.dev/config-baseline`` and, with ``roll``,
        ``spec.template.metadata.annotations`` with the one key: the field manager that
        sends it owns those keys and nothing else, so other managers' fields are neither
        claimed nor removed.
    """
    meta = workload["metadata"]
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {LABEL_CONFIG_BASELINE: baseline_value(digest)},
        },
    }
    if roll:
        body["spec"] = {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}}}
    return body


#: The annotation kubectl's client-side apply keeps the applied manifest in.
_LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True, slots=True)
class FieldOwner:
    """Another field manager that owns the annotation or the baseline label.

    Attributes:
        manager: its field manager name (``kubectl-rollout``, ``argocd-controller``, ...).
        operation: ``Apply`` (server-side apply) or ``Update`` (any other write).
    """

    manager: str
    operation: str


#: The workload labels, template annotations and template labels cbop's apply sets.
_OUR_LABELS: Final = (LABEL_CONFIG_BASELINE, LABEL_PINNED_BASELINE)
_OUR_ANNOTATIONS: Final = (ANNOTATION_CONFIG_HASH, ANNOTATION_REVISIONS)
_OUR_TEMPLATE_LABELS: Final = (LABEL_PINNED,)


def _owns_ours(fields: Mapping[str, Any]) -> bool:
    labels = ((fields.get("f:metadata") or {}).get("f:labels")) or {}
    template = ((fields.get("f:spec") or {}).get("f:template") or {}).get("f:metadata") or {}
    annotations = template.get("f:annotations") or {}
    template_labels = template.get("f:labels") or {}
    return (
        any(f"f:{k}" in labels for k in _OUR_LABELS)
        or any(f"f:{k}" in annotations for k in _OUR_ANNOTATIONS)
        or any(f"f:{k}" in template_labels for k in _OUR_TEMPLATE_LABELS)
    )


def other_owners(workload: Mapping[str, Any], field_manager: str) -> tuple[FieldOwner, ...]:
    """Return the field managers other than ``field_manager`` owning keys cbop applies.

    Args:
        workload: the workload as the API server returns it, ``metadata.managedFields``
            included (informer caches drop them).
        field_manager: cbop's own field manager (``cbop-rollout``).

    Returns:
        One :class:`FieldOwner` per managedFields entry of another manager (or of the
        same name with the Update operation) whose ``fieldsV1`` holds one of them (the
        template annotations ``cbop.dev/config-hash`` and ``cbop.dev/revisions``, the
        template label ``cbop.dev/pinned``, the labels ``cbop.dev/config-baseline`` and
        ``cbop.dev/pinned-baseline``), in the object's order.
    """
    owners = []
    for entry in (workload.get("metadata") or {}).get("managedFields") or ():
        manager = str(entry.get("manager", ""))
        operation = str(entry.get("operation", ""))
        if manager == field_manager and operation == "Apply":
            continue
        if _owns_ours(entry.get("fieldsV1") or {}):
            owners.append(FieldOwner(manager, operation))
    return tuple(owners)


def in_last_applied(workload: Mapping[str, Any]) -> bool:
    """Whether kubectl's ``last-applied-configuration`` holds one of the keys cbop applies.

    True means a client-side ``kubectl apply`` (as Argo CD runs by default) applies that
    key from a manifest, and would put its own value back on every sync. An annotation
    that does not parse counts as not holding them.
    """
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(_LAST_APPLIED)
    if not raw:
        return False
    try:
        applied = json.loads(raw)
    except ValueError:
        return False
    labels = _dig(applied, "metadata", "labels")
    kept = _dig(applied, "spec", "template", "metadata", "annotations")
    template_labels = _dig(applied, "spec", "template", "metadata", "labels")
    return (
        any(k in labels for k in _OUR_LABELS)
        or any(k in kept for k in _OUR_ANNOTATIONS)
        or any(k in template_labels for k in _OUR_TEMPLATE_LABELS)
    )


def _dig(obj: Any, *path: str) -> Mapping[str, Any]:
    """Return the mapping at ``path`` in parsed JSON, ``{}`` where any step is not one."""
    for step in path:
        obj = obj.get(step) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def may_take_back(workload: Mapping[str, Any], field_manager: str) -> bool:
    """Whether cbop may apply its two keys with ``force`` after a 409 Conflict.

    Yes when every other owner of them wrote them with a plain update (``operation:
    Update``: ``kubectl rollout undo``, ``kubectl edit`` or ``annotate``, Helm, a
    script) and no client-side apply keeps them in its manifest: such an owner does
    not write them again by itself, so taking them back is no fight. No when a manager
    server-side applies them, or kubectl's last-applied-configuration holds them: a
    GitOps tool whose manifest carries the key would put its value back on every sync.

    Args:
        workload: the workload with ``metadata.managedFields`` (a fresh read).
        field_manager: cbop's own field manager.
    """
    if in_last_applied(workload):
        return False
    return all(owner.operation == "Update" for owner in other_owners(workload, field_manager))
