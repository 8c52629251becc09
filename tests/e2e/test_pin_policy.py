"""The shipped pod-pinning policy on a real API server (docs/revisions.md).

The session's ``workload_control_plane`` (Kubernetes 1.36, which serves
MutatingAdmissionPolicy), in a namespace of this module's own, with the policy and
binding of ``manifests/revisions/pin_pods.yaml`` installed. The policy has no params:
it reads the pod's own ``cbop.dev/revisions`` annotation, written as cbop's rollout
writes it (:func:`cbop.revisions.model.format_mapping`), on a pod labelled
``cbop.dev/pinned: "true"`` (tests/e2e/test_revision_history.py checks them end to end
with cbop running). Each test creates pods and reads them back as the API server stored
them: no kubelet is needed for admission. A pod's expected spec is the same pod admitted
with ``dryRun=All`` and no mapping, with only the pinned names replaced: every other
field must come out as it went in.

The policy and its binding deleted and made again, and an unrelated policy with
ConfigMap params bound and unbound (kubernetes/kubernetes#130887 froze the param
informer of kube-apiserver 1.36 that way), leave pinning working, with no restart of
kube-apiserver.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.api.revisions import revision_name
from cbop.kube import CONFIGMAPS, NAMESPACES, ApiError, KubeClient
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    format_mapping,
    parse_mapping,
)
from cbop_testing.envtest import ControlPlane

from .harness import wait_for
from .pinpolicy import BINDINGS, POLICIES, create_pod, install_policy, policy_docs

NAMESPACE = "pin-policy-e2e"
WAIT = 60.0
PINNED = {
    name: revision_name(name, "sha256:" + digit * 64)
    for name, digit in (("vol-conf", "1"), ("proj-conf", "2"), ("env-conf", "3"), ("key-conf", "4"))
}
#: The annotation as the rollout writes it.
MAPPING = format_mapping(PINNED)
#: An annotation edited by hand: a pair that names no revision of its plain name, a
#: pair without a plain name, a repeated plain name (the last counts), an upper-case
#: suffix.
EDITED = (
    f"vol-conf=elsewhere, =env-conf-9999999999,env-conf=env-conf-0000000000,"
    f"env-conf={PINNED['env-conf']} ,key-conf=key-conf-ABCDEF0123"
)


@pytest.fixture(scope="module")
def kube(workload_control_plane: ControlPlane) -> Iterator[KubeClient]:
    """A client and the module's namespace; the policy installed and effective."""
    config = str(workload_control_plane.kubeconfig_path)
    with KubeClient.from_config(kubeconfig=config, qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        install_policy(client)
        _wait_pinning(client, NAMESPACE)
        yield client
        client.delete(NAMESPACES, None, NAMESPACE)


def _container(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.invalid/app:1", **fields}


def _env_ref(name: str, configmap: str, **ref: Any) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "k", **ref}}}


def _pod(
    kube: KubeClient,
    spec: dict[str, Any],
    mapping: str | None,
    *,
    labelled: bool = True,
    dry_run: bool = False,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """Create a pod of ``spec`` whose template mapping is ``mapping`` (None: no annotation)."""
    annotations = {ANNOTATION_REVISIONS: mapping} if mapping is not None else {}
    labels = {"app": "pinned", **({LABEL_PINNED: "true"} if labelled else {})}
    metadata = {"labels": labels, "annotations": {"team": "a", **annotations}}
    body = {"automountServiceAccountToken": False, **spec}
    return create_pod(kube, namespace, metadata, body, dry_run=dry_run)


#: A pod that reads one pinned ConfigMap in its environment.
PROBE = {"containers": [_container("probe", env=[_env_ref("A", "key-conf")])]}


def _probe_pinned(kube: KubeClient, namespace: str = NAMESPACE) -> bool:
    pod = _pod(kube, PROBE, MAPPING, dry_run=True, namespace=namespace)
    return bool(_env_names(pod)[0] == PINNED["key-conf"])


def _wait_pinning(kube: KubeClient, namespace: str = NAMESPACE) -> None:
    """A new policy or binding takes effect within moments: wait for a pinned pod."""
    wait_for(lambda: _probe_pinned(kube, namespace), WAIT, message="the policy pins a pod")


def _unpinned_spec(kube: KubeClient, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as the API server admits it without a mapping (defaults filled in)."""
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
    pod = _pod(kube, spec, MAPPING)
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
    assert pod["metadata"]["annotations"] == {"team": "a", ANNOTATION_REVISIONS: MAPPING}


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
    pod = _pod(kube, spec, MAPPING)
    expected = _pinned(_unpinned_spec(kube, spec), PINNED)
    assert pod["spec"] == expected
    assert pod["spec"] != _unpinned_spec(kube, spec)


def test_a_pod_without_a_mapping_or_the_label_is_unchanged(kube: KubeClient) -> None:
    spec = _every_kind()
    unpinned = _unpinned_spec(kube, spec)
    assert _pod(kube, spec, None)["spec"] == unpinned
    assert _pod(kube, spec, "")["spec"] == unpinned
    assert _pod(kube, spec, "garbage")["spec"] == unpinned
    # The label is what the policy selects: a mapping alone pins nothing.
    assert _pod(kube, spec, MAPPING, labelled=False)["spec"] == unpinned


def test_a_mapping_edited_by_hand_pins_only_its_well_formed_pairs(kube: KubeClient) -> None:
    spec = _every_kind()
    pod = _pod(kube, spec, EDITED)
    # "vol-conf=elsewhere" and an upper-case suffix are no revision names; of the two
    # env-conf pairs the last counts: the policy reads the annotation as parse_mapping.
    assert parse_mapping(EDITED) == {"env-conf": PINNED["env-conf"]}
    expected = _pinned(_unpinned_spec(kube, spec), parse_mapping(EDITED))
    assert pod["spec"] == expected


def _delete(kube: KubeClient, resource: Any, name: str) -> None:
    try:
        kube.delete(resource, None, name)
    except ApiError as err:
        if not err.is_not_found:
            raise


def test_the_policy_deleted_and_made_again_pins_again_with_no_apiserver_restart(
    kube: KubeClient,
) -> None:
    docs = policy_docs()
    for doc in reversed(docs):  # the binding first, as helm uninstall deletes them
        _delete(kube, BINDINGS if doc["kind"].endswith("Binding") else POLICIES,
                doc["metadata"]["name"])  # fmt: skip
    wait_for(lambda: not _probe_pinned(kube), WAIT, message="pinning stops with the policy gone")
    install_policy(kube)
    _wait_pinning(kube)
    # A namespace made afterwards is pinned too (a param informer frozen by the
    # deletion would not have seen anything new).
    fresh = f"{NAMESPACE}-after"
    kube.create(NAMESPACES, None, {"metadata": {"name": fresh}})
    try:
        _wait_pinning(kube, fresh)
    finally:
        kube.delete(NAMESPACES, None, fresh)


#: An unrelated policy with ConfigMap params, as another product might ship one.
OTHER_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingAdmissionPolicy",
    "metadata": {"name": "other-product-params"},
    "spec": {
        "failurePolicy": "Ignore",
        "reinvocationPolicy": "Never",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["pods"],
                    "operations": ["CREATE"],
                }
            ]
        },
        "matchConditions": [{"name": "never", "expression": "params != null && false"}],
        "mutations": [
            {
                "patchType": "JSONPatch",
                "jsonPatch": {
                    "expression": "[JSONPatch{op: 'add', path: '/metadata/labels/other', "
                    "value: params.data.a}]"
                },
            }
        ],
    },
}
OTHER_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingAdmissionPolicyBinding",
    "metadata": {"name": "other-product-params"},
    "spec": {
        "policyName": "other-product-params",
        "paramRef": {"name": "other-product", "parameterNotFoundAction": "Allow"},
    },
}


def test_an_unrelated_policy_with_configmap_params_bound_and_unbound_leaves_pinning_on(
    kube: KubeClient,
) -> None:
    kube.create(CONFIGMAPS, NAMESPACE, {"metadata": {"name": "other-product"}, "data": {"a": "b"}})
    kube.create(POLICIES, None, copy.deepcopy(OTHER_POLICY))
    kube.create(BINDINGS, None, copy.deepcopy(OTHER_BINDING))
    assert _probe_pinned(kube)
    _delete(kube, BINDINGS, "other-product-params")
    _delete(kube, POLICIES, "other-product-params")
    # kube-apiserver stops its ConfigMap param informer once no binding names the kind
    # (kubernetes/kubernetes#130887): cbop's policy has no params, so pinning goes on,
    # here and in a namespace made afterwards.
    fresh = f"{NAMESPACE}-unbound"
    kube.create(NAMESPACES, None, {"metadata": {"name": fresh}})
    try:
        _wait_pinning(kube, NAMESPACE)
        _wait_pinning(kube, fresh)
    finally:
        kube.delete(NAMESPACES, None, fresh)
