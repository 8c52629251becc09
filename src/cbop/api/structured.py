"""The values of ``spec.merge`` keys: read, merged and written without changing what was written.

:func:`merge_layers` takes the layers' values of one merge key, in order, and returns the
merged text and the layers that made it; docs/sources.md gives the rules to users. YAML
is read and written by :mod:`cbop.api.roundtrip`, JSON read by :mod:`cbop.api.strictjson`
and written by orjson (indent 2, a final newline). Maps merge deeply by key; a merge
never mutates a parsed document (:func:`_merge_yaml` makes new maps on the path it
changes and shares the rest).

**Parsed once.** :class:`Documents` keeps the parsed documents by format and text, so a
source's value is parsed once per version for all its readers, in an LRU bounded by
estimated bytes; readers of a text being parsed wait for that parse. A YAML document
whose top level is a block mapping without anchors is also written once per top-level
entry (:meth:`Document.fragment`): a merged result reuses the text of every top-level
entry that no later layer changed and writes only those that changed. The concatenation
is what writing the whole document gives (tests/unit/test_sources_merge.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import cachetools
import orjson
from ruamel.yaml.comments import CommentedMap

from cbop.api import roundtrip, strictjson
from cbop.api.roundtrip import DEFAULT_LAYOUT, EMIT_LOCK, Layout, emit, emit_entry
from cbop.api.spec import MergeFormat

__all__ = [
    "DOCUMENTS",
    "Document",
    "Documents",
    "StructuredError",
    "merge_layers",
]

#: Estimated bytes of memory per byte of text of a parsed document, measured with
#: tracemalloc (bench/compose.py): ruamel.yaml's round-trip nodes, their comments and
#: line/column records; the standard library's JSON objects with a Fragment per number.
YAML_BYTES_PER_CHAR: Final = 48
JSON_BYTES_PER_CHAR: Final = 8
#: The default memory budget of :data:`DOCUMENTS`, estimated bytes: room for a parsed
#: YAML value of the largest ConfigMap (1 MiB of text) and the small ones around it.
DEFAULT_BUDGET: Final = 96 * 1024 * 1024
#: The default characters of merge inputs and results kept (:meth:`Documents.merged`).
DEFAULT_MERGED_BUDGET: Final = 16 * 1024 * 1024


#: A kept merge: its output, the layers that made it, and its weight (the characters of
#: its inputs, which its key keeps alive, and of its output).
_Merged = tuple[str, tuple[int, ...], int]


class StructuredError(ValueError):
    """A layer's value of a merge key is not valid, or cannot be written.

    Attributes:
        layer: the index of the layer in the sequence given to :func:`merge_layers`.
        detail: what is wrong and where (a line and column, or a JSON Pointer).
    """

    def __init__(self, detail: str, layer: int = -1) -> None:
        super().__init__(detail)
        self.detail = detail
        self.layer = layer


class Document:
    """One layer's value of a merge key, parsed; shared by every reader, never mutated.

    Attributes:
        fmt: the format it was read as.
        root: the parsed value (a ruamel.yaml round-trip node, a JSON value of dicts,
            lists, strings, bools, None and ``orjson.Fragment`` numbers), None when the
            document holds nothing.
        layout: the YAML indentation it uses (:func:`cbop.api.roundtrip.layout_of`).
        weight: its estimated bytes in memory.
    """

    __slots__ = ("_fragments", "_whole", "fmt", "fragmented", "layout", "root", "weight")

    def __init__(self, fmt: MergeFormat, text: str, root: Any) -> None:
        self.fmt = fmt
        self.root = root
        per_char = YAML_BYTES_PER_CHAR if fmt is MergeFormat.YAML else JSON_BYTES_PER_CHAR
        self.weight = 256 + per_char * len(text)
        self.layout: Layout = DEFAULT_LAYOUT
        self.fragmented = False
        if fmt is MergeFormat.YAML and isinstance(root, CommentedMap):
            self.layout = roundtrip.layout_of(root)
            self.fragmented = (
                not root.fa.flow_style() and not root.tag.value and not roundtrip.has_anchors(root)
            )
        self._fragments: dict[tuple[Any, bool, bool], str] = {}
        self._whole: str | None = None

    def fragment(self, key: Any, first: bool, last: bool) -> str:
        """Return the text of top-level entry ``key`` as the whole document writes it.

        ``first``: the entry opens the document (the comments before the first key come
        with it); ``last``: it ends it (the comments at the end come with it). Only for
        a :attr:`fragmented` document; computed once per ``(key, first, last)``.
        """
        found = self._fragments.get((key, first, last))
        if found is None:
            found = emit_entry(self.root, key, self.root[key], self.layout, first=first, last=last)
            self._fragments[(key, first, last)] = found
        return found

    def whole(self) -> str:
        """Return the document written whole with the pinned settings, computed once."""
        if self._whole is None:
            self._whole = _write(self.root, self.fmt, self.layout, self)
        return self._whole


def _write(value: Any, fmt: MergeFormat, layout: Layout, base: Document | None) -> str:
    """Write a merged ``value``; ``base`` is the document whose root it was made from.

    When ``base`` is fragmented and ``value`` is a map made from its root, the entries
    that are ``base``'s own nodes are taken from :meth:`Document.fragment`.
    """
    if value is None:
        return ""
    if fmt is MergeFormat.JSON:
        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"
        except orjson.JSONEncodeError as err:
            raise StructuredError(f"the merged value cannot be written as JSON ({err})") from None
    with EMIT_LOCK:
        if base is None or not base.fragmented or not isinstance(value, CommentedMap):
            return emit(value, layout)
        root: CommentedMap = base.root
        keys = list(value)
        parts = []
        for i, key in enumerate(keys):
            first, last = i == 0, i == len(keys) - 1
            node = value[key]
            if key in root and root[key] is node:
                parts.append(base.fragment(key, first, last))
            else:
                parts.append(emit_entry(root, key, node, layout, first=first, last=last))
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class _Failed:
    """A text that did not parse, kept so that it is not parsed again."""

    error: StructuredError
    weight: int


class _Pending:
    """A parse under way: the other readers of the same text wait for it."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Document | _Failed | None = None


class Documents:
    """Parsed documents by format and text, each parsed once (module docstring).

    Also the results of merges by their inputs (:meth:`merged`): the reconcile that
    writes a bundle's ConfigMap and the one its watch event brings compose the same
    inputs, and so do the stamps of one ClusterConfigBundle template.

    Args:
        budget: estimated bytes of the documents kept (:attr:`Document.weight`), the
            least recently used out first; a document heavier than the budget is not
            kept.
        merged_budget: characters of the merges kept (their inputs and output).

    Thread-safe. :attr:`parses` counts the texts parsed, :attr:`merges` the merges made
    (for tests and bench/).
    """

    def __init__(
        self, budget: int = DEFAULT_BUDGET, merged_budget: int = DEFAULT_MERGED_BUDGET
    ) -> None:
        self._cache: cachetools.LRUCache[tuple[MergeFormat, str], Document | _Failed] = (
            cachetools.LRUCache(maxsize=budget, getsizeof=lambda d: d.weight)
        )
        self._merged: cachetools.LRUCache[tuple[Any, ...], _Merged] = cachetools.LRUCache(
            maxsize=merged_budget, getsizeof=lambda m: m[2]
        )
        self._pending: dict[tuple[MergeFormat, str], _Pending] = {}
        self._lock = threading.Lock()
        self.parses = 0
        self.merges = 0

    def merged(
        self, key: tuple[Any, ...], merge: Callable[[], tuple[str, tuple[int, ...]]]
    ) -> tuple[str, tuple[int, ...]]:
        """Return the result kept for merge inputs ``key``, or ``merge()``'s, then kept."""
        with self._lock:
            found = self._merged.get(key)
        if found is not None:
            return found[0], found[1]
        text, made_by = merge()
        self.merges += 1  # not under the lock: a count for tests and bench/
        weight = 64 + len(text) + sum(len(part) for part in key if isinstance(part, str))
        with self._lock, contextlib.suppress(ValueError):  # heavier than the budget
            self._merged[key] = (text, made_by, weight)
        return text, made_by

    def parse(self, text: str, fmt: MergeFormat) -> Document:
        """Return ``text`` parsed as ``fmt``; raise :class:`StructuredError` if invalid.

        ``text`` of a ConfigMap value; the same text gives the same (shared) document.
        """
        key = (fmt, text)
        found = self._claim(key)
        if isinstance(found, _Pending):  # another reader is parsing it
            found.done.wait()
            # None: that parse crashed; this reader tries for itself.
            found = found.result or _read(fmt, text)
        elif found is None:
            found = self._parse(key)
        if isinstance(found, _Failed):
            raise StructuredError(found.error.detail)
        return found

    def _claim(self, key: tuple[MergeFormat, str]) -> Document | _Failed | _Pending | None:
        """Return the kept result, or another reader's parse; None: this reader parses."""
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                return found
            pending = self._pending.get(key)
            if pending is not None:
                return pending
            self._pending[key] = _Pending()
            return None

    def _parse(self, key: tuple[MergeFormat, str]) -> Document | _Failed:
        """Parse for every reader of ``key``: keep the result and wake those waiting."""
        result: Document | _Failed | None = None
        try:
            result = _read(*key)
            return result
        finally:
            with self._lock:
                self.parses += 1
                pending = self._pending.pop(key)
                pending.result = result
                if result is not None:
                    with contextlib.suppress(ValueError):  # heavier than the budget
                        self._cache[key] = result
            pending.done.set()


def _read(fmt: MergeFormat, text: str) -> Document | _Failed:
    """Parse ``text`` as ``fmt``: the document, or why it is not valid."""
    parse: Callable[[str], Any] = strictjson.loads if fmt is MergeFormat.JSON else roundtrip.load
    try:
        return Document(fmt, text, parse(text))
    except (strictjson.JSONTextError, roundtrip.YAMLTextError) as err:
        return _Failed(StructuredError(err.detail), 256 + len(text))


#: The documents :func:`merge_layers` uses unless given its own.
DOCUMENTS: Final = Documents()


# ------------------------------------------------------------------------ merging


#: The plain scalars that YAML 1.2's core schema reads as null: a document of only one
#: of them holds nothing, as an empty one.
_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})


def _empty(doc: Document) -> bool:
    """Tell a document that holds nothing: empty, or a lone plain null."""
    root = doc.root
    return root is None or (type(root) is str and root in _NULLS)


def _merge_yaml(base: Any, over: Any) -> Any:
    """Merge ``over`` into ``base``: maps deeply, the rest replaced whole. Never mutates.

    A map that changes is a new map with ``base``'s entries in their order (the changed
    ones merged), then ``over``'s new keys in theirs, and ``base``'s comments, style and
    anchor; everything else is shared with the inputs.
    """
    if not (isinstance(base, CommentedMap) and isinstance(over, CommentedMap)):
        return over
    out = CommentedMap()
    for key, value in base.items():
        # A fresh key each time: CommentedMap turns a new plain string into the quoted
        # kind of the value it replaces, which must not happen here.
        out[key] = _merge_yaml(value, over[key]) if key in over else value
    for key, value in over.items():
        if key not in base:
            out[key] = value
    base.copy_attributes(out)
    return out


def _merge_json(base: Any, over: Any) -> Any:
    """As :func:`_merge_yaml` for JSON values (plain dicts)."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge_json(base[key], value) if key in base else value
    return out


def merge_layers(
    values: Sequence[str], fmt: MergeFormat, documents: Documents = DOCUMENTS
) -> tuple[str, list[int]]:
    """Merge the layers' values of one merge key and write the result.

    Args:
        values: each layer's value, in layer order (at least one).
        fmt: how to read and write them.
        documents: where parsed documents are kept.

    Returns:
        ``(text, made_by)``: the merged value as written, and the indices of the layers
        whose value is part of it (a value that is not a map, merged onto anything,
        starts the list again; an empty document adds nothing).

    Raises:
        StructuredError: a value is not valid (its :attr:`~StructuredError.layer` set),
            or the result cannot be written (``layer`` -1).
    """
    key = (fmt, *values)
    text, made_by = documents.merged(key, lambda: _merge_layers(values, fmt, documents))
    return text, list(made_by)


def _merge_layers(
    values: Sequence[str], fmt: MergeFormat, documents: Documents
) -> tuple[str, tuple[int, ...]]:
    merge = _merge_json if fmt is MergeFormat.JSON else _merge_yaml
    value: Any = None
    base: Document | None = None
    made_by: list[int] = []
    for index, text in enumerate(values):
        try:
            doc = documents.parse(text, fmt)
        except StructuredError as err:
            raise StructuredError(err.detail, index) from None
        if made_by and _empty(doc):
            continue  # an empty document adds nothing
        if made_by and isinstance(value, dict) and isinstance(doc.root, dict):
            value = merge(value, doc.root)
            made_by.append(index)
        else:
            value, base = doc.root, doc
            made_by = [index]
    if base is not None and value is base.root:
        return base.whole(), tuple(made_by)
    layout = base.layout if base is not None else DEFAULT_LAYOUT
    return _write(value, fmt, layout, base), tuple(made_by)
