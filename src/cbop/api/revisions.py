"""The revisions part of a ConfigBundle's spec: typed view, names and limits.

``spec.revisions`` asks cbop to keep, besides the ConfigMap of ``configMapName``, one
immutable ConfigMap per content version, named ``<configMapName>-<the first 10 hex
digits of the content hash>`` (docs/revisions.md). This module owns the parse of that
field (:func:`parse_revisions`), the name of a revision (:func:`revision_name`), the
name limit it implies and the label that marks a revision. Pure; no I/O.

The CRD checks ``keep``'s bounds and an explicit ``configMapName``'s length at
admission; the parse checks them again (a CRD installed by an older cbop), and is the
only check of a bundle whose ConfigMap name is its own name, which a CEL rule on
``spec`` cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api.spec import SpecError

__all__ = [
    "DEFAULT_KEEP",
    "LABEL_REVISION_OF",
    "MAX_KEEP",
    "MAX_REVISIONED_NAME",
    "MIN_KEEP",
    "OWNER_KINDS",
    "PARAMS_NAME",
    "PINS_FROZEN",
    "PINS_KEY_DIGITS",
    "PIN_POLICY_NAME",
    "REVISION_HASH_DIGITS",
    "RevisionsSpec",
    "is_frozen",
    "owner_pins_key",
    "parse_pins",
    "parse_revisions",
    "pins_key",
    "pins_value",
    "revision_name",
]

#: Hex digits of the content hash in a revision's name.
REVISION_HASH_DIGITS: Final = 10
#: The longest ConfigMap name the API server accepts (a DNS subdomain).
_MAX_NAME: Final = 253
#: The longest ``configMapName`` with revisions on: the suffix is ``-`` and 10 hex digits.
MAX_REVISIONED_NAME: Final = _MAX_NAME - 1 - REVISION_HASH_DIGITS
#: ``spec.revisions.keep``: default and bounds (the CRD's too).
DEFAULT_KEEP: Final = 3
MIN_KEEP: Final = 1
MAX_KEEP: Final = 20
#: Label on every revision ConfigMap: the (label-safe) name of the bundle it is a
#: revision of. The plain ConfigMap never carries it.
LABEL_REVISION_OF: Final = "cbop.dev/revision-of"


@dataclass(frozen=True, slots=True)
class RevisionsSpec:
    """A validated ``spec.revisions``.

    Attributes:
        enabled: keep a revision ConfigMap per content version.
        keep: the newest revisions kept even when nothing references them (1..20).
    """

    enabled: bool = False
    keep: int = DEFAULT_KEEP


#: What a bundle without ``spec.revisions`` means: revisions off.
REVISIONS_OFF: Final = RevisionsSpec()


def parse_revisions(bundle: Mapping[str, Any]) -> RevisionsSpec:
    """Return the validated ``spec.revisions`` of ``bundle`` (off when absent).

    Args:
        bundle: the whole ConfigBundle as a dict (``metadata.name`` and ``spec`` are read).

    Raises:
        SpecError: ``revisions`` is not an object, ``enabled`` not a boolean, ``keep``
            not an integer in 1..20, or, with revisions on, the ConfigMap name
            (``configMapName``, else the bundle's name) longer than
            :data:`MAX_REVISIONED_NAME` characters; the message names the field and the
            limit.
    """
    spec = bundle.get("spec") or {}
    raw = spec.get("revisions") if isinstance(spec, Mapping) else None
    if raw is None:
        return REVISIONS_OFF
    if not isinstance(raw, Mapping):
        raise SpecError("spec.revisions must be an object")
    enabled = raw.get("enabled", False)
    if enabled is None:
        enabled = False
    if not isinstance(enabled, bool):
        raise SpecError("spec.revisions.enabled must be true or false")
    keep = raw.get("keep", DEFAULT_KEEP)
    if keep is None:
        keep = DEFAULT_KEEP
    if isinstance(keep, bool) or not isinstance(keep, int) or not MIN_KEEP <= keep <= MAX_KEEP:
        raise SpecError(
            f"spec.revisions.keep must be an integer from {MIN_KEEP} to {MAX_KEEP}, not {keep!r}"
        )
    if enabled:
        name = spec.get("configMapName") or bundle.get("metadata", {}).get("name", "")
        field = "spec.configMapName" if spec.get("configMapName") else "the bundle's name"
        if isinstance(name, str) and len(name) > MAX_REVISIONED_NAME:
            raise SpecError(
                f"{field} has {len(name)} characters; with spec.revisions.enabled the "
                f"ConfigMap name may have at most {MAX_REVISIONED_NAME} (a revision adds "
                f"{_MAX_NAME - MAX_REVISIONED_NAME} characters, and a ConfigMap name has at "
                f"most {_MAX_NAME}); set a shorter spec.configMapName"
            )
    return RevisionsSpec(enabled=enabled, keep=keep)


def revision_name(config_map_name: str, content_hash: str) -> str:
    """Return the name of the revision of ``config_map_name`` holding ``content_hash``.

    Args:
        config_map_name: the plain ConfigMap's name (at most
            :data:`MAX_REVISIONED_NAME` characters for a valid name).
        content_hash: ``sha256:<hex>`` (:func:`cbop.api.content_hash`).

    Returns:
        ``<config_map_name>-<the first 10 hex digits>``.

    Raises:
        ValueError: ``content_hash`` is not ``sha256:`` and at least 10 hex digits.
    """
    algorithm, _, digest = content_hash.partition(":")
    head = digest[:REVISION_HASH_DIGITS]
    if algorithm != "sha256" or len(head) != REVISION_HASH_DIGITS or not _is_hex(head):
        raise ValueError(f"not a sha256 content hash: {content_hash!r}")
    return f"{config_map_name}-{head}"


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


#: The per-namespace ConfigMap mapping template digests to revisions (the pins), which
#: the rollout writes before a template annotation and the history and the admission
#: policy read (docs/revisions.md).
PARAMS_NAME: Final = "cbop-revisions"
#: The name of the MutatingAdmissionPolicy that points new pods at their revisions, and
#: of its binding (manifests/revisions/pin_revisions.yaml, the chart's
#: ``revisions.pinPods``).
PIN_POLICY_NAME: Final = "cbop-pin-revisions"
#: Hex digits of a template digest in a pin's key (as the rollout's baseline label).
PINS_KEY_DIGITS: Final = 40


def pins_key(digest: str) -> str:
    """Return the pins ConfigMap's key for the template digest ``digest``.

    Args:
        digest: the pod template annotation ``cbop.dev/config-hash``, ``sha256:<hex>``.

    Returns:
        The first :data:`PINS_KEY_DIGITS` hex digits (a valid ConfigMap key), or ``""``
        when ``digest`` is not ``sha256:`` and that many hex digits.
    """
    algorithm, _, hex_digits = digest.partition(":")
    head = hex_digits[:PINS_KEY_DIGITS]
    if algorithm != "sha256" or len(head) != PINS_KEY_DIGITS or not _is_hex(head):
        return ""
    return head


def pins_value(pins: Mapping[str, str]) -> str:
    """Return the pins ConfigMap value for ``pins`` (plain name -> revision name).

    One ``plain=revision`` line per pair, sorted by the plain name: the same pairs
    always give the same value, so rewriting an entry that is there writes nothing new.
    """
    return "".join(f"{plain}={revision}\n" for plain, revision in sorted(pins.items()))


def parse_pins(value: str) -> dict[str, str]:
    """Return the plain name -> revision name pairs of one pins ConfigMap value.

    The inverse of :func:`pins_value`; lines without ``=`` or with an empty side are
    skipped (an entry edited by hand pins what it still names correctly).
    """
    out = {}
    for line in value.splitlines():
        plain, sep, revision = line.strip().partition("=")
        if sep and plain and revision:
            out[plain] = revision
    return out


#: The workload kinds whose never-rolled pods are pinned by their workload's name.
OWNER_KINDS: Final = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
#: The line that marks a workload's entry frozen (its first rollout happened): a line
#: without ``=``, so neither :func:`parse_pins` nor the policy's CEL reads it as a pin.
PINS_FROZEN: Final = "#frozen"
#: The longest key a ConfigMap's data may have.
_MAX_KEY: Final = 253


def owner_pins_key(kind: str, name: str) -> str:
    """Return the pins key of a workload's pods whose template carries no digest yet.

    A workload opted in but never rolled has no ``cbop.dev/config-hash`` on its pod
    template, so its pods are found by their controller instead: the admission policy
    builds the same key from the pod's controller owner reference (a ReplicaSet
    ``<deployment>-<pod-template-hash>`` gives its Deployment's name; a StatefulSet's or
    DaemonSet's pods name their workload). docs/revisions.md.

    Args:
        kind: ``Deployment``, ``StatefulSet`` or ``DaemonSet``.
        name: the workload's name.

    Returns:
        ``<kind>.<name>`` (a valid ConfigMap key: a name is a DNS subdomain), or ``""``
        for another kind or a key longer than 253 characters.
    """
    key = f"{kind}.{name}"
    if kind not in OWNER_KINDS or not name or len(key) > _MAX_KEY:
        return ""
    return key


def is_frozen(value: str) -> bool:
    """Whether a pins value carries the :data:`PINS_FROZEN` line."""
    return any(line.strip() == PINS_FROZEN for line in value.splitlines())
