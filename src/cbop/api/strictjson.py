"""JSON read strictly (RFC 8259), keeping every number as the text it was written as.

The standard library's decoder with hooks: ``NaN``, ``Infinity`` and ``-Infinity``
(which it accepts), numbers beyond a double's range and a key given twice in one object
are refused, naming the member by its JSON Pointer (RFC 6901). Numbers are never
converted: each is kept as its text in an ``orjson.Fragment``, which orjson writes back
as it is, so integers of any size and floats such as ``1.10`` or ``1E5`` stay as written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import orjson

__all__ = ["JSONTextError", "loads"]


class JSONTextError(ValueError):
    """A text is not strict JSON; ``detail`` says what and where."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _Invalid:
    """A JSON value the strict reader refuses, left in place to be found with its path."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _json_number(text: str) -> Any:
    if not math.isfinite(float(text)):
        return _Invalid(f"{text} is beyond the range of a double")
    return orjson.Fragment(text)


def _json_constant(text: str) -> Any:
    return _Invalid(f"{text} is not a JSON value (RFC 8259)")


def _json_object(pairs: list[tuple[str, Any]]) -> Any:
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                return _Invalid(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _pointer_part(key: str | int) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _first_invalid(value: Any, path: str = "") -> tuple[str, _Invalid] | None:
    """Return the JSON Pointer and the first refused value in document order, or None."""
    if isinstance(value, _Invalid):
        return path or "/", value
    items: Iterator[tuple[str | int, Any]]
    if isinstance(value, dict):
        items = iter(value.items())
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _first_invalid(item, f"{path}/{_pointer_part(key)}")
        if found is not None:
            return found
    return None


def loads(text: str) -> Any:
    """Read ``text`` as strict JSON (module docstring); None for blank text.

    Returns:
        dicts (in the order written), lists, strings, bools, None, and
        ``orjson.Fragment`` numbers.

    Raises:
        JSONTextError: not JSON, or JSON that RFC 8259 refuses (module docstring).
    """
    if not text.strip():
        return None
    try:
        value = json.loads(
            text,
            parse_float=_json_number,
            parse_int=orjson.Fragment,
            parse_constant=_json_constant,
            object_pairs_hook=_json_object,
        )
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise JSONTextError(str(err)) from None
    found = _first_invalid(value)
    if found is not None:
        path, bad = found
        raise JSONTextError(f"{bad.why}, at {path}")
    return value
