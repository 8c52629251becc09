"""0.2.0's pins, read and never written: the bridge across an upgrade (docs/revisions.md).

cbop 0.2.0 kept, per namespace, a ConfigMap :data:`PARAMS_NAME` (the pins: template
digest -> ``plain=revision`` lines, and ``Kind.name`` entries of workloads never
rolled), which its MutatingAdmissionPolicy (:data:`LEGACY_POLICY_NAME`, with
``paramKind: ConfigMap``) read to rewrite new pods, and it made each ReplicaSet and
ControllerRevision of a pinned template an owner of its revisions. A template rolled
by 0.2.0 carries only ``cbop.dev/config-hash``: its mapping lives in those pins.

After an upgrade, until the user removes them, this module lets cbop honour them
without writing them: a template with an entry is pinned the 0.2.0 way (the rollout
does not roll it to pin it, :func:`legacy_pinned`), and a revision an entry names is
never collected (:func:`legacy_named`). :func:`legacy_in_use` tells whether anything
still depends on them, for the metric that says when they may go. Pure: the callers
read the caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from cbop.revisions.model import mapping_of

__all__ = [
    "LEGACY_DIGEST_ANNOTATION",
    "LEGACY_POLICY_NAME",
    "OWNER_KINDS",
    "PARAMS_NAME",
    "legacy_in_use",
    "legacy_named",
    "legacy_pinned",
    "owner_pins_key",
    "parse_pins",
    "pins_key",
]

#: The per-namespace pins ConfigMap of cbop 0.2.0 (labelled as cbop's, so the
#: managed-ConfigMap cache holds it).
PARAMS_NAME: Final = "cbop-revisions"
#: The name of 0.2.0's policy and binding in ``manifests/revisions/`` (the chart
#: prefixed it with the release name).
LEGACY_POLICY_NAME: Final = "cbop-pin-revisions"
#: The template annotation whose digest keys 0.2.0's pins: the rollout's
#: ``cbop.rollout.decision.ANNOTATION_CONFIG_HASH``.
LEGACY_DIGEST_ANNOTATION: Final = "cbop.dev/config-hash"
#: Hex digits of a template digest in a pins key.
_KEY_DIGITS: Final = 40
#: The workload kinds 0.2.0 keyed by name (``Kind.name``) before their first rollout.
OWNER_KINDS: Final = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
_MAX_KEY: Final = 253
#: The owner kinds 0.2.0 added to the revisions their templates read.
_HISTORY_KINDS: Final = frozenset({"ReplicaSet", "ControllerRevision"})


def pins_key(digest: str) -> str:
    """Return 0.2.0's pins key of a template digest (``sha256:<hex>``): its first 40 hex digits.

    ``""`` when ``digest`` is not ``sha256:`` and at least that many hex digits.
    """
    algorithm, _, hex_digits = digest.partition(":")
    head = hex_digits[:_KEY_DIGITS]
    if (
        algorithm != "sha256"
        or len(head) != _KEY_DIGITS
        or not set(head) <= set("0123456789abcdef")
    ):
        return ""
    return head


def owner_pins_key(kind: str, name: str) -> str:
    """Return 0.2.0's key of a workload whose template had no digest: ``Kind.name``.

    ``""`` for another kind, an empty name or a key over 253 characters.
    """
    key = f"{kind}.{name}"
    if kind not in OWNER_KINDS or not name or len(key) > _MAX_KEY:
        return ""
    return key


def parse_pins(value: str) -> dict[str, str]:
    """Return the plain -> revision pairs of one 0.2.0 pins value (``plain=revision`` lines).

    Lines without ``=`` (0.2.0's ``#frozen`` mark) or with an empty side are skipped; of
    lines naming the same plain ConfigMap the last one counts, as 0.2.0 read them.
    """
    out = {}
    for line in value.splitlines():
        plain, sep, revision = line.strip().partition("=")
        if sep and plain and revision:
            out[plain] = revision
    return out


def _entries(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    data = (params or {}).get("data")
    return data if isinstance(data, Mapping) else {}


def legacy_pinned(
    params: Mapping[str, Any] | None, kind: str, name: str, template: Mapping[str, Any]
) -> bool:
    """Whether 0.2.0's pins have an entry for a workload's pod template.

    Args:
        params: the namespace's :data:`PARAMS_NAME` ConfigMap, or None.
        kind: the workload's kind.
        name: the workload's name.
        template: its ``spec.template``.

    Returns:
        True when the template carries ``cbop.dev/config-hash`` and the pins have the
        entry of that digest, or carries none and the pins have the workload's
        ``Kind.name`` entry (0.2.0's policy pinned its pods by their controller).
    """
    entries = _entries(params)
    if not entries:
        return False
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    digest = annotations.get(LEGACY_DIGEST_ANNOTATION)
    if isinstance(digest, str) and digest:
        return pins_key(digest) in entries
    return owner_pins_key(kind, name) in entries


def legacy_named(params: Mapping[str, Any] | None) -> frozenset[str]:
    """Return the revision names any entry of 0.2.0's pins names (none without them)."""
    names: set[str] = set()
    for value in _entries(params).values():
        if isinstance(value, str):
            names.update(parse_pins(value).values())
    return frozenset(names)


def legacy_in_use(
    params: Mapping[str, Any] | None,
    revisions: Iterable[Mapping[str, Any]],
    workloads: Iterable[tuple[str, Mapping[str, Any]]],
) -> bool:
    """Whether anything in a namespace still relies on 0.2.0's pins.

    Args:
        params: the namespace's :data:`PARAMS_NAME` ConfigMap, or None.
        revisions: the namespace's revision ConfigMaps.
        workloads: ``(kind, workload)`` of the namespace's opted-in workloads.

    Returns:
        False without pins entries. Else True while a revision still carries an owner
        reference of a ReplicaSet or ControllerRevision (0.2.0 added one from each
        pinned template in the workloads' history; the garbage collector removes it when
        that entry goes), or an opted-in workload's current template has a pins entry
        and no mapping of its own. The entries of templates that had no digest
        (``Kind.name``) are not followed into the history: see docs/revisions.md.
    """
    if not _entries(params):
        return False
    for revision in revisions:
        refs = (revision.get("metadata") or {}).get("ownerReferences") or ()
        if any(ref.get("kind") in _HISTORY_KINDS for ref in refs):
            return True
    for kind, workload in workloads:
        meta = workload.get("metadata") or {}
        template = (workload.get("spec") or {}).get("template") or {}
        if not mapping_of(workload) and legacy_pinned(
            params, kind, str(meta.get("name") or ""), template
        ):
            return True
    return False
