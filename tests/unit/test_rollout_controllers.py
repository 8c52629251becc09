"""The rollout controllers' wiring: one controller per workload kind, sharing informers.

The ConfigBundle controller and the three rollout controllers read the managed
ConfigMaps through one informer per namespace (the factory's key is resource, scope and
selector), and each workload kind is cached with the opt-in label selector and the
ConfigMap index the rollout's map function queries; the ConfigBundle controller reads
the same workload informers, and caches only pinned ReplicaSets, ControllerRevisions
and pods (docs/revisions.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cbop.api import MANAGED_SELECTOR, SOURCE_SELECTOR
from cbop.configbundle import controller as configbundle
from cbop.informers import SharedInformerFactory
from cbop.keys import CONTROLLER_UID_INDEX
from cbop.kube import (
    CONFIGMAPS,
    CONTROLLERREVISIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    SECRETS,
    STATEFULSETS,
)
from cbop.manager import Manager as CbopManager
from cbop.manager import Options
from cbop.revisions.caches import PLAIN_INDEX, READS_INDEX, REVISION_INDEX
from cbop.revisions.model import LABEL_PINNED, PINNED_SELECTOR
from cbop.rollout import CONFIGMAP_INDEX, ROLLOUT_SELECTOR, SECRET_INDEX
from cbop.rollout import controller as rollout
from cbop.runtime import Scope
from cbop.secretaccess import SecretsScope
from cbop_testing.fakekube import FakeKube


@pytest.fixture
def scope() -> Iterator[Scope]:
    kube = FakeKube()
    informers = SharedInformerFactory(kube, namespaces=["a", "b"], resync_period=0)
    made = Scope(kube, informers=informers)
    yield made
    informers.shutdown()


def test_rollout_controllers_share_the_configbundle_controllers_configmap_informer(
    scope: Scope,
) -> None:
    configbundle.setup(scope)
    controllers = rollout.setup(scope, workers=1)
    assert [c.name for c in controllers] == [
        "rollout-deployment",
        "rollout-statefulset",
        "rollout-daemonset",
    ]
    assert set(scope.controllers) == {"configbundle", *(c.name for c in controllers)}
    factory = scope.informers
    # One informer per (resource, namespace, selector): the managed-ConfigMap informer
    # serves all four controllers (a second selector would add "configmaps/a[...]");
    # the other ConfigMap informer is the ConfigBundle controller's source ConfigMaps.
    # The history and pods: only those of pinned templates.
    assert sorted(inf.name for inf in factory.informers) == sorted(
        [
            f"{plural}/{ns}"
            for plural in (
                "configbundles",
                "configmaps",
                "controllerrevisions",
                "daemonsets",
                "deployments",
                "pods",
                "replicasets",
                "statefulsets",
            )
            for ns in ("a", "b")
        ]
        + [f"configmaps/{ns}[cbop.dev/source=true]" for ns in ("a", "b")]
    )
    for resource in (REPLICASETS, CONTROLLERREVISIONS, PODS):
        for informer in factory.informers_for(resource, label_selector=PINNED_SELECTOR).values():
            assert {PLAIN_INDEX, REVISION_INDEX} <= set(informer.indexer().index_names())
    configmaps = factory.informers_for(CONFIGMAPS, label_selector=configbundle.MANAGED_SELECTOR)
    for informer in configmaps.values():
        assert CONTROLLER_UID_INDEX in informer.indexer().index_names()
    for resource in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS):
        for informer in factory.informers_for(resource, label_selector=ROLLOUT_SELECTOR).values():
            assert CONFIGMAP_INDEX in informer.indexer().index_names()
            assert READS_INDEX in informer.indexer().index_names()


def test_a_second_setup_is_refused(scope: Scope) -> None:
    rollout.setup(scope)
    with pytest.raises(ValueError, match="rollout-deployment"):
        rollout.setup(scope)


@pytest.mark.parametrize("enabled", [True, False], ids=["rollout", "no-rollout"])
def test_cbop_manager_runs_the_rollout_only_with_the_flag(enabled: bool) -> None:
    """``--rollout`` adds the three controllers and ``cbop_rollouts_total{kind}`` (each
    kind at 0); without it neither, and no workload informer is created: the bundles
    still cache the pinned history and pods, to keep what they name."""
    made = CbopManager(
        FakeKube(),
        Options(
            namespaces=("a",),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            settings={"rollout": enabled},
        ),
    )
    rollouts = {"rollout-deployment", "rollout-statefulset", "rollout-daemonset"}
    (scope,) = made.prepared_scopes()
    assert set(scope.controllers) == {"configbundle", *(rollouts if enabled else ())}
    counted = {
        kind: made.registry.get_sample_value("cbop_rollouts_total", {"kind": kind})
        for kind in ("Deployment", "StatefulSet", "DaemonSet")
    }
    if enabled:
        assert counted == {"Deployment": 0.0, "StatefulSet": 0.0, "DaemonSet": 0.0}
    else:
        assert counted == {"Deployment": None, "StatefulSet": None, "DaemonSet": None}
        assert sorted(inf.name for inf in scope.informers.informers) == [
            "configbundles/a",
            "configmaps/a",
            "configmaps/a[cbop.dev/source=true]",
            "controllerrevisions/a",
            "pods/a",
            "replicasets/a",
        ]


@pytest.mark.parametrize(
    ("served", "namespaces"),
    [(None, {"a", "b"}), (("b",), {"b"})],
    ids=["every namespace", "--secrets-namespace b"],
)
def test_with_secrets_the_rollout_watches_only_the_managed_secrets(
    scope: Scope, served: tuple[str, ...] | None, namespaces: set[str]
) -> None:
    """With Secrets on, the rollout reads the ConfigBundle controller's informer of the
    Secrets cbop manages (label selector on the API server), in the namespaces it
    serves: no Secret informer of its own, none without a label selector, and its
    workload caches carry the Secret index its map function queries."""
    secrets = SecretsScope(enabled=True, namespaces=served)
    configbundle.setup(scope, secrets=secrets)
    before = {k for k in scope.informers._informers if k[0] == SECRETS}
    rollout.setup(scope, workers=1, secrets=secrets)
    keys = {k for k in scope.informers._informers if k[0] == SECRETS}
    assert keys == before
    assert {(ns, selector) for _, ns, selector, _ in keys} == {
        (ns, selector) for ns in namespaces for selector in (MANAGED_SELECTOR, SOURCE_SELECTOR)
    }
    workloads = scope.lister(DEPLOYMENTS, label_selector=ROLLOUT_SELECTOR)
    assert workloads.by_index(SECRET_INDEX, "b/tls") == []


def test_with_secrets_off_the_rollout_watches_no_secret(scope: Scope) -> None:
    configbundle.setup(scope)
    rollout.setup(scope, workers=1, secrets=SecretsScope())
    assert [k for k in scope.informers._informers if k[0] == SECRETS] == []


def _history_object(name: str, *, pinned: bool) -> dict[str, object]:
    labels = {"app": "web", **({LABEL_PINNED: "true"} if pinned else {})}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c"}]}}
    return {
        "metadata": {"name": name, "namespace": "a", "labels": labels},
        "spec": {"template": template},
    }


@pytest.mark.parametrize("enabled", [True, False], ids=["rollout", "no-rollout"])
def test_the_history_and_pods_of_unpinned_templates_are_never_listed_nor_cached(
    enabled: bool,
) -> None:
    """The server filters the ReplicaSets, ControllerRevisions and pods cbop caches: every
    LIST and WATCH of them carries the pinned selector, so a workload that does not use
    revisions costs cbop no memory for its history."""
    kube = FakeKube()
    for name, pinned in (("pinned", True), ("other", False)):
        kube.tracker.add(REPLICASETS, _history_object(name, pinned=pinned))
        kube.tracker.add(CONTROLLERREVISIONS, _history_object(name, pinned=pinned))
        pod = _history_object(name, pinned=pinned)
        kube.tracker.add(PODS, {**pod, "spec": {"containers": [{"name": "c"}]}})
    made = CbopManager(
        kube,
        Options(
            namespaces=("a",),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            settings={"rollout": enabled},
        ),
    )
    (scope,) = made.prepared_scopes()
    scope.informers.start()
    try:
        assert scope.informers.wait_for_cache_sync(timeout=10)
        history = {r.plural for r in (REPLICASETS, CONTROLLERREVISIONS, PODS)}
        requests = [a for a in kube.actions if a.verb in ("list", "watch")]
        selectors = {
            (a.resource, a.options.get("label_selector")) for a in requests if a.resource in history
        }
        assert selectors == {(plural, PINNED_SELECTOR) for plural in history}
        for resource in (REPLICASETS, CONTROLLERREVISIONS, PODS):
            cached = [
                o["metadata"]["name"]
                for informer in scope.informers.informers
                if informer.name.startswith(f"{resource.plural}/")
                for o in informer.indexer().list()
            ]
            assert cached == ["pinned"], resource.plural
    finally:
        scope.informers.shutdown()
