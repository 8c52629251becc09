"""The values of merge keys (cbop.api.structured): nothing a layer wrote changes unless overridden.

The inputs are the YAML 1.1 type rules that rewrite values (the "Norway problem":
``NO`` read as false, ``1.10`` as 1.1, ``12:30`` as 750, ``0755`` as 493, the key ``on``
as true, timestamps rewritten, comments dropped), JSON that is not JSON (``NaN``,
``Infinity``, ``1e400``, duplicate keys) and a large source read by many bundles.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from ruamel.yaml.comments import CommentedBase, CommentedMap, CommentedSeq

from cbop.api import MergeFormat
from cbop.api.roundtrip import emit
from cbop.api.structured import (
    DOCUMENTS,
    Document,
    Documents,
    StructuredError,
    _merge_yaml,
    merge_layers,
)

YAML = MergeFormat.YAML
JSON = MergeFormat.JSON


def merged(*values: str, fmt: MergeFormat = YAML, documents: Documents | None = None) -> str:
    return merge_layers(values, fmt, documents or Documents())[0]


# ------------------------------------------------------------------ the scalar table

#: Each row: text that a base layer holds. A later layer overrides ``level`` only, so
#: the result must be the base text with that one line changed, byte for byte.
KEPT = [
    pytest.param("country: NO\nanswer: yes\nflag: off\nother: n\n", id="yaml11-booleans"),
    pytest.param("on: x\noff: y\ny: 1\nn: 2\nyes: z\n", id="on-off-y-n-keys"),
    pytest.param("window: 12:30\nangle: 190:20:30.15\n", id="sexagesimal"),
    pytest.param("mode: 0755\nnew: 0o755\nhex: 0x1F\nbin: 0b1010\n", id="octal-hex-binary"),
    pytest.param("version: 1.10\nratio: 0.50\nexp: 1.5E3\ndot: .5\n", id="floats-trailing-zeros"),
    pytest.param("inf: .inf\nnan: .NaN\nneg: -.Inf\nzero: -0.0\n", id="special-floats"),
    pytest.param("big: 123456789012345678901234567890\nplus: +12\nunder: 1_000\n", id="integers"),
    pytest.param(
        "stamp: 2001-12-14t21:59:43.10-05:00\nday: 2002-12-14\nspaced: 2001-12-14 21:59:43.10 -5\n",
        id="timestamps",
    ),
    pytest.param("a: ~\nb: null\nc: Null\nd:\n", id="nulls"),
    pytest.param("t: True\nu: TRUE\nf: false\n", id="yaml12-booleans"),
    pytest.param(
        "single: 'NO'\ndouble: \"1.10\"\nescaped: \"tab\\tnew\\nline\"\nquote: 'it''s'\n",
        id="quoted-strings",
    ),
    pytest.param(
        "literal: |\n  line one\n   indented\nfolded: >\n  folded\n  text\n"
        "strip: |-\n  no newline\nkeep: |+\n  kept\n\nindicator: |2\n    two more\n",
        id="multi-line-strings",
    ),
    pytest.param(
        "defaults: &defaults\n  retries: 3\n  timeout: 1.50\nprod: *defaults\n"
        "staging:\n  <<: *defaults\n  retries: 1\n",
        id="anchors-aliases-merge-keys",
    ),
    pytest.param("list: [a, 'b', 1.0]\nmap: {x: NO, y: 0755}\n", id="flow-collections"),
    pytest.param("int: !!int 5\nfloat: !!float 1.10\ncustom: !thing x\n", id="explicit-tags"),
    pytest.param(
        "# the on-call team relies on this\nkey: value  # why\n\n# before list\n"
        "list:\n- a  # first\n- b\n# the end\n",
        id="comments",
    ),
    pytest.param(
        "outer:\n    inner:\n        deep: 1\nitems:\n  - name: a\n    value: 1\n",
        id="indentation",
    ),
    pytest.param("zeta: 1\nalpha: 2\nmid: 3\n", id="key-order"),
    pytest.param(
        "long: " + " ".join(["word"] * 60) + "\n" + "unicode: héllo ✓\n", id="long-and-unicode"
    ),
]


@pytest.mark.parametrize("text", KEPT)
def test_every_value_no_layer_overrides_is_written_as_the_base_wrote_it(text: str) -> None:
    base = "level: info\n" + text
    assert merged(base, "level: debug\n") == "level: debug\n" + text
    assert merged(base) == base  # a single layer is written as it is


def test_the_field_report_as_written() -> None:
    """The report: every leaf but the overridden one is kept, and the comment too."""
    base = (
        "enabled: NO\nversion: 1.10\ntime: 12:30\nmode: 0755\ncountry: NO\non: x\n"
        "stamp: 2001-12-14t21:59:43.10-05:00\n# the on-call team relies on this\n"
    )
    assert merged(base, "level: debug\n") == base + "level: debug\n"
    assert merged(base, "mode: 0644\n") == base.replace("mode: 0755", "mode: 0644")


@pytest.mark.parametrize(
    ("override", "written"),
    [
        ("level: debug\n", "level: debug"),
        ("level: 'debug'\n", "level: 'debug'"),
        ('level: "1.10"\n', 'level: "1.10"'),
        ("level: 0644\n", "level: 0644"),
        ("level: NO  # on the override's line\n", "level: NO"),
        ("level: [a, b]\n", "level: [a, b]"),
        ("level:\n  nested: yes\n", "level:"),
    ],
    ids=["plain", "quoted", "quoted-float", "octal", "comment", "flow-list", "map"],
)
def test_an_overridden_leaf_is_written_as_the_later_layer_wrote_it(
    override: str, written: str
) -> None:
    """The later layer's scalar as written; the comment on the line stays the base's.

    The comment keeps its column (15) while the new value leaves room for it.
    """
    nested = "  nested: yes\n" if override.endswith("yes\n") else ""
    expected = f"{written.ljust(15)}# was info\n{nested}after: 1\n"
    assert merged("level: 'info'  # was info\nafter: 1\n", override) == expected


def test_keys_keep_the_order_written_and_new_keys_follow_in_their_layers_order() -> None:
    base = "zeta: 1\nnested:\n  b: 1\n  a: 2\nalpha: 3\n"
    over = "new2: x\nnested:\n  c: 3\n  a: 9\nnew1: y\n"
    assert merged(base, over) == (
        "zeta: 1\nnested:\n  b: 1\n  a: 9\n  c: 3\nalpha: 3\nnew2: x\nnew1: y\n"
    )


def test_an_override_inside_an_anchored_map_leaves_its_aliases_as_they_were() -> None:
    """The merge is by path: the alias elsewhere still says what the base said there."""
    base = "defaults: &d\n  retries: 3\nprod: *d\n"
    assert merged(base, "other: 1\n") == base + "other: 1\n"
    got = merged(base, "defaults:\n  retries: 5\n")
    assert got == "defaults:\n  retries: 5\nprod:\n  retries: 3\n"


def test_lists_and_scalars_replace_whole_and_an_empty_layer_adds_nothing() -> None:
    base = "list:\n- a\n- b\nmap:\n  k: v\n"
    assert merged(base, "list: [c]\n") == "list: [c]\nmap:\n  k: v\n"
    assert merged(base, "map: plain\n") == "list:\n- a\n- b\nmap: plain\n"
    assert merged(base, "") == base
    assert merged(base, "# only a comment\n") == base
    assert merged(base, "~\n") == base
    assert merged(base, "null\n") == base
    assert merged(base, "'null'\n") == "'null'\n"  # a string, quoted: replaces
    assert merge_layers([base, "just text\n"], YAML, Documents()) == ("just text\n...\n", [1])
    assert merge_layers(["", "a: 1\n"], YAML, Documents()) == ("a: 1\n", [1])
    assert merge_layers(["a: 1\n", "", "b: 2\n"], YAML, Documents())[1] == [0, 2]


# ------------------------------------------------------------------ stable bytes


#: The field report merged under ``level: debug``, as cbop writes it: if ruamel.yaml or
#: cbop's settings ever write it differently, every merged ConfigMap would be rewritten
#: by an upgrade. Pin the library's range in pyproject.toml and change this only with a
#: CHANGELOG entry that says so.
GOLDEN_BASE = (
    "# platform defaults\n"
    "enabled: NO\n"
    "version: 1.10   # not 1.1\n"
    "time: 12:30\n"
    "mode: 0755\n"
    "on: x\n"
    "stamp: 2001-12-14t21:59:43.10-05:00\n"
    "servers:\n"
    "  - host: 'a.example'\n"
    "    port: 08080\n"
    "text: |\n"
    "  two\n"
    "  lines\n"
    "# the on-call team relies on this\n"
)
GOLDEN = (
    "# platform defaults\n"
    "enabled: NO\n"
    "version: 1.10   # not 1.1\n"
    "time: 12:30\n"
    "mode: 0644\n"
    "on: x\n"
    "stamp: 2001-12-14t21:59:43.10-05:00\n"
    "servers:\n"
    "  - host: 'a.example'\n"
    "    port: 08080\n"
    "text: |\n"
    "  two\n"
    "  lines\n"
    "# the on-call team relies on this\n"
    "level: debug\n"
)


def test_the_same_inputs_give_the_same_bytes_pinned() -> None:
    outputs = {merged(GOLDEN_BASE, "mode: 0644\nlevel: debug\n") for _ in range(3)}
    shared = DOCUMENTS
    outputs.add(merge_layers([GOLDEN_BASE, "mode: 0644\nlevel: debug\n"], YAML, shared)[0])
    outputs.add(merge_layers([GOLDEN_BASE, "mode: 0644\nlevel: debug\n"], YAML, shared)[0])
    assert outputs == {GOLDEN}


CORPUS = [
    *(p.values[0] for p in KEPT),
    "# head\n\n# more head\na: 1 # c1\n\n# between\nb:\n  x: 1\n  # inner end\nc: [1, 2]\n"
    "d: |\n  text\n\n# before e\ne: 'q'   # eol e\n# last\n",
    "k: |+\n  keep\n\nz: 1\n",
    "a:\n  x: |+\n    keep\n\n  y: 2\nb: >+\n  f\n\nc: |+\n  end\n\n",
    "flow: {a: 1, b: [x, y]}\n# tail\n",
    "only: 1\n",
]


def _tree(text: str) -> Any:
    return Documents().parse(text, YAML).root


@pytest.mark.parametrize("text", CORPUS)
def test_entries_written_one_by_one_are_the_whole_document_written(text: str) -> None:
    """The reuse of untouched top-level entries gives what writing the whole would."""
    doc = Document(YAML, text, _tree(text))
    for over in ("", "zz: 1\n", "a: changed\n", "b:\n  y: 2\n"):
        value = doc.root if not over else _merge_yaml(doc.root, _tree(over))
        got = merge_layers([text, over], YAML, Documents())[0] if over else doc.whole()
        assert got == emit(value, doc.layout), (text, over)


# ------------------------------------------------------------------ never mutated


def _fingerprint(node: Any, seen: dict[int, int] | None = None) -> Any:
    """Everything a write reads of a parsed node: values, types, order, comments, styles."""
    seen = {} if seen is None else seen
    if id(node) in seen:
        return ("alias", seen[id(node)])
    seen[id(node)] = len(seen)
    extra: tuple[Any, ...] = (type(node).__name__,)
    if isinstance(node, CommentedBase):
        extra += (repr(node.ca), node.fa.flow_style(), node.anchor.value, node.tag.value)
    if isinstance(node, CommentedMap):
        return (*extra, [(k, _fingerprint(v, seen)) for k, v in node.items()])
    if isinstance(node, CommentedSeq):
        return (*extra, [_fingerprint(v, seen) for v in node])
    return (*extra, str(node), getattr(node, "style", None))


def test_a_cached_document_is_never_mutated_by_a_merge() -> None:
    documents = Documents()
    base = GOLDEN_BASE + "defaults: &d\n  a: 1\n  deep:\n    b: 'q'\nalias: *d\n"
    doc = documents.parse(base, YAML)
    before = _fingerprint(doc.root)
    overlays = [
        "mode: 0600\n",
        "servers: [x]\n",
        "defaults:\n  deep:\n    b: r\n    c: 1\n  new: 2\n",
        "alias:\n  a: 2\n",
        "text: plain\nlevel: 1\n",
    ]
    first = [merge_layers([base, o], YAML, documents)[0] for o in overlays]
    assert _fingerprint(doc.root) == before
    # ... and each result is what it is whatever was merged before it.
    assert [merge_layers([base, o], YAML, documents)[0] for o in reversed(overlays)] == list(
        reversed(first)
    )
    assert [merge_layers([base, o], YAML, Documents())[0] for o in overlays] == first
    assert documents.parse(base, YAML) is doc
    assert merged(base) == base


# ------------------------------------------------------------------ invalid YAML


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: [1, 2\n", "line 2"),
        ("a: 1\na: 2\n", 'duplicate key "a"'),
        ("a: 1\n'a': 2\n", 'duplicate key "a"'),
        ("---\na: 1\n---\nb: 2\n", "another document"),
        ("a: *nowhere\n", "undefined alias 'nowhere'"),
        ("a:\tb\n", "'\\t'"),
    ],
    ids=["unclosed", "duplicate", "duplicate-quoted", "two-documents", "alias", "tab"],
)
def test_invalid_yaml_names_the_layer_and_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(StructuredError) as err:
        merge_layers(["ok: 1\n", text], YAML, Documents())
    assert err.value.layer == 1
    assert words in err.value.detail


# ------------------------------------------------------------------ strict JSON


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"timeoutSeconds": 30, "ratio": NaN}', "NaN is not a JSON value (RFC 8259), at /ratio"),
        ('{"a": {"b": [1, Infinity]}}', "Infinity is not a JSON value (RFC 8259), at /a/b/1"),
        ('{"a": -Infinity}', "-Infinity is not a JSON value"),
        ('{"limit": 1e400}', "1e400 is beyond the range of a double, at /limit"),
        ('{"x": -1.5E309}', "-1.5E309 is beyond the range of a double, at /x"),
        ('{"a": 1, "a": 2}', "duplicate key 'a', at /"),
        ('{"a/b": {"k": 1, "k": 2}}', "duplicate key 'k', at /a~1b"),
        ('{"a": 1,}', "Expecting property name"),
        ("[1, 2", "Expecting"),
    ],
    ids=["nan", "infinity", "-infinity", "1e400", "-1.5e309", "dup", "dup-nested", "comma", "eof"],
)
def test_json_that_rfc_8259_refuses_is_invalid_naming_the_member(text: str, words: str) -> None:
    with pytest.raises(StructuredError) as err:
        merge_layers(['{"timeoutSeconds": 10}', text], JSON, Documents())
    assert err.value.layer == 1
    assert words in err.value.detail


def test_json_numbers_are_kept_as_written_integers_of_any_size_exactly() -> None:
    huge = "9" * 5000  # past Python's 4,300-digit limit for int(): never converted
    base = (
        f'{{"big": {2**70}, "huge": {huge}, "version": 1.10, "exp": 1E5, "neg": -0.0, '
        '"tiny": 1e-400, "keep": "é", "flag": true, "none": null, "list": [1.0, 2]}'
    )
    got = merged(base, '{"version": 2.50}', fmt=JSON)
    assert got == (
        "{\n"
        f'  "big": {2**70},\n'
        f'  "huge": {huge},\n'
        '  "version": 2.50,\n'
        '  "exp": 1E5,\n'
        '  "neg": -0.0,\n'
        '  "tiny": 1e-400,\n'
        '  "keep": "é",\n'
        '  "flag": true,\n'
        '  "none": null,\n'
        '  "list": [\n    1.0,\n    2\n  ]\n'
        "}\n"
    )


def test_json_maps_merge_deeply_in_the_order_written() -> None:
    got = merged('{"z": {"y": 1, "x": [1]}, "a": 1}', '{"z": {"x": [2], "w": 3}}', fmt=JSON)
    assert (
        got
        == '{\n  "z": {\n    "y": 1,\n    "x": [\n      2\n    ],\n    "w": 3\n  },\n  "a": 1\n}\n'
    )
    assert merged("", fmt=JSON) == ""
    assert merged("  \n", '{"a": 1}', fmt=JSON) == '{\n  "a": 1\n}\n'


def test_json_a_lone_surrogate_cannot_be_written() -> None:
    with pytest.raises(StructuredError) as err:
        merged('{"a": "\\ud800"}', fmt=JSON)
    assert err.value.layer == -1
    assert "cannot be written as JSON" in err.value.detail


# ------------------------------------------------------------------ parsed once


def test_each_text_is_parsed_once_for_all_its_readers() -> None:
    documents = Documents()
    base = GOLDEN_BASE * 1  # one string object, as the informer cache holds one per version
    outputs = {merge_layers([base, f"reader: {i % 3}\n"], YAML, documents)[0] for i in range(300)}
    assert len(outputs) == 3
    assert documents.parses == 1 + 3  # the base once, each distinct overlay once
    assert documents.merges == 3  # the same inputs: the same result, merged once
    # A new source version is a new text: parsed once more.
    merge_layers([base + "x: 1\n", "reader: 0\n"], YAML, documents)
    assert documents.parses == 5


def test_an_invalid_text_is_also_parsed_once() -> None:
    documents = Documents()
    for _ in range(5):
        with pytest.raises(StructuredError):
            merge_layers(['{"a": NaN}'], JSON, documents)
    assert documents.parses == 1


def test_documents_are_bounded_by_estimated_bytes_least_recently_used_out() -> None:
    one = Documents().parse("a: 1\n", YAML).weight
    documents = Documents(budget=2 * one)
    for text in ("a: 1\n", "a: 2\n", "a: 3\n", "a: 1\n"):
        documents.parse(text, YAML)
    assert documents.parses == 4  # "a: 1" was evicted by "a: 3"
    documents.parse("a: 3\n", YAML)
    assert documents.parses == 4
    heavy = "a: " + "x" * 100 + "\n"
    for _ in range(2):
        documents.parse(heavy, YAML)  # heavier than the whole budget: never kept
    assert documents.parses == 6


class _CountedEvent(threading.Event):
    """An Event that tells a condition how many threads wait on it."""

    waiting = 0
    changed = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with _CountedEvent.changed:
            _CountedEvent.waiting += 1
            _CountedEvent.changed.notify_all()
        return super().wait(timeout)


@pytest.fixture
def slow_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Parses block until the returned event is set; waits on a parse are counted."""
    from cbop.api import structured

    release = threading.Event()
    real = structured._read

    def blocking(fmt: MergeFormat, text: str) -> Any:
        release.wait(30)
        return real(fmt, text)

    class Counted(structured._Pending):
        def __init__(self) -> None:
            super().__init__()
            self.done = _CountedEvent()

    monkeypatch.setattr(structured, "_read", blocking)
    monkeypatch.setattr(structured, "_Pending", Counted)
    _CountedEvent.waiting = 0
    yield release
    release.set()


def test_concurrent_readers_of_one_text_wait_for_one_parse(slow_parse: threading.Event) -> None:
    documents = Documents()
    got: list[Document] = []
    readers = [
        threading.Thread(target=lambda: got.append(documents.parse("a: 1\n", YAML)))
        for _ in range(6)
    ]
    for reader in readers:
        reader.start()
    # One reader parses (blocked); the other five wait for it, none parses on its own.
    with _CountedEvent.changed:
        assert _CountedEvent.changed.wait_for(lambda: _CountedEvent.waiting == 5, timeout=30)
    assert documents.parses == 0
    slow_parse.set()
    for reader in readers:
        reader.join(30)
    assert documents.parses == 1
    assert len(got) == 6
    assert all(doc is got[0] for doc in got)
