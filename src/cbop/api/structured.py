"""The values of ``spec.merge`` keys: read, merged and written without changing what was written.

:func:`merge_layers` takes the layers' values of one merge key, in order, and returns the
merged text and the layers that made it. docs/sources.md gives the rules to users; here
is how they are carried out:

* **YAML** is read by ruamel.yaml in round-trip mode with the YAML 1.2 *failsafe*
  schema (:class:`_FailsafeResolver`): mappings, sequences and strings, no implicit
  types. A scalar is never turned into a bool, a number or a date and back, so each is
  written as it was read, its quoting and block style included; comments, key order,
  anchors and aliases are kept by the round trip. Maps merge deeply by key (keys compare
  as the strings they are, quotes removed); the merge never mutates a parsed document
  (:func:`_merge_yaml` copies the maps on the path it changes and shares the rest).
  The output settings are pinned (:func:`_dumper`): ruamel.yaml's emitter, no line
  wrapping, and the indentation that the first layer of the result uses
  (:func:`_layout`).
* **JSON** is read strictly by the standard library's decoder, with hooks: ``NaN``,
  ``Infinity``, numbers beyond a double's range and duplicate keys are refused, naming
  the member by its JSON Pointer (RFC 6901). Numbers are never converted: each is kept as
  its text in an ``orjson.Fragment``, so integers of any size and floats such as
  ``1.10`` are written as they were. orjson writes the result, indented by 2, with a
  final newline.

**Parsed once.** :class:`Documents` keeps the parsed documents by format and text, so a
source's value is parsed once per version for all its readers (the text of a source
version is one string object in the informer cache), a size-bounded LRU of estimated
bytes; concurrent readers of a text being parsed wait for that parse. A YAML document
whose top level is a block mapping without anchors is also written once per top-level
entry (:meth:`Document.fragment`): a merged result reuses the text of every top-level
entry that no later layer changed, and writes only the entries that changed. The
concatenation is what writing the whole document gives (tests prove it on the scalar
table and comments of every position).

Writing is serialised by one lock: ruamel.yaml's emitter marks the comment tokens it has
written (and its representer clears the marks), and the parsed documents' tokens are
shared by every merge that reuses them.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import cachetools
import orjson
from ruamel.yaml import YAML
from ruamel.yaml.anchor import Anchor
from ruamel.yaml.comments import Comment, CommentedBase, CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.resolver import VersionedResolver

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
#: The emitter's line width: never fold a long scalar onto new lines.
_WIDTH: Final = 1 << 30
#: ruamel.yaml's indentation when the first layer shows none: maps by 2, list items at
#: their parent's column.
_DEFAULT_LAYOUT: Final = (2, 2, 0)

#: How the emitter ends a document that would otherwise be open-ended.
_DOCUMENT_END: Final = "\n...\n"

#: ``(mapping, sequence, offset)`` as ``YAML.indent`` takes them.
Layout = tuple[int, int, int]


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


class _FailsafeResolver(VersionedResolver):
    """ruamel.yaml's resolver with no implicit types: the YAML 1.2 failsafe schema.

    Every untagged scalar is a string (``tag:yaml.org,2002:str``), every mapping and
    sequence its default tag. Used for loading and for writing, so a plain scalar is
    written plain again: the emitter quotes a string only when it would not read back
    as the same string.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode:
            return self.DEFAULT_SCALAR_TAG
        if kind is SequenceNode:
            return self.DEFAULT_SEQUENCE_TAG
        if kind is MappingNode:
            return self.DEFAULT_MAPPING_TAG
        return super().resolve(kind, value, implicit)


class _FailsafeConstructor(RoundTripConstructor):
    """ruamel.yaml's round-trip constructor, keeping explicitly typed scalars as written.

    A scalar tagged ``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!timestamp`` or
    ``!!binary`` becomes a ``TaggedScalar`` (its tag, text and style), as an unknown tag
    does, instead of a value written back in ruamel.yaml's own form.
    """


for _tag in ("null", "bool", "int", "float", "timestamp", "binary"):
    _FailsafeConstructor.add_constructor(
        f"tag:yaml.org,2002:{_tag}", RoundTripConstructor.construct_unknown
    )


class _Representer(RoundTripRepresenter):
    """ruamel.yaml's round-trip representer, leaving the comments it reads as they were.

    Its ``represent_mapping`` appends a map's closing comments to the list of the map's
    opening comments that it was given, not to a copy, so every write of a parsed map
    would grow that list; here it is given a copy.
    """

    def represent_mapping(self, tag: Any, mapping: Any, flow_style: Any = None) -> Any:
        comment: Comment | None = getattr(mapping, Comment.attrib, None)
        opening = None if comment is None else comment.comment
        if comment is None or opening is None:
            return super().represent_mapping(tag, mapping, flow_style)
        comment.comment = list(opening)
        try:
            return super().represent_mapping(tag, mapping, flow_style)
        finally:
            comment.comment = opening


def _yaml(layout: Layout = _DEFAULT_LAYOUT) -> YAML:
    """Return a ruamel.yaml round-trip instance with cbop's pinned settings.

    One per parse or write: an instance holds the state of its reader and emitter.
    """
    yaml = YAML(typ="rt", pure=True)
    yaml.Resolver = _FailsafeResolver
    yaml.Constructor = _FailsafeConstructor
    yaml.Representer = _Representer
    yaml.preserve_quotes = True
    yaml.allow_duplicate_keys = False
    yaml.width = _WIDTH
    mapping, sequence, offset = layout
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


# ------------------------------------------------------------------------ parsing


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


def _parse_json(text: str) -> Any:
    """Read ``text`` as strict JSON (module docstring); None for blank text."""
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
        raise StructuredError(str(err)) from None
    found = _first_invalid(value)
    if found is not None:
        path, bad = found
        raise StructuredError(f"{bad.why}, at {path}")
    return value


def _parse_yaml(text: str) -> Any:
    """Read ``text`` as YAML with the failsafe schema; None for an empty document."""
    try:
        return _yaml().load(text)
    except MarkedYAMLError as err:
        where = ""
        if err.problem_mark is not None:
            where = f", line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}"
        problem = " ".join(str(err.problem or err.context or type(err).__name__).split())
        raise StructuredError(f"{problem}{where}") from None
    except YAMLError as err:
        raise StructuredError(" ".join(str(err).split()) or type(err).__name__) from None


# ------------------------------------------------------------------------ layout


def _is_block(node: Any) -> bool:
    return isinstance(node, CommentedBase) and not node.fa.flow_style()


def _plain_node(node: Any) -> bool:
    """Tell a block map or list without anchor or tag (its column is its first line's)."""
    return _is_block(node) and _anchor(node) is None and not node.tag.value


def _key_column(node: CommentedMap) -> int | None:
    """Return the column of ``node``'s first key as read, or None."""
    for key in node:
        found = node.lc.key(key) if node.lc.data else None
        return None if found is None else int(found[1])
    return None


def _layout(root: Any) -> Layout:
    """Return the indentation ``root``'s text uses, as ``(mapping, sequence, offset)``.

    Measured at the first block mapping nested in a block mapping (the columns of their
    keys) and the first block list nested in a block mapping (the columns of its dash and
    of its first item), from the line and column records of the round trip, breadth
    first; what the text does not show is ruamel.yaml's default (2, 2, 0).
    """
    mapping: int | None = None
    seq: tuple[int, int] | None = None
    level = [root] if isinstance(root, CommentedMap) and _plain_node(root) else []
    while level and (mapping is None or seq is None):
        below: list[CommentedMap] = []
        for parent in level:
            column = _key_column(parent)
            for child in parent.values():
                if column is None or not _plain_node(child):
                    continue
                if isinstance(child, CommentedMap):
                    inner = _key_column(child)
                    if mapping is None and inner is not None and inner > column:
                        mapping = inner - column
                    below.append(child)
                elif isinstance(child, CommentedSeq) and seq is None and child.lc.data:
                    seq = (int(child.lc.item(0)[1]) - column, int(child.lc.col) - column)
        level = below
    default_mapping, default_sequence, default_offset = _DEFAULT_LAYOUT
    sequence, offset = seq if seq is not None else (default_sequence, default_offset)
    if offset < 0 or sequence < offset + 2:  # a dash needs its own column and a space
        sequence, offset = default_sequence, default_offset
    return mapping or default_mapping, sequence, offset


def _anchor(node: Any) -> Any:
    """Return the anchor ``node`` was read with, or None (adding no empty one)."""
    found = getattr(node, Anchor.attrib, None)
    return None if found is None else found.value


def _has_anchors(root: Any) -> bool:
    """Whether any node of ``root`` carries an anchor or is reached twice (an alias)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if _anchor(node) is not None:
            return True
        if isinstance(node, CommentedMap | CommentedSeq):
            if id(node) in seen:
                return True
            seen.add(id(node))
            if isinstance(node, CommentedMap):
                stack.extend(node.values())
                stack.extend(k for k in node if isinstance(k, CommentedBase))
            else:
                stack.extend(node)
    return False


# ------------------------------------------------------------------------ documents

#: One lock for every write of YAML (module docstring).
_EMIT_LOCK = threading.Lock()


def _emit(value: Any, layout: Layout) -> str:
    """Write ``value`` with the pinned settings; the caller holds :data:`_EMIT_LOCK`."""
    out = io.StringIO()
    _yaml(layout).dump(value, out)
    return out.getvalue()


class Document:
    """One layer's value of a merge key, parsed; shared by every reader, never mutated.

    Attributes:
        fmt: the format it was read as.
        root: the parsed value (a ruamel.yaml round-trip node, a JSON value of dicts,
            lists, strings, bools, None and ``orjson.Fragment`` numbers), None when the
            document holds nothing.
        layout: the YAML indentation it uses (:func:`_layout`).
        weight: its estimated bytes in memory.
    """

    __slots__ = ("_fragments", "_whole", "fmt", "fragmented", "layout", "root", "weight")

    def __init__(self, fmt: MergeFormat, text: str, root: Any) -> None:
        self.fmt = fmt
        self.root = root
        per_char = YAML_BYTES_PER_CHAR if fmt is MergeFormat.YAML else JSON_BYTES_PER_CHAR
        self.weight = 256 + per_char * len(text)
        self.layout: Layout = _DEFAULT_LAYOUT
        self.fragmented = False
        if fmt is MergeFormat.YAML and isinstance(root, CommentedMap):
            self.layout = _layout(root)
            self.fragmented = _is_block(root) and not root.tag.value and not _has_anchors(root)
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
            found = _entry(self.root, key, self.root[key], self.layout, first=first, last=last)
            self._fragments[(key, first, last)] = found
        return found

    def whole(self) -> str:
        """Return the document written whole with the pinned settings, computed once."""
        if self._whole is None:
            self._whole = _write(self.root, self.fmt, self.layout, self)
        return self._whole


def _entry(
    root: CommentedMap, key: Any, value: Any, layout: Layout, *, first: bool, last: bool
) -> str:
    """Write one top-level entry of ``root`` with ``value``, as the whole document would.

    The entry keeps the comments ``root`` holds for its key; the document's opening
    comments come with the first entry and its closing ones with the last. The caller
    holds :data:`_EMIT_LOCK`.
    """
    single = CommentedMap()
    single[key] = value
    comments = root.ca
    if key in comments.items:
        single.ca.items[key] = comments.items[key]
    if first:
        single.ca.comment = comments.comment
    if last and comments.end:
        if single.ca.comment is None:
            single.ca.comment = [None, None]
        single.ca.end = comments.end
    text = _emit(single, layout)
    if not last and text.endswith(_DOCUMENT_END):
        # The emitter ends a document whose last scalar keeps its trailing line breaks
        # (a "|+" block) with "...": the whole document has it only at its end.
        text = text[: -len(_DOCUMENT_END) + 1]
    return text


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
    with _EMIT_LOCK:
        if base is None or not base.fragmented or not isinstance(value, CommentedMap):
            return _emit(value, layout)
        root: CommentedMap = base.root
        keys = list(value)
        parts = []
        for i, key in enumerate(keys):
            first, last = i == 0, i == len(keys) - 1
            node = value[key]
            if key in root and root[key] is node:
                parts.append(base.fragment(key, first, last))
            else:
                parts.append(_entry(root, key, node, layout, first=first, last=last))
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

    Args:
        budget: estimated bytes of the documents kept (:attr:`Document.weight`), the
            least recently used out first; a document heavier than the budget is not
            kept.

    Thread-safe. :attr:`parses` counts the texts parsed (for tests and bench/).
    """

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self._cache: cachetools.LRUCache[tuple[MergeFormat, str], Document | _Failed] = (
            cachetools.LRUCache(maxsize=budget, getsizeof=lambda d: d.weight)
        )
        self._pending: dict[tuple[MergeFormat, str], _Pending] = {}
        self._lock = threading.Lock()
        self.parses = 0

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
    parse: Callable[[str], Any] = _parse_json if fmt is MergeFormat.JSON else _parse_yaml
    try:
        return Document(fmt, text, parse(text))
    except StructuredError as err:
        return _Failed(err, 256 + len(text))


#: The documents :func:`merge_layers` uses unless given its own.
DOCUMENTS: Final = Documents()


# ------------------------------------------------------------------------ merging


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
    merge = _merge_json if fmt is MergeFormat.JSON else _merge_yaml
    value: Any = None
    base: Document | None = None
    made_by: list[int] = []
    for index, text in enumerate(values):
        try:
            doc = documents.parse(text, fmt)
        except StructuredError as err:
            raise StructuredError(err.detail, index) from None
        if doc.root is None and made_by:
            continue  # an empty document adds nothing
        if made_by and isinstance(value, dict) and isinstance(doc.root, dict):
            value = merge(value, doc.root)
            made_by.append(index)
        else:
            value, base = doc.root, doc
            made_by = [index]
    if base is not None and value is base.root:
        return base.whole(), made_by
    layout = base.layout if base is not None else _DEFAULT_LAYOUT
    return _write(value, fmt, layout, base), made_by
