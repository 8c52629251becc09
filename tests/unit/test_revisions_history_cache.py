"""The history caches keep only what their readers use, listed and watched alike.

A ReplicaSet, ControllerRevision or pod as its controller writes it goes through the
informer's transform (:func:`strip_history`, :func:`strip_pod`); every question
:class:`cbop.revisions.caches.History` answers, and every index value, is the same for
the stripped object as for the whole one.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from cbop.configbundle import controller as configbundle
from cbop.informers import FuncHandler, SharedInformerFactory
from cbop.kube import REPLICASETS
from cbop.revisions.caches import (
    HISTORY_INDEXERS,
    PLAIN_INDEX,
    POD_INDEXERS,
    REVISION_INDEX,
    History,
    count_unpinned,
    strip_history,
    strip_pod,
)
from cbop.revisions.legacy import LEGACY_DIGEST_ANNOTATION
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    PINNED_SELECTOR,
    format_mapping,
    mapping_of,
)
from cbop.rollout import controller as rollout
from cbop.runtime import Scope
from cbop_testing.fakekube import CacheLister, FakeKube

MAPPING = {"conf": "conf-7c9d2f41ab", "env": "env-0123456789"}
OLD = {"conf": "conf-1111111111", "env": "env-0123456789"}


def _template(mapping: Mapping[str, str], hash_: str) -> dict[str, Any]:
    return {
        "metadata": {
            "creationTimestamp": None,
            "labels": {"app": "web", LABEL_PINNED: "true", "pod-template-hash": hash_},
            "annotations": {
                ANNOTATION_REVISIONS: format_mapping(mapping),
                LEGACY_DIGEST_ANNOTATION: "ab" * 32,
                "kubectl.kubernetes.io/restartedAt": "2026-12-07T10:00:00Z",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "envFrom": [{"configMapRef": {"name": "env"}}],
                    "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}],
                }
            ],
            "volumes": [{"name": "conf", "configMap": {"name": "conf", "defaultMode": 420}}],
            "restartPolicy": "Always",
        },
    }


def replicaset(name: str, mapping: Mapping[str, str], hash_: str) -> dict[str, Any]:
    """A ReplicaSet as kube-controller-manager's deployment controller writes it."""
    template = _template(mapping, hash_)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": "demo",
            "uid": f"uid-{name}",
            "resourceVersion": "1234",
            "generation": 2,
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {
                "deployment.kubernetes.io/desired-replicas": "1",
                "deployment.kubernetes.io/max-replicas": "2",
                "deployment.kubernetes.io/revision": "3",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "uid-web",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": hash_}},
            "template": template,
        },
        "status": {"replicas": 1, "observedGeneration": 2},
    }


def pod(name: str, owner: str, mapping: Mapping[str, str], *, rewritten: bool) -> dict[str, Any]:
    """A pod of ReplicaSet ``owner``; ``rewritten``: the policy pinned its references."""
    template = _template(mapping, owner.rpartition("-")[2])
    spec = copy.deepcopy(template["spec"])
    if rewritten:
        spec["containers"][0]["envFrom"][0]["configMapRef"]["name"] = mapping["env"]
        spec["volumes"][0]["configMap"]["name"] = mapping["conf"]
    spec["containers"][0]["env"] = [{"name": "MODE", "value": "prod"}]
    return {
        "metadata": {
            **template["metadata"],
            "name": name,
            "namespace": "demo",
            "uid": f"uid-{name}",
            "resourceVersion": "99",
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {**spec, "nodeName": "node-1", "serviceAccountName": "default"},
        "status": {"phase": "Running"},
    }


def deployment() -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "demo", "uid": "uid-web"},
        "spec": {"template": _template(MAPPING, "")},
    }


def _history(transform: bool) -> History:
    strip = strip_history if transform else (lambda o: o)
    strip_p = strip_pod if transform else (lambda o: o)
    replicasets = [
        strip(copy.deepcopy(replicaset("web-new", MAPPING, "new"))),
        strip(copy.deepcopy(replicaset("web-old", OLD, "old"))),
    ]
    pods = [
        strip_p(copy.deepcopy(pod("web-new-a", "web-new", MAPPING, rewritten=True))),
        strip_p(copy.deepcopy(pod("web-old-a", "web-old", OLD, rewritten=False))),
    ]
    return History(
        replicasets=CacheLister(replicasets, indexers=dict(HISTORY_INDEXERS)),
        controllerrevisions=CacheLister((), indexers=dict(HISTORY_INDEXERS)),
        pods=CacheLister(pods, indexers={**HISTORY_INDEXERS, **POD_INDEXERS}),
        workloads={"Deployment": CacheLister([deployment()], indexers=dict(HISTORY_INDEXERS))},
    )


def test_strip_history_keeps_the_read_metadata_of_a_replicaset_only() -> None:
    whole = replicaset("web-new", MAPPING, "new")
    stripped = strip_history(copy.deepcopy(whole))
    assert stripped == {
        "metadata": {
            "name": "web-new",
            "namespace": "demo",
            "uid": "uid-web-new",
            "resourceVersion": "1234",
            "labels": {LABEL_PINNED: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "uid-web",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "template": {
                "metadata": {
                    "labels": {LABEL_PINNED: "true"},
                    "annotations": {
                        ANNOTATION_REVISIONS: format_mapping(MAPPING),
                        LEGACY_DIGEST_ANNOTATION: "ab" * 32,
                    },
                }
            }
        },
    }
    assert mapping_of(stripped) == mapping_of(whole) == MAPPING
    for name, fn in HISTORY_INDEXERS.items():
        assert fn(stripped) == fn(whole), name


def test_strip_history_keeps_a_controllerrevisions_template_in_its_place() -> None:
    rs = replicaset("db-0", MAPPING, "x")
    whole = {
        "metadata": {
            **rs["metadata"],
            "ownerReferences": [
                {**rs["metadata"]["ownerReferences"][0], "kind": "StatefulSet", "name": "db"}
            ],
        },
        "data": {"spec": {"template": rs["spec"]["template"]}},
        "revision": 3,
    }
    stripped = strip_history(copy.deepcopy(whole))
    assert set(stripped) == {"metadata", "data"}
    assert stripped["data"]["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_REVISIONS: format_mapping(MAPPING),
        LEGACY_DIGEST_ANNOTATION: "ab" * 32,
    }
    assert stripped["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert mapping_of(stripped) == MAPPING
    for name, fn in HISTORY_INDEXERS.items():
        assert fn(stripped) == fn(whole), name


def test_strip_drops_owner_references_that_are_not_the_controller() -> None:
    whole = replicaset("web-new", MAPPING, "new")
    whole["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "uid-x"}
    )
    stripped = strip_history(copy.deepcopy(whole))
    assert [r["kind"] for r in stripped["metadata"]["ownerReferences"]] == ["Deployment"]


def test_strip_pod_keeps_what_the_unpinned_check_and_its_indexes_read() -> None:
    for rewritten in (True, False):
        whole = pod("web-new-a", "web-new", MAPPING, rewritten=rewritten)
        stripped = strip_pod(copy.deepcopy(whole))
        assert count_unpinned([stripped]) == count_unpinned([whole]) == (0 if rewritten else 1)
        for name, fn in {**HISTORY_INDEXERS, **POD_INDEXERS}.items():
            assert fn(stripped) == fn(whole), name
        assert "status" not in stripped
        assert "nodeName" not in stripped["spec"]
        assert stripped["metadata"]["labels"] == {LABEL_PINNED: "true"}
        assert stripped["metadata"]["ownerReferences"][0]["name"] == "web-new"


def test_history_answers_the_same_for_stripped_and_whole_objects() -> None:
    whole, stripped = _history(False), _history(True)
    for h in (whole, stripped):
        assert h.named("demo", "conf-7c9d2f41ab")
        assert h.named("demo", "conf-1111111111")
        assert not h.named("demo", "conf-2222222222")
    assert [(k, o["metadata"]["name"]) for k, o in stripped.naming("demo", "conf")] == [
        (k, o["metadata"]["name"]) for k, o in whole.naming("demo", "conf")
    ]
    assert [
        (k, o["metadata"]["name"])
        for k, o in stripped.naming_other("demo", "conf", {"conf-7c9d2f41ab"})
    ] == [("ReplicaSet", "web-old"), ("Pod", "web-old-a")]
    assert (
        [p["metadata"]["name"] for p in stripped.unpinned_pods("demo", "conf")]
        == [p["metadata"]["name"] for p in whole.unpinned_pods("demo", "conf")]
        == ["web-old-a"]
    )
    for kind, name in (("Pod", "web-old-a"), ("ReplicaSet", "web-new")):
        lister = stripped.pods if kind == "Pod" else stripped.replicasets
        obj = lister.get("demo", name)
        assert obj is not None
        owner_kind, owner = stripped.workload_of(kind, obj)
        assert (owner_kind, owner["metadata"]["name"]) == ("Deployment", "web")


def test_the_pinned_replicaset_informer_strips_listed_and_watched_objects() -> None:
    """The transform is the informer's: a listed ReplicaSet and a watched one are both stripped."""
    kube = FakeKube()
    kube.tracker.add(REPLICASETS, replicaset("web-old", OLD, "old"))
    informers = SharedInformerFactory(kube, namespaces=["demo"], resync_period=0)
    scope = Scope(kube, informers=informers)
    rollout.setup(scope)
    configbundle.setup(scope)
    lister = scope.lister(REPLICASETS, label_selector=PINNED_SELECTOR)
    (informer,) = informers.informers_for(REPLICASETS, label_selector=PINNED_SELECTOR).values()
    seen: list[Mapping[str, Any]] = []
    cond = threading.Condition()

    def added(obj: Mapping[str, Any]) -> None:
        with cond:
            seen.append(obj)
            cond.notify_all()

    informer.add_event_handler(FuncHandler(on_add=added))
    try:
        informers.start()
        assert informers.wait_for_cache_sync(5.0)
        kube.wait_watching("replicasets", "demo")
        kube.tracker.add(REPLICASETS, replicaset("web-new", MAPPING, "new"))
        with cond:
            assert cond.wait_for(lambda: any(o["metadata"]["name"] == "web-new" for o in seen), 5)
        for name, mapping in (("web-old", OLD), ("web-new", MAPPING)):
            cached = lister.get("demo", name)
            assert cached is not None
            assert "status" not in cached
            assert "spec" not in cached["spec"]["template"]
            assert "generation" not in cached["metadata"]
            assert mapping_of(cached) == mapping
        assert [o["metadata"]["name"] for o in lister.by_index(PLAIN_INDEX, "demo/conf")] == [
            "web-new",
            "web-old",
        ]
        assert (
            lister.by_index(REVISION_INDEX, "demo/conf-1111111111")[0]["metadata"]["name"]
            == "web-old"
        )
    finally:
        informers.shutdown()


def test_replicasets_of_a_deployment_share_their_labels_and_owner_list() -> None:
    new = strip_history(replicaset("web-new", MAPPING, "new"))
    old = strip_history(replicaset("web-old", OLD, "old"))
    assert new["metadata"]["ownerReferences"] is old["metadata"]["ownerReferences"]
    assert new["metadata"]["labels"] is old["metadata"]["labels"]
    other = replicaset("api-1", MAPPING, "1")
    other["metadata"]["ownerReferences"][0].update(name="api", uid="uid-api")
    stripped = strip_history(other)
    assert stripped["metadata"]["ownerReferences"][0]["name"] == "api"
    assert new["metadata"]["ownerReferences"][0]["name"] == "web"
