"""The shipped pod-pinning policy on a real API server (docs/revisions.md).

The session's ``workload_control_plane`` (Kubernetes 1.36, which serves
MutatingAdmissionPolicy), in namespaces of this module's own, with the policy and
binding of ``manifests/revisions/pin_revisions.yaml`` installed (and left there). The
params are written in cbop's own pins format (:func:`cbop.api.revisions.pins_key` and
:func:`cbop.api.revisions.pins_value`), as the rollout writes them
(tests/e2e/test_revision_history.py checks them end to end with cbop running). Each
test creates pods and reads them back as the API server stored them: no kubelet is
needed for admission. A pod's expected spec is the same pod admitted with ``dryRun=All``
and no template digest (so no pins), with only the pinned names replaced: every other
field must come out as it went in.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.api.revisions import PARAMS_NAME, pins_key, pins_value, revision_name
from cbop.kube import CONFIGMAPS, NAMESPACES, KubeClient
from cbop.rollout import ANNOTATION_CONFIG_HASH
from cbop_testing.envtest import ControlPlane

from .harness import wait_for
from .pinpolicy import create_pod, install_policy

NAMESPACE = "pin-policy-e2e"
WAIT = 60.0
#: The template digest whose entry pins the ConfigMaps below, and one without an entry.
DIGEST = "sha256:" + "5e" * 32
UNKNOWN = "sha256:" + "0f" * 32
#: A digest whose entry was edited by hand: a malformed line and a repeated one.
EDITED = "sha256:" + "e7" * 32
PINNED = {
    name: revision_name(name, "sha256:" + digit * 64)
    for name, digit in (("vol-conf", "1"), ("proj-conf", "2"), ("env-conf", "3"), ("key-conf", "4"))
}


@pytest.fixture(scope="module")
def kube(workload_control_plane: ControlPlane) -> Iterator[KubeClient]:
    """A client, the module's namespace and its params; the policy installed."""
    config = str(workload_control_plane.kubeconfig_path)
    with KubeClient.from_config(kubeconfig=config, qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        edited = "vol-conf=elsewhere\n =env-conf-9999999999\nenv-conf=env-conf-0000000000\n"
        edited += f"env-conf={PINNED['env-conf']}\nkey-conf=key-conf-ABCDEF0123\n"
        params = {
            "metadata": {"name": PARAMS_NAME},
            "data": {pins_key(DIGEST): pins_value(PINNED), pins_key(EDITED): edited},
        }
        client.create(CONFIGMAPS, NAMESPACE, params)
        install_policy(client)
        # A new policy takes effect within moments: wait for a pinned pod.
        probe = {"containers": [_container("probe", env=[_env_ref("A", "key-conf")])]}
        wait_for(
            lambda: _env_names(_pod(client, probe, DIGEST))[0] == PINNED["key-conf"],
            WAIT,
            message="the policy pins a pod",
        )
        yield client
        client.delete(NAMESPACES, None, NAMESPACE)


def _container(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.invalid/app:1", **fields}


def _env_ref(name: str, configmap: str, **ref: Any) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "k", **ref}}}


def _pod(
    kube: KubeClient, spec: dict[str, Any], digest: str | None, *, dry_run: bool = False
) -> dict[str, Any]:
    """Create a pod of ``spec`` whose template digest is ``digest`` (None: no annotation)."""
    annotations = {ANNOTATION_CONFIG_HASH: digest} if digest else {}
    metadata = {"labels": {"app": "pinned"}, "annotations": {"team": "a", **annotations}}
    body = {"automountServiceAccountToken": False, **spec}
    return create_pod(kube, NAMESPACE, metadata, body, dry_run=dry_run)


def _unpinned_spec(kube: KubeClient, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as the API server admits it without pins (defaults filled in)."""
    return dict(_pod(kube, spec, None, dry_run=True)["spec"])


def _env_names(pod: dict[str, Any]) -> list[str]:
    return [
        e["valueFrom"]["configMapKeyRef"]["name"]
        for c in pod["spec"]["containers"]
        for e in c.get("env") or ()
        if "configMapKeyRef" in (e.get("valueFrom") or {})
    ]


def _every_kind() -> dict[str, Any]:
    """A pod spec naming pinned and unpinned ConfigMaps in every kind of reference."""
    env_from = [
        {"configMapRef": {"name": "env-conf"}},
        {"prefix": "X_", "configMapRef": {"name": "unpinned", "optional": True}},
        {"secretRef": {"name": "env-conf"}},
        {"prefix": "Y_", "configMapRef": {"name": "key-conf", "optional": False}},
    ]
    env = [
        _env_ref("A", "key-conf"),
        _env_ref("B", "unpinned", optional=True),
        {"name": "C", "value": "env-conf"},
        {"name": "D", "valueFrom": {"secretKeyRef": {"name": "key-conf", "key": "d"}}},
        {"name": "E", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        _env_ref("A", "env-conf"),  # a repeated name: env is not merged by name here
    ]
    return {
        "initContainers": [
            _container("init", envFrom=env_from[:2], env=[_env_ref("I", "key-conf")]),
            _container("init2", command=["true"]),
        ],
        "containers": [
            _container(
                "app",
                envFrom=env_from,
                env=env,
                volumeMounts=[{"name": "conf", "mountPath": "/etc/conf"}],
            ),
            _container("side", env=[_env_ref("S", "unpinned"), _env_ref("T", "vol-conf")]),
        ],
        "volumes": [
            {
                "name": "conf",
                "configMap": {"name": "vol-conf", "items": [{"key": "k", "path": "p"}]},
            },
            {"name": "other", "configMap": {"name": "unpinned", "defaultMode": 0o400}},
            {"name": "sec", "secret": {"secretName": "vol-conf"}},
            {
                "name": "proj",
                "projected": {
                    "sources": [
                        {"configMap": {"name": "proj-conf"}},
                        {"secret": {"name": "proj-conf"}},
                        {"configMap": {"name": "unpinned", "optional": True}},
                        {
                            "downwardAPI": {
                                "items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]
                            }
                        },
                        {"configMap": {"name": "vol-conf", "items": [{"key": "k", "path": "q"}]}},
                    ]
                },
            },
        ],
    }


def _pinned(spec: dict[str, Any], pins: dict[str, str]) -> dict[str, Any]:
    """``spec`` with every ConfigMap reference whose name ``pins`` has renamed (by hand)."""
    out = copy.deepcopy(spec)

    def pin(ref: dict[str, Any]) -> None:
        ref["name"] = pins.get(ref["name"], ref["name"])

    for volume in out.get("volumes") or ():
        if "configMap" in volume:
            pin(volume["configMap"])
        for source in (volume.get("projected") or {}).get("sources") or ():
            if "configMap" in source:
                pin(source["configMap"])
    for container in [*out.get("initContainers", ()), *out["containers"]]:
        for ref in container.get("envFrom") or ():
            if "configMapRef" in ref:
                pin(ref["configMapRef"])
        for var in container.get("env") or ():
            if "configMapKeyRef" in (var.get("valueFrom") or {}):
                pin(var["valueFrom"]["configMapKeyRef"])
    return out


def test_every_kind_of_reference_is_pinned_and_nothing_else_changes(kube: KubeClient) -> None:
    spec = _every_kind()
    pod = _pod(kube, spec, DIGEST)
    expected = _pinned(_unpinned_spec(kube, spec), PINNED)
    assert pod["spec"] == expected
    # The hand-made expectation did rename something in each kind of reference.
    got = pod["spec"]
    assert got["volumes"][0]["configMap"]["name"] == PINNED["vol-conf"]
    sources = got["volumes"][3]["projected"]["sources"]
    assert [s.get("configMap", {}).get("name") for s in sources] == [
        PINNED["proj-conf"],
        None,
        "unpinned",
        None,
        PINNED["vol-conf"],
    ]
    app = got["containers"][0]
    assert [r.get("configMapRef", {}).get("name") for r in app["envFrom"]] == [
        PINNED["env-conf"],
        "unpinned",
        None,
        PINNED["key-conf"],
    ]
    assert _env_names(pod) == [
        PINNED["key-conf"],
        "unpinned",
        PINNED["env-conf"],
        "unpinned",
        PINNED["vol-conf"],
    ]
    init = got["initContainers"][0]
    assert init["envFrom"][0]["configMapRef"]["name"] == PINNED["env-conf"]
    assert init["env"][0]["valueFrom"]["configMapKeyRef"]["name"] == PINNED["key-conf"]
    assert got["initContainers"][1] == expected["initContainers"][1]
    # Metadata is as it was written.
    assert pod["metadata"]["annotations"] == {"team": "a", ANNOTATION_CONFIG_HASH: DIGEST}


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [_container("app", envFrom=[{"configMapRef": {"name": "env-conf"}}])]},
        {"containers": [_container("app", env=[_env_ref("A", "key-conf")])]},
        {
            "containers": [_container("app")],
            "initContainers": [_container("init", env=[_env_ref("A", "key-conf")])],
        },
        {
            "containers": [_container("app")],
            "volumes": [
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj-conf"}}]}}
            ],
        },
    ],
    ids=["envFrom-only", "env-only", "init-env-only", "projected-only"],
)
def test_a_pod_with_one_kind_of_reference_is_pinned(kube: KubeClient, spec: dict[str, Any]) -> None:
    pod = _pod(kube, spec, DIGEST)
    expected = _pinned(_unpinned_spec(kube, spec), PINNED)
    assert pod["spec"] == expected
    assert pod["spec"] != _unpinned_spec(kube, spec)


def test_a_pod_without_pins_is_unchanged(kube: KubeClient) -> None:
    spec = _every_kind()
    unpinned = _unpinned_spec(kube, spec)
    for digest in (UNKNOWN, None, "sha256:short"):
        assert _pod(kube, spec, digest)["spec"] == unpinned, digest


def test_an_entry_edited_by_hand_pins_only_its_well_formed_lines(kube: KubeClient) -> None:
    spec = _every_kind()
    pod = _pod(kube, spec, EDITED)
    # "vol-conf=elsewhere" and an upper-case suffix are no revision names; of the two
    # env-conf lines the last counts, as cbop's parse_pins reads them.
    expected = _pinned(_unpinned_spec(kube, spec), {"env-conf": PINNED["env-conf"]})
    assert pod["spec"] == expected
