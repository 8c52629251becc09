"""The rollout of workloads that read Secret targets: references, the keyed digest, decisions.

Pure decisions and the reconciler against the fake API server, CacheListers, fake time.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest

from cbop.api import content_hash, keyed_content_hash
from cbop.cli import build_parser, controller_settings
from cbop.configbundle.controller import ConfigBundleSettings
from cbop.kube import DEPLOYMENTS, NAMESPACES
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    INDEXERS,
    Action,
    ChangeCoalescer,
    RolloutReconciler,
    SecretInputs,
    config_digest,
    configmap_mapper,
    decide,
    index_by_secret,
    referenced_configmaps,
    referenced_secrets,
    secret_mapper,
)
from cbop.rollout.controller import RolloutSettings
from cbop.rollout.decision import (
    EMPTY_DIGEST,
    KIND_SECRET,
    ManagedObject,
    baseline_value,
    managed_references,
    required_secrets,
)
from cbop.rollout.references import SecretReader
from cbop.runtime.definition import FlagValues
from cbop.secretaccess import SecretsScope
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker
from cbop_testing.objects import configmap, with_baseline, workload

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
#: Values no output may show.
CERT = b"-----BEGIN CERTIFICATE-----\nMIIBsecretcert\n-----END CERTIFICATE-----\n"
PRIVATE = b"-----BEGIN PRIVATE KEY-----\nMIIEsecretkey\n-----END PRIVATE KEY-----\n"
RENEWED = b"-----BEGIN CERTIFICATE-----\nMIIBrenewedcert\n-----END CERTIFICATE-----\n"


def secret(
    name: str,
    data: dict[str, bytes] | None = None,
    *,
    bundle: str | None = None,
    managed: bool = True,
    namespace: str = "demo",
) -> dict[str, Any]:
    """Return a Secret as cbop writes it (managed) or as anyone else would."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
    if managed:
        meta["labels"] = {"app.kubernetes.io/managed-by": "cbop"}
        meta["ownerReferences"] = [
            {
                "apiVersion": "cbop.dev/v1beta1",
                "kind": "ConfigBundle",
                "name": bundle or name,
                "uid": f"uid-{bundle or name}",
                "controller": True,
            }
        ]
    content = data if data is not None else {"tls.crt": CERT, "tls.key": PRIVATE}
    return {
        "metadata": meta,
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in content.items()},
    }


def reading(
    *,
    volume: str | None = None,
    projected: str | None = None,
    env_from: str | None = None,
    key_ref: str | None = None,
    optional: bool = False,
    configmaps: list[str] = (),  # type: ignore[assignment]
    name: str = "web",
) -> dict[str, Any]:
    """Return a labelled Deployment reading Secrets in each way asked for."""
    w = workload(name, volumes=list(configmaps))
    spec = w["spec"]["template"]["spec"]
    opt = {"optional": True} if optional else {}
    if volume:
        spec["volumes"].append({"name": "tls", "secret": {"secretName": volume, **opt}})
    if projected:
        spec["volumes"].append(
            {"name": "p", "projected": {"sources": [{"secret": {"name": projected, **opt}}]}}
        )
    container = spec["containers"][0]
    if env_from:
        container["envFrom"].append({"secretRef": {"name": env_from, **opt}})
    if key_ref:
        container["env"] = [
            {
                "name": "TLS_KEY",
                "valueFrom": {"secretKeyRef": {"name": key_ref, "key": "tls.key", **opt}},
            }
        ]
    return w


def tls_bundle(name: str, target: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "demo", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": meta,
        "spec": {
            "target": {"kind": "Secret", "name": target, "type": "kubernetes.io/tls"},
            "sources": [{"secret": {"name": "wildcard-tls", "namespace": "cert-manager"}}],
        },
    }


# ----------------------------------------------------------------- references


def test_every_way_a_pod_template_reads_a_secret_is_found() -> None:
    """Secret volumes (``secretName``), projected ``secret`` sources, ``envFrom.secretRef``
    and ``env.valueFrom.secretKeyRef``, in containers, init and ephemeral containers; a
    ConfigMap of the same name is another reference, and image pull Secrets are not
    content the pods read."""
    w = reading(volume="vol", projected="proj", env_from="env", key_ref="keyref")
    spec = w["spec"]["template"]["spec"]
    spec["initContainers"] = [{"name": "i", "envFrom": [{"secretRef": {"name": "init"}}]}]
    spec["ephemeralContainers"] = [
        {"name": "e", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "eph"}}}]}
    ]
    spec["imagePullSecrets"] = [{"name": "pull"}]
    spec["volumes"].append({"name": "cm", "configMap": {"name": "vol"}})
    assert referenced_secrets(w) == ["env", "eph", "init", "keyref", "proj", "vol"]
    assert referenced_configmaps(w) == ["vol"]
    assert index_by_secret(w) == [f"demo/{n}" for n in referenced_secrets(w)]


def test_optional_secret_references_are_not_required() -> None:
    w = reading(volume="a", env_from="b", optional=True)
    w["spec"]["template"]["spec"]["containers"][0]["envFrom"].append(
        {"secretRef": {"name": "c", "optional": False}}
    )
    assert referenced_secrets(w) == ["a", "b", "c"]
    assert required_secrets(w) == ["c"]


def test_a_secret_change_wakes_its_readers_and_not_a_configmap_namesake_s() -> None:
    """The Secret watch maps through the Secret index: a Deployment reading ConfigMap
    ``tls`` is not woken by Secret ``tls``, and the other way round."""
    workloads = CacheLister(indexers=dict(INDEXERS))
    workloads.add(reading(volume="tls", name="reads-secret"))
    workloads.add(reading(configmaps=["tls"], name="reads-configmap"))
    clock = FakeClock(0.0)
    coalescer = ChangeCoalescer(clock=clock)
    assert secret_mapper(workloads, coalescer)(secret("tls")) == ["demo/reads-secret"]
    assert configmap_mapper(workloads)(configmap("tls")) == ["demo/reads-configmap"]
    assert coalescer.delay("demo/reads-secret") == pytest.approx(1.0)
    assert coalescer.delay("demo/reads-configmap") == 0.0


# ----------------------------------------------------------------- the keyed digest


def test_a_managed_secret_counts_with_its_keyed_digest_never_a_plain_hash() -> None:
    """The digest of a Secret reader is built from the HMAC of the Secret's data under
    the digest key: the same content under another key gives another digest, and the
    plain SHA-256 of the content (testable offline by anyone who reads the workload)
    appears nowhere in it."""
    w = reading(volume="tls")
    s = secret("tls", bundle="wildcard")
    (managed,) = managed_references(w, {}, SecretInputs(secrets={"tls": s}, key=KEY))
    content = {"tls.crt": CERT, "tls.key": PRIVATE}
    assert managed == ManagedObject(
        "tls", "wildcard", keyed_content_hash(KEY, {}, content), KIND_SECRET
    )
    assert managed.content_hash.startswith("hmac-sha256:")
    d = decide(w, {}, secrets=SecretInputs(secrets={"tls": s}, key=KEY))
    other = decide(w, {}, secrets=SecretInputs(secrets={"tls": s}, key=OTHER_KEY))
    assert d.action is Action.RECORD
    assert d.digest != other.digest
    plain = content_hash({}, content)
    unkeyed = config_digest([ManagedObject("tls", "wildcard", plain, KIND_SECRET)])
    assert d.digest != unkeyed
    for value in (*content.values(), plain.encode()):
        assert value.hex() not in d.digest
    assert d.digest == config_digest([managed])


def test_the_digest_of_configmap_readers_is_unchanged() -> None:
    """A ConfigMap reader's digest is the SHA-256 of (name, hash) pairs as before
    Secrets were read: an upgrade rolls none of them."""
    cm = configmap("a", {"k": "v"})
    d = decide(workload(volumes=["a"]), {"a": cm})
    expected = hashlib.sha256()
    for part in (b"a", content_hash({"k": "v"}, {}).encode()):
        expected.update(len(part).to_bytes(8, "big") + part)
    assert d.digest == "sha256:" + expected.hexdigest()


def test_a_secret_and_a_configmap_of_one_name_are_two_parts_of_the_digest() -> None:
    w = reading(volume="conf", configmaps=["conf"])
    cm = configmap("conf")
    s = secret("conf", {"k": b"v"})
    both = decide(w, {"conf": cm}, secrets=SecretInputs(secrets={"conf": s}, key=KEY))
    only_cm = decide(w, {"conf": cm})
    assert [m.ref for m in both.configmaps] == ["conf", "Secret/conf"]
    assert both.digest != only_cm.digest


def test_a_managed_secret_without_the_key_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="digest key"):
        decide(reading(volume="tls"), {}, secrets=SecretInputs(secrets={"tls": secret("tls")}))


def test_a_secret_cbop_does_not_manage_counts_as_nothing() -> None:
    """Another owner's Secret (no label, or no owner reference to a bundle) is not read
    into the digest: the workload's baseline is the digest of nothing."""
    w = reading(env_from="db-creds")
    foreign = secret("db-creds", managed=False)
    d = decide(w, {}, secrets=SecretInputs(secrets={"db-creds": foreign}, key=KEY))
    assert (d.action, d.digest, d.configmaps) == (Action.RECORD, EMPTY_DIGEST, ())


# ----------------------------------------------------------------- the decisions


def test_first_sight_records_then_a_renewal_applies_once() -> None:
    w = reading(key_ref="tls")
    first = decide(w, {}, secrets=SecretInputs(secrets={"tls": secret("tls")}, key=KEY))
    assert first.action is Action.RECORD
    seen = with_baseline(w, first.digest)
    same = decide(seen, {}, secrets=SecretInputs(secrets={"tls": secret("tls")}, key=KEY))
    assert same.action is Action.NONE
    renewed = secret("tls", {"tls.crt": RENEWED, "tls.key": PRIVATE})
    after = decide(seen, {}, secrets=SecretInputs(secrets={"tls": renewed}, key=KEY))
    assert after.action is Action.APPLY
    assert baseline_value(after.digest) != baseline_value(first.digest)


def test_a_required_secret_a_bundle_will_write_holds_the_baseline_back() -> None:
    """The pods wait for a required Secret that does not exist: nothing is recorded
    until it appears, and then its content is the baseline (no roll)."""
    w = reading(volume="tls")
    waiting = decide(w, {}, secrets=SecretInputs(absent={"tls"}, key=KEY))
    assert (waiting.action, waiting.digest) == (Action.NONE, "")
    assert "Secret(s) tls" in waiting.message
    arrived = decide(w, {}, secrets=SecretInputs(secrets={"tls": secret("tls")}, key=KEY))
    assert arrived.action is Action.RECORD
    assert arrived.digest != EMPTY_DIGEST


def test_an_optional_secret_that_is_not_there_yet_is_nothing_then_rolls() -> None:
    w = reading(env_from="tls", optional=True)
    first = decide(w, {}, secrets=SecretInputs(absent={"tls"}, key=KEY))
    assert (first.action, first.digest) == (Action.RECORD, EMPTY_DIGEST)
    later = decide(
        with_baseline(w, EMPTY_DIGEST),
        {},
        secrets=SecretInputs(secrets={"tls": secret("tls")}, key=KEY),
    )
    assert later.action is Action.APPLY


def test_a_secret_target_going_away_keeps_the_baseline() -> None:
    w = with_baseline(reading(volume="tls"), "sha256:" + "1" * 64)
    d = decide(w, {}, secrets=SecretInputs(key=KEY))
    assert (d.action, d.digest) == (Action.NONE, "")


def test_secrets_off_leaves_secret_references_out() -> None:
    """Without ``secrets`` (Secrets off) a workload reading a Secret and a ConfigMap has
    the ConfigMap's digest alone, as before."""
    w = reading(volume="tls", configmaps=["a"])
    cm = configmap("a")
    assert decide(w, {"a": cm}).digest == decide(workload(volumes=["a"]), {"a": cm}).digest


# ----------------------------------------------------------------- reading the caches


class KeyCalls:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        return KEY


def test_secret_reads_ask_the_key_only_for_a_managed_secret() -> None:
    key = KeyCalls()
    reads = SecretReader(
        secrets=CacheLister([secret("tls"), secret("foreign", managed=False)]),
        bundles=CacheLister(),
        serves=lambda ns: ns == "demo",
        key=key,
    )
    assert reads.read("demo", reading(env_from="foreign")).key is None
    assert key.calls == 0
    got = reads.read("demo", reading(env_from="tls"))
    assert (got.key, set(got.secrets), key.calls) == (KEY, {"tls"}, 1)
    assert reads.read("elsewhere", reading(env_from="tls")) == SecretInputs()
    assert key.calls == 1


def test_secret_reads_await_only_targets_of_live_bundles() -> None:
    """A required Secret missing from the cache is awaited while a ConfigBundle of the
    namespace keeps it as its target; another owner's Secret (no such bundle), or the
    target of a bundle being deleted, is not: the pods read it, or never will."""
    reads = SecretReader(
        secrets=CacheLister(),
        bundles=CacheLister(
            [tls_bundle("wildcard", "tls"), tls_bundle("going", "old", deleting=True)]
        ),
        serves=lambda ns: True,
        key=KeyCalls(),
    )
    w = reading(volume="tls", projected="old", env_from="db-creds")
    assert reads.read("demo", w).absent == {"tls"}
    assert reads.read("demo", with_baseline(w, EMPTY_DIGEST)).absent == frozenset()
    optional = reading(volume="tls", optional=True)
    assert reads.read("demo", optional).absent == frozenset()


# ----------------------------------------------------------------- the reconciler


class Fixture:
    def __init__(self, *secrets: dict[str, Any]) -> None:
        self.clock = FakeClock(100.0)
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        self.kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
        self.workloads = CacheLister(indexers=dict(INDEXERS))
        self.secrets = CacheLister(secrets)
        self.configmaps = CacheLister()
        self.bundles = CacheLister([tls_bundle("wildcard", "tls")])
        self.recorder = FakeRecorder()
        self.coalescer = ChangeCoalescer(window=1.0, max_delay=5.0, clock=self.clock)
        self.mapper = secret_mapper(self.workloads, self.coalescer)
        self.key = KeyCalls()
        self.reconciler = RolloutReconciler(
            resource=DEPLOYMENTS,
            client=self.kube,
            workloads=self.workloads,
            configmaps=self.configmaps,
            recorder=self.recorder,
            coalescer=self.coalescer,
            secrets=SecretReader(
                secrets=self.secrets, bundles=self.bundles, serves=lambda ns: True, key=self.key
            ),
        )

    def seed(self, obj: dict[str, Any]) -> None:
        self.kube.tracker.add(DEPLOYMENTS, obj)
        self.sync()

    def sync(self) -> None:
        self.workloads.sync(self.kube.tracker, DEPLOYMENTS)

    def stored(self, name: str = "web") -> dict[str, Any]:
        return self.kube.tracker.get(DEPLOYMENTS, "demo", name)

    def change(self, s: dict[str, Any]) -> list[str]:
        self.secrets.add(s)
        return self.mapper(s)

    def patches(self) -> list[dict[str, Any]]:
        return [a.body for a in self.kube.write_actions() if a.verb == "patch"]


@pytest.mark.parametrize(
    "how",
    [{"volume": "tls"}, {"projected": "tls"}, {"env_from": "tls"}, {"key_ref": "tls"}],
    ids=["volume", "projected", "envFrom", "secretKeyRef"],
)
def test_a_renewed_secret_rolls_each_reader_once(how: dict[str, Any]) -> None:
    """First sight: the baseline alone (generation 1). The renewal (both keys replaced
    in two updates within the window) is one apply with the final digest, one
    ConfigChanged Event naming the bundle and the Secret and no value; then nothing."""
    f = Fixture(secret("tls", bundle="wildcard"))
    f.seed(reading(**how))
    assert f.reconciler.reconcile("demo/web").action is Action.RECORD
    f.sync()
    assert f.stored()["metadata"]["generation"] == 1
    assert f.change(secret("tls", {"tls.crt": RENEWED, "tls.key": PRIVATE}, bundle="wildcard"))
    f.clock.step(0.5)
    final = secret("tls", {"tls.crt": RENEWED, "tls.key": b"new key"}, bundle="wildcard")
    assert f.change(final) == ["demo/web"]
    assert f.reconciler.reconcile("demo/web").requeue_after == pytest.approx(1.0)
    f.clock.step(1.0)
    rolled = f.reconciler.reconcile("demo/web")
    assert (rolled.action, rolled.written) == (Action.APPLY, True)
    f.sync()
    assert f.stored()["metadata"]["generation"] == 2
    annotations = f.stored()["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {ANNOTATION_CONFIG_HASH: rolled.digest}
    expected = decide(reading(**how), {}, secrets=SecretInputs(secrets={"tls": final}, key=KEY))
    assert rolled.digest == expected.digest
    assert len(f.patches()) == 2  # the baseline, then the one roll
    ((reason, message),) = [(e.reason, e.message) for e in f.recorder.recorded]
    assert reason == "ConfigChanged"
    assert message.startswith("ConfigBundle(s) wildcard changed (Secrets tls)")
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert len(f.patches()) == 2
    said = repr(f.kube.actions) + repr(f.recorder.recorded) + repr(f.stored())
    for value in (CERT, PRIVATE, RENEWED, b"new key"):
        assert value.decode() not in said
        assert base64.b64encode(value).decode() not in said


def test_a_configmap_and_a_secret_changed_together_roll_once() -> None:
    """Both watches feed the one coalescer of the workload: a bundle's ConfigMap and a
    Secret target changed within the window are one apply, with the final digest, and
    the Event names both."""
    f = Fixture(secret("tls", bundle="wildcard"))
    f.configmaps.add(configmap("app", {"k": "1"}, bundle="app-conf"))
    f.seed(reading(volume="tls", configmaps=["app"]))
    assert f.reconciler.reconcile("demo/web").action is Action.RECORD
    f.sync()
    f.change(secret("tls", {"tls.crt": RENEWED, "tls.key": PRIVATE}, bundle="wildcard"))
    f.clock.step(0.5)
    cm = configmap("app", {"k": "2"}, bundle="app-conf")
    f.configmaps.add(cm)
    assert configmap_mapper(f.workloads, f.coalescer)(cm) == ["demo/web"]
    assert f.reconciler.reconcile("demo/web").requeue_after == pytest.approx(1.0)
    f.clock.step(1.0)
    rolled = f.reconciler.reconcile("demo/web")
    assert (rolled.action, rolled.written) == (Action.APPLY, True)
    assert len(f.patches()) == 2  # the baseline, then one roll
    ((message,),) = [(e.message,) for e in f.recorder.recorded]
    assert message.startswith(
        "ConfigBundle(s) app-conf, wildcard changed (ConfigMaps app; Secrets tls)"
    )


def test_a_deployment_first_seen_before_its_secret_is_written_is_not_rolled() -> None:
    """Helm creates the workload before the bundle has written the Secret: the pods wait
    for it, so its arrival is the baseline, not a roll."""
    f = Fixture()
    f.seed(reading(volume="tls"))
    waiting = f.reconciler.reconcile("demo/web")
    assert (waiting.action, waiting.written) == (Action.NONE, False)
    assert f.patches() == []
    f.change(secret("tls", bundle="wildcard"))
    f.clock.step(1.0)
    arrived = f.reconciler.reconcile("demo/web")
    assert (arrived.action, arrived.written) == (Action.RECORD, True)
    assert "spec" not in f.patches()[0]
    assert f.kube.actions
    assert all(a.resource != "secrets" for a in f.kube.actions)


def test_a_workload_reading_another_owner_s_secret_still_gets_a_baseline() -> None:
    """A required Secret that no bundle keeps (another tool's) does not hold back the
    baseline: the workload still rolls for its managed ConfigMap. cbop never GETs it."""
    f = Fixture()
    w = reading(env_from="db-creds")
    f.seed(w)
    recorded = f.reconciler.reconcile("demo/web")
    assert (recorded.action, recorded.digest) == (Action.RECORD, EMPTY_DIGEST)
    assert [a for a in f.kube.actions if a.resource == "secrets"] == []
    assert f.key.calls == 0


def test_a_key_that_cannot_be_read_fails_the_reconcile_for_a_retry() -> None:
    f = Fixture(secret("tls", bundle="wildcard"))

    def refused() -> bytes:
        raise RuntimeError("forbidden to get secrets cbop-digest-key")

    f.reconciler = RolloutReconciler(
        resource=DEPLOYMENTS,
        client=f.kube,
        workloads=f.workloads,
        configmaps=CacheLister(),
        secrets=SecretReader(
            secrets=f.secrets, bundles=f.bundles, serves=lambda ns: True, key=refused
        ),
    )
    f.seed(reading(volume="tls"))
    with pytest.raises(RuntimeError, match="forbidden"):
        f.reconciler.reconcile("demo/web")
    assert f.patches() == []


def test_the_workload_is_never_changed_in_place() -> None:
    w = reading(volume="tls")
    before = copy.deepcopy(w)
    decide(w, {}, secrets=SecretInputs(secrets={"tls": secret("tls")}, key=KEY))
    assert w == before


# ----------------------------------------------------------------- the flags


def test_the_rollout_reads_the_secrets_flags_the_configbundle_controller_offers() -> None:
    """The command line offers ``--secrets``, ``--secrets-namespace`` and
    ``--secrets-digest-key`` once (the ConfigBundle controller's); the rollout reads the
    same values, so it serves Secrets where they are written, under the same key."""
    args = [
        "--secrets",
        "--secrets-namespace=team-a, certs",
        "--secrets-digest-key=keys/the-key",
    ]
    flags = FlagValues(controller_settings(build_parser().parse_args(args)))
    theirs = ConfigBundleSettings.from_flags(flags).secrets
    ours = RolloutSettings.from_flags(flags).secrets
    assert ours == theirs
    assert ours == SecretsScope(
        enabled=True, namespaces=("team-a", "certs"), digest_key=("keys", "the-key")
    )
    assert RolloutSettings.from_flags(FlagValues()).secrets == SecretsScope()
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        RolloutSettings.from_flags(FlagValues({"secrets_digest_key": "no-slash"}))
