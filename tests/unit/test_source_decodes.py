"""SourceDecodes: a source's base64 content decoded once per version, never stale."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from cbop.api.compose import SourceDecodes
from cbop.api.content import decode_binary


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def secret(data: dict[str, bytes], *, uid: str | None = "u1", rv: str | None = "1") -> Any:
    meta: dict[str, Any] = {"name": "tls", "namespace": "demo"}
    if uid is not None:
        meta["uid"] = uid
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"kind": "Secret", "metadata": meta, "data": {k: b64(v) for k, v in data.items()}}


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every decode that SourceDecodes makes (the argument it decodes)."""
    calls: list[Any] = []

    def counting(raw: Any) -> Any:
        calls.append(raw)
        return decode_binary(raw)

    monkeypatch.setattr("cbop.api.compose.decode_binary", counting)
    return calls


def test_one_version_is_decoded_once_for_all_its_readers(decoded: list[Any]) -> None:
    decodes = SourceDecodes()
    v1 = secret({"tls.crt": b"cert-1"})
    assert [decodes.decode(v1, "data") for _ in range(3)] == [{"tls.crt": b"cert-1"}] * 3
    # The same version read from another copy of the object (a relist) is not decoded again.
    assert decodes.decode(secret({"tls.crt": b"cert-1"}), "data") == {"tls.crt": b"cert-1"}
    assert len(decoded) == 1


def test_a_new_version_is_decoded_and_replaces_the_old_one(decoded: list[Any]) -> None:
    decodes = SourceDecodes()
    assert decodes.decode(secret({"k": b"old"}, rv="1"), "data") == {"k": b"old"}
    assert decodes.decode(secret({"k": b"new"}, rv="2"), "data") == {"k": b"new"}
    assert decodes.decode(secret({"k": b"new"}, rv="2"), "data") == {"k": b"new"}
    # Back to an older version (a lookup racing an update): decoded again, never stale.
    assert decodes.decode(secret({"k": b"old"}, rv="1"), "data") == {"k": b"old"}
    assert len(decoded) == 3


def test_fields_and_objects_are_kept_apart(decoded: list[Any]) -> None:
    decodes = SourceDecodes()
    configmap = {
        "metadata": {"uid": "u1", "resourceVersion": "1"},
        "data": {"a": "text"},
        "binaryData": {"b": b64(b"\x00\x01")},
    }
    assert decodes.decode(configmap, "binaryData") == {"b": b"\x00\x01"}
    assert decodes.decode(secret({"k": b"v"}, uid="u2"), "data") == {"k": b"v"}
    assert decodes.decode(secret({"k": b"w"}, uid="u3"), "data") == {"k": b"w"}
    assert len(decoded) == 3


def test_an_object_without_uid_or_version_is_decoded_every_time(decoded: list[Any]) -> None:
    decodes = SourceDecodes()
    for _ in range(2):
        assert decodes.decode(secret({"k": b"v"}, uid=None), "data") == {"k": b"v"}
        assert decodes.decode(secret({"k": b"v"}, rv=None), "data") == {"k": b"v"}
    assert len(decoded) == 4


def test_invalid_base64_is_none_and_an_absent_field_empty() -> None:
    decodes = SourceDecodes()
    bad = secret({})
    bad["data"] = {"k": "not base64!"}
    assert decodes.decode(bad, "data") is None
    assert decodes.decode(bad, "data") is None
    assert decodes.decode(secret({}, uid="u9"), "data") == {}
    assert decodes.decode({"metadata": {"uid": "u8", "resourceVersion": "1"}}, "data") == {}


def test_at_most_size_sources_are_kept(decoded: list[Any]) -> None:
    decodes = SourceDecodes(size=2)
    for uid in ("a", "b", "c"):
        decodes.decode(secret({"k": uid.encode()}, uid=uid), "data")
    assert len(decoded) == 3
    decodes.decode(secret({"k": b"c"}, uid="c"), "data")  # kept
    decodes.decode(secret({"k": b"a"}, uid="a"), "data")  # the oldest went first
    assert len(decoded) == 4
