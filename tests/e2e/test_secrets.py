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
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    SECRETS,
    ApiError,
    KubeClient,
)

from .clusterbundles import bundle_plane
from .harness import bundle, events, wait_for
from .helm import BUILD_TIMEOUT, CHART, helm_binary
from .secretcluster import (
    SECRETS_AUDIT_POLICY,
    SOURCE_LABELS,
    WAIT,
    Cluster,
    can_i,
    cbop_requests,
    make_secret,
    namespace,
    wait_reason,
)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with bundle_plane(
        request.config, tmp_path_factory, "secrets", audit_policy=SECRETS_AUDIT_POLICY
    ) as (control, kube):
        found = Cluster(control, kube, tmp_path_factory.mktemp("secrets"))
        try:
            yield found
        finally:
            for op in found.operators:
                code = op.stop()
                assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()}"


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


def test_with_secrets_off_nothing_is_read_and_the_bundle_says_so(cluster: Cluster) -> None:
    """The shipped RBAC without manifests/secrets/: cbop's ServiceAccount may not get a
    Secret, and a bundle with a Secret target is SecretsDisabled, with an Event and a
    metric; a ConfigMap bundle is served as ever."""
    kube = cluster.kube
    ns = namespace(kube, "off")
    make_secret(kube, ns, "present", {"k": cluster.value("present")}, labels=SOURCE_LABELS)
    with KubeClient.from_config(kubeconfig=str(cluster.service_account), qps=0) as sa:
        with pytest.raises(ApiError) as refused:
            sa.get(SECRETS, ns, "present")
        assert refused.value.is_forbidden
    assert not can_i(cluster, "get", "secrets", ns)
    assert not can_i(cluster, "list", "secrets", None)
    since = time.time()
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
        # No Secret was written, none read (none even asked for): the one there is untouched.
        assert [s["metadata"]["name"] for s in kube.list(SECRETS, ns)["items"]] == ["present"]
        assert cbop_requests(cluster, since) == []
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


@pytest.mark.timeout(BUILD_TIMEOUT + 180)
def test_the_chart_narrows_the_grant_to_namespaces_and_named_secrets(cluster: Cluster) -> None:
    """The chart's Secrets RBAC with ``secrets.namespaces`` and ``secrets.resourceNames``,
    applied as rendered: cbop's ServiceAccount may list Secrets in those namespaces only,
    and get, update or delete only the named ones; cbop run as the chart runs it
    (``--secrets-namespace``) lists and watches there only, serves a bundle there, and
    says SecretsDisabled elsewhere."""
    kube = cluster.kube
    team, certs, other = (namespace(kube, n) for n in ("team-a", "cert-manager", "elsewhere"))
    rendered = subprocess.run(
        [helm_binary(), "template", "cbop", str(CHART), "--namespace", "cbop-system",
         "--set", "secrets.enabled=true", "--set", f"secrets.namespaces={{{team},{certs}}}",
         "--set", "secrets.resourceNames={tls}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    rbac = [
        o
        for o in yaml.safe_load_all(rendered.stdout)
        if o
        and o["kind"] in ("ClusterRole", "Role", "RoleBinding", "ClusterRoleBinding")
        and o["metadata"]["name"] in ("cbop-cbop-secrets", "cbop-digest-key")
    ]
    assert {(o["kind"], o["metadata"].get("namespace")) for o in rbac} == {
        ("ClusterRole", None),
        ("RoleBinding", team),
        ("RoleBinding", certs),
        ("Role", "cbop-system"),
        ("RoleBinding", "cbop-system"),
    }
    manifest = cluster.tmp / "narrowed-rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(rbac))
    cluster.kubectl("apply", "-f", str(manifest))
    op = None
    try:
        assert can_i(cluster, "list", "secrets", team)
        assert can_i(cluster, "watch", "secrets", certs)
        assert not can_i(cluster, "list", "secrets", other)
        assert not can_i(cluster, "list", "secrets", None)
        assert can_i(cluster, "get", "secrets/tls", team)
        assert not can_i(cluster, "get", "secrets/other", team)
        assert not can_i(cluster, "get", "secrets/tls", other)

        value = cluster.value("narrowed")
        make_secret(
            kube,
            certs,
            "wildcard-tls",
            {"tls.crt": value, "tls.key": cluster.value("narrowed-key")},
            labels=SOURCE_LABELS,
            annotations={"cbop.dev/share-with": team},
        )
        since = time.time()
        op = cluster.start("--secrets", f"--secrets-namespace={team},{certs}")
        spec = {"target": SECRET_TARGET, "sources": [SECRET_SOURCE]}
        kube.create(CONFIGBUNDLES, team, bundle("tls", spec))
        kube.create(CONFIGBUNDLES, other, bundle("tls", spec))
        wait_reason(kube, team, "tls", "Synced")
        assert kube.get(SECRETS, team, "tls")["type"] == "kubernetes.io/tls"
        refused = wait_reason(kube, other, "tls", "SecretsDisabled")
        assert team in refused["message"]
        collections = [e for e in cbop_requests(cluster, since) if e["verb"] in ("list", "watch")]
        assert collections
        for e in collections:
            assert e["objectRef"].get("namespace") in (team, certs), e["requestURI"]
            assert "labelSelector=" in e["requestURI"], e["requestURI"]
        # The narrowed grant covers every request cbop makes: none is forbidden. (A 404
        # or 409 is the API's answer to a race, e.g. the digest key made on first use.)
        forbidden = [
            (e["verb"], e["requestURI"])
            for e in cbop_requests(cluster, since)
            if e["responseStatus"]["code"] in (401, 403)
        ]
        assert forbidden == []
    finally:
        if op is not None:
            cluster.operators.remove(op)
            assert op.stop() in (0, -9)
        cluster.kubectl("delete", "-f", str(manifest))
    assert not can_i(cluster, "list", "secrets", team)


def test_no_secret_value_reaches_any_output(cluster: Cluster) -> None:
    """The values of the Secrets above: in no log line of cbop, Event, bundle or metric."""
    assert cluster.values
    assert cluster.log_paths
    # A value planted in one output is found there, and nothing else is.
    canary = cluster.value("canary")
    cluster.printed("a planted output", f"text around {canary} and more")
    assert cluster.leaks() == [f"{canary} in a planted output"]
