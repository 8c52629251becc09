"""YAML read and written by ruamel.yaml in round-trip mode, with cbop's pinned settings.

What :mod:`cbop.api.structured` merges is read here and written here, so that nothing
a layer wrote changes unless a later layer overrides it:

* the YAML 1.2 *failsafe* schema (:class:`_FailsafeResolver`): maps, lists and
  strings, no implicit types, so a scalar is never turned into a bool, a number or a
  date and written back; explicitly typed scalars keep tag and text
  (:class:`_FailsafeConstructor`); quoting, block styles, comments, key order, anchors
  and aliases are kept by the round trip;
* the output settings are pinned (:func:`_yaml`): no line wrapping, and the indentation
  the first layer uses (:func:`layout_of`), measured from the round trip's line and
  column records.

Writing is serialised by :data:`EMIT_LOCK`: ruamel.yaml's emitter marks the comment
tokens it has written (and its representer clears the marks), and parsed documents'
tokens are shared by every merge that reuses them.
"""

from __future__ import annotations

import io
import threading
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.anchor import Anchor
from ruamel.yaml.comments import Comment, CommentedBase, CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.resolver import VersionedResolver

__all__ = [
    "DEFAULT_LAYOUT",
    "EMIT_LOCK",
    "Layout",
    "YAMLTextError",
    "emit",
    "emit_entry",
    "has_anchors",
    "layout_of",
    "load",
]

#: The emitter's line width: never fold a long scalar onto new lines.
_WIDTH: Final = 1 << 30
#: ruamel.yaml's indentation when the first layer shows none: maps by 2, list items at
#: their parent's column.
DEFAULT_LAYOUT: Final = (2, 2, 0)
#: How the emitter ends a document that would otherwise be open-ended.
_DOCUMENT_END: Final = "\n...\n"

#: ``(mapping, sequence, offset)`` as ``YAML.indent`` takes them.
Layout = tuple[int, int, int]


class YAMLTextError(ValueError):
    """A text is not one valid YAML document; ``detail`` says what and where."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


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


def _yaml(layout: Layout = DEFAULT_LAYOUT) -> YAML:
    """Return a ruamel.yaml round-trip instance with cbop's pinned settings.

    An instance holds the state of its reader and emitter: one per parse, one per layout
    for writing (:func:`emit`).
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


def load(text: str) -> Any:
    """Read ``text`` as YAML with the failsafe schema; None for an empty document.

    Raises:
        YAMLTextError: not one valid YAML document (a key given twice included).
    """
    try:
        return _yaml().load(text)
    except MarkedYAMLError as err:
        where = ""
        if err.problem_mark is not None:
            where = f", line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}"
        problem = " ".join(str(err.problem or err.context or type(err).__name__).split())
        raise YAMLTextError(f"{problem}{where}") from None
    except YAMLError as err:
        raise YAMLTextError(" ".join(str(err).split()) or type(err).__name__) from None


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


def layout_of(root: Any) -> Layout:
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
    default_mapping, default_sequence, default_offset = DEFAULT_LAYOUT
    sequence, offset = seq if seq is not None else (default_sequence, default_offset)
    if offset < 0 or sequence < offset + 2:  # a dash needs its own column and a space
        sequence, offset = default_sequence, default_offset
    return mapping or default_mapping, sequence, offset


def _anchor(node: Any) -> Any:
    """Return the anchor ``node`` was read with, or None (adding no empty one)."""
    found = getattr(node, Anchor.attrib, None)
    return None if found is None else found.value


def has_anchors(root: Any) -> bool:
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


#: One lock for every write of YAML (module docstring).
EMIT_LOCK = threading.Lock()
#: One writer per layout, used under :data:`EMIT_LOCK`: making a ``YAML`` instance
#: looks for plug-ins on the file system each time.
_EMITTERS: dict[Layout, YAML] = {}


def emit(value: Any, layout: Layout) -> str:
    """Write ``value`` with the pinned settings; the caller holds :data:`EMIT_LOCK`."""
    emitter = _EMITTERS.get(layout)
    if emitter is None:
        emitter = _EMITTERS[layout] = _yaml(layout)
    out = io.StringIO()
    emitter.dump(value, out)
    return out.getvalue()


def emit_entry(
    root: CommentedMap, key: Any, value: Any, layout: Layout, *, first: bool, last: bool
) -> str:
    """Write one top-level entry of ``root`` with ``value``, as the whole document would.

    The entry keeps the comments ``root`` holds for its key; the document's opening
    comments come with the first entry and its closing ones with the last. The caller
    holds :data:`EMIT_LOCK`.
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
    text = emit(single, layout)
    if not last and text.endswith(_DOCUMENT_END):
        # The emitter ends a document whose last scalar keeps its trailing line breaks
        # (a "|+" block) with "...": the whole document has it only at its end.
        text = text[: -len(_DOCUMENT_END) + 1]
    return text
