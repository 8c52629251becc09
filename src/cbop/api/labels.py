"""Label values made from object names: the one rule every label cbop writes follows.

Object names may be DNS subdomains of up to 253 characters, but a label value holds at
most 63 (apimachinery's ``IsValidLabelValue``). Every label whose value cbop derives
from a name (``cbop.dev/bundle``, ``cbop.dev/cluster-bundle``, ``cbop.dev/shard-group``)
goes through :func:`label_value`, and so does every selector or comparison that looks
for such a value, so a name the API server accepts never makes a write it refuses.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["MAX_LABEL_VALUE", "label_value"]

#: apimachinery's limit on a label value (``validation.LabelValueMaxLength``).
MAX_LABEL_VALUE: Final = 63
#: Characters of a long name kept before its hash.
_KEPT: Final = 54
#: Hex digits of the name's SHA-256 appended to a cut name.
_DIGITS: Final = 8


def label_value(name: str) -> str:
    """Return ``name`` as a valid label value: itself up to 63 characters, else cut and hashed.

    A longer name is cut to its first 54 characters, stripped of trailing ``.``, ``-``
    and ``_`` (a label value ends with an alphanumeric), followed by ``-`` and the
    first 8 hex digits of the SHA-256 of the whole name: at most 63 characters, stable
    across releases (the ``cbop.dev/bundle`` labels cbop has always written), and
    distinct for names that share their first 54 characters.

    Args:
        name: an object name (a DNS subdomain: lower-case alphanumerics, ``-``, ``.``).

    Returns:
        The label value (``str``, 1 to 63 characters for a non-empty name).
    """
    if len(name) <= MAX_LABEL_VALUE:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_DIGITS]
    return f"{name[:_KEPT].rstrip('.-_')}-{digest}"
