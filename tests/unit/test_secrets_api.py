"""The Secret target's API, pure (docs/secrets.md): the target, its parse, the keyed digest,
Secret sources in a composition, and ClusterConfigBundle templates of Secrets."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import pytest

from cbop.api import (
    Kind,
    Reason,
    SpecError,
    Target,
    TooLargeError,
    config_map_name_of,
    content_hash,
    keyed_content_hash,
    parse_spec,
    target_of,
    template_of,
)
from cbop.api.cluster import target_key
from cbop.api.compose import SecretReads, SourceError, compose, composed_spec
from cbop.api.content import MIN_DIGEST_KEY_BYTES
from cbop.api.target import secret_type_error

NS = "team-a"
KEY = b"k" * 32
TLS = {"kind": "Secret", "name": "tls", "type": "kubernetes.io/tls"}


def bundle(spec: Mapping[str, Any], name: str = "b", namespace: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)}


def secret(
    name: str,
    namespace: str = NS,
    data: Mapping[str, bytes] | None = None,
    *,
    share_with: str | None = None,
    labelled: bool = True,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if labelled:
        meta["labels"]["cbop.dev/source"] = "true"
    if share_with is not None:
        meta["annotations"] = {"cbop.dev/share-with": share_with}
    encoded = {k: base64.b64encode(v).decode() for k, v in (data or {}).items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": encoded}


def configmap(name: str, data: Mapping[str, str], namespace: str = NS) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "labels": {"cbop.dev/source": "true"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def keyed(found: Mapping[str, Any]) -> str:
    raw = {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
    return keyed_content_hash(KEY, {}, raw)


def run(spec: Mapping[str, Any], *objs: Mapping[str, Any]) -> Any:
    def lookup(kind: str) -> Any:
        found = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o
            for o in objs
            if o["kind"] == kind
        }
        return lambda ns, name: found.get((ns, name))

    parsed = parse_spec(bundle(spec))
    return compose(
        parsed, NS, lookup("ConfigMap"), secrets=SecretReads(lookup("Secret"), keyed)
    ), parsed


# ------------------------------------------------------------------ target


def test_no_target_is_a_configmap_target_as_before() -> None:
    spec = parse_spec(bundle({"data": {"a": "1"}}, name="web"))
    assert spec.target == Target(Kind.CONFIGMAP, "web")
    assert spec.config_map_name == "web"
    assert not spec.target.is_secret
    named = parse_spec(bundle({"configMapName": "conf", "target": {"kind": "ConfigMap"}}))
    assert named.target == Target(Kind.CONFIGMAP, "conf")


def test_a_secret_target_defaults_its_name_and_type_and_keeps_no_configmap() -> None:
    spec = parse_spec(bundle({"target": {"kind": "Secret"}}, name="pull"))
    assert spec.target == Target(Kind.SECRET, "pull", "Opaque")
    assert spec.config_map_name == ""
    assert config_map_name_of(bundle({"target": {"kind": "Secret"}})) is None
    assert target_of(bundle({"target": TLS})) == Target(Kind.SECRET, "tls", "kubernetes.io/tls")
    # target_of reads a bundle whose spec is otherwise invalid (status, release).
    invalid = bundle({"target": TLS, "data": {"x": "inline"}})
    with pytest.raises(SpecError):
        parse_spec(invalid)
    assert target_of(invalid) == Target(Kind.SECRET, "tls", "kubernetes.io/tls")
    assert target_of(bundle({"target": {"kind": "Vault"}})) is None


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({}, Target(Kind.CONFIGMAP, "b")),
        ({"target": {"kind": ""}}, Target(Kind.CONFIGMAP, "b")),
        ({"configMapName": "conf"}, Target(Kind.CONFIGMAP, "conf")),
        ({"configMapName": "Not_A_Name"}, None),
        ({"configMapName": ["conf"]}, None),
        ({"target": {"kind": "Secret", "name": "tls"}}, Target(Kind.SECRET, "tls", "Opaque")),
        ({"target": {"kind": "Secret", "name": {"a": 1}}}, None),
        ({"target": {"kind": "Secret", "name": "tls", "type": 7}}, None),
        ({"target": {"kind": 7}}, None),
        ({"target": {"kind": ["Secret"]}}, None),
        ({"target": "Secret"}, None),
    ],
)
def test_target_of_is_the_same_whether_asked_once_or_again(
    spec: dict[str, Any], want: Target | None
) -> None:
    """target_of keeps one Target per (kind, name, type): asking again, or for a bundle
    of the same target, gives the same answer, and a changed spec its new one."""
    first = bundle(spec, name="b")
    assert target_of(first) == want
    assert target_of(bundle(spec, name="b")) == want
    assert target_of(first) == want
    renamed = bundle({**spec, "configMapName": "other"}, name="b")
    if want is not None and not want.is_secret:
        assert target_of(renamed) == Target(Kind.CONFIGMAP, "other")
    first["spec"] = {"target": {"kind": "Secret", "name": "changed"}}
    assert target_of(first) == Target(Kind.SECRET, "changed", "Opaque")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"target": TLS, "data": {"tls.key": "x"}}, "spec.data is not allowed"),
        ({"target": TLS, "binaryData": {"tls.key": "aGk="}}, "spec.binaryData is not allowed"),
        ({"target": TLS, "revisions": {"enabled": True}}, "not supported for a Secret target"),
        ({"target": TLS, "configMapName": "x"}, "a Secret target is named by"),
        ({"target": {"kind": "ConfigMap", "name": "x"}}, "spec.target.name is for a Secret"),
        ({"target": {"type": "Opaque"}}, "spec.target.type is for a Secret"),
        ({"target": {"kind": "Secret", "name": "Not_A_Name"}}, "not a valid Secret name"),
        (
            {"target": {"kind": "Secret", "type": "kubernetes.io/service-account-token"}},
            "token controller",
        ),
        ({"target": {"kind": "Secret", "type": ""}}, "1 to 253 characters"),
        ({"target": "Secret"}, "spec.target must be an object"),
        ({"target": {"kind": "Vault"}}, "'ConfigMap' or 'Secret'"),
        ({"sources": [{"secret": {"name": "s"}}]}, "a Secret never flows into a ConfigMap"),
        (
            {"target": TLS, "sources": [{"secret": {"name": "s"}, "configMap": {"name": "c"}}]},
            "one",
        ),
        ({"target": TLS, "sources": [{"secret": {"name": "s", "optional": "yes"}}]}, "optional"),
    ],
)
def test_what_a_secret_target_may_not_have_is_a_spec_error(
    spec: dict[str, Any], words: str
) -> None:
    """The second line of defence behind the CRD's rules (an older CRD, say)."""
    with pytest.raises(SpecError) as err:
        parse_spec(bundle(spec))
    assert words in err.value.message
    assert err.value.reason is Reason.INVALID_SPEC


def test_empty_inline_maps_and_disabled_revisions_are_allowed_with_a_secret_target() -> None:
    spec = parse_spec(bundle({"target": TLS, "data": {}, "revisions": {"enabled": False}}))
    assert spec.target.is_secret


def test_secret_sources_are_parsed_with_their_kind_and_key() -> None:
    spec = parse_spec(
        bundle(
            {
                "target": TLS,
                "sources": [
                    {
                        "secret": {
                            "name": "w",
                            "namespace": "cm",
                            "items": [{"key": "a", "path": "b"}],
                        }
                    },
                    {"configMap": {"name": "w"}},
                ],
            }
        )
    )
    first, second = spec.sources
    assert (first.kind, first.key, first.ref) == (Kind.SECRET, "secret:cm/w", "cm/w")
    assert first.describe() == "Secret cm/w"
    assert (second.kind, second.key) == (Kind.CONFIGMAP, f"{NS}/w")


@pytest.mark.parametrize(
    ("secret_type", "keys", "missing"),
    [
        ("kubernetes.io/tls", {"tls.crt", "tls.key"}, None),
        ("kubernetes.io/tls", {"tls.crt"}, "tls.key"),
        ("kubernetes.io/tls", set(), "tls.crt and tls.key"),
        ("kubernetes.io/ssh-auth", {"other"}, "ssh-privatekey"),
        ("kubernetes.io/dockerconfigjson", set(), ".dockerconfigjson"),
        ("kubernetes.io/dockercfg", set(), ".dockercfg"),
        ("kubernetes.io/basic-auth", {"password"}, None),
        ("kubernetes.io/basic-auth", set(), "username or password"),
        ("Opaque", set(), None),
        ("example.com/custom", set(), None),
    ],
)
def test_a_type_requires_the_keys_the_api_server_requires(
    secret_type: str, keys: set[str], missing: str | None
) -> None:
    error = secret_type_error(secret_type, keys)
    if missing is None:
        assert error is None
    else:
        assert error is not None
        assert f"must hold {missing}" in error


# ------------------------------------------------------------------ keyed digest


def test_the_keyed_digest_is_an_hmac_of_the_content_hash_stream() -> None:
    data = {"tls.key": b"hunter2"}
    digest = keyed_content_hash(KEY, {}, data)
    assert digest.startswith("hmac-sha256:")
    assert len(digest) == len("hmac-sha256:") + 64
    stream = b"b" + (7).to_bytes(8, "big") + b"tls.key" + (7).to_bytes(8, "big") + b"hunter2"
    assert digest == "hmac-sha256:" + hmac.new(KEY, stream, hashlib.sha256).hexdigest()
    # The unkeyed digest of the same stream is another value: no guess can be tested.
    assert content_hash({}, data) == "sha256:" + hashlib.sha256(stream).hexdigest()
    assert digest.split(":")[1] != content_hash({}, data).split(":")[1]


def test_the_keyed_digest_depends_on_key_and_content_only() -> None:
    data = {"a": b"1", "b": b"2"}
    assert keyed_content_hash(KEY, {}, data) == keyed_content_hash(
        KEY, {}, dict(reversed(data.items()))
    )
    assert keyed_content_hash(KEY, {}, data) != keyed_content_hash(b"j" * 32, {}, data)
    assert keyed_content_hash(KEY, {}, data) != keyed_content_hash(KEY, {}, {"a": b"1", "b": b"3"})
    with pytest.raises(ValueError, match=str(MIN_DIGEST_KEY_BYTES)):
        keyed_content_hash(b"short", {}, data)


# ------------------------------------------------------------------ composition


def test_secret_and_configmap_sources_compose_into_bytes_with_keyed_status() -> None:
    tls = secret(
        "wildcard", "cert-manager", {"tls.crt": b"CERT", "tls.key": b"\xff\x00"}, share_with=NS
    )
    extras = configmap("extras", {"ca.crt": "CA", "tls.crt": "overridden"})
    spec = {
        "target": TLS,
        "sources": [
            {"configMap": {"name": "extras"}},
            {"secret": {"name": "wildcard", "namespace": "cert-manager"}},
        ],
    }
    composed, parsed = run(spec, tls, extras)
    assert composed.binary_data == {"tls.crt": b"CERT", "tls.key": b"\xff\x00"}
    assert composed.data == {"ca.crt": "CA"}
    assert composed.key_sources == {
        "ca.crt": f"{NS}/extras",
        "tls.crt": "secret:cert-manager/wildcard",
        "tls.key": "secret:cert-manager/wildcard",
    }
    statuses = [s.as_status() for s in composed.sources]
    assert statuses[0] == {
        "namespace": NS,
        "name": "extras",
        "contentHash": content_hash({"ca.crt": "CA", "tls.crt": "overridden"}, {}),
    }
    assert statuses[1] == {
        "namespace": "cert-manager",
        "name": "wildcard",
        "contentHash": keyed(tls),
        "kind": "Secret",
    }
    provenance = composed_spec(parsed, composed).provenance
    assert provenance is not None
    assert provenance["sources"] == statuses


@pytest.mark.parametrize(
    ("obj", "reason", "words"),
    [
        (None, Reason.SOURCE_NOT_FOUND, "source Secret other/s not found"),
        (secret("s", "other", {"k": b"v"}, labelled=False), Reason.SOURCE_NOT_FOUND, "label"),
        (secret("s", "other", {"k": b"v"}), Reason.SOURCE_NOT_SHARED, "not shared with namespace"),
        (
            secret("s", "other", {"k": b"v"}, share_with="x, y"),
            Reason.SOURCE_NOT_SHARED,
            "share-with",
        ),
        (
            secret(
                "s",
                "other",
                {"k": b"v"},
                share_with="*",
                labels={"app.kubernetes.io/managed-by": "cbop"},
            ),
            Reason.INVALID_SOURCE,
            "never read as a source",
        ),
    ],
)
def test_a_secret_source_must_be_labelled_shared_and_not_cbops(
    obj: dict[str, Any] | None, reason: Reason, words: str
) -> None:
    spec = {"target": TLS, "sources": [{"secret": {"name": "s", "namespace": "other"}}]}
    with pytest.raises(SourceError) as err:
        run(spec, *([obj] if obj else []))
    assert err.value.reason is reason
    assert words in err.value.message
    assert err.value.source == "secret:other/s"


def test_a_shared_secret_is_read_and_an_optional_missing_one_is_empty() -> None:
    spec = {
        "target": TLS,
        "sources": [
            {"secret": {"name": "s", "namespace": "other"}},
            {"secret": {"name": "gone", "optional": True}},
        ],
    }
    composed, _ = run(spec, secret("s", "other", {"k": b"v"}, share_with="x,team-a"))
    assert composed.binary_data == {"k": b"v"}
    assert [s.name for s in composed.sources] == ["s"]


def test_a_configmap_of_the_secrets_name_is_another_source() -> None:
    spec = {"target": TLS, "sources": [{"secret": {"name": "same"}}]}
    with pytest.raises(SourceError) as err:
        run(spec, configmap("same", {"k": "v"}))
    assert err.value.reason is Reason.SOURCE_NOT_FOUND


def test_a_merge_error_into_a_secret_never_shows_the_text() -> None:
    spec = {
        "target": TLS,
        "sources": [{"secret": {"name": "a"}}, {"secret": {"name": "b"}}],
        "merge": [{"key": "conf.yaml", "format": "yaml"}],
    }
    a = secret("a", data={"conf.yaml": b"password: hunter2-secret\npassword: other-secret\n"})
    b = secret("b", data={"conf.yaml": b"user: x\n"})
    with pytest.raises(SourceError) as err:
        run(spec, a, b)
    message = err.value.message
    assert "source Secret team-a/a" in message
    assert "conf.yaml" in message
    assert "line 2, column 1" in message
    assert "the text is not shown" in message
    assert "hunter2" not in message
    assert "other-secret" not in message


def test_a_secret_target_over_the_limit_is_secret_too_large() -> None:
    spec = {"target": TLS, "sources": [{"secret": {"name": "big"}}]}
    with pytest.raises(TooLargeError) as err:
        run(spec, secret("big", data={"blob": b"x" * (1_048_576 + 1)}))
    assert err.value.reason is Reason.SECRET_TOO_LARGE
    assert "the Secret content would be 1,048,577 bytes" in err.value.message


# ------------------------------------------------------------------ cluster templates


def test_a_secret_template_defaults_its_name_not_configmapname() -> None:
    ccb = {
        "metadata": {"name": "tls-everywhere"},
        "spec": {"template": {"target": {"kind": "Secret"}}},
    }
    assert template_of(ccb) == {"target": {"kind": "Secret", "name": "tls-everywhere"}}
    assert target_key(ccb) == ("Secret", "tls-everywhere")
    plain = {"metadata": {"name": "ca"}, "spec": {"template": {"data": {"a": "1"}}}}
    assert template_of(plain)["configMapName"] == "ca"
    assert target_key(plain) == ("ConfigMap", "ca")
