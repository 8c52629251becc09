"""What a bundle keeps: a ConfigMap (the default) or a Secret, and the rules of a Secret's type.

This module owns ``spec.target`` (docs/secrets.md): :class:`Kind`, the two kinds of
object a bundle writes and reads; :class:`Target`, the kind, name and Secret type of the
object a bundle keeps; :func:`parse_target`, its validation (the CRD's CEL rules say the
same at admission); :func:`target_of`, the same read tolerantly from a bundle whose spec
may be invalid (status, release and indexes still name the object); and
:func:`secret_type_error`, the keys the API server requires in a Secret of a built-in
type, so a bundle says so before a write is refused. Pure functions on parsed JSON.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "DEFAULT_SECRET_TYPE",
    "REFUSED_SECRET_TYPES",
    "REQUIRED_SECRET_KEYS",
    "Kind",
    "Target",
    "TargetError",
    "parse_target",
    "secret_type_error",
    "target_of",
]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_MAX_NAME = 253


class Kind(enum.StrEnum):
    """The two kinds of object a bundle writes (its target) and reads (its sources)."""

    CONFIGMAP = "ConfigMap"
    SECRET = "Secret"


#: The type of a Secret target whose ``spec.target.type`` is not given.
DEFAULT_SECRET_TYPE: Final = "Opaque"
#: Secret types cbop never makes: the token controller fills service account tokens.
REFUSED_SECRET_TYPES: Final = frozenset({"kubernetes.io/service-account-token"})
#: Secret type -> the keys the API server requires (``ValidateSecret`` of
#: kubernetes/pkg/apis/core/validation): each inner tuple is satisfied by any one of
#: its keys.
REQUIRED_SECRET_KEYS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = MappingProxyType(
    {
        "kubernetes.io/tls": (("tls.crt",), ("tls.key",)),
        "kubernetes.io/ssh-auth": (("ssh-privatekey",),),
        "kubernetes.io/dockerconfigjson": ((".dockerconfigjson",),),
        "kubernetes.io/dockercfg": ((".dockercfg",),),
        "kubernetes.io/basic-auth": (("username", "password"),),
    }
)


class TargetError(ValueError):
    """``spec.target`` (or a field that depends on it) is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class Target:
    """The object a bundle keeps in its namespace.

    Attributes:
        kind: :attr:`Kind.CONFIGMAP` or :attr:`Kind.SECRET`.
        name: the object's name (a DNS subdomain).
        type: the Secret's type (``Opaque`` by default) for a Secret target, None for a
            ConfigMap.
    """

    kind: Kind
    name: str
    type: str | None = None

    @property
    def is_secret(self) -> bool:
        """Whether the target is a Secret."""
        return self.kind is Kind.SECRET

    def describe(self) -> str:
        """Return ``ConfigMap <name>`` or ``Secret <name>``, for messages."""
        return f"{self.kind.value} {self.name}"


#: ``spec.target.kind`` -> its :class:`Kind` (a dict lookup: ``Kind(value)`` costs more).
_KINDS: Final[Mapping[str, Kind]] = MappingProxyType({k.value: k for k in Kind})


def _raw_target(raw_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    raw = raw_spec.get("target")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TargetError(f"spec.target must be an object, not {type(raw).__name__}")
    return raw


def _kind(raw: Mapping[str, Any]) -> Kind:
    value = raw.get("kind") or Kind.CONFIGMAP.value
    kind = _KINDS.get(value) if isinstance(value, str) else None
    if kind is None:
        raise TargetError(f"spec.target.kind {value!r} must be 'ConfigMap' or 'Secret'")
    return kind


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= _MAX_NAME and bool(_DNS1123_SUBDOMAIN.match(name))


def target_of(bundle: Mapping[str, Any]) -> Target | None:
    """Return the target ``bundle`` names, read tolerantly, or None when it names none.

    The kind (``ConfigMap`` unless ``spec.target.kind`` is ``Secret``), the name
    (``spec.target.name`` for a Secret, ``spec.configMapName`` for a ConfigMap, else
    ``metadata.name``) and the Secret's type, without checking the rest of the spec:
    status, the Orphan release and the indexes name the object even while the spec is
    invalid. None when the kind is unknown or the name is not a valid object name.
    """
    raw_spec = bundle.get("spec") or {}
    if not isinstance(raw_spec, Mapping):
        return None
    try:
        raw = _raw_target(raw_spec)
        kind = _kind(raw)
    except TargetError:
        return None
    own = (bundle.get("metadata") or {}).get("name", "")
    if kind is Kind.SECRET:
        name = raw.get("name") or own
        kind_type = raw.get("type") or DEFAULT_SECRET_TYPE
        if not isinstance(name, str) or not isinstance(kind_type, str):
            return None
        return _named(kind, name, kind_type)
    name = raw_spec.get("configMapName") or own
    return _named(kind, name, None) if isinstance(name, str) else None


@functools.lru_cache(maxsize=4096)
def _named(kind: Kind, name: str, secret_type: str | None) -> Target | None:
    """Return the :class:`Target` of ``kind``, ``name`` and ``secret_type`` (None: bad name).

    A pure function of its arguments, so one (immutable) Target per name is kept and
    shared: every reconcile asks for its bundle's target several times.
    """
    return Target(kind, name, secret_type) if _valid_name(name) else None


def parse_target(raw_spec: Mapping[str, Any], bundle_name: str) -> Target:
    """Validate ``spec.target`` (and ``configMapName`` against it); return the :class:`Target`.

    Args:
        raw_spec: the bundle's ``spec`` as a dict.
        bundle_name: the bundle's ``metadata.name``, the default name.

    Raises:
        TargetError: an unknown kind; ``name`` or ``type`` with a ConfigMap target;
            ``configMapName`` with a Secret target; an invalid name; an empty or refused
            type. The message names the field.
    """
    raw = _raw_target(raw_spec)
    kind = _kind(raw)
    if kind is Kind.CONFIGMAP:
        for field in ("name", "type"):
            if raw.get(field) is not None:
                raise TargetError(
                    f"spec.target.{field} is for a Secret target; a ConfigMap target is "
                    "named by spec.configMapName"
                )
        name = raw_spec.get("configMapName") or bundle_name
        if not _valid_name(name):
            raise TargetError(
                f"spec.configMapName {str(name)[:60]!r} is not a valid ConfigMap name "
                "(lowercase DNS subdomain, at most 253 characters)"
            )
        return Target(kind, name)
    if raw_spec.get("configMapName") is not None:
        raise TargetError(
            "spec.configMapName names a ConfigMap; a Secret target is named by spec.target.name"
        )
    name = raw.get("name") or bundle_name
    if not _valid_name(name):
        raise TargetError(
            f"spec.target.name {str(name)[:60]!r} is not a valid Secret name "
            "(lowercase DNS subdomain, at most 253 characters)"
        )
    secret_type = raw.get("type")
    if secret_type is None:
        secret_type = DEFAULT_SECRET_TYPE
    if not isinstance(secret_type, str) or not secret_type or len(secret_type) > _MAX_NAME:
        raise TargetError("spec.target.type must be a Secret type of 1 to 253 characters")
    if secret_type in REFUSED_SECRET_TYPES:
        raise TargetError(
            f"spec.target.type {secret_type} is refused: the token controller fills those, not cbop"
        )
    return Target(kind, name, secret_type)


def secret_type_error(secret_type: str, keys: Iterable[str]) -> str | None:
    """Return why a Secret of ``secret_type`` may not hold just ``keys``, or None when it may.

    The API server refuses a Secret of a built-in type without the keys that type
    requires (:data:`REQUIRED_SECRET_KEYS`); other types require nothing. The message
    names the type and the missing keys, never a value.
    """
    required = REQUIRED_SECRET_KEYS.get(secret_type, ())
    present = set(keys)
    missing = [" or ".join(group) for group in required if not present.intersection(group)]
    if not missing:
        return None
    return (
        f"a Secret of type {secret_type} must hold {' and '.join(missing)}, and the "
        f"sources give no {' and no '.join(missing)}"
    )
