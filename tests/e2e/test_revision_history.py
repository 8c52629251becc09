"""The workload's history holds revisions, end to end (docs/revisions.md).

The session's control plane with kube-controller-manager's deployment, replicaset and
garbage-collector controllers (``workload_control_plane``, in a namespace of its own),
and one cbop process with ``--rollout``. A Deployment with ``revisionHistoryLimit: 1``
(and no replicas: no pod needs a node) reads a bundle with revisions and ``keep: 1``.
Each change makes a new revision and a new ReplicaSet; that ReplicaSet becomes an owner
of the revision its template was made for. A revision beyond ``keep`` that a ReplicaSet
in the history still reads stays, and so does the bundle's hold on it while the pins
name it; once the history limit deletes that ReplicaSet, its pins entry is dropped
(``--pins-grace 2``) and the revision collected.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.api import content_hash
from cbop.api.revisions import PARAMS_NAME, is_frozen, parse_pins, pins_key, revision_name
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    REPLICASETS,
    ApiError,
    KubeClient,
)
from cbop.rollout import ANNOTATION_CONFIG_HASH, LABEL_ROLLOUT
from cbop_testing.envtest import ControlPlane

from .harness import Operator, bundle, set_spec, wait_for
from .pinpolicy import create_pod
from .revisions import configmap_volumes, install_pin_policy

NAMESPACE = "revision-history-e2e"
#: A namespace without cbop's pins (no bundle with revisions there).
UNPINNED = "revision-history-e2e-plain"
WAIT = 90.0


@pytest.fixture(scope="module")
def kube(workload_control_plane: ControlPlane) -> Iterator[KubeClient]:
    config = str(workload_control_plane.kubeconfig_path)
    with KubeClient.from_config(kubeconfig=config, qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        yield client


@pytest.fixture(scope="module")
def cbop(
    workload_control_plane: ControlPlane,
    kube: KubeClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    logs: Path = tmp_path_factory.mktemp("revision-history-cbop")
    op = Operator(
        workload_control_plane.kubeconfig_path,
        [NAMESPACE],
        args=["--rollout", "--resync-period", "2s", "--pins-grace", "2"],
        log_path=logs / "cbop.log",
    ).wait_ready(WAIT)
    yield op
    for item in kube.list(CONFIGBUNDLES, NAMESPACE)["items"]:
        kube.delete(CONFIGBUNDLES, NAMESPACE, item["metadata"]["name"])
    wait_for(lambda: not kube.list(CONFIGBUNDLES, NAMESPACE)["items"], 30, message="bundles gone")
    code = op.stop()
    assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()[-4000:]}"


def _revision(data: dict[str, str], plain: str = "web-conf") -> str:
    return revision_name(plain, content_hash(data, {}))


def _deployment(
    name: str = "web", plain: str = "web-conf", *, every_kind: bool = False
) -> dict[str, Any]:
    """A Deployment of no replicas whose template mounts ``plain`` (and ``not-cbops``).

    With ``every_kind`` it also reads ``plain`` through ``envFrom``, ``env``, a
    projected volume and an init container's ``env``.
    """
    labels = {"app": name}
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": 0,
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.invalid/app:1",
                            "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}],
                        }
                    ],
                    "volumes": [
                        {"name": "conf", "configMap": {"name": plain}},
                        {"name": "other", "configMap": {"name": "not-cbops"}},
                    ],
                },
            },
        },
    }
    if every_kind:
        spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
        ref = {"valueFrom": {"configMapKeyRef": {"name": plain, "key": "v"}}}
        spec["containers"][0]["envFrom"] = [{"configMapRef": {"name": plain}}]
        spec["containers"][0]["env"] = [{"name": "V", **ref}, {"name": "W", "value": plain}]
        spec["initContainers"] = [{"name": "init", "image": "registry.invalid/app:1"}]
        spec["initContainers"][0]["env"] = [{"name": "V", **ref}]
        projected = {"sources": [{"configMap": {"name": plain}}, {"secret": {"name": plain}}]}
        spec["volumes"].append({"name": "proj", "projected": projected})
    return deployment


def _replicaset_for(kube: KubeClient, data: dict[str, str]) -> dict[str, Any] | None:
    """The Deployment's ReplicaSet whose template digest pins ``data``'s revision."""
    try:
        pins = kube.get(CONFIGMAPS, NAMESPACE, PARAMS_NAME).get("data") or {}
    except ApiError as err:
        if err.is_not_found:
            return None
        raise
    for rs in kube.list(REPLICASETS, NAMESPACE)["items"]:
        annotations = rs["spec"]["template"]["metadata"].get("annotations") or {}
        entry = pins.get(pins_key(annotations.get(ANNOTATION_CONFIG_HASH, "")))
        if entry is not None and parse_pins(entry).get("web-conf") == _revision(data):
            return dict(rs)
    return None


def _owners(kube: KubeClient, name: str) -> list[tuple[str, str]] | None:
    try:
        cm = kube.get(CONFIGMAPS, NAMESPACE, name)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise
    return sorted((r["kind"], r["uid"]) for r in cm["metadata"].get("ownerReferences") or ())


def _held_by(kube: KubeClient, data: dict[str, str]) -> str:
    """Wait until ``data``'s ReplicaSet owns ``data``'s revision; return its UID."""

    def owned() -> str | None:
        rs = _replicaset_for(kube, data)
        if rs is None:
            return None
        owners = _owners(kube, _revision(data)) or []
        uid = str(rs["metadata"]["uid"])
        return uid if ("ReplicaSet", uid) in owners else None

    found: str = wait_for(owned, WAIT, message=f"the ReplicaSet of {data} owns its revision")
    return found


def _gone(kube: KubeClient, name: str) -> bool:
    return _owners(kube, name) is None


def _change(kube: KubeClient, spec: dict[str, Any], data: dict[str, str]) -> None:
    time.sleep(1.1)  # creationTimestamp has whole seconds: the newest is unambiguous
    set_spec(kube, NAMESPACE, "web", {**spec, "data": data})


def test_history_holds_revisions_until_its_limit_drops_them(
    kube: KubeClient, cbop: Operator
) -> None:
    c1, c2, c3, c4 = ({"v": str(i)} for i in (1, 2, 3, 4))
    spec: dict[str, Any] = {"configMapName": "web-conf", "revisions": {"enabled": True, "keep": 1}}
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle("web", {**spec, "data": c1}))
    wait_for(lambda: _owners(kube, _revision(c1)) is not None, WAIT, message="c1's revision")
    kube.create(DEPLOYMENTS, NAMESPACE, _deployment())
    # cbop records the baseline (the template keeps no annotation: nothing rolls).
    wait_for(
        lambda: (
            "cbop.dev/config-baseline"
            in kube.get(DEPLOYMENTS, NAMESPACE, "web")["metadata"]["labels"]
        ),
        WAIT,
        message="baseline",
    )

    _change(kube, spec, c2)
    rs2 = _held_by(kube, c2)
    digest2 = _digest_of(kube, rs2)
    _change(kube, spec, c3)
    rs3 = _held_by(kube, c3)
    web = str(kube.get(CONFIGBUNDLES, NAMESPACE, "web")["metadata"]["uid"])
    # c2 is beyond keep (1), but its ReplicaSet (in the history: revisionHistoryLimit 1)
    # reads it and the pins name it: the bundle keeps its hold too.
    wait_for(
        lambda: _owners(kube, _revision(c2)) == [("ConfigBundle", web), ("ReplicaSet", rs2)],
        WAIT,
        message="c2's revision held by its ReplicaSet and the bundle",
    )

    _change(kube, spec, c4)
    _held_by(kube, c4)
    # The history limit deletes c2's ReplicaSet; cbop drops its pins entry, and the
    # revision, held by nothing, is collected.
    wait_for(lambda: pins_key(digest2) not in _pins(kube), WAIT, message="c2's entry dropped")
    wait_for(lambda: _gone(kube, _revision(c2)), WAIT, message="c2's revision collected")
    wait_for(
        lambda: _owners(kube, _revision(c3)) == [("ConfigBundle", web), ("ReplicaSet", rs3)],
        WAIT,
        message="c3's revision held by its ReplicaSet and the bundle",
    )
    # c1: beyond keep; the first template (no digest) ran with it, and its entry
    # (Deployment.web, frozen by the first rollout) went with that ReplicaSet.
    wait_for(lambda: _gone(kube, _revision(c1)), WAIT, message="c1's revision collected")
    assert "Deployment.web" not in _pins(kube)
    names = {cm["metadata"]["name"] for cm in kube.list(CONFIGMAPS, NAMESPACE)["items"]}
    assert {_revision(c3), _revision(c4)} <= names
    assert _revision(c2) not in names
    # The entries of the templates in the history stay.
    assert len(_pins(kube)) == 2


def _pins(kube: KubeClient) -> dict[str, str]:
    return dict(kube.get(CONFIGMAPS, NAMESPACE, PARAMS_NAME).get("data") or {})


def _digest_of(kube: KubeClient, uid: str) -> str:
    for rs in kube.list(REPLICASETS, NAMESPACE)["items"]:
        if rs["metadata"]["uid"] == uid:
            return str(rs["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH])
    raise AssertionError(f"no ReplicaSet {uid}")


def _pod(kube: KubeClient, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
    """Create a pod of ``template`` (as a ReplicaSet would) in ``namespace``; return it."""
    return create_pod(kube, namespace, template["metadata"], template["spec"])


@pytest.fixture
def pin_policy(kube: KubeClient) -> None:
    """The shipped policy and binding (manifests/revisions/), left installed
    (:func:`tests.e2e.revisions.install_pin_policy` says why)."""
    install_pin_policy(kube)


def test_a_new_pod_of_a_pinned_template_reads_its_revision(
    kube: KubeClient, cbop: Operator, pin_policy: None
) -> None:
    spec: dict[str, Any] = {"configMapName": "api-conf", "revisions": {"enabled": True}}
    d1, d2 = {"v": "1"}, {"v": "2"}
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle("api", {**spec, "data": d1}))
    wait_for(lambda: _owners(kube, _revision(d1, "api-conf")) is not None, WAIT, message="d1")
    kube.create(DEPLOYMENTS, NAMESPACE, _deployment("api", "api-conf", every_kind=True))
    wait_for(
        lambda: (
            "cbop.dev/config-baseline"
            in kube.get(DEPLOYMENTS, NAMESPACE, "api")["metadata"]["labels"]
        ),
        WAIT,
        message="baseline",
    )
    set_spec(kube, NAMESPACE, "api", {**spec, "data": d2})

    def rolled() -> dict[str, Any] | None:
        template = kube.get(DEPLOYMENTS, NAMESPACE, "api")["spec"]["template"]
        annotations = template["metadata"].get("annotations") or {}
        return dict(template) if ANNOTATION_CONFIG_HASH in annotations else None

    template: dict[str, Any] = wait_for(rolled, WAIT, message="api rolled")

    # The policy takes effect within moments of its creation: retry until a pod is pinned.
    def pinned_pod() -> dict[str, Any] | None:
        pod = _pod(kube, NAMESPACE, template)
        return pod if configmap_volumes(pod)["conf"] != "api-conf" else None

    pinned: dict[str, Any] = wait_for(pinned_pod, WAIT, message="a pod pinned")
    revision = _revision(d2, "api-conf")
    assert configmap_volumes(pinned) == {"conf": revision, "other": "not-cbops"}
    # And in every other kind of reference the template has (tests/e2e/test_pin_policy.py
    # checks each kind and the fields around it).
    app, init = pinned["spec"]["containers"][0], pinned["spec"]["initContainers"][0]
    assert app["envFrom"] == [{"configMapRef": {"name": revision}}]
    ref = {"valueFrom": {"configMapKeyRef": {"name": revision, "key": "v"}}}
    assert app["env"] == [{"name": "V", **ref}, {"name": "W", "value": "api-conf"}]
    assert init["env"] == [{"name": "V", **ref}]
    projected = next(v for v in pinned["spec"]["volumes"] if v["name"] == "proj")["projected"]
    assert projected["sources"] == [
        {"configMap": {"name": revision}},
        {"secret": {"name": "api-conf"}},
    ]
    # The rest of the pod is as its template wrote it.
    assert (
        pinned["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
        == (template["metadata"]["annotations"][ANNOTATION_CONFIG_HASH])
    )
    # A pinned digest on a pod with no volume of a pinned ConfigMap: volumes untouched.
    unpinned_volumes = {
        **template,
        "spec": {
            **template["spec"],
            "volumes": [v for v in template["spec"]["volumes"] if v["name"] == "other"],
            "containers": [{**template["spec"]["containers"][0], "volumeMounts": []}],
        },
    }
    assert configmap_volumes(_pod(kube, NAMESPACE, unpinned_volumes)) == {"other": "not-cbops"}
    # Where the params are missing, the same template keeps the plain name.
    kube.create(NAMESPACES, None, {"metadata": {"name": UNPINNED}})
    assert configmap_volumes(_pod(kube, UNPINNED, template)) == {
        "conf": "api-conf",
        "other": "not-cbops",
    }
    # A digest without an entry keeps the plain name too.
    unknown = {
        **template,
        "metadata": {
            **template["metadata"],
            "annotations": {ANNOTATION_CONFIG_HASH: "sha256:" + "0" * 64},
        },
    }
    assert configmap_volumes(_pod(kube, NAMESPACE, unknown)) == {
        "conf": "api-conf",
        "other": "not-cbops",
    }


def test_a_pod_of_a_workload_never_rolled_reads_its_revision_until_and_after_the_first_roll(
    kube: KubeClient, cbop: Operator, pin_policy: None
) -> None:
    spec: dict[str, Any] = {"configMapName": "batch-conf", "revisions": {"enabled": True}}
    e1, e2 = {"v": "1"}, {"v": "2"}
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle("batch", {**spec, "data": e1}))
    wait_for(lambda: _owners(kube, _revision(e1, "batch-conf")) is not None, WAIT, message="e1")
    kube.create(DEPLOYMENTS, NAMESPACE, _deployment("batch", "batch-conf"))
    # Never rolled: cbop keeps the Deployment's own entry at the current revision.
    wait_for(
        lambda: (
            parse_pins(_pins(kube).get("Deployment.batch", ""))
            == {"batch-conf": _revision(e1, "batch-conf")}
        ),
        WAIT,
        message="the entry of the Deployment never rolled",
    )

    def first_replicaset() -> dict[str, Any] | None:
        for rs in kube.list(REPLICASETS, NAMESPACE)["items"]:
            owners = rs["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "Deployment" and o["name"] == "batch" for o in owners):
                return dict(rs)
        return None

    rs: dict[str, Any] = wait_for(first_replicaset, WAIT, message="the first ReplicaSet")
    owned = {
        **rs["spec"]["template"],
        "metadata": {
            **rs["spec"]["template"]["metadata"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs["metadata"]["name"],
                    "uid": rs["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
    }

    # A pod of that ReplicaSet (as it would create one; no template digest): pinned.
    def pinned_pod() -> dict[str, Any] | None:
        pod = _pod(kube, NAMESPACE, owned)
        return pod if configmap_volumes(pod)["conf"] != "batch-conf" else None

    pinned: dict[str, Any] = wait_for(pinned_pod, WAIT, message="a pod pinned by its owner")
    assert configmap_volumes(pinned) == {"conf": _revision(e1, "batch-conf"), "other": "not-cbops"}

    # The first content change rolls the Deployment and freezes its entry: a pod of the
    # old template created mid-rollout still reads the revision that template ran with.
    set_spec(kube, NAMESPACE, "batch", {**spec, "data": e2})
    wait_for(
        lambda: is_frozen(_pins(kube).get("Deployment.batch", "")),
        WAIT,
        message="the entry frozen by the first rollout",
    )
    assert parse_pins(_pins(kube)["Deployment.batch"]) == {
        "batch-conf": _revision(e1, "batch-conf")
    }
    assert configmap_volumes(_pod(kube, NAMESPACE, owned)) == {
        "conf": _revision(e1, "batch-conf"),
        "other": "not-cbops",
    }
    # A pod whose template carries a digest never falls back to its owner's entry.
    digested = {
        **owned,
        "metadata": {
            **owned["metadata"],
            "annotations": {ANNOTATION_CONFIG_HASH: "sha256:" + "0" * 64},
        },
    }
    assert configmap_volumes(_pod(kube, NAMESPACE, digested)) == {
        "conf": "batch-conf",
        "other": "not-cbops",
    }
