"""Incremental decoding of a Kubernetes list response, one item at a time.

This module owns :func:`decode_list`: the byte chunks of a LIST answer become the dict
``json.loads`` would return, except that each element of ``items`` goes to a callback
as soon as it is complete, and the callback's result is kept. Why: a list of ten
thousand objects is tens of megabytes of JSON; decoding it while it streams in overlaps
decoding with the transfer, lets a transform (dropping ``managedFields``) shrink each
object before the next, and never holds more than one chunk of raw text. Runs of
complete items are decoded by ``orjson``, whose cache of key strings shares the keys
every object repeats; items decoded by the standard ``json`` scanner get theirs interned
(bench/listdecode.py measures both).
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import orjson

__all__ = ["ItemHook", "StreamDecodeError", "decode_list", "intern_keys", "paused_gc"]

#: ``hook(item) -> item to keep`` (may return the same dict, changed in place).
ItemHook = Callable[[dict[str, Any]], dict[str, Any]]

_WS: Final = re.compile(r"[ \t\n\r]*")
#: Bytes read per refill of the decoding window.
_FILL: Final = 256 * 1024
#: The opening of an item up to its first key that is not ``apiVersion`` or ``kind``,
#: with the values of those two, e.g. ``{"metadata":`` for a ConfigMap and
#: ``{"apiVersion":"cbop.dev/v1beta1","kind":"ConfigBundle","metadata":`` for a custom
#: resource. The values make the boundary marker specific: nested objects such as
#: ``managedFields`` entries and owner references also begin with ``{"apiVersion":``,
#: and a marker that matched them would make most batch attempts fail.
_ITEM_START: Final = re.compile(
    r'\{[ \t\n\r]*(?:"(?:apiVersion|kind)"[ \t\n\r]*:[ \t\n\r]*"(?:[^"\\]|\\.)*"'
    r'[ \t\n\r]*,[ \t\n\r]*){0,2}"(?:[^"\\]|\\.)*"[ \t\n\r]*:'
)
#: Characters the window may hold past the read position with no item boundary in it
#: before batching stops and the rest of the items are decoded one at a time. It bounds
#: the window (and the rescans of it) when the marker never recurs, say in an indented
#: body; a single item this large is rare, and is decoded correctly either way.
_MAX_WINDOW: Final = 1024 * 1024
#: Failed batch attempts after which the rest of a list is decoded item by item.
_MAX_BATCH_MISSES: Final = 3
_DECODER: Final = json.JSONDecoder()
#: Decodes one batch of items (a JSON array as ``str``); ``bench.listdecode`` swaps in
#: ``json.loads`` as its baseline.
_load_batch: Callable[[str], Any] = orjson.loads


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_reenable = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Suspend the cyclic garbage collector while decoding a large document.

    Decoding 10,000 objects allocates ~200,000 dicts and lists; each 700 container
    allocations trigger a collection, and the older generations get rescanned as the
    heap grows, which costs more than the decoding itself. Reference counting still
    frees everything that is not in a cycle meanwhile. Nested and concurrent pauses are
    counted; the collector is re-enabled when the last one ends, and only if it was
    enabled when the first began.
    """
    global _gc_pausers, _gc_reenable  # noqa: PLW0603 - process-wide collector state
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_reenable = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_reenable:
                gc.enable()


class StreamDecodeError(ValueError):
    """The byte stream is not a JSON object of the expected shape (or it was cut short)."""


def intern_keys(value: Any, depth: int = 3) -> Any:
    """Return ``value`` with the keys of its dicts interned, ``depth`` dict levels deep.

    Dicts are rebuilt; lists are updated in place and do not count as a level. Three
    levels cover ``item -> metadata -> labels``/``annotations`` and ``data`` keys, the
    keys objects of one kind repeat; deeper structures are left as decoded.
    """
    if isinstance(value, dict):
        intern = sys.intern
        if depth <= 1:
            return {intern(k): v for k, v in value.items()}
        return {intern(k): intern_keys(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict | list):
                value[i] = intern_keys(v, depth)
    return value


class _Reader:
    """A text window over the byte chunks, refilled on demand."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False

    def fill(self) -> bool:
        """Append at least ``_FILL`` more bytes of input, dropping consumed text.

        Returns ``False`` at the end of input. Reading in large steps matters: a chunked
        response arrives in pieces of ~2 KiB, and every refill re-scans the partial item
        at the end of the window.
        """
        if self.eof:
            return False
        pieces: list[bytes] = []
        size = 0
        while size < _FILL:
            chunk = next(self._chunks, None)
            if chunk is None:
                self.eof = True
                break
            pieces.append(chunk)
            size += len(chunk)
        text = self._utf8.decode(b"".join(pieces), final=self.eof)
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        return bool(text) or not self.eof

    def peek(self) -> str:
        """Skip whitespace and return the next character (``""`` at the end of input)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise StreamDecodeError(f"expected {char!r} at offset {self.pos}, found {found!r}")
        self.pos += 1

    def batch(self, marker: str) -> tuple[list[Any] | None, bool]:
        """Decode every complete item ahead that ends before a ``marker`` (``},{"key":``).

        Returns ``(items, tried)``: ``items`` is ``None`` when no candidate boundary
        parsed (``tried`` tells whether there was one). On success the window is left
        at the ``,`` after the last decoded item.
        """
        cut = self.buf.rfind(marker, self.pos)
        tried = False
        for _ in range(2):  # the last candidate, then the one before it
            if cut <= self.pos:
                break
            tried = True
            try:
                values = _load_batch("[" + self.buf[self.pos : cut + 1] + "]")
            except ValueError:  # orjson's and json's JSONDecodeError are ValueErrors
                cut = self.buf.rfind(marker, self.pos, cut)
                continue
            if not isinstance(values, list):
                break
            self.pos = cut + 1
            return values, True
        return None, tried

    def value(self) -> Any:
        """Decode the next complete JSON value, reading more input as needed."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.fill():
                    continue
                raise StreamDecodeError(f"invalid or truncated JSON: {exc}") from exc
            # A number (or literal) that ends exactly at the end of the window may
            # continue in the next chunk; objects, arrays and strings cannot.
            if (
                end == len(self.buf)
                and not self.eof
                and not isinstance(value, dict | list | str)
                and self.fill()
            ):
                continue
            self.pos = end
            return value


def decode_list(chunks: Iterable[bytes], hook: ItemHook | None = None) -> dict[str, Any]:
    """Decode a JSON object from byte chunks, passing each ``items`` element through ``hook``.

    Args:
        chunks: the response body in pieces of any size (split anywhere, even inside a
            UTF-8 sequence).
        hook: called with each decoded element of the top-level ``items`` array, in
            order; its return value is stored in ``items``. ``None`` keeps elements as
            decoded.

    Returns:
        The decoded object, as ``json.loads`` would return it (the keys of ``items``
        elements shared as the module docstring says), with one exception: in items
        decoded in a batch, an integer outside ``[-2**63, 2**64 - 1]`` is a ``float``
        (``orjson``'s rule) where ``json.loads`` gives an ``int``. The API server holds
        every such number as a float64 (apimachinery decodes JSON integers that do not
        fit an int64 as float64, and writes them back as digit strings such as
        ``18446744073709552000``, or with an exponent from 1e21), so the ``float`` is
        the value it stores.

    Raises:
        StreamDecodeError: malformed or truncated input, or not a JSON object.
    """
    reader = _Reader(chunks)
    reader.expect("{")
    result: dict[str, Any] = {}
    if reader.peek() == "}":
        reader.pos += 1
        return _finish(reader, result)
    while True:
        key = reader.value()
        if not isinstance(key, str):
            raise StreamDecodeError("object key is not a string")
        reader.expect(":")
        if key == "items" and reader.peek() == "[":
            reader.pos += 1
            result[key] = _decode_items(reader, hook)
        else:
            result[key] = reader.value()
        sep = reader.peek()
        reader.pos += 1
        if sep == "}":
            return _finish(reader, result)
        if sep != ",":
            raise StreamDecodeError(f"expected ',' or '}}' after member {key!r}, found {sep!r}")


def _decode_items(reader: _Reader, hook: ItemHook | None) -> list[Any]:
    """Decode the ``items`` array (the reader is just past its ``[``).

    Items are decoded in batches where possible: once the first item shows how items
    begin (e.g. ``{"metadata":``), every complete item in the window up to the last
    ``},{"metadata":`` is decoded by one ``orjson.loads`` of ``"[" + segment + "]"``.
    That is exact, never a guess: a segment that starts at an item and parses as an
    array of values can only be split at the true item boundaries, and a candidate
    boundary inside a string or a nested object makes the parse fail, in which case
    the items are decoded one by one. Batches are decoded by ``orjson``, whose key
    cache shares most key strings across items and batches (see the module docstring).
    """
    items: list[Any] = []
    if reader.peek() == "]":
        reader.pos += 1
        return items
    marker: str | None = None
    misses = 0
    while True:
        batch: list[Any] | None = None
        if marker is not None and misses < _MAX_BATCH_MISSES:
            batch, tried = reader.batch(marker)
            if tried and batch is None:
                misses += 1
            elif not tried:
                if len(reader.buf) - reader.pos < _MAX_WINDOW and reader.fill():
                    # No item boundary ahead yet: the window ends inside this item.
                    # Read on instead of decoding (and failing on) the partial item.
                    continue
                # A whole window without a boundary: the items are not laid out as
                # the first one is (or one item is very large). Stop looking.
                misses = _MAX_BATCH_MISSES
        if batch:
            for item in batch:
                items.append(hook(item) if hook is not None and isinstance(item, dict) else item)
        else:
            if marker is None:
                match = _ITEM_START.match(reader.buf, reader.pos)
                if match is not None:
                    marker = "}," + match.group(0)
            item = reader.value()
            if hook is not None and isinstance(item, dict):
                item = hook(item)
            items.append(intern_keys(item))
        sep = reader.peek()
        reader.pos += 1
        if sep == "]":
            return items
        if sep != ",":
            raise StreamDecodeError(f"expected ',' or ']' in items, found {sep!r}")


def _finish(reader: _Reader, result: dict[str, Any]) -> dict[str, Any]:
    if reader.peek() != "":
        raise StreamDecodeError(f"trailing data at offset {reader.pos}")
    return result
