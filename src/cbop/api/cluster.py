"""The ClusterConfigBundle API (``cbop.dev/v1beta1``, cluster-scoped): names, selector, template.

A ClusterConfigBundle keeps one ConfigMap in every namespace its ``namespaceSelector``
selects, through a ConfigBundle stamped into each of them (docs/cluster-bundles.md).
This module owns what users and the controller share: the kind's names, the label a
stamped ConfigBundle carries, the reasons its status speaks in, the selector's meaning
(:class:`NamespaceSelector`, as apimachinery's ``metav1.LabelSelectorAsSelector``) and
the stamped spec (:func:`template_of`). Pure functions on parsed JSON; no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api.target import Kind
from cbop.api.types import GROUP

__all__ = [
    "CLUSTER_KIND",
    "CLUSTER_PLURAL",
    "LABEL_CLUSTER_BUNDLE",
    "MAX_FAILED_NAMESPACES",
    "ClusterReason",
    "NamespaceSelector",
    "Requirement",
    "SelectorError",
    "is_cluster_bundle_reference",
    "parse_selector",
    "target_key",
    "template_of",
]

CLUSTER_KIND: Final = "ClusterConfigBundle"
CLUSTER_PLURAL: Final = "clusterconfigbundles"
#: Label of every stamped ConfigBundle: the name of the ClusterConfigBundle it serves.
LABEL_CLUSTER_BUNDLE: Final = "cbop.dev/cluster-bundle"
#: At most this many entries in ``status.failedNamespaces``; the rest are only counted.
MAX_FAILED_NAMESPACES: Final = 20

_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class ClusterReason(enum.StrEnum):
    """Reasons of a ClusterConfigBundle's ``Ready`` condition and failed namespaces."""

    ALL_NAMESPACES_READY = "AllNamespacesReady"
    NAMESPACES_FAILING = "NamespacesFailing"
    NAMESPACES_PENDING = "NamespacesPending"
    INVALID_SELECTOR = "InvalidSelector"
    #: A ConfigBundle of the stamp's name that this ClusterConfigBundle does not control.
    CONFIGBUNDLE_CONFLICT = "ConfigBundleConflict"
    #: An older ClusterConfigBundle keeps a ConfigMap of the same name in the namespace.
    CONFIGMAP_NAME_CONFLICT = "ConfigMapNameConflict"
    #: The API server refused the stamp (an admission policy, a quota: 403 or 422).
    REFUSED = "Refused"


class SelectorError(ValueError):
    """A ``namespaceSelector`` that selects nothing meaningful (unknown operator, ...)."""


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key`` ``operator`` ``values``."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet it (as apimachinery's ``labels.Requirement.Matches``).

        ``NotIn`` holds for a label that is absent, as upstream.
        """
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class NamespaceSelector:
    """A parsed ``metav1.LabelSelector``: every label and every requirement must hold.

    The empty selector (no labels, no requirements) selects everything, as
    ``LabelSelectorAsSelector`` gives ``labels.Everything()`` for ``{}``.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with ``labels`` (None: none) is selected."""
        found = labels or {}
        if any(found.get(key) != value for key, value in self.match_labels):
            return False
        return all(r.matches(found) for r in self.requirements)

    def matches_object(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (its ``metadata.labels``) is selected."""
        return self.matches((obj.get("metadata") or {}).get("labels"))


def parse_selector(selector: Any) -> NamespaceSelector:
    """Parse a ``namespaceSelector`` (a LabelSelector as JSON).

    Args:
        selector: ``{"matchLabels": {...}, "matchExpressions": [...]}``; ``{}`` selects
            every namespace.

    Raises:
        SelectorError: not a mapping, a non-string label, an unknown operator, ``In`` or
            ``NotIn`` without values, ``Exists`` or ``DoesNotExist`` with values (the
            CRD refuses these at admission; the parser refuses them again).
    """
    if not isinstance(selector, Mapping):
        raise SelectorError("namespaceSelector must be an object")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise SelectorError("namespaceSelector.matchLabels must map strings to strings")
    requirements = []
    for i, expr in enumerate(selector.get("matchExpressions") or ()):
        where = f"namespaceSelector.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise SelectorError(f"{where}: needs a key")
        operator = expr.get("operator")
        if operator not in _OPERATORS:
            raise SelectorError(f"{where}: unknown operator {operator!r}")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{where}: values must be strings")
        if (operator in ("In", "NotIn")) != bool(values):
            raise SelectorError(f"{where}: In and NotIn need values; Exists and DoesNotExist none")
        requirements.append(Requirement(expr["key"], operator, frozenset(values)))
    return NamespaceSelector(tuple(sorted(labels.items())), tuple(requirements))


def template_of(cluster_bundle: Mapping[str, Any]) -> dict[str, Any]:
    """Return the spec of the ConfigBundle stamped for ``cluster_bundle``.

    A copy of ``spec.template`` with the target's name defaulted to the
    ClusterConfigBundle's name (as a ConfigBundle defaults it to its own name, which
    the stamp shares): ``configMapName`` for a ConfigMap target, ``target.name`` for a
    Secret target (which may not have a ``configMapName``). One level deep, and the
    ``target`` map copied when it is changed: the caller must not mutate nested values.
    """
    spec = cluster_bundle.get("spec") or {}
    template = dict(spec.get("template") or {})
    name = str(cluster_bundle["metadata"]["name"])
    target = template.get("target")
    if isinstance(target, Mapping) and target.get("kind") == Kind.SECRET.value:
        if not target.get("name"):
            template["target"] = {**target, "name": name}
    else:
        template.setdefault("configMapName", name)
    return template


def target_key(cluster_bundle: Mapping[str, Any]) -> tuple[str, str]:
    """Return ``(kind, name)`` of the object each stamp of ``cluster_bundle`` keeps.

    Two ClusterConfigBundles whose keys are equal keep the same object in a namespace
    they both select (the older one wins it). ``("ConfigMap", name)`` or
    ``("Secret", name)``; an invalid template gives its raw values, which match no
    valid one.
    """
    template = template_of(cluster_bundle)
    target = template.get("target")
    if isinstance(target, Mapping) and target.get("kind") == Kind.SECRET.value:
        return Kind.SECRET.value, str(target.get("name"))
    return Kind.CONFIGMAP.value, str(template.get("configMapName"))


def is_cluster_bundle_reference(ref: Mapping[str, Any]) -> bool:
    """Whether an owner reference points at a ClusterConfigBundle (group, kind; any version)."""
    group = str(ref.get("apiVersion", "")).partition("/")[0]
    return group == GROUP and ref.get("kind") == CLUSTER_KIND
