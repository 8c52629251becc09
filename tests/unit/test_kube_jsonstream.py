from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.kube import jsonstream
from cbop.kube.codec import decode_body
from cbop.kube.jsonstream import StreamDecodeError, decode_list, intern_keys, paused_gc


def split(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def configmap(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"cm-{i}",
            "namespace": "ns",
            "resourceVersion": str(100 + i),
            "labels": {"app": "x", "ünï": "cødé"},
            "ownerReferences": [{"uid": "a", "controller": True}, {"uid": "b"}],
            "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {"f:k": {}}}}],
        },
        # Strings that look like item boundaries must not confuse the batching.
        "data": {
            "tricky": '},{"metadata":{"name":"fake"}},{"metadata":',
            "json": json.dumps([{"metadata": {"name": "nested"}}, {"metadata": {}}]),
            "emoji": "😀" * (i % 3),
        },
        "nested": [{"a": 1}, {"metadata": {"name": "inner"}}],
        "number": 1.5e3 + i,
    }


def document(
    n: int, *, indent: int | None = None, items_last: bool = True, compact: bool = True
) -> bytes:
    """A list document; compact (as kube-apiserver writes it) unless told otherwise."""
    doc: dict[str, Any] = {"kind": "ConfigMapList", "apiVersion": "v1"}
    if not items_last:
        doc["items"] = [configmap(i) for i in range(n)]
    doc["metadata"] = {"resourceVersion": "12345", "remainingItemCount": 987654321}
    if items_last:
        doc["items"] = [configmap(i) for i in range(n)]
    separators = (",", ":") if compact and indent is None else None
    return json.dumps(doc, indent=indent, ensure_ascii=False, separators=separators).encode()


@pytest.mark.parametrize("fill", [1, 7, 64, 1000, 256 * 1024])
@pytest.mark.parametrize("chunk", [1, 3, 50, 4096])
def test_decodes_like_json_loads_whatever_the_chunking(
    monkeypatch: pytest.MonkeyPatch, fill: int, chunk: int
) -> None:
    monkeypatch.setattr(jsonstream, "_FILL", fill)
    data = document(40)
    assert decode_list(split(data, chunk)) == json.loads(data)


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("items_last", [True, False])
@pytest.mark.parametrize("compact", [True, False])
def test_layout_variants(
    monkeypatch: pytest.MonkeyPatch, indent: int | None, items_last: bool, compact: bool
) -> None:
    monkeypatch.setattr(jsonstream, "_FILL", 300)
    data = document(25, indent=indent, items_last=items_last, compact=compact)
    assert decode_list(split(data, 17)) == json.loads(data)


class BatchSpy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.batches: list[int] = []
        self.misses = 0
        self.calls = 0
        original = jsonstream._Reader.batch

        def spy(reader: Any, marker: str) -> tuple[list[Any] | None, bool]:
            self.calls += 1
            items, tried = original(reader, marker)
            if items:
                self.batches.append(len(items))
            elif tried:
                self.misses += 1
            return items, tried

        monkeypatch.setattr(jsonstream._Reader, "batch", spy)


def test_compact_lists_are_decoded_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonstream, "_FILL", 4000)
    spy = BatchSpy(monkeypatch)
    items = [{"metadata": {"name": f"o{i}"}, "data": {"k": "v" * (i % 50)}} for i in range(300)]
    data = json.dumps({"kind": "List", "items": items}, separators=(",", ":")).encode()
    assert decode_list(split(data, 1000)) == json.loads(data)
    assert sum(spy.batches) > 250  # nearly all items came in batches
    assert len(spy.batches) > 3


def bundle(i: int) -> dict[str, Any]:
    """A custom resource as a list returns it: nested objects open as items do."""
    version = "cbop.dev/v1alpha1"
    entry = {"apiVersion": version, "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}
    return {
        "apiVersion": version,
        "kind": "ConfigBundle",
        "metadata": {
            "name": f"cb-{i}",
            "managedFields": [{**entry, "manager": "a"}, {**entry, "manager": "b"}],
            "ownerReferences": [
                {"apiVersion": version, "kind": "ConfigBundle", "name": "p", "uid": "1"},
                {"apiVersion": version, "kind": "ConfigBundle", "name": "q", "uid": "2"},
            ],
        },
        "spec": {"data": {"k": "v" * (i % 40)}},
    }


def test_custom_resources_with_lookalike_nested_objects_are_decoded_in_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # managedFields entries and owner references begin with {"apiVersion":... as the
    # items do; the boundary marker carries apiVersion and kind, so they are not taken
    # for item boundaries and the batches keep working.
    monkeypatch.setattr(jsonstream, "_FILL", 4000)
    spy = BatchSpy(monkeypatch)
    items = [bundle(i) for i in range(300)]
    data = json.dumps({"kind": "ConfigBundleList", "items": items}, separators=(",", ":"))
    assert decode_list(split(data.encode(), 1000)) == json.loads(data)
    assert spy.misses == 0
    assert sum(spy.batches) > 250


def test_a_layout_without_recurring_boundaries_stops_batching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Items separated by ", " never show the compact marker: once a whole window holds
    # no boundary, the rest is decoded item by item without rescanning the window for
    # one per item (which made an indented 10,000-item list take seconds).
    monkeypatch.setattr(jsonstream, "_FILL", 2000)
    monkeypatch.setattr(jsonstream, "_MAX_WINDOW", 8000)
    spy = BatchSpy(monkeypatch)
    items = [{"metadata": {"name": f"o{i}"}, "data": {"k": "v" * 20}} for i in range(2000)]
    data = json.dumps({"kind": "List", "items": items}).encode()
    assert decode_list(split(data, 500)) == json.loads(data)
    assert spy.calls < 20


def test_nested_lookalike_boundaries_fall_back_to_single_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every item holds a nested list whose elements start like items do: candidate
    # boundaries inside the unfinished last item fail to parse and are not used.
    monkeypatch.setattr(jsonstream, "_FILL", 500)
    spy = BatchSpy(monkeypatch)
    data = document(60)
    assert decode_list(split(data, 100)) == json.loads(data)
    assert spy.misses >= 1


def test_every_split_point_of_a_small_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonstream, "_FILL", 1)
    data = document(3)
    expected = json.loads(data)
    for cut in range(1, len(data)):
        assert decode_list(iter([data[:cut], data[cut:]])) == expected, cut


def test_hook_sees_each_item_in_order_and_its_result_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jsonstream, "_FILL", 2000)
    seen: list[str] = []

    def hook(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        item["metadata"].pop("managedFields")
        return {"kept": item["metadata"]["name"]}

    out = decode_list(split(document(30), 100), hook)
    names = [f"cm-{i}" for i in range(30)]
    assert seen == names
    assert out["items"] == [{"kept": n} for n in names]
    assert out["metadata"]["remainingItemCount"] == 987654321


def test_keys_are_shared_between_items(monkeypatch: pytest.MonkeyPatch) -> None:
    # Within a batch through json's key memo, for single items through interning: only
    # a handful of copies of each key remain (one per batch), not one per item.
    monkeypatch.setattr(jsonstream, "_FILL", 3000)
    items = decode_list(split(document(60), 512))["items"]
    for path in (("metadata",), ("metadata", "labels"), ("data",)):
        copies: set[int] = set()
        for item in items:
            node = item
            for step in path:
                node = node[step]
            copies.update(id(k) for k in node if k in ("name", "app", "tricky"))
        assert 1 <= len(copies) <= len(items) // 4, path


def test_empty_and_odd_shapes() -> None:
    assert decode_list([b'{"items":[]}']) == {"items": []}
    assert decode_list([b"{}"]) == {}
    assert decode_list([b' { "items" : [ 1 , "x" , null ] } ']) == {"items": [1, "x", None]}
    assert decode_list([b'{"items": null, "a": 1}']) == {"items": None, "a": 1}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"items":[{"a":1}',
        b'{"items":[{"a":1},]}',
        b'{"items":[{"a":1}]} x',
        b'{"a" 1}',
        b'{"a":1 "b":2}',
        b"{1:2}",
        b'{"items":[{"a":1} {"b":2}]}',
    ],
)
def test_malformed_input_raises(data: bytes) -> None:
    with pytest.raises(StreamDecodeError):
        decode_list(split(data, 3))


def test_intern_keys_depth() -> None:
    a = json.loads('{"metadata": {"labels": {"k": {"deep": 1}}}}')
    b = json.loads('{"metadata": {"labels": {"k": {"deep": 1}}}}')
    a, b = intern_keys(a), intern_keys(b)
    assert next(iter(a["metadata"]["labels"])) is next(iter(b["metadata"]["labels"]))
    assert a == b


def test_paused_gc_nests_and_restores() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


# An integer token beyond 64 bits, as kube-apiserver writes a number it holds as float64
# (2**64 here), and numbers just inside and outside orjson's integer range.
_WIDE_NUMBERS = [18446744073709552000, 2**64 - 1, -(2**63), -(2**63) - 1, 2**70, 10**30]


def test_integers_beyond_64_bits_decode_to_the_float64_the_server_holds() -> None:
    items = [{"metadata": {"name": f"cm-{i}"}, "spec": {"n": _WIDE_NUMBERS}} for i in range(6)]
    doc = {"kind": "ThingList", "apiVersion": "v1", "metadata": {}, "items": items}
    data = json.dumps(doc, separators=(",", ":")).encode()
    want = json.loads(data)
    got = decode_list(split(data, 4096))
    assert len(got["items"]) == 6
    for item in got["items"]:
        for value, exact in zip(item["spec"]["n"], _WIDE_NUMBERS, strict=True):
            if -(2**63) <= exact <= 2**64 - 1:
                assert value == exact
                assert isinstance(value, int)
            else:
                # Batched items come back as float (orjson), the others as int (json):
                # either way the same float64, which is all the API server stores.
                assert float(value) == float(exact)
    assert [i["metadata"] for i in got["items"]] == [i["metadata"] for i in want["items"]]
    event = json.dumps({"type": "ADDED", "object": items[0]}).encode()
    decoded = decode_body(event)["object"]["spec"]["n"]
    assert [float(v) for v in decoded] == [float(v) for v in _WIDE_NUMBERS]
