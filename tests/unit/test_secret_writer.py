"""The Secret writer alone: its writes, its recovery, and what its errors pass on.

:class:`cbop.configbundle.secretwrites.SecretWriter` against the fake API server and a
CacheLister, with the digest key in the fake server and reports to a fake that notes
Events and counts (with their kind); no reconciler. Every error it passes on has the
content's values cut out: the API server quotes a refused value in its message.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from cbop.api import Kind, Reason, keyed_content_hash, parse_spec
from cbop.api.compose import SecretReads, compose, composed_spec
from cbop.configbundle.decision import SECRET, Action, decide
from cbop.configbundle.interfaces import RejectedError, Requeue, TargetWriter
from cbop.configbundle.secret import in_sync
from cbop.configbundle.secretwrites import SecretWriter
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import SECRETS
from cbop.secretaccess.digestkey import DigestKey
from cbop_testing.fakekube import CacheLister, FakeKube, errors, fail
from cbop_testing.objects import UID, bundle

KEY = b"k" * 32
VALUE = b"hunter2-the-value-that-must-not-leak"
SPEC: dict[str, Any] = {
    "target": {"kind": "Secret", "name": "creds"},
    "sources": [{"secret": {"name": "src"}}],
}


class Reports:
    """A fake of :class:`cbop.configbundle.interfaces.Reporting`: notes what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.counts: list[tuple[str, Kind]] = []

    def event(
        self, bundle: Any, type_: str, reason: str, message: str, *, routine: bool = False
    ) -> None:
        self.events.append((type_, reason, message))

    def count(self, operation: str, *, kind: Kind = Kind.CONFIGMAP) -> None:
        self.counts.append((operation, kind))


class Setup:
    """A fake server holding the digest key and ``secrets``, a cache of the managed ones,
    and a writer over both."""

    def __init__(self, *secrets: dict[str, Any], dry_run: bool = False) -> None:
        self.kube = FakeKube()
        key = base64.b64encode(KEY).decode()
        self.kube.tracker.add(
            SECRETS,
            {
                "metadata": {"name": "cbop-digest-key", "namespace": "cbop-system"},
                "data": {"key": key},
            },
        )
        for secret in secrets:
            self.kube.tracker.add(SECRETS, secret)
        self.cache = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.cache.sync(self.kube.tracker, SECRETS)
        self.reports = Reports()
        self.writer = SecretWriter(
            client=self.kube,
            secrets=self.cache,
            digest_key=DigestKey(self.kube, "cbop-system", "cbop-digest-key"),
            reports=self.reports,
            dry_run=dry_run,
        )

    def decide(
        self, b: dict[str, Any], current: dict[str, Any] | None, value: bytes = VALUE
    ) -> Any:
        spec = composed(b, value)
        return spec, decide(
            b, spec, current, desired_of=self.writer.desired, synced=in_sync, ops=SECRET
        )

    def verbs(self) -> list[tuple[str, str]]:
        """Every call on Secrets but the digest key's: (verb, name)."""
        return [
            (a.verb, a.name or "")
            for a in self.kube.actions
            if a.resource == "secrets" and a.name != "cbop-digest-key"
        ]

    def stored(self, name: str = "creds") -> dict[str, Any]:
        return self.kube.tracker.get(SECRETS, "demo", name)


def composed(b: dict[str, Any], value: bytes) -> Any:
    """``b``'s spec with its one source Secret composed in."""
    source = {
        "kind": "Secret",
        "metadata": {"name": "src", "namespace": "demo", "labels": {"cbop.dev/source": "true"}},
        "data": {"password": base64.b64encode(value).decode()},
    }

    def digest(found: Any) -> str:
        raw = {k: base64.b64decode(v) for k, v in found["data"].items()}
        return keyed_content_hash(KEY, {}, raw)

    spec = parse_spec(b)
    reads = SecretReads(lambda ns, n: source if n == "src" else None, digest)
    return composed_spec(spec, compose(spec, "demo", lambda ns, n: None, secrets=reads))


def _protocol(writer: SecretWriter) -> TargetWriter:
    """Never called: mypy checks that the writer is a TargetWriter."""
    return writer


def test_a_create_and_an_update_are_counted_as_secret_writes() -> None:
    s = Setup()
    b = bundle(SPEC)
    spec, decision = s.decide(b, None)
    assert decision.action is Action.CREATE
    s.writer.apply(b, spec, decision, None)
    stored = s.stored()
    assert base64.b64decode(stored["data"]["password"]) == VALUE
    assert stored["metadata"]["annotations"]["cbop.dev/content-hash"].startswith("hmac-sha256:")
    spec, decision = s.decide(b, stored, b"renewed")
    assert decision.action is Action.UPDATE
    s.writer.apply(b, spec, decision, stored)
    assert base64.b64decode(s.stored()["data"]["password"]) == b"renewed"
    assert s.reports.counts == [("create", Kind.SECRET), ("update", Kind.SECRET)]
    assert s.verbs() == [("create", "creds"), ("update", "creds")]


def test_a_refusal_that_quotes_the_value_is_passed_on_without_it() -> None:
    s = Setup()
    b = bundle(SPEC)
    spec, decision = s.decide(b, None)
    quoted = errors.invalid(
        "Secret", "creds", [("data[password]", f"Invalid value: {VALUE.decode()!r}")]
    )
    s.kube.prepend_reactor("create", "secrets", fail(quoted))
    with pytest.raises(RejectedError) as raised:
        s.writer.apply(b, spec, decision, None)
    assert VALUE.decode() not in raised.value.message
    assert "creds" in raised.value.message


def test_a_request_too_large_is_secret_too_large_and_names_no_value() -> None:
    s = Setup()
    b = bundle(SPEC)
    spec, decision = s.decide(b, None)
    too_large = errors.status_error(413, "RequestEntityTooLarge", "request entity too large")
    s.kube.prepend_reactor("create", "secrets", fail(too_large))
    with pytest.raises(RejectedError) as raised:
        s.writer.apply(b, spec, decision, None)
    assert raised.value.condition_reason is Reason.SECRET_TOO_LARGE
    assert "Secret creds" in raised.value.message


def test_a_conflict_is_a_requeue() -> None:
    s = Setup()
    b = bundle(SPEC)
    spec, decision = s.decide(b, None)
    s.kube.prepend_reactor("create", "secrets", fail(errors.conflict(SECRETS, "creds")))
    with pytest.raises(Requeue):
        s.writer.apply(b, spec, decision, None)


def test_a_create_on_a_stale_cache_is_decided_again_from_a_fresh_read() -> None:
    s = Setup()
    b = bundle(SPEC)
    old_spec, old = s.decide(b, None, b"old")
    s.writer.apply(b, old_spec, old, None)  # made, but the cache has not seen it
    spec, decision = s.decide(b, None)
    assert decision.action is Action.CREATE
    carried, against = s.writer.apply(b, spec, decision, None)
    assert carried.action is Action.UPDATE
    assert against is not None
    assert s.verbs() == [
        ("create", "creds"),
        ("create", "creds"),
        ("get", "creds"),
        ("update", "creds"),
    ]
    assert base64.b64decode(s.stored()["data"]["password"]) == VALUE


def test_an_immutable_secret_is_replaced_with_preconditions() -> None:
    s = Setup()
    b = bundle({**SPEC, "immutable": True})
    spec, decision = s.decide(b, None, b"old")
    s.writer.apply(b, spec, decision, None)
    current = s.stored()
    spec, decision = s.decide(b, current)
    assert decision.action is Action.REPLACE
    s.writer.apply(b, spec, decision, current)
    delete = next(a for a in s.kube.write_actions() if a.verb == "delete")
    assert delete.options["preconditions"]["uid"] == current["metadata"]["uid"]
    assert base64.b64decode(s.stored()["data"]["password"]) == VALUE
    assert [op for op, _ in s.reports.counts] == ["create", "delete", "create"]


def test_a_secret_left_under_an_old_name_is_deleted_by_uid_and_no_other() -> None:
    owned = {
        "metadata": {
            "name": "old-name",
            "namespace": "demo",
            "uid": "old-uid",
            "labels": {"app.kubernetes.io/managed-by": "cbop"},
            "ownerReferences": [
                {"apiVersion": "cbop.dev/v1beta1", "kind": "ConfigBundle", "name": "app",
                 "uid": UID, "controller": True},
            ],
        },
        "data": {},
    }  # fmt: skip
    foreign = {"metadata": {"name": "theirs", "namespace": "demo"}, "data": {}}
    s = Setup(owned, foreign)
    b = bundle(SPEC)
    _, decision = s.decide(b, None)
    assert s.writer.controls_others(b, "creds")
    assert s.writer.delete_stale(b, decision) == ["old-name"]
    assert s.verbs() == [("delete", "old-name")]
    assert s.kube.tracker.get(SECRETS, "demo", "theirs") is not None
    (event,) = s.reports.events
    assert event[1] == "Deleted"
