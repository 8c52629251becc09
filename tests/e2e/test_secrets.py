"""Bundles whose target is a Secret, on a real control plane (docs/secrets.md).

One control plane of its own (kube-apiserver, etcd, and kube-controller-manager's
garbage collector and namespace controller) serves the module. Each test uses
namespaces of its own. cbop runs as its ServiceAccount with the shipped RBAC
(manifests/rbac/, and manifests/secrets/'s roles where Secrets are on), so what RBAC
refuses is refused as in a cluster.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    NAMESPACES,
    SECRETS,
    ApiError,
    KubeClient,
)
from cbop_testing.envtest import ControlPlane

from .clusterbundles import bundle_plane
from .harness import REPO, Operator, bundle, events, wait_for

#: Generous bound for a change to travel through cbop.
WAIT = 30.0
MANIFESTS = REPO / "manifests"
#: The Secrets Component's RBAC objects (its Deployment patch is checked by
#: tests/e2e/test_deploy_manifests.py).
SECRET_RBAC = (
    "cluster_role.yaml",
    "cluster_role_binding.yaml",
    "digest_key_role.yaml",
    "digest_key_role_binding.yaml",
)


class Cluster:
    """The module's control plane, an admin client, a directory for logs, and cbop's
    ServiceAccount (manifests/rbac/ applied; the Secrets' roles are not)."""

    def __init__(self, control: ControlPlane, kube: KubeClient, tmp: Path) -> None:
        self.control = control
        self.kube = kube
        self.tmp = tmp
        self.operators: list[Operator] = []
        self.kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml"))
        self.kubectl("apply", "-k", str(MANIFESTS / "rbac"))
        self.service_account = control.kubeconfig_for_service_account("cbop-system", "cbop")

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True) -> str:
        config = kubeconfig or self.control.kubeconfig_path
        result = subprocess.run(
            [str(self.control.binaries.kubectl), f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout.strip()

    def secret_rbac(self, verb: str) -> None:
        """``apply`` or ``delete`` the Secrets Component's roles and bindings."""
        for name in SECRET_RBAC:
            self.kubectl(verb, "-f", str(MANIFESTS / "secrets" / name))

    def start(self, *args: str, wait: bool = True) -> Operator:
        """Start cbop, cluster-wide, as its ServiceAccount."""
        op = Operator(
            self.service_account,
            (),
            args=["--resync-period", "2s", *args],
            log_path=self.tmp / f"cbop-{len(self.operators)}.log",
        )
        self.operators.append(op)
        if wait:
            op.wait_ready(60)
        return op


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with bundle_plane(request.config, tmp_path_factory, "secrets") as (control, kube):
        found = Cluster(control, kube, tmp_path_factory.mktemp("secrets"))
        try:
            yield found
        finally:
            for op in found.operators:
                code = op.stop()
                assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()}"


def namespace(kube: KubeClient, name: str) -> str:
    kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def admission(cluster: Cluster) -> str:
    """A namespace for bundles the API server is to refuse."""
    return namespace(cluster.kube, "admission")


SECRET_TARGET = {"kind": "Secret", "name": "tls", "type": "kubernetes.io/tls"}
SECRET_SOURCE = {"secret": {"name": "wildcard-tls", "namespace": "cert-manager"}}


def _refused(kube: KubeClient, ns: str, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as err:
        kube.create(CONFIGBUNDLES, ns, bundle("bad", spec))
    assert err.value.status == 422, err.value.message
    return err.value.message


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        pytest.param(
            {"sources": [SECRET_SOURCE]},
            "a Secret never flows into a ConfigMap",
            id="a secret source into a ConfigMap",
        ),
        pytest.param(
            {"target": {"kind": "ConfigMap"}, "sources": [SECRET_SOURCE]},
            "a Secret never flows into a ConfigMap",
            id="a secret source into an explicit ConfigMap",
        ),
        pytest.param(
            {"target": SECRET_TARGET, "data": {"tls.key": "inline"}},
            "not allowed with a Secret target",
            id="inline data",
        ),
        pytest.param(
            {"target": SECRET_TARGET, "binaryData": {"tls.key": "aGk="}},
            "not allowed with a Secret target",
            id="inline binaryData",
        ),
        pytest.param(
            {"target": SECRET_TARGET, "sources": [SECRET_SOURCE], "revisions": {"enabled": True}},
            "not supported for a Secret target yet",
            id="revisions",
        ),
        pytest.param(
            {"target": {"kind": "Secret"}, "configMapName": "x", "sources": [SECRET_SOURCE]},
            "a Secret target is named by spec.target.name",
            id="configMapName",
        ),
        pytest.param(
            {"target": {"kind": "ConfigMap", "name": "x"}},
            "are for a Secret target",
            id="a name on a ConfigMap target",
        ),
        pytest.param(
            {"target": {"type": "Opaque"}},
            "are for a Secret target",
            id="a type on a ConfigMap target",
        ),
        pytest.param(
            {"target": {"kind": "Secret", "type": "kubernetes.io/service-account-token"}},
            "the token controller fills those",
            id="a service account token",
        ),
        pytest.param(
            {
                "target": SECRET_TARGET,
                "sources": [{"secret": {"name": "a"}, "configMap": {"name": "b"}}],
            },
            "exactly one of configMap and secret",
            id="a source of both kinds",
        ),
        pytest.param(
            {"target": SECRET_TARGET, "sources": [{}]},
            "exactly one of configMap and secret",
            id="a source of no kind",
        ),
        pytest.param({"target": {"kind": "Vault"}}, "Unsupported value", id="an unknown kind"),
    ],
)
def test_what_a_secret_target_may_not_have_is_refused_at_admission(
    cluster: Cluster, admission: str, spec: dict[str, Any], words: str
) -> None:
    assert words in _refused(cluster.kube, admission, spec)


def test_a_secret_target_is_accepted_and_its_kind_and_type_stay_fixed(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "admission-fixed")
    spec: dict[str, Any] = {
        "target": SECRET_TARGET,
        "sources": [SECRET_SOURCE, {"configMap": {"name": "extras", "optional": True}}],
        "data": {},
    }
    created = kube.create(CONFIGBUNDLES, ns, bundle("tls", spec))
    assert created["spec"]["target"] == SECRET_TARGET
    # No target: a ConfigMap bundle, as before; kind defaults to ConfigMap when given.
    plain = kube.create(CONFIGBUNDLES, ns, bundle("plain", {"data": {"a": "1"}}))
    assert "target" not in plain["spec"]
    defaulted = kube.create(CONFIGBUNDLES, ns, bundle("explicit", {"target": {}}))
    assert defaulted["spec"]["target"] == {"kind": "ConfigMap"}

    def update(name: str, spec: dict[str, Any]) -> str:
        current = kube.get(CONFIGBUNDLES, ns, name)
        with pytest.raises(ApiError) as err:
            kube.update(CONFIGBUNDLES, ns, name, {**current, "spec": spec})
        assert err.value.status == 422
        return err.value.message

    assert "type cannot change" in update(
        "tls", {**spec, "target": {**SECRET_TARGET, "type": "Opaque"}}
    )
    assert "type cannot change" in update(
        "tls", {**spec, "target": {"kind": "Secret", "name": "tls"}}
    )
    assert "kind cannot change" in update("tls", {"data": {"a": "1"}})
    assert "kind cannot change" in update("plain", {"target": {"kind": "Secret"}})
    # The name may change (the old Secret is deleted, as a ConfigMap's).
    current = kube.get(CONFIGBUNDLES, ns, "tls")
    renamed = {**spec, "target": {**SECRET_TARGET, "name": "tls-2"}}
    kube.update(CONFIGBUNDLES, ns, "tls", {**current, "spec": renamed})


def test_a_cluster_bundle_template_has_the_same_rules(cluster: Cluster) -> None:
    kube = cluster.kube
    body = {
        "metadata": {"name": "secret-into-configmap"},
        "spec": {"namespaceSelector": {}, "template": {"sources": [SECRET_SOURCE]}},
    }
    with pytest.raises(ApiError) as err:
        kube.create(CLUSTERCONFIGBUNDLES, None, body)
    assert err.value.status == 422
    assert "a Secret never flows into a ConfigMap" in err.value.message
    ok = {
        "metadata": {"name": "tls-everywhere"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"tls": "yes"}},
            "template": {"target": SECRET_TARGET, "sources": [SECRET_SOURCE]},
        },
    }
    kube.create(CLUSTERCONFIGBUNDLES, None, ok)
    kube.delete(CLUSTERCONFIGBUNDLES, None, "tls-everywhere")


# ------------------------------------------------------------------ turning it on


def ready_condition(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    for cond in (kube.get(CONFIGBUNDLES, ns, name).get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return dict(cond)
    return {}


def wait_reason(kube: KubeClient, ns: str, name: str, reason: str) -> dict[str, Any]:
    got: dict[str, Any] = wait_for(
        lambda: (c := ready_condition(kube, ns, name)).get("reason") == reason and c,
        WAIT,
        message=f"{ns}/{name} reason {reason}",
    )
    return got


def can_i(cluster: Cluster, verb: str, resource: str, namespace: str | None) -> bool:
    where = f"--namespace={namespace}" if namespace else "--all-namespaces"
    answer = cluster.kubectl(
        "auth", "can-i", verb, resource, where, kubeconfig=cluster.service_account, check=False
    )
    return answer == "yes"


def test_with_secrets_off_nothing_is_read_and_the_bundle_says_so(cluster: Cluster) -> None:
    """The shipped RBAC without manifests/secrets/: cbop's ServiceAccount may not get a
    Secret, and a bundle with a Secret target is SecretsDisabled, with an Event and a
    metric; a ConfigMap bundle is served as ever."""
    kube = cluster.kube
    ns = namespace(kube, "off")
    kube.create(SECRETS, ns, {"metadata": {"name": "present"}, "data": {"k": "dg=="}})
    with KubeClient.from_config(kubeconfig=str(cluster.service_account), qps=0) as sa:
        with pytest.raises(ApiError) as refused:
            sa.get(SECRETS, ns, "present")
        assert refused.value.is_forbidden
    assert not can_i(cluster, "get", "secrets", ns)
    assert not can_i(cluster, "list", "secrets", None)
    op = cluster.start()
    try:
        spec = {"target": SECRET_TARGET, "sources": [{"secret": {"name": "present"}}]}
        kube.create(CONFIGBUNDLES, ns, bundle("tls", spec))
        kube.create(CONFIGBUNDLES, ns, bundle("plain", {"data": {"a": "1"}}))
        cond = wait_reason(kube, ns, "tls", "SecretsDisabled")
        assert cond["status"] == "False"
        assert "--secrets" in cond["message"]
        wait_reason(kube, ns, "plain", "Synced")
        status = kube.get(CONFIGBUNDLES, ns, "tls")["status"]
        assert "configMapName" not in status
        assert "secretName" not in status
        (event,) = wait_for(
            lambda: events(kube, ns, "SecretsDisabled"), WAIT, message="a SecretsDisabled Event"
        )
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == "tls"
        secret_targets = [
            b
            for b in kube.list(CONFIGBUNDLES, None)["items"]
            if (b["spec"].get("target") or {}).get("kind") == "Secret"
        ]
        assert ns in {b["metadata"]["namespace"] for b in secret_targets}
        wait_for(
            lambda: (
                op.metrics().get("cbop_configbundles_secrets_disabled{}") == len(secret_targets)
            ),
            WAIT,
            message=f"cbop_configbundles_secrets_disabled {len(secret_targets)}",
        )
        # No Secret was written, none read: the one there is untouched.
        assert [s["metadata"]["name"] for s in kube.list(SECRETS, ns)["items"]] == ["present"]
    finally:
        cluster.operators.remove(op)
        assert op.stop() in (0, -9)


def test_with_secrets_on_the_shipped_roles_grant_what_cbop_needs(cluster: Cluster) -> None:
    """--secrets without manifests/secrets/'s roles: not ready, /readyz naming the refused
    list; with them: ready. The roles grant list/watch/get/create/update/delete on
    Secrets, get on the digest key by name and create in cbop-system; no patch."""
    op = cluster.start("--secrets", wait=False)
    try:

        def refused() -> bool:
            with contextlib.suppress(OSError):
                code, body = op.get("/readyz?verbose")
                return code == 503 and "forbidden to list secrets" in body
            return False

        wait_for(refused, WAIT, message="/readyz names the refused list of secrets")
        cluster.secret_rbac("apply")
        op.wait_ready(WAIT)
        assert can_i(cluster, "list", "secrets", None)
        assert can_i(cluster, "watch", "secrets", None)
        assert can_i(cluster, "update", "secrets", "default")
        assert can_i(cluster, "delete", "secrets", "default")
        assert not can_i(cluster, "patch", "secrets", "default")
        assert not can_i(cluster, "deletecollection", "secrets", "default")
        assert can_i(cluster, "get", "secrets/cbop-digest-key", "cbop-system")
        assert can_i(cluster, "create", "secrets", "cbop-system")
    finally:
        cluster.operators.remove(op)
        code = op.stop()
        cluster.secret_rbac("delete")
        assert code in (0, -9), op.logs()[-6000:]
    assert not can_i(cluster, "list", "secrets", None)
