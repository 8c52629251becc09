"""Ordering resourceVersions, as Kubernetes 1.35 allows (KEP-5504, GA in 1.35).

Until 1.35 a ``metadata.resourceVersion`` was opaque to clients: equal or not. KEP-5504
("Comparable Resource Version") made it comparable for objects of the same resource: a
resourceVersion the API server hands out is a decimal unsigned integer without leading
zeros, and a greater one is newer. client-go exposes the rule as
``k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion``; this module is
cbop's own implementation of it, for callers that must tell whether an informer cache
already holds their own last write.

A value outside that form (empty, leading zeros, signs, other characters: an API server
or aggregated API that does not follow the rule) cannot be ordered, and the function
says so with None instead of guessing.

Pure functions on strings; no dependency on the rest of cbop.
"""

from __future__ import annotations

__all__ = ["compare_resource_versions", "is_older"]


def _well_formed(rv: str) -> bool:
    return rv.isascii() and rv.isdigit() and (rv == "0" or not rv.startswith("0"))


def compare_resource_versions(a: str, b: str) -> int | None:
    """Order two resourceVersions of objects of the same resource.

    Args:
        a: a ``metadata.resourceVersion`` (e.g. ``"1234"``).
        b: another one, of the same resource.

    Returns:
        -1 if ``a`` is older than ``b``, 0 if they are equal, 1 if ``a`` is newer; None
        when either is not a decimal unsigned integer without leading zeros (not
        comparable: the caller must not assume an order). Never raises.
    """
    if not (_well_formed(a) and _well_formed(b)):
        return None
    # Without leading zeros, the longer number is the greater; equal lengths compare
    # as strings (no int() of arbitrarily long input).
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def is_older(a: str, b: str) -> bool:
    """Return whether resourceVersion ``a`` is known to be older than ``b``.

    False when they are equal, when ``a`` is newer, or when either cannot be ordered
    (see :func:`compare_resource_versions`).
    """
    return compare_resource_versions(a, b) == -1
