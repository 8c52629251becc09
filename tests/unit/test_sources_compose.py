"""Composing a bundle from its sources (cbop.api.compose): the rules of docs/sources.md.

Inputs follow the field reports of issue 35: precedence that is not what the docs say
(cmmc#7), a merge order that changes from run to run (cloudflare-operator#26), a deleted
source that silently empties the result and cross-namespace reads nobody allowed
(kubernetes-replicator#73), kustomize's merge behaviour (#370, #1468, #3365).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from cbop.api import MAX_CONFIGMAP_BYTES, Reason, SpecError, TooLargeError, parse_spec
from cbop.api.compose import (
    MAX_KEY_SOURCES,
    Composed,
    SourceDigests,
    SourceError,
    bounded_key_sources,
    compose,
    shared_with,
)
from cbop.api.content import content_hash

NS = "demo"


def source(
    name: str,
    namespace: str = NS,
    data: Mapping[str, str] | None = None,
    binary: Mapping[str, bytes] | None = None,
    *,
    share_with: str | None = None,
    labelled: bool = True,
    extra_labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {}}
    if labelled:
        meta["labels"]["cbop.dev/source"] = "true"
    meta["labels"].update(extra_labels or {})
    if share_with is not None:
        meta["annotations"] = {"cbop.dev/share-with": share_with}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        cm["data"] = dict(data)
    if binary is not None:
        cm["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    return cm


def run(
    spec: dict[str, Any],
    *cms: Mapping[str, Any],
    namespace: str = NS,
    scope: list[str] | None = None,
) -> Composed:
    bundle = {"metadata": {"name": "b", "namespace": namespace}, "spec": spec}
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in cms}
    return compose(parse_spec(bundle), namespace, lambda n, m: by_key.get((n, m)), scope=scope)


def ref(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    cm: dict[str, Any] = {"name": name, **extra}
    if namespace is not None:
        cm["namespace"] = namespace
    return {"configMap": cm}


# ------------------------------------------------------------------ precedence


def test_a_later_source_wins_a_key_and_the_spec_wins_over_every_source() -> None:
    base = source("base", data={"a": "base", "b": "base", "c": "base"})
    team = source("team", data={"b": "team", "c": "team"})
    got = run({"sources": [ref("base"), ref("team")], "data": {"c": "spec"}}, base, team)
    assert got.data == {"a": "base", "b": "team", "c": "spec"}
    assert got.key_sources == {"a": "demo/base", "b": "demo/team", "c": "spec"}


def test_the_order_of_sources_is_the_order_of_the_spec_not_of_names() -> None:
    """cmmc#7: precedence as written; swapping the list swaps the winner."""
    z = source("z-first", data={"k": "z"})
    a = source("a-second", data={"k": "a"})
    assert run({"sources": [ref("z-first"), ref("a-second")]}, z, a).data == {"k": "a"}
    assert run({"sources": [ref("a-second"), ref("z-first")]}, z, a).data == {"k": "z"}


def test_text_and_binary_values_replace_each_other_by_key() -> None:
    base = source("base", data={"t": "text"}, binary={"b": b"\x00\xff"})
    got = run(
        {"sources": [ref("base")], "binaryData": {"t": base64.b64encode(b"\x01").decode()}},
        base,
    )
    assert got.data == {}
    assert got.binary_data == {"b": b"\x00\xff", "t": b"\x01"}
    assert got.size == 3


def test_the_same_inputs_give_the_same_bytes_whatever_the_dict_order() -> None:
    """cloudflare-operator#26: a merge order that changed from run to run."""
    keys = [f"k{i}" for i in range(50)]
    doc = json.dumps({k: {"v": k, "n": [1, 2]} for k in keys})
    outputs = set()
    for seed in range(5):
        random.Random(seed).shuffle(keys)
        base = source("base", data={**{k: k for k in keys}, "m.json": doc})
        team = source("team", data=dict.fromkeys(reversed(keys), "t") | {"m.json": '{"k1": 2}'})
        got = run(
            {"sources": [ref("base"), ref("team")], "merge": [{"key": "m.json", "format": "json"}]},
            base,
            team,
        )
        outputs.add((tuple(got.data.items()), tuple(got.key_sources.items())))
    assert len(outputs) == 1
    (data, _), *_ = outputs
    assert [k for k, _ in data] == sorted(k for k, _ in data)


# ------------------------------------------------------------------ missing, optional


def test_a_missing_required_source_fails_naming_it_and_saying_to_label_it() -> None:
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("gone")], "data": {"a": "1"}})
    assert err.value.reason is Reason.SOURCE_NOT_FOUND
    assert err.value.source == "demo/gone"
    assert "label it" in err.value.message
    assert 'cbop.dev/source: "true"' in err.value.message


def test_an_unlabelled_configmap_is_not_found() -> None:
    unlabelled = source("plain", data={"a": "1"}, labelled=False)
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("plain")]}, unlabelled)
    assert err.value.reason is Reason.SOURCE_NOT_FOUND


def test_a_missing_optional_source_counts_as_empty_and_is_not_listed() -> None:
    base = source("base", data={"a": "1"})
    got = run({"sources": [ref("base"), ref("maybe", optional=True)]}, base)
    assert got.data == {"a": "1"}
    assert [s.name for s in got.sources] == ["base"]


def test_status_sources_carry_the_content_hash_of_each_whole_source() -> None:
    base = source("base", data={"a": "1", "b": "2"}, binary={"c": b"\x00"})
    got = run({"sources": [ref("base", items=[{"key": "a", "path": "a"}])]}, base)
    (read,) = got.sources
    assert read.as_status() == {
        "namespace": NS,
        "name": "base",
        "contentHash": content_hash({"a": "1", "b": "2"}, {"c": b"\x00"}),
    }


def test_with_namespace_scope_a_source_outside_it_is_not_found_naming_the_scope() -> None:
    shared = source("defaults", "platform", {"a": "1"}, share_with="*")
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("defaults", "platform")]}, shared, scope=[NS, "team-b"])
    assert err.value.reason is Reason.SOURCE_NOT_FOUND
    assert "--namespace demo, team-b" in err.value.message
    got = run(
        {"sources": [ref("defaults", "platform", optional=True)], "data": {"x": "y"}},
        shared,
        scope=[NS],
    )
    assert got.data == {"x": "y"}


# ------------------------------------------------------------------ sharing


@pytest.mark.parametrize(
    ("annotation", "allowed"),
    [
        (None, False),
        ("", False),
        ("team-a", False),
        ("team-a,demo", True),
        (" team-a , demo ", True),
        ("*", True),
        ("demo-x", False),
    ],
)
def test_share_with_lists_namespaces_or_a_star(annotation: str | None, allowed: bool) -> None:
    cm = source("defaults", "platform", {"a": "1"}, share_with=annotation)
    assert shared_with(cm, NS) is allowed


def test_a_source_of_another_namespace_needs_share_with() -> None:
    """kubernetes-replicator#73: cross-namespace reads nobody allowed."""
    private = source("defaults", "platform", {"a": "1"})
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("defaults", "platform")]}, private)
    assert err.value.reason is Reason.SOURCE_NOT_SHARED
    assert "cbop.dev/share-with" in err.value.message
    assert '"demo"' in err.value.message
    granted = source("defaults", "platform", {"a": "1"}, share_with="demo")
    assert run({"sources": [ref("defaults", "platform")]}, granted).data == {"a": "1"}


def test_a_source_of_the_bundles_own_namespace_needs_no_share_with() -> None:
    own = source("base", data={"a": "1"})
    assert run({"sources": [ref("base", NS)]}, own).data == {"a": "1"}


# ------------------------------------------------------------------ loops


def test_a_configmap_cbop_manages_is_refused_as_a_source() -> None:
    owner = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "name": "other",
        "uid": "u1",
        "controller": True,
    }
    output = source("other-out", data={"a": "1"}, owner=owner)
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("other-out")]}, output)
    assert err.value.reason is Reason.INVALID_SOURCE
    assert "ConfigBundle demo/other" in err.value.message
    labelled = source(
        "marked", data={"a": "1"}, extra_labels={"app.kubernetes.io/managed-by": "cbop"}
    )
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("marked", optional=True)]}, labelled)
    assert err.value.reason is Reason.INVALID_SOURCE


# ------------------------------------------------------------------ items


def test_items_select_and_rename_keys_as_a_configmap_volume_does() -> None:
    base = source("base", data={"log.yaml": "a: 1\n", "other": "x"}, binary={"b": b"\x01"})
    items = [{"key": "log.yaml", "path": "logging.yaml"}, {"key": "b", "path": "blob"}]
    got = run({"sources": [ref("base", items=items)]}, base)
    assert got.data == {"logging.yaml": "a: 1\n"}
    assert got.binary_data == {"blob": b"\x01"}
    assert got.key_sources == {"blob": "demo/base", "logging.yaml": "demo/base"}


def test_an_item_key_the_source_lacks_fails_unless_the_source_is_optional() -> None:
    base = source("base", data={"a": "1"})
    items = [{"key": "missing", "path": "m"}, {"key": "a", "path": "a"}]
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("base", items=items)]}, base)
    assert err.value.reason is Reason.INVALID_SOURCE
    assert "'missing'" in err.value.message
    assert run({"sources": [ref("base", items=items, optional=True)]}, base).data == {"a": "1"}


# ------------------------------------------------------------------ structured merge


def test_yaml_maps_merge_deeply_lists_and_scalars_are_replaced_spec_last() -> None:
    platform = source(
        "logging-defaults",
        "platform",
        {"log.yaml": "level: info\nsinks: [stdout, file]\nformat:\n  time: iso\n  color: true\n"},
        share_with="*",
    )
    team = source("team-overrides", data={"log.yaml": "sinks: [stdout]\nformat: {color: false}\n"})
    got = run(
        {
            "sources": [ref("logging-defaults", "platform"), ref("team-overrides")],
            "data": {"log.yaml": "# a comment on a key the base has\nlevel: debug\n"},
            "merge": [{"key": "log.yaml", "format": "yaml"}],
        },
        platform,
        team,
    )
    # The base's order and text; the later layers' leaves as they wrote them.
    assert got.data["log.yaml"] == (
        "level: debug\nsinks: [stdout]\nformat:\n  time: iso\n  color: false\n"
    )
    assert got.key_sources["log.yaml"] == "platform/logging-defaults+demo/team-overrides+spec"


def test_json_merge_keeps_the_order_and_numbers_written_indent_two_final_newline() -> None:
    a = source("a", data={"c.json": '{"b": {"y": 1.50, "x": [1]}, "a": "é"}'})
    b = source("b", data={"c.json": '{"b": {"x": [2, 3]}}'})
    got = run(
        {"sources": [ref("a"), ref("b")], "merge": [{"key": "c.json", "format": "json"}]}, a, b
    )
    lines = ["{", '  "b": {', '    "y": 1.50,', '    "x": [', "      2,", "      3", "    ]"]
    assert got.data["c.json"] == "\n".join([*lines, "  },", '  "a": "é"', "}", ""])
    assert json.loads(got.data["c.json"]) == {"a": "é", "b": {"x": [2, 3], "y": 1.5}}


def test_a_scalar_replacing_a_map_resets_the_provenance() -> None:
    a = source("a", data={"v.yaml": "a: 1\n"})
    b = source("b", data={"v.yaml": "just a string\n"})
    got = run(
        {"sources": [ref("a"), ref("b")], "merge": [{"key": "v.yaml", "format": "yaml"}]}, a, b
    )
    assert yaml.safe_load(got.data["v.yaml"]) == "just a string"
    assert got.key_sources["v.yaml"] == "demo/b"


def test_an_empty_layer_adds_nothing_to_a_merged_key() -> None:
    a = source("a", data={"v.yaml": "a: 1\n"})
    b = source("b", data={"v.yaml": ""})
    got = run(
        {"sources": [ref("a"), ref("b")], "merge": [{"key": "v.yaml", "format": "yaml"}]}, a, b
    )
    assert got.data["v.yaml"] == "a: 1\n"
    assert got.key_sources["v.yaml"] == "demo/a"


def test_a_merge_key_that_does_not_parse_names_the_source_and_the_key() -> None:
    a = source("a", data={"v.yaml": "a: [1, 2\n"})
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("a")], "merge": [{"key": "v.yaml", "format": "yaml"}]}, a)
    assert err.value.reason is Reason.INVALID_SOURCE
    assert "source ConfigMap demo/a" in err.value.message
    assert "'v.yaml'" in err.value.message
    j = source("a", data={"v.json": "{nope"})
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("a")], "merge": [{"key": "v.json", "format": "json"}]}, j)
    assert err.value.reason is Reason.INVALID_SOURCE


def test_a_spec_value_that_does_not_parse_is_an_invalid_spec() -> None:
    with pytest.raises(SourceError) as err:
        run({"data": {"v.json": "{"}, "merge": [{"key": "v.json", "format": "json"}]})
    assert err.value.reason is Reason.INVALID_SPEC
    assert "spec.data" in err.value.message


def test_yaml_keys_of_mixed_types_are_written_as_they_parse_back() -> None:
    a = source("a", data={"v.yaml": "b: two\n1: one\n"})
    got = run({"sources": [ref("a")], "merge": [{"key": "v.yaml", "format": "yaml"}]}, a)
    assert yaml.safe_load(got.data["v.yaml"]) == {1: "one", "b": "two"}


# ------------------------------------------------------------------ bounds


def test_the_composed_content_is_bounded_by_the_configmap_limit() -> None:
    half = "x" * (MAX_CONFIGMAP_BYTES // 2 + 1)
    a = source("a", data={"one": half})
    b = source("b", data={"two": half})
    with pytest.raises(TooLargeError) as err:
        run({"sources": [ref("a"), ref("b")]}, a, b)
    assert err.value.reason is Reason.CONFIGMAP_TOO_LARGE
    assert run({"sources": [ref("a"), ref("b", items=[])]}, a, b).size == len(half)


def test_key_sources_are_bounded_to_the_first_hundred_keys_and_the_rest_counted() -> None:
    a = source("a", data={f"k{i:03d}": "v" for i in range(130)})
    got = run({"sources": [ref("a")]}, a)
    shown, omitted = bounded_key_sources(got.key_sources)
    assert len(shown) == MAX_KEY_SOURCES
    assert omitted == 30
    assert max(shown) == "k099"


# ------------------------------------------------------------------ spec parsing


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"merge": [{"key": "a", "format": "yaml"}, {"key": "a", "format": "json"}]}, "once"),
        ({"merge": [{"key": "a", "format": "toml"}]}, "'yaml' or 'json'"),
        ({"merge": [{"key": "../x", "format": "yaml"}]}, "not a ConfigMap key"),
        ({"sources": [{}]}, "exactly one of configMap and secret"),
        ({"sources": [ref("Bad_Name")]}, "not a valid ConfigMap name"),
        ({"sources": [ref("a", "Bad.NS")]}, "not a valid namespace"),
        (
            {"sources": [ref("a", items=[{"key": "x", "path": "p"}, {"key": "y", "path": "p"}])]},
            "more than once",
        ),
        ({"sources": [ref("a", items=[{"key": "x", "path": ".."}])]}, ".path"),
        ({"sources": [ref("a", optional="yes")]}, "true or false"),
        ({"sources": [ref(f"s{i}") for i in range(17)]}, "more than 16"),
    ],
    ids=[
        "duplicate-merge-key",
        "unknown-format",
        "bad-merge-key",
        "no-kind",
        "bad-name",
        "bad-namespace",
        "duplicate-path",
        "bad-path",
        "optional-not-bool",
        "too-many",
    ],
)
def test_invalid_sources_and_merge_are_spec_errors(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"metadata": {"name": "b", "namespace": NS}, "spec": spec})
    assert words in err.value.message


def test_an_omitted_source_namespace_is_the_bundles() -> None:
    spec = parse_spec({"metadata": {"name": "b", "namespace": NS}, "spec": {"sources": [ref("x")]}})
    assert spec.sources[0].key == "demo/x"
    assert spec.composed
    assert not parse_spec({"metadata": {"name": "b", "namespace": NS}, "spec": {}}).composed


# ------------------------------------------------------------------ source digests


def _versioned(data: Mapping[str, str], version: str, uid: str = "u-src") -> dict[str, Any]:
    cm = source("base", data=data)
    cm["metadata"].update(uid=uid, resourceVersion=version)
    return cm


def test_a_source_version_is_hashed_once_for_all_its_readers() -> None:
    digests = SourceDigests()
    first = _versioned({"a": "1"}, "10")
    assert digests.digest(first) == content_hash({"a": "1"}, {})
    # The same (uid, resourceVersion) is the same content: the stored digest answers.
    assert digests.digest(_versioned({"a": "other"}, "10")) == content_hash({"a": "1"}, {})
    # A new version (what every change of the source brings) is hashed again.
    assert digests.digest(_versioned({"a": "2"}, "11")) == content_hash({"a": "2"}, {})
    # So is a ConfigMap without a resourceVersion, every time.
    plain = source("base", data={"a": "3"})
    assert digests.digest(plain) == content_hash({"a": "3"}, {})
    plain["data"] = {"a": "4"}
    assert digests.digest(plain) == content_hash({"a": "4"}, {})


def test_source_digests_keep_at_most_their_size_oldest_out_first() -> None:
    digests = SourceDigests(size=2)
    for version in ("1", "2", "3"):
        digests.digest(_versioned({"a": version}, version))
    # Version 1 fell out: a stale object under its key is hashed for what it holds.
    assert digests.digest(_versioned({"a": "x"}, "1")) == content_hash({"a": "x"}, {})
    assert digests.digest(_versioned({"a": "y"}, "3")) == content_hash({"a": "3"}, {})


def _only(cm: Mapping[str, Any]) -> Any:
    return lambda namespace, name: cm if (namespace, name) == (NS, "base") else None


def test_compose_reports_each_source_version_with_its_own_hash() -> None:
    digests = SourceDigests()
    spec = parse_spec(
        {"metadata": {"name": "b", "namespace": NS}, "spec": {"sources": [ref("base")]}}
    )
    for version, value in (("5", "one"), ("6", "two"), ("5", "one")):
        cm = _versioned({"k": value}, version)
        got = compose(spec, NS, _only(cm), digests=digests)
        assert got.data == {"k": value}
        assert got.sources[0].content_hash == content_hash({"k": value}, {})


# ------------------------------------------------------------------ values kept, JSON strict


def test_a_merge_keeps_what_nobody_overrode_case_21() -> None:
    """Case 21: every leaf but ``level`` as ``base`` wrote it, and the comment."""
    app = (
        "enabled: NO\nversion: 1.10\ntime: 12:30\nmode: 0755\ncountry: NO\non: x\n"
        "stamp: 2001-12-14t21:59:43.10-05:00\n# the on-call team relies on this\n"
    )
    base = source("base", data={"app.yaml": app})
    team = source("team", data={"app.yaml": "level: debug\n"})
    got = run(
        {"sources": [ref("base"), ref("team")], "merge": [{"key": "app.yaml", "format": "yaml"}]},
        base,
        team,
    )
    assert got.data["app.yaml"] == app + "level: debug\n"
    assert got.key_sources["app.yaml"] == "demo/base+demo/team"


@pytest.mark.parametrize(
    ("value", "member"),
    [('{"timeoutSeconds": 30, "ratio": NaN}', "/ratio"), ('{"limit": 1e400}', "/limit")],
    ids=["nan", "1e400"],
)
def test_json_that_is_not_json_is_an_invalid_source_case_22(value: str, member: str) -> None:
    """Case 22: InvalidSource naming the source, the key and the member; nothing composed."""
    svc = source("svc", data={"svc.json": value})
    with pytest.raises(SourceError) as err:
        run(
            {
                "sources": [ref("svc")],
                "data": {"svc.json": '{"timeoutSeconds": 10}'},
                "merge": [{"key": "svc.json", "format": "json"}],
            },
            svc,
        )
    assert err.value.reason is Reason.INVALID_SOURCE
    assert err.value.source == "demo/svc"
    assert "source ConfigMap demo/svc: key 'svc.json' is not valid json" in err.value.message
    assert f"at {member}" in err.value.message
    with pytest.raises(SourceError) as err:
        run({"data": {"svc.json": value}, "merge": [{"key": "svc.json", "format": "json"}]})
    assert err.value.reason is Reason.INVALID_SPEC
    assert "spec.data: key 'svc.json'" in err.value.message


def test_a_merge_key_in_binary_data_that_is_not_utf8_is_invalid() -> None:
    a = source("a", binary={"v.yaml": b"\xff\xfe"})
    with pytest.raises(SourceError) as err:
        run({"sources": [ref("a")], "merge": [{"key": "v.yaml", "format": "yaml"}]}, a)
    assert err.value.reason is Reason.INVALID_SOURCE
    assert "not UTF-8" in err.value.message
