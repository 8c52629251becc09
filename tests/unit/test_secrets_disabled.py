"""Secrets off (the default), or outside ``--secrets-namespace``: a bundle with a Secret
target is ``SecretsDisabled``, says so in its status, an Event and a metric, and nothing
is read or written for it (docs/secrets.md, "Turning it on")."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.api import FINALIZER_ORPHAN, Reason
from cbop.configbundle import Action, Reconciler
from cbop.configbundle.settings import secrets_scope
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop.metrics.controller import SecretsDisabledCollector
from cbop.runtime.definition import FlagValues
from cbop.secretaccess.scope import SecretsScope, parse_namespaces
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder
from cbop_testing.objects import bundle

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
SECRET_SPEC: dict[str, Any] = {
    "target": {"kind": "Secret", "name": "tls", "type": "kubernetes.io/tls"},
    "sources": [{"secret": {"name": "wildcard", "namespace": "cert-manager"}}],
    "deletionPolicy": "Orphan",
}


def reconcile(
    b: dict[str, Any], scope: SecretsScope | None = None
) -> tuple[FakeKube, FakeRecorder, Any]:
    kube = FakeKube()
    kube.tracker.add(CONFIGBUNDLES, b)
    recorder = FakeRecorder()
    configmaps = CacheLister((), indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
    r = Reconciler(
        client=kube,
        bundles=CacheLister(()).sync(kube.tracker, CONFIGBUNDLES),
        configmaps=configmaps.sync(kube.tracker, CONFIGMAPS),
        recorder=recorder,
        now=lambda: NOW,
        secrets=scope,
    )
    return kube, recorder, r.reconcile("demo/app")


def test_with_secrets_off_a_secret_target_is_refused_and_nothing_is_read_or_written() -> None:
    kube, recorder, result = reconcile(bundle(SECRET_SPEC))
    assert result.action is Action.INVALID
    assert (result.ready, result.reason) == ("False", Reason.SECRETS_DISABLED)
    assert "--secrets" in result.message
    assert "manifests/secrets/" in result.message
    assert result.config_map is None
    # The one write: the status. No Secret, no ConfigMap, no finalizer.
    assert [(a.verb, a.resource, a.subresource) for a in kube.actions] == [
        ("patch", "configbundles", "status")
    ]
    status = kube.actions[0].body["status"]
    assert "configMapName" not in status
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "SecretsDisabled")
    assert recorder.reasons == ["SecretsDisabled"]
    assert recorder.recorded[0].type == "Warning"


def test_outside_the_secrets_namespaces_the_message_names_them() -> None:
    scope = SecretsScope(enabled=True, namespaces=("team-a", "team-b"))
    _, _, result = reconcile(bundle(SECRET_SPEC), scope)
    assert result.reason is Reason.SECRETS_DISABLED
    assert "namespace demo is not among" in result.message
    assert "--secrets-namespace team-a, team-b" in result.message


def test_a_deleted_orphan_bundle_keeps_its_finalizer_while_secrets_are_off() -> None:
    """Removing it would let the garbage collector delete the Secret Orphan keeps."""
    b = bundle(SECRET_SPEC, finalizers=[FINALIZER_ORPHAN], deleting=True)
    kube, recorder, result = reconcile(b)
    assert result.reason is Reason.SECRETS_DISABLED
    assert "keeps its cbop.dev/orphan finalizer" in result.message
    assert [(a.verb, a.subresource) for a in kube.actions] == [("patch", "status")]
    assert kube.tracker.get(CONFIGBUNDLES, "demo", "app")["metadata"]["finalizers"] == [
        FINALIZER_ORPHAN
    ]
    assert recorder.reasons == ["SecretsDisabled"]


def test_a_configmap_bundle_is_not_concerned() -> None:
    _, recorder, result = reconcile(bundle({"data": {"a": "1"}}))
    assert (result.action, result.ready) == (Action.CREATE, "True")
    assert "SecretsDisabled" not in recorder.reasons


@pytest.mark.parametrize(
    ("scope", "namespace", "served"),
    [
        (SecretsScope(), "demo", False),
        (SecretsScope(enabled=True), "demo", True),
        (SecretsScope(enabled=True, namespaces=("demo",)), "demo", True),
        (SecretsScope(enabled=True, namespaces=("other",)), "demo", False),
    ],
)
def test_the_scope_serves(scope: SecretsScope, namespace: str, served: bool) -> None:
    assert scope.serves(namespace) is served
    assert (scope.refusal(bundle(SECRET_SPEC, namespace=namespace)) is None) is served
    assert scope.refusal(bundle({"data": {"a": "1"}}, namespace=namespace)) is None


def test_the_informers_live_only_in_the_served_namespaces() -> None:
    assert SecretsScope().informer_namespaces((None,)) == ()
    assert SecretsScope(enabled=True).informer_namespaces((None,)) == (None,)
    assert SecretsScope(enabled=True).informer_namespaces(("a", "b")) == ("a", "b")
    narrowed = SecretsScope(enabled=True, namespaces=("b", "c"))
    assert narrowed.informer_namespaces((None,)) == ("b", "c")
    assert narrowed.informer_namespaces(("a", "b")) == ("b",)
    assert parse_namespaces(" b, c ,,b") == ("b", "c")
    assert parse_namespaces("") is None
    settings = {"secrets": True, "secrets_namespace": "x,y"}
    assert secrets_scope(FlagValues(settings)) == SecretsScope(True, ("x", "y"))


def test_the_gauge_counts_the_refused_bundles_and_names_none() -> None:
    scope = SecretsScope()
    bundles = [
        bundle(SECRET_SPEC, name="a"),
        bundle(SECRET_SPEC, name="b"),
        bundle({"data": {"a": "1"}}, name="c"),
    ]
    registry = CollectorRegistry()
    registry.register(
        SecretsDisabledCollector(lambda: bundles, lambda b: scope.refusal(b) is not None)
    )
    assert registry.get_sample_value("cbop_configbundles_secrets_disabled") == 2.0
    (family,) = [f for f in registry.collect() if f.name == "cbop_configbundles_secrets_disabled"]
    assert [s.labels for s in family.samples] == [{}]
