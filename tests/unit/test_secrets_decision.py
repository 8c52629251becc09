"""The Secret target's pure parts (docs/secrets.md): the desired Secret, its render, the
decision (create, no-op, drift, replace, conflicts, the type kept), the required keys of
a type, the dry run's diff and the redaction of messages cbop did not build. The field
cases of ConfigMaps that apply to Secrets are named where they are covered."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from cbop.api import FINALIZER_ORPHAN, Kind, Reason, SpecError, keyed_content_hash, parse_spec
from cbop.api.compose import SecretReads, compose, composed_spec
from cbop.configbundle import Action
from cbop.configbundle.decision import CONFIGMAP, SECRET, decide, release_body
from cbop.configbundle.diff import SECRET_VALUES_HIDDEN, secret_diff
from cbop.configbundle.release import ConfigMapOutcome, Release, release_deleted
from cbop.configbundle.secret import (
    content_matches,
    desired_secret,
    in_sync,
    redact,
    render,
    secret_bytes,
    spec_error,
)
from cbop.kube import CONFIGBUNDLES, SECRETS, ApiError
from cbop_testing.fakekube import FakeKube, fail
from cbop_testing.objects import UID, bundle, synced_status

KEY = b"k" * 32
TLS_CERT = b"-----BEGIN CERTIFICATE-----\nMIIB-cert-bytes\n-----END CERTIFICATE-----\n"
TLS_KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE-hunter2-key\n-----END PRIVATE KEY-----\n"
SPEC: dict[str, Any] = {
    "target": {"kind": "Secret", "name": "tls", "type": "kubernetes.io/tls"},
    "sources": [{"secret": {"name": "wildcard"}}, {"configMap": {"name": "extras"}}],
    "labels": {"team": "web"},
}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def source_secret(data: dict[str, bytes]) -> dict[str, Any]:
    meta = {"name": "wildcard", "namespace": "demo", "labels": {"cbop.dev/source": "true"}}
    return {"kind": "Secret", "metadata": meta, "data": {k: b64(v) for k, v in data.items()}}


def composed(b: dict[str, Any], data: dict[str, bytes] | None = None) -> Any:
    """``b``'s spec with its sources composed in (a source Secret and a ConfigMap)."""
    secret = source_secret(data if data is not None else {"tls.crt": TLS_CERT, "tls.key": TLS_KEY})
    extras = {
        "kind": "ConfigMap",
        "metadata": {"name": "extras", "namespace": "demo", "labels": {"cbop.dev/source": "true"}},
        "data": {"ca.crt": "CA"},
    }
    spec = parse_spec(b)

    def digest(found: Any) -> str:
        return keyed_content_hash(
            KEY, {}, {k: base64.b64decode(v) for k, v in found["data"].items()}
        )

    reads = SecretReads(lambda ns, n: secret if n == "wildcard" else None, digest)
    out = compose(spec, "demo", lambda ns, n: extras if n == "extras" else None, secrets=reads)
    return composed_spec(spec, out)


def decide_secret(b: dict[str, Any], current: dict[str, Any] | None, **kw: Any) -> Any:
    spec = composed(b, **kw)
    return decide(
        b,
        spec,
        current,
        desired_of=lambda bundle_, spec_: desired_secret(bundle_, spec_, KEY),
        synced=in_sync,
        ops=SECRET,
    )


def written_secret(b: dict[str, Any]) -> dict[str, Any]:
    """The Secret as a create of ``b`` writes it, as the API server then holds it."""
    body = render(desired_secret(b, composed(b), KEY), None)
    body["metadata"].update(uid="secret-uid", resourceVersion="7")
    return body


# ------------------------------------------------------------------ desired


def test_the_desired_secret_holds_bytes_a_keyed_digest_and_the_type() -> None:
    b = bundle(SPEC)
    desired = desired_secret(b, composed(b), KEY)
    assert desired.binary_data == {"ca.crt": b"CA", "tls.crt": TLS_CERT, "tls.key": TLS_KEY}
    assert desired.data == {}
    assert desired.key_count == 3
    assert desired.content_hash == keyed_content_hash(KEY, {}, desired.binary_data)
    assert desired.annotations["cbop.dev/content-hash"] == desired.content_hash
    assert desired.secret_type == "kubernetes.io/tls"
    assert desired.labels["app.kubernetes.io/managed-by"] == "cbop"
    assert desired.labels["team"] == "web"
    body = render(desired, None)
    assert (body["kind"], body["type"]) == ("Secret", "kubernetes.io/tls")
    assert body["data"] == {"ca.crt": b64(b"CA"), "tls.crt": b64(TLS_CERT), "tls.key": b64(TLS_KEY)}
    assert body["metadata"]["ownerReferences"][0]["uid"] == UID
    assert "stringData" not in body


def test_text_from_a_configmap_and_bytes_from_a_secret_are_one_map() -> None:
    """Case 2: a key that moves between a ConfigMap's data and a Secret keeps its bytes."""
    b = bundle(SPEC)
    assert secret_bytes(composed(b))["ca.crt"] == b"CA"


def test_a_configmap_spec_is_never_rendered_as_a_secret_nor_the_other_way_round() -> None:
    b = bundle(SPEC)
    with pytest.raises(ValueError, match="not a Secret"):
        desired_secret(bundle({"data": {"a": "1"}}), parse_spec(bundle({"data": {"a": "1"}})), KEY)
    with pytest.raises(ValueError, match="a Secret target decided as a ConfigMap"):
        decide(b, composed(b), None, ops=CONFIGMAP)


# ------------------------------------------------------------------ decision


def test_create_then_nothing_to_do() -> None:
    b = bundle(SPEC)
    created = decide_secret(b, None)
    assert created.action is Action.CREATE
    assert created.message == "Secret tls created"
    current = written_secret(b)
    assert decide_secret(b, current).action is Action.NONE  # case 5: no write


def test_drift_of_a_value_and_an_extra_key_is_healed_and_foreign_metadata_kept() -> None:
    """Cases 7 and 9: the edit is undone, the added key removed, others' labels kept."""
    b = bundle(SPEC, status=synced_status())
    current = written_secret(b)
    b["status"]["contentHash"] = current["metadata"]["annotations"]["cbop.dev/content-hash"]
    current["data"]["tls.key"] = b64(b"tampered")
    current["data"]["extra"] = b64(b"x")
    current["metadata"]["labels"]["reloader.example/match"] = "true"
    decision = decide_secret(b, current)
    assert decision.action is Action.UPDATE
    assert decision.drift
    assert decision.message == "Secret tls was changed outside cbop; restored it"
    assert set(decision.body["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert decision.body["data"]["tls.key"] == b64(TLS_KEY)
    assert decision.body["metadata"]["labels"]["reloader.example/match"] == "true"
    assert decision.body["metadata"]["resourceVersion"] == "7"


def test_an_update_body_shares_nothing_it_may_change_with_the_cached_secret() -> None:
    """The metadata is copied one level, as the ConfigMap's: the cache stays as it was."""
    b = bundle(SPEC)
    current = written_secret(b)
    current["metadata"]["finalizers"] = ["other.example/keep"]
    current["metadata"]["labels"]["team"] = "web"
    current["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]
    current["data"]["tls.key"] = b64(b"tampered")
    before = copy.deepcopy(current)
    decision = decide_secret(b, current)
    assert decision.action is Action.UPDATE
    meta = decision.body["metadata"]
    assert "managedFields" not in meta
    assert (meta["resourceVersion"], meta["finalizers"]) == ("7", ["other.example/keep"])
    meta["finalizers"].append("mine")
    meta["labels"]["x"] = "y"
    meta["annotations"]["x"] = "y"
    meta["ownerReferences"][0]["name"] = "other"
    decision.body["data"]["tls.key"] = b64(b"other")
    assert current == before


def test_the_content_compares_as_bytes_whatever_base64_text_carries_it() -> None:
    """The base64 cbop writes matches without a decode; other text of the same bytes
    (non-zero padding bits) matches too, and other bytes never do."""
    b = bundle(SPEC)
    desired = desired_secret(b, composed(b, data={"tls.crt": b"A", "tls.key": b"B"}), KEY)
    assert desired.encoded == {"ca.crt": b64(b"CA"), "tls.crt": "QQ==", "tls.key": "Qg=="}
    current = render(desired, None)
    assert current["data"] == desired.encoded
    assert content_matches(desired, current)
    assert content_matches(desired, {**current, "data": {**current["data"], "tls.crt": "QR=="}})
    assert not content_matches(desired, {**current, "data": {**current["data"], "tls.crt": "Qg=="}})
    assert not content_matches(desired, {**current, "data": {"tls.crt": "QQ==", "tls.key": "Qg=="}})
    assert not content_matches(desired, {**current, "data": {**current["data"], "x": "QQ=="}})


def test_desired_secrets_of_the_same_bytes_share_their_base64_text() -> None:
    """The memo keeps a desired Secret per bundle: readers of one source hold one text
    of each small value; a large value is encoded as it is, and never wrong."""
    big = b"\x00\xff" * 40_000
    data = {"tls.crt": TLS_CERT, "tls.key": TLS_KEY, "big": big}
    one = desired_secret(bundle(SPEC, name="one"), composed(bundle(SPEC), data=data), KEY)
    two = desired_secret(bundle(SPEC, name="two"), composed(bundle(SPEC), data=data), KEY)
    assert one.encoded is not None
    assert two.encoded is not None
    assert one.encoded == two.encoded == {k: b64(v) for k, v in one.binary_data.items()}
    assert one.encoded["tls.key"] is two.encoded["tls.key"]
    assert one.encoded["big"] == b64(big)
    renewed = desired_secret(
        bundle(SPEC, name="one"), composed(bundle(SPEC), data={**data, "tls.key": b"new"}), KEY
    )
    assert renewed.encoded is not None
    assert renewed.encoded["tls.key"] == b64(b"new")


def test_a_source_change_updates_and_an_immutable_secret_is_replaced() -> None:
    """Case 4: immutable (by the spec or by hand) means delete with preconditions, create."""
    b = bundle({**SPEC, "immutable": True})
    current = written_secret(b)
    renewed = {"tls.crt": b"renewed cert", "tls.key": b"renewed key"}
    decision = decide_secret(b, current, data=renewed)
    assert decision.action is Action.REPLACE
    assert decision.precondition == {"uid": "secret-uid", "resourceVersion": "7"}
    assert "uid" not in decision.body["metadata"]
    assert "Secret tls is immutable" in decision.message
    mutable = bundle(SPEC)
    current = written_secret(mutable)
    assert decide_secret(mutable, current, data=renewed).action is Action.UPDATE
    current["immutable"] = True
    assert decide_secret(mutable, current, data=renewed).action is Action.REPLACE


def test_a_secret_cbop_does_not_manage_is_never_touched() -> None:
    """Case 11, and reflector#238: a same-named Secret of someone else's is a conflict."""
    b = bundle(SPEC)
    foreign = {
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "tls", "namespace": "demo", "uid": "x", "resourceVersion": "1"},
        "data": {"tls.crt": b64(b"theirs"), "tls.key": b64(b"theirs")},
    }
    decision = decide_secret(b, foreign)
    assert decision.action is Action.CONFLICT
    assert decision.body is None
    assert "Secret tls exists and is not managed by this ConfigBundle" in decision.message
    assert "spec.target.name" in decision.message


def test_a_secret_of_another_type_is_reported_not_fought() -> None:
    b = bundle(SPEC)
    current = written_secret(b)
    current["type"] = "Opaque"
    decision = decide_secret(b, current)
    assert decision.action is Action.CONFLICT
    assert decision.body is None
    assert "has type Opaque, and spec.target.type is kubernetes.io/tls" in decision.message
    assert "delete it" in decision.message


def test_an_orphaned_secret_is_released_and_taken_back_by_its_namesake() -> None:
    b = bundle({**SPEC, "deletionPolicy": "Orphan"}, finalizers=[FINALIZER_ORPHAN])
    current = written_secret(b)
    deleting = bundle(
        {**SPEC, "deletionPolicy": "Orphan"}, finalizers=[FINALIZER_ORPHAN], deleting=True
    )
    release = decide_secret(deleting, current)
    assert release.action is Action.RELEASE
    assert release.message == "Secret tls released (deletionPolicy Orphan)"
    released = release_body(current, deleting)
    assert released["metadata"]["ownerReferences"] == []
    assert released["metadata"]["annotations"]["cbop.dev/released-by"] == "demo/app"
    assert released["data"] == current["data"]
    back = decide_secret(b, released)
    assert back.action is Action.UPDATE
    assert back.adopted
    assert back.body["metadata"]["ownerReferences"][0]["uid"] == UID


def test_a_tls_secret_without_its_keys_is_invalid_and_names_them_only() -> None:
    b = bundle(SPEC)
    spec = composed(b, data={"tls.crt": TLS_CERT})
    err = spec_error(spec)
    assert isinstance(err, SpecError)
    assert err.reason is Reason.INVALID_SPEC
    assert "must hold tls.key" in err.message
    assert err.spec is spec  # the deletionPolicy holds, the last good content stays
    assert b"cert-bytes".decode() not in err.message
    assert spec_error(composed(b)) is None


# ------------------------------------------------------------------ no values shown


def test_the_dry_run_diff_shows_keys_sizes_and_changes_never_values() -> None:
    b = bundle(SPEC)
    current = written_secret(b)
    desired = decide_secret(b, current, data={"tls.crt": TLS_CERT, "tls.key": b"n" * len(TLS_KEY)})
    diff = secret_diff(current, desired.body)
    assert diff.startswith(SECRET_VALUES_HIDDEN)
    assert f"-  tls.key: ({len(TLS_KEY):,} bytes)" in diff
    assert f"+  tls.key: ({len(TLS_KEY):,} bytes, changed)" in diff
    assert f"\n   tls.crt: ({len(TLS_CERT):,} bytes)\n" in diff  # unchanged: context
    for secret_text in (b"hunter2", b"cert-bytes", b64(TLS_KEY).encode(), b"nnnn"):
        assert secret_text.decode() not in diff
    assert "hmac-sha256" not in diff
    assert "sha256" not in diff
    assert secret_diff(current, current) == ""
    created = secret_diff(None, written_secret(b))
    assert f"+  tls.crt: ({len(TLS_CERT):,} bytes)" in created


def test_messages_cbop_did_not_build_lose_every_value() -> None:
    content = {"password": b"hunter2-secret", "short": b"ab", "pem": TLS_KEY}
    message = (
        'Secret "x" is invalid: data[password]: Invalid value: "hunter2-secret"; '
        f"as base64 {b64(b'hunter2-secret')}; a line: MIIE-hunter2-key; ab stays"
    )
    out = redact(message, content)
    assert "hunter2" not in out
    assert b64(b"hunter2-secret") not in out
    assert out.count("[redacted]") == 3
    assert "data[password]" in out
    assert "ab stays" in out


def test_cbop_release_releases_a_secret_target_and_never_drops_the_finalizer_first() -> None:
    """``cbop release`` (release_deleted) on a deleted Orphan bundle with a Secret
    target: the Secret keeps its content and loses cbop's owner reference, then the
    finalizer comes off. Without Secret rights the release fails, the finalizer stays."""
    spec = {**SPEC, "deletionPolicy": "Orphan"}
    kube = FakeKube()
    kube.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[FINALIZER_ORPHAN]))
    secret = written_secret(bundle(spec))
    for field in ("uid", "resourceVersion"):
        del secret["metadata"][field]
    kube.tracker.add(SECRETS, secret)
    kube.tracker.delete(CONFIGBUNDLES, "demo", "app")
    listed = kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    done = release_deleted(kube, listed)
    assert done == Release("demo/app", "demo/tls", ConfigMapOutcome.RELEASED, True, Kind.SECRET)
    kept = kube.tracker.get(SECRETS, "demo", "tls")
    assert kept["data"] == secret["data"]
    assert kept["type"] == "kubernetes.io/tls"
    assert kept["metadata"]["ownerReferences"] == []
    assert [(a.verb, a.resource) for a in kube.write_actions()] == [
        ("update", "secrets"),
        ("patch", "configbundles"),
    ]

    refused = FakeKube()
    refused.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[FINALIZER_ORPHAN]))
    refused.tracker.delete(CONFIGBUNDLES, "demo", "app")
    forbidden = ApiError(403, "Forbidden", 'secrets "tls" is forbidden')
    refused.prepend_reactor("get", "secrets", fail(forbidden))
    with pytest.raises(ApiError):
        release_deleted(refused, refused.tracker.get(CONFIGBUNDLES, "demo", "app"))
    assert refused.write_actions() == []
