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
    "REVISION_HASH_DIGITS",
    "RevisionsSpec",
    "parse_revisions",
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
