"""A renewed TLS Secret reaches every namespace and rolls each reader once (docs/rollout.md).

A control plane of its own, whose kube-controller-manager runs the workload controllers,
so a new ``cbop.dev/config-hash`` really makes a new ReplicaSet. One cbop process,
cluster-wide, with ``--secrets --rollout --cluster-bundles``: a labelled, shared TLS
Secret (as cert-manager keeps one) is stamped by a ClusterConfigBundle into 20 team
namespaces, each with a labelled Deployment that mounts it; two more read it through
``envFrom.secretRef`` and ``env.valueFrom.secretKeyRef``. The certificate is renewed
(``tls.crt`` and ``tls.key`` replaced): each target Secret is written once, each
Deployment rolls once. Then every output of the module (cbop's log, Events, statuses,
the workloads) is searched for the secret values and for their plain digest.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.api import content_hash
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    REPLICASETS,
    SECRETS,
    KubeClient,
)
from cbop.rollout import ANNOTATION_CONFIG_HASH, LABEL_CONFIG_BASELINE, LABEL_ROLLOUT, decide
from cbop.rollout.decision import SecretInputs
from cbop_testing.envtest import ControlPlane

from .clusterbundles import install_cluster_crd, wait_status
from .control_plane import START_TIMEOUT, _binaries
from .fixtures import install_crd
from .harness import Operator, apiserver_writes, wait_for
from .workloads import WORKLOAD_CONTROLLERS

WAIT = 120.0
#: The answers of writes that were made: a create refused with 409 (the stamp in
#: TAKEN finds the name held by a Secret cbop does not cache) wrote nothing.
DONE = ("200", "201")
#: Longer than the coalescing window (1 s) plus resyncs (2 s): a write that was going
#: to happen has happened by then.
QUIET = 8.0
TEAMS = [f"team-{i:02d}" for i in range(20)]
#: A selected namespace where a Secret of the target's name is someone else's.
TAKEN = "team-taken"
CERTS = "certs"
KEY_NS = "cbop-keys"
KEY_SECRET = "cbop-digest-key"
NAME = "wildcard-tls"
SELECTOR = {"matchLabels": {"tls.e2e/team": "yes"}}

CERT_1 = b"-----BEGIN CERTIFICATE-----\nMIIBfirstcertificatebody0001\n-----END CERTIFICATE-----\n"
KEY_1 = b"-----BEGIN PRIVATE KEY-----\nMIIEfirstprivatekeybody0001\n-----END PRIVATE KEY-----\n"
CERT_2 = b"-----BEGIN CERTIFICATE-----\nMIIBrenewedcertificate00002\n-----END CERTIFICATE-----\n"
KEY_2 = b"-----BEGIN PRIVATE KEY-----\nMIIErenewedprivatekey000002\n-----END PRIVATE KEY-----\n"
SECRET_VALUES = (CERT_1, KEY_1, CERT_2, KEY_2)


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def tls_data(cert: bytes, key: bytes) -> dict[str, str]:
    return {"tls.crt": b64(cert), "tls.key": b64(key)}


class Cluster:
    """The module's control plane, an admin client, and the cbop process (restartable)."""

    def __init__(self, control: ControlPlane, kube: KubeClient, tmp: Path) -> None:
        self.control = control
        self.kube = kube
        self.tmp = tmp
        self.op: Operator | None = None
        self.starts = 0
        self.logs: list[Path] = []

    def start(self) -> Operator:
        """Stop cbop if it runs, and start it, cluster-wide, with Secrets and rollouts."""
        if self.op is not None:
            code = self.op.stop()
            assert code == 0, f"cbop did not stop cleanly ({code}):\n{self.op.logs()}"
        self.starts += 1
        self.logs.append(self.tmp / f"cbop-{self.starts}.log")
        self.op = Operator(
            self.control.kubeconfig_path,
            (),
            args=[
                "--secrets",
                "--rollout",
                "--cluster-bundles",
                "--secrets-digest-key",
                f"{KEY_NS}/{KEY_SECRET}",
                "--resync-period",
                "2s",
            ],
            log_path=self.logs[-1],
        ).wait_ready(WAIT)
        return self.op

    def everything_readable(self) -> str:
        """cbop's logs, the Events, bundles, statuses and workloads, and /metrics."""
        kube = self.kube
        outputs = [path.read_text(errors="replace") for path in self.logs]
        outputs += [repr(kube.list(EVENTS, ns)) for ns in [*TEAMS, TAKEN, CERTS]]
        outputs += [repr(kube.list(CONFIGBUNDLES, ns)) for ns in [*TEAMS, TAKEN]]
        outputs += [repr(kube.get(CLUSTERCONFIGBUNDLES, None, NAME))]
        outputs += [repr(kube.list(DEPLOYMENTS, ns)) for ns in TEAMS]
        if self.op is not None:
            outputs += [self.op.metrics_text()]
        return "\n".join(outputs)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    control = ControlPlane(
        binaries=_binaries(request.config),
        workdir=tmp_path_factory.mktemp("secret-rollouts-plane"),
        controllers=WORKLOAD_CONTROLLERS,
    )
    control.start(timeout=START_TIMEOUT)
    kube = KubeClient.from_config(kubeconfig=str(control.kubeconfig_path), qps=0)
    found = Cluster(control, kube, tmp_path_factory.mktemp("secret-rollouts"))
    try:
        install_crd(control)
        install_cluster_crd(kube)
        yield found
    finally:
        if found.op is not None:
            code = found.op.stop()
            assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{found.op.logs()}"
        kube.close()
        control.stop()


def make_namespace(kube: KubeClient, name: str, labels: dict[str, str] | None = None) -> None:
    kube.create(NAMESPACES, None, {"metadata": {"name": name, "labels": labels or {}}})


def deployment(
    name: str, *, volume: bool = False, env_from: bool = False, key_ref: bool = False
) -> dict[str, Any]:
    """A labelled Deployment reading Secret ``NAME`` in each way asked for."""
    container: dict[str, Any] = {"name": "app", "image": "registry.invalid/app:1"}
    spec: dict[str, Any] = {"containers": [container]}
    if volume:
        container["volumeMounts"] = [{"name": "tls", "mountPath": "/etc/tls"}]
        spec["volumes"] = [{"name": "tls", "secret": {"secretName": NAME}}]
    if env_from:
        container["envFrom"] = [{"secretRef": {"name": NAME}}]
    if key_ref:
        container["env"] = [
            {"name": "TLS_KEY", "valueFrom": {"secretKeyRef": {"name": NAME, "key": "tls.key"}}}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


#: (namespace, Deployment) of every reader: a volume in each team namespace, and the
#: two environment readers in the first.
READERS = [(ns, "web") for ns in TEAMS] + [(TEAMS[0], "env-from"), (TEAMS[0], "key-ref")]


def replicasets(kube: KubeClient, ns: str, name: str) -> list[str]:
    uid = kube.get(DEPLOYMENTS, ns, name)["metadata"]["uid"]
    return sorted(
        rs["metadata"]["name"]
        for rs in kube.list(REPLICASETS, ns)["items"]
        if any(ref.get("uid") == uid for ref in rs["metadata"].get("ownerReferences") or ())
    )


def target_data(kube: KubeClient, ns: str) -> dict[str, str] | None:
    with contextlib.suppress(Exception):
        return dict(kube.get(SECRETS, ns, NAME).get("data") or {})
    return None


def test_a_renewed_tls_secret_reaches_20_namespaces_and_rolls_each_reader_once(
    cluster: Cluster,
) -> None:
    kube = cluster.kube
    make_namespace(kube, CERTS)
    make_namespace(kube, KEY_NS)
    for ns in TEAMS:
        make_namespace(kube, ns, {"tls.e2e/team": "yes"})
    make_namespace(kube, TAKEN, {"tls.e2e/team": "yes"})
    kube.create(
        SECRETS,
        TAKEN,
        {
            "metadata": {"name": NAME},
            "type": "kubernetes.io/tls",
            "data": tls_data(b"someone else's cert", b"someone else's key"),
        },
    )
    kube.create(
        SECRETS,
        CERTS,
        {
            "metadata": {
                "name": NAME,
                "labels": {"cbop.dev/source": "true"},
                "annotations": {"cbop.dev/share-with": "*"},
            },
            "type": "kubernetes.io/tls",
            "data": tls_data(CERT_1, KEY_1),
        },
    )
    kube.create(
        CLUSTERCONFIGBUNDLES,
        None,
        {
            "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
            "kind": CLUSTERCONFIGBUNDLES.kind,
            "metadata": {"name": NAME},
            "spec": {
                "namespaceSelector": SELECTOR,
                "template": {
                    "target": {"kind": "Secret", "type": "kubernetes.io/tls"},
                    "sources": [{"secret": {"name": NAME, "namespace": CERTS}}],
                },
            },
        },
    )
    op = cluster.start()

    # The stamps: one Secret per team namespace, of the source's type and content;
    # the namespace whose Secret is someone else's is counted as failed, and its
    # Secret is not touched.
    first = tls_data(CERT_1, KEY_1)
    wait_for(
        lambda: all(target_data(kube, ns) == first for ns in TEAMS),
        WAIT,
        message="the Secret in every team namespace",
    )
    status = wait_status(kube, NAME, selected=21, ready=20, failed=1)
    ((failure,),) = [status["failedNamespaces"]]
    assert (failure["namespace"], failure["reason"]) == (TAKEN, "SecretConflict")
    for ns in TEAMS:
        target = kube.get(SECRETS, ns, NAME)
        assert target["type"] == "kubernetes.io/tls"
        assert target["metadata"]["annotations"]["cbop.dev/content-hash"].startswith("hmac-sha256:")
    taken = kube.get(SECRETS, TAKEN, NAME)
    assert taken["data"] == tls_data(b"someone else's cert", b"someone else's key")
    assert "labels" not in taken["metadata"]

    # The readers, created after the Secrets: first sight records the baseline only.
    for ns, name in READERS:
        kube.create(
            DEPLOYMENTS,
            ns,
            deployment(
                name,
                volume=name == "web",
                env_from=name == "env-from",
                key_ref=name == "key-ref",
            ),
        )

    def baselined() -> bool:
        return all(
            LABEL_CONFIG_BASELINE in kube.get(DEPLOYMENTS, ns, name)["metadata"]["labels"]
            for ns, name in READERS
        )

    wait_for(baselined, WAIT, message="a baseline on every reader")
    wait_for(
        lambda: all(len(replicasets(kube, ns, name)) == 1 for ns, name in READERS),
        WAIT,
        message="one ReplicaSet each",
    )
    time.sleep(QUIET)
    for ns, name in READERS:
        got = kube.get(DEPLOYMENTS, ns, name)
        assert got["metadata"]["generation"] == 1, (ns, name)
        assert ANNOTATION_CONFIG_HASH not in (
            got["spec"]["template"]["metadata"].get("annotations") or {}
        )

    # The renewal: both keys replaced in one update, as cert-manager writes it.
    before = apiserver_writes(kube, ("secrets", "deployments"), codes=DONE)
    source = kube.get(SECRETS, CERTS, NAME)
    source["data"] = tls_data(CERT_2, KEY_2)
    kube.update(SECRETS, CERTS, NAME, source)
    renewed = tls_data(CERT_2, KEY_2)
    wait_for(
        lambda: all(target_data(kube, ns) == renewed for ns in TEAMS),
        WAIT,
        message="the renewed Secret in every team namespace",
    )

    def rolled() -> bool:
        return all(kube.get(DEPLOYMENTS, ns, n)["metadata"]["generation"] == 2 for ns, n in READERS)

    wait_for(rolled, WAIT, message="every reader rolled")
    wait_for(
        lambda: all(len(replicasets(kube, ns, name)) == 2 for ns, name in READERS),
        WAIT,
        message="a second ReplicaSet each",
    )
    time.sleep(QUIET)
    after = apiserver_writes(kube, ("secrets", "deployments"), codes=DONE)
    writes = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    # One write per target Secret, one apply per reader (cbop is the only client
    # that applies Deployments; kube-controller-manager updates their status).
    assert writes.get(("PUT", "secrets"), 0.0) == len(TEAMS) + 1  # + the source
    assert writes.get(("APPLY", "deployments"), 0.0) == len(READERS)
    assert writes.get(("POST", "secrets"), 0.0) == 0
    assert writes.get(("DELETE", "secrets"), 0.0) == 0

    # The digest each reader carries is the keyed one: what the rollout decides with
    # the key in cbop's own Secret, never the plain hash of the content.
    assert_keyed(kube, generation=2)
    changed = [
        e
        for ns in TEAMS
        for e in kube.list(EVENTS, ns)["items"]
        if e.get("reason") == "ConfigChanged"
    ]
    assert len(changed) == len(READERS)
    assert all(
        e["message"].startswith(f"ConfigBundle(s) {NAME} changed (Secrets {NAME})") for e in changed
    )
    assert op.metrics()['cbop_rollouts_total{kind="Deployment"}'] == len(READERS)
    assert_no_secret_in(cluster.everything_readable())


def assert_keyed(kube: KubeClient, generation: int) -> None:
    """Each reader is at ``generation``, with one ReplicaSet per roll, and carries the
    digest the rollout makes with the key in cbop's own Secret (and the Secret's plain
    hash nowhere in it): the decision on what is in the cluster now is to do nothing."""
    key = base64.b64decode(kube.get(SECRETS, KEY_NS, KEY_SECRET)["data"]["key"])
    for ns, name in READERS:
        got = kube.get(DEPLOYMENTS, ns, name)
        assert got["metadata"]["generation"] == generation, (ns, name)
        assert len(replicasets(kube, ns, name)) == generation, (ns, name)
        target = kube.get(SECRETS, ns, NAME)
        expected = decide(got, {}, secrets=SecretInputs(secrets={NAME: target}, key=key))
        assert got["spec"]["template"]["metadata"]["annotations"] == {
            ANNOTATION_CONFIG_HASH: expected.digest
        }
        assert expected.action.value == "none"


def assert_no_secret_in(text: str) -> None:
    """Nothing of the secret material where a log reader or ``view`` can read it: no
    value (as text, a line of it, or base64), and not its plain digest."""
    for value in SECRET_VALUES:
        for form in (value.decode(), b64(value), *value.decode().splitlines()[1:2]):
            assert form not in text
    for cert, key in ((CERT_1, KEY_1), (CERT_2, KEY_2)):
        plain = content_hash({}, {"tls.crt": cert, "tls.key": key})
        assert plain.removeprefix("sha256:") not in text


def test_a_restart_writes_nothing_and_a_new_digest_key_rolls_each_reader_once(
    cluster: Cluster,
) -> None:
    """The key lives in cbop's own Secret: a restart computes the same digests and
    writes nothing. A new key (the Secret deleted, cbop restarted) changes every
    digest: each reader rolls once more, and then nothing."""
    kube = cluster.kube
    old_key = kube.get(SECRETS, KEY_NS, KEY_SECRET)["data"]["key"]
    before = apiserver_writes(kube, ("secrets", "deployments"), codes=DONE)
    cluster.start()
    time.sleep(QUIET)
    after = apiserver_writes(kube, ("secrets", "deployments"), codes=DONE)
    assert {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)} == {}
    assert_keyed(kube, generation=2)

    kube.delete(SECRETS, KEY_NS, KEY_SECRET)
    before = after
    cluster.start()

    def rolled_again() -> bool:
        return all(kube.get(DEPLOYMENTS, ns, n)["metadata"]["generation"] == 3 for ns, n in READERS)

    wait_for(rolled_again, WAIT, message="every reader rolled under the new key")
    time.sleep(QUIET)
    after = apiserver_writes(kube, ("secrets", "deployments"), codes=DONE)
    writes = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    assert writes.get(("APPLY", "deployments"), 0.0) == len(READERS)
    assert writes.get(("POST", "secrets"), 0.0) == 1  # the new key, made once
    assert kube.get(SECRETS, KEY_NS, KEY_SECRET)["data"]["key"] != old_key
    assert_keyed(kube, generation=3)
    assert_no_secret_in(cluster.everything_readable())
