"""Label and field selectors as the API server parses and matches them.

This module owns :class:`LabelSelector` (the string syntax of
apimachinery's ``labels.Parse``: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a)``, ``k``, ``!k``) and :class:`FieldSelector` (``metadata.name`` and
``metadata.namespace`` with ``=``, ``==`` and ``!=``, the fields every resource
supports). Used by :class:`cbop_testing.fakekube.ObjectTracker` for list and watch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldSelector", "LabelSelector", "Requirement"]

_SET_RE = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector.

    Attributes:
        key: the label key.
        op: ``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!exists``.
        values: the values compared with (empty for the existence operators).
    """

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet this requirement (as apimachinery's ``Requirement.Matches``)."""
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        return not has


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: all requirements must hold (an empty one matches all)."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse a selector string.

        Raises:
            ValueError: a requirement it cannot parse (the server answers 400).
        """
        reqs: list[Requirement] = []
        for part in _split_top(text or ""):
            m = _SET_RE.match(part)
            if m:
                values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
                reqs.append(Requirement(m.group(1), m.group(2), values))
            elif "!=" in part:
                key, value = part.split("!=", 1)
                reqs.append(Requirement(key.strip(), "!=", frozenset([value.strip()])))
            elif "=" in part:
                key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
                reqs.append(Requirement(key.strip(), "=", frozenset([value.strip()])))
            elif part.startswith("!"):
                reqs.append(Requirement(part[1:].strip(), "!exists"))
            elif re.fullmatch(r"[^\s!=(),]+", part):
                reqs.append(Requirement(part, "exists"))
            else:
                raise ValueError(f"unable to parse requirement: {part!r}")
        return cls(tuple(reqs))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's ``metadata.labels`` meet every requirement."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector over ``metadata.name`` and ``metadata.namespace``."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        """Parse ``metadata.name=x,metadata.namespace!=y``.

        Raises:
            ValueError: an unsupported field or operator (the server answers 400:
                ``field label not supported``).
        """
        terms: list[tuple[str, bool, str]] = []
        for part in _split_top(text or ""):
            if "!=" in part:
                field, value = part.split("!=", 1)
                equal = False
            elif "=" in part:
                field, value = part.split("==", 1) if "==" in part else part.split("=", 1)
                equal = True
            else:
                raise ValueError(f"invalid field selector: {part!r}")
            field = field.strip()
            if field not in ("metadata.name", "metadata.namespace"):
                raise ValueError(f'field label not supported: "{field}"')
            terms.append((field, equal, value.strip()))
        return cls(tuple(terms))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's name and namespace meet every term."""
        meta = obj.get("metadata") or {}
        for field, equal, value in self.terms:
            have = meta.get(field.split(".", 1)[1]) or ""
            if (have == value) != equal:
                return False
        return True
