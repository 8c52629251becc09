"""Bundles with a Secret target, kept by cbop with ``--secrets`` on a real control plane.

One control plane of its own (kube-apiserver with an audit log of every Secret request,
etcd, kube-controller-manager's garbage collector and namespace controller) and one cbop
process, run as its ServiceAccount with the shipped RBAC and the Secrets' roles
(manifests/secrets/), serve the module. Each test uses namespaces of its own. The
guarantees of a ConfigMap target, for a Secret (docs/secrets.md): create, no write in
steady state, replace, drift heal of owned fields only, owner reference and garbage
collection, ``deletionPolicy: Orphan``, a Secret cbop does not manage never touched,
the 1 MiB limit, the type kept; Secret sources with their label and ``share-with``;
the keyed digest. The last test searches every output of the module for the values.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cbop.api import content_hash
from cbop.cli.exits import EXIT_PENDING
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, SECRETS, ApiError, KubeClient

from .clusterbundles import bundle_plane
from .harness import apiserver_writes, bundle, events, run_cli, set_spec, wait_for
from .secretcluster import (
    SECRETS_AUDIT_POLICY,
    SOURCE_LABELS,
    WAIT,
    Cluster,
    cbop_requests,
    decoded,
    make_secret,
    namespace,
    wait_reason,
)

TLS = "kubernetes.io/tls"
MANAGED_BY = "app.kubernetes.io/managed-by"


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The control plane, the Secrets' roles applied, and cbop running with ``--secrets``."""
    with bundle_plane(
        request.config, tmp_path_factory, "secret-targets", audit_policy=SECRETS_AUDIT_POLICY
    ) as (control, kube):
        found = Cluster(control, kube, tmp_path_factory.mktemp("secret-targets"))
        found.secret_rbac("apply")
        try:
            found.start("--secrets")
            yield found
        finally:
            for op in found.operators:
                code = op.stop()
                assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()}"


def writes_to(requests: list[dict[str, Any]], name: str) -> list[str]:
    """The verbs of the write requests to Secret ``name`` among ``requests``."""
    return [
        e["verb"]
        for e in requests
        if e["verb"] in ("create", "update", "patch", "delete")
        and (e.get("objectRef") or {}).get("name") == name
        and (e.get("responseStatus") or {}).get("code", 0) < 300
    ]


def secret_bundle(
    name: str, sources: list[dict[str, Any]], *, type_: str | None = TLS, **more: Any
) -> dict[str, Any]:
    target: dict[str, Any] = {"kind": "Secret", "name": name}
    if type_:
        target["type"] = type_
    return bundle(name, {"target": target, "sources": sources, **more})


def secret_of(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(SECRETS, ns, name)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise


def tls_source(cluster: Cluster, ns: str, name: str, share_with: str) -> dict[str, str]:
    """A labelled TLS source Secret shared with ``share_with``; returns its content."""
    content = {"tls.crt": cluster.value("crt"), "tls.key": cluster.value("key")}
    make_secret(
        cluster.kube,
        ns,
        name,
        content,
        labels=SOURCE_LABELS,
        annotations={"cbop.dev/share-with": share_with},
        type_=TLS,
    )
    return content


def renew(cluster: Cluster, ns: str, name: str, **changes: str) -> None:
    """Update source Secret ``ns/name`` with ``changes`` (what cert-manager does)."""
    current = cluster.kube.get(SECRETS, ns, name)
    data = {**decoded(current), **changes}
    current["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    cluster.kube.update(SECRETS, ns, name, current)


def unkeyed(content: Mapping[str, str]) -> str:
    """The unkeyed digest of ``content`` (what must never be published for a Secret)."""
    return content_hash({}, {k: v.encode() for k, v in content.items()})


def test_a_secret_target_is_made_kept_quietly_and_follows_its_source(cluster: Cluster) -> None:
    kube = cluster.kube
    src, ns = namespace(kube, "certs"), namespace(kube, "life")
    content = tls_source(cluster, src, "wildcard-tls", ns)
    source = {"secret": {"name": "wildcard-tls", "namespace": src}}
    made = kube.create(CONFIGBUNDLES, ns, secret_bundle("tls", [source]))
    wait_reason(kube, ns, "tls", "Synced")

    target = kube.get(SECRETS, ns, "tls")
    assert target["type"] == TLS
    assert decoded(target) == content
    assert target["metadata"]["labels"][MANAGED_BY] == "cbop"
    (owner,) = target["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "ConfigBundle",
        "tls",
        made["metadata"]["uid"],
    )
    assert owner["controller"]
    assert owner["blockOwnerDeletion"]
    digest = target["metadata"]["annotations"]["cbop.dev/content-hash"]
    assert digest.startswith("hmac-sha256:")
    status = kube.get(CONFIGBUNDLES, ns, "tls")["status"]
    assert (status["secretName"], status["contentHash"], status["keyCount"]) == ("tls", digest, 2)
    assert "configMapName" not in status
    assert "tls" not in {cm["metadata"]["name"] for cm in kube.list(CONFIGMAPS, ns)["items"]}
    # No unkeyed digest of the content anywhere view reads (noted as a leak for the
    # module's last test, which searches every output for it).
    plain = unkeyed(content)
    cluster.values.add(plain.removeprefix("sha256:"))
    assert plain.removeprefix("sha256:") not in json.dumps(kube.get(CONFIGBUNDLES, ns, "tls"))
    assert plain.removeprefix("sha256:") not in json.dumps(target["metadata"])
    # The digest key: a Secret cbop made in its own namespace, immutable.
    key = kube.get(SECRETS, "cbop-system", "cbop-digest-key")
    assert key["immutable"] is True
    assert len(base64.b64decode(key["data"]["key"])) >= 32

    # Steady state: no write at all, and no read of a Secret but the watches, over
    # four resyncs.
    time.sleep(3)
    before = apiserver_writes(kube, ("secrets", "configbundles", "events"))
    since = time.time()
    time.sleep(8)
    assert apiserver_writes(kube, ("secrets", "configbundles", "events")) == before
    quiet = [e["verb"] for e in cbop_requests(cluster, since) if e["verb"] not in ("watch",)]
    assert quiet == [], quiet

    # cert-manager renews: the target follows, in one write.
    since = time.time()
    renewed = cluster.value("crt-renewed")
    renew(cluster, src, "wildcard-tls", **{"tls.crt": renewed})
    wait_for(
        lambda: decoded(kube.get(SECRETS, ns, "tls"))["tls.crt"] == renewed,
        WAIT,
        message="the target follows its renewed source",
    )
    wait_for(
        lambda: kube.get(CONFIGBUNDLES, ns, "tls")["status"]["contentHash"] != digest,
        WAIT,
        message="the status names the new digest",
    )
    time.sleep(3)
    assert writes_to(cbop_requests(cluster, since), "tls") == ["update"]
    metrics = cluster.operators[-1].metrics()
    assert metrics['cbop_secret_writes_total{operation="create"}'] >= 1
    assert metrics['cbop_secret_writes_total{operation="update"}'] >= 1
    assert metrics['cbop_configmap_writes_total{operation="create"}'] == 0
    assert kube.get(CONFIGBUNDLES, ns, "tls")["status"]["contentHash"].startswith("hmac-sha256:")


def test_an_immutable_target_is_replaced_when_its_content_changes(cluster: Cluster) -> None:
    kube = cluster.kube
    src, ns = namespace(kube, "certs-immutable"), namespace(kube, "immutable")
    tls_source(cluster, src, "wildcard-tls", ns)
    source = {"secret": {"name": "wildcard-tls", "namespace": src}}
    kube.create(CONFIGBUNDLES, ns, secret_bundle("tls", [source], immutable=True))
    wait_reason(kube, ns, "tls", "Synced")
    first = kube.get(SECRETS, ns, "tls")
    assert first["immutable"] is True
    renewed = cluster.value("crt-renewed")
    renew(cluster, src, "wildcard-tls", **{"tls.crt": renewed})
    wait_for(
        lambda: (
            (s := secret_of(kube, ns, "tls")) is not None
            and s["metadata"]["uid"] != first["metadata"]["uid"]
        ),
        WAIT,
        message="the immutable Secret made again",
    )
    second = kube.get(SECRETS, ns, "tls")
    assert decoded(second)["tls.crt"] == renewed
    assert (second["immutable"], second["type"]) == (True, TLS)
    wait_for(lambda: events(kube, ns, "Replaced"), WAIT, message="a Replaced Event")
    wait_reason(kube, ns, "tls", "Synced")

    # Made immutable by hand, where the spec does not ask for it: made again as the
    # spec says (an immutable Secret cannot be made mutable in place).
    kube.create(CONFIGBUNDLES, ns, secret_bundle("by-hand", [source]))
    wait_reason(kube, ns, "by-hand", "Synced")
    mine = kube.get(SECRETS, ns, "by-hand")
    kube.update(SECRETS, ns, "by-hand", {**mine, "immutable": True})
    wait_for(
        lambda: (
            (s := secret_of(kube, ns, "by-hand")) is not None
            and s["metadata"]["uid"] != mine["metadata"]["uid"]
            and not s.get("immutable")
        ),
        WAIT,
        message="the Secret made immutable by hand made again",
    )
    assert decoded(kube.get(SECRETS, ns, "by-hand"))["tls.crt"] == renewed


def test_drift_is_healed_in_the_owned_fields_only(cluster: Cluster) -> None:
    """A ConfigMap source into an Opaque Secret; a hand edit of a value, an added key, a
    foreign label and annotation: the content restored, the foreign metadata kept."""
    kube = cluster.kube
    ns = namespace(kube, "drift")
    password = cluster.value("password")
    kube.create(
        CONFIGMAPS,
        ns,
        {"metadata": {"name": "app-env", "labels": SOURCE_LABELS}, "data": {"PASSWORD": password}},
    )
    kube.create(
        CONFIGBUNDLES, ns, secret_bundle("app", [{"configMap": {"name": "app-env"}}], type_=None)
    )
    wait_reason(kube, ns, "app", "Synced")
    secret = kube.get(SECRETS, ns, "app")
    assert secret["type"] == "Opaque"
    assert decoded(secret) == {"PASSWORD": password}

    edited = cluster.value("edited")
    secret["data"] = {
        "PASSWORD": base64.b64encode(edited.encode()).decode(),
        "EXTRA": base64.b64encode(b"added by hand").decode(),
    }
    secret["metadata"]["labels"]["team"] = "a"
    secret["metadata"].setdefault("annotations", {})["note"] = "kept"
    kube.update(SECRETS, ns, "app", secret)
    wait_for(
        lambda: decoded(kube.get(SECRETS, ns, "app")) == {"PASSWORD": password},
        WAIT,
        message="the drift healed",
    )
    healed = kube.get(SECRETS, ns, "app")
    assert healed["metadata"]["labels"]["team"] == "a"
    assert healed["metadata"]["annotations"]["note"] == "kept"
    wait_for(lambda: events(kube, ns, "DriftCorrected"), WAIT, message="a DriftCorrected Event")

    # Deleted by hand: made again, the same content and owner.
    kube.delete(SECRETS, ns, "app")
    again = wait_for(lambda: secret_of(kube, ns, "app"), WAIT, message="the Secret made again")
    assert decoded(again) == {"PASSWORD": password}
    assert again["metadata"]["ownerReferences"][0]["name"] == "app"


def test_a_secret_cbop_does_not_manage_is_never_touched(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "foreign")
    theirs = cluster.value("theirs")
    make_secret(kube, ns, "taken", {"token": theirs})
    ours = cluster.value("ours")
    kube.create(
        CONFIGMAPS,
        ns,
        {"metadata": {"name": "src", "labels": SOURCE_LABELS}, "data": {"token": ours}},
    )
    since = time.time()
    kube.create(
        CONFIGBUNDLES, ns, secret_bundle("taken", [{"configMap": {"name": "src"}}], type_=None)
    )
    cond = wait_reason(kube, ns, "taken", "SecretConflict")
    assert cond["status"] == "False"
    assert "taken" in cond["message"]
    before = kube.get(SECRETS, ns, "taken")
    time.sleep(5)
    after = kube.get(SECRETS, ns, "taken")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert decoded(after) == {"token": theirs}
    assert writes_to(cbop_requests(cluster, since), "taken") == []
    # The name freed: cbop takes it (at the next recheck).
    kube.delete(SECRETS, ns, "taken")
    wait_reason(kube, ns, "taken", "Synced")
    assert decoded(kube.get(SECRETS, ns, "taken")) == {"token": ours}


def test_garbage_collection_and_orphan(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "lifecycle")
    kube.create(
        CONFIGMAPS,
        ns,
        {"metadata": {"name": "src", "labels": SOURCE_LABELS}, "data": {"k": cluster.value("v")}},
    )
    source = [{"configMap": {"name": "src"}}]
    kube.create(CONFIGBUNDLES, ns, secret_bundle("collected", source, type_=None))
    kube.create(
        CONFIGBUNDLES, ns, secret_bundle("orphaned", source, type_=None, deletionPolicy="Orphan")
    )
    wait_reason(kube, ns, "collected", "Synced")
    wait_reason(kube, ns, "orphaned", "Synced")

    kube.delete(CONFIGBUNDLES, ns, "collected")
    wait_for(lambda: secret_of(kube, ns, "collected") is None, WAIT, message="collected by the GC")

    kube.delete(CONFIGBUNDLES, ns, "orphaned")
    wait_for(
        lambda: (
            not any(
                b["metadata"]["name"] == "orphaned" for b in kube.list(CONFIGBUNDLES, ns)["items"]
            )
        ),
        WAIT,
        message="the Orphan bundle gone",
    )
    kept = kube.get(SECRETS, ns, "orphaned")
    assert not kept["metadata"].get("ownerReferences")
    assert kept["metadata"]["annotations"]["cbop.dev/released-by"] == f"{ns}/orphaned"
    assert MANAGED_BY not in (kept["metadata"].get("labels") or {})
    time.sleep(3)
    assert secret_of(kube, ns, "orphaned") is not None

    # A namesake bundle of another type finds it: reported, never retyped.
    kube.create(CONFIGBUNDLES, ns, secret_bundle("orphaned", source, type_="example.com/custom"))
    cond = wait_reason(kube, ns, "orphaned", "SecretConflict")
    assert "Opaque" in cond["message"]
    assert kube.get(SECRETS, ns, "orphaned")["type"] == "Opaque"


def test_the_one_mebibyte_limit(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "large")
    for part in ("a", "b"):
        make_secret(kube, ns, part, {part: "x" * 600_000}, labels=SOURCE_LABELS)
    sources = [{"secret": {"name": "a"}}, {"secret": {"name": "b"}}]
    kube.create(CONFIGBUNDLES, ns, secret_bundle("big", sources, type_=None))
    cond = wait_reason(kube, ns, "big", "SecretTooLarge")
    assert cond["status"] == "False"
    assert "1,200,000 bytes" in cond["message"]
    assert secret_of(kube, ns, "big") is None
    # Smaller: written.
    set_spec(kube, ns, "big", {"target": {"kind": "Secret", "name": "big"}, "sources": sources[:1]})
    wait_reason(kube, ns, "big", "Synced")
    assert len(decoded(kube.get(SECRETS, ns, "big"))["a"]) == 600_000


def test_a_tls_target_without_its_keys_is_invalid(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "tls-keys")
    only_cert = cluster.value("cert-only")
    make_secret(kube, ns, "half", {"tls.crt": only_cert}, labels=SOURCE_LABELS)
    kube.create(CONFIGBUNDLES, ns, secret_bundle("tls", [{"secret": {"name": "half"}}]))
    cond = wait_reason(kube, ns, "tls", "InvalidSpec")
    assert cond["status"] == "False"
    assert "tls.key" in cond["message"]
    time.sleep(2)
    assert secret_of(kube, ns, "tls") is None


def test_a_restart_writes_no_secret_and_no_status(cluster: Cluster) -> None:
    """Every bundle above converged (or refused, for good): a new cbop process reads the
    digest key again, compares bytes, and changes nothing. (A create of a name another
    Secret holds is refused, 409, as for ConfigMaps: cbop does not cache foreign ones.)"""
    kube = cluster.kube
    time.sleep(3)
    done = ("200", "201")
    before = apiserver_writes(kube, ("secrets", "configbundles"), codes=done)
    running = cluster.operators.pop()
    assert running.stop() in (0, -9)
    since = time.time()
    cluster.start("--secrets")
    time.sleep(8)
    assert apiserver_writes(kube, ("secrets", "configbundles"), codes=done) == before
    requests = [
        (e["verb"], (e.get("objectRef") or {}).get("name"), e["responseStatus"]["code"])
        for e in cbop_requests(cluster, since)
        if e["verb"] not in ("list", "watch")
    ]
    assert ("get", "cbop-digest-key", 200) in requests
    assert {r for r in requests if r[1] != "cbop-digest-key"} <= {
        ("create", "orphaned", 409),
        ("get", "orphaned", 200),
    }, requests


def test_a_new_digest_key_writes_each_target_once(cluster: Cluster) -> None:
    """The digest key deleted and cbop restarted: the new leader makes a new key, and each
    Secret target gets one update (its keyed digest), never more, never a replace."""
    kube = cluster.kube
    managed = {
        (t["metadata"]["namespace"], t["metadata"]["name"]): t["metadata"]["annotations"][
            "cbop.dev/content-hash"
        ]
        for t in kube.list(SECRETS, None, label_selector=f"{MANAGED_BY}=cbop")["items"]
    }
    assert len(managed) >= 5
    running = cluster.operators.pop()
    assert running.stop() in (0, -9)
    old_key = kube.get(SECRETS, "cbop-system", "cbop-digest-key")
    kube.delete(SECRETS, "cbop-system", "cbop-digest-key")
    since = time.time()
    cluster.start("--secrets")

    def rehashed() -> bool:
        now = {
            (t["metadata"]["namespace"], t["metadata"]["name"]): t["metadata"]["annotations"][
                "cbop.dev/content-hash"
            ]
            for t in kube.list(SECRETS, None, label_selector=f"{MANAGED_BY}=cbop")["items"]
        }
        return now.keys() == managed.keys() and all(now[k] != managed[k] for k in managed)

    wait_for(rehashed, WAIT, message="every target under the new key")
    new_key = kube.get(SECRETS, "cbop-system", "cbop-digest-key")
    assert new_key["data"]["key"] != old_key["data"]["key"]
    time.sleep(6)
    requests = cbop_requests(cluster, since)
    for ns, name in managed:
        done = [
            e["verb"]
            for e in requests
            if e["verb"] in ("create", "update", "delete")
            and e["objectRef"].get("namespace") == ns
            and e["objectRef"].get("name") == name
            and e["responseStatus"]["code"] < 300
        ]
        assert done == ["update"], (ns, name, done)


# ---------------------------------------------------------------- Secret sources


def test_a_source_secret_needs_its_label_and_to_be_shared(cluster: Cluster) -> None:
    kube = cluster.kube
    owner, ns = namespace(kube, "src-owner"), namespace(kube, "src-reader")
    value = cluster.value("shared")
    make_secret(kube, owner, "unlabelled", {"k": value})
    make_secret(kube, owner, "not-shared", {"k": value}, labels=SOURCE_LABELS)
    kube.create(
        CONFIGBUNDLES,
        ns,
        secret_bundle("a", [{"secret": {"name": "unlabelled", "namespace": owner}}], type_=None),
    )
    kube.create(
        CONFIGBUNDLES,
        ns,
        secret_bundle("b", [{"secret": {"name": "not-shared", "namespace": owner}}], type_=None),
    )
    wait_reason(kube, ns, "a", "SourceNotFound")
    refused = wait_reason(kube, ns, "b", "SourceNotShared")
    assert "cbop.dev/share-with" in refused["message"]
    assert secret_of(kube, ns, "a") is None
    assert secret_of(kube, ns, "b") is None

    # The owner shares it: granted.
    shared = kube.get(SECRETS, owner, "not-shared")
    shared["metadata"]["annotations"] = {"cbop.dev/share-with": ns}
    kube.update(SECRETS, owner, "not-shared", shared)
    wait_reason(kube, ns, "b", "Synced")
    assert decoded(kube.get(SECRETS, ns, "b")) == {"k": value}
    sources = kube.get(CONFIGBUNDLES, ns, "b")["status"]["sources"]
    assert all(s.get("contentHash", "hmac-sha256:").startswith("hmac-sha256:") for s in sources)

    # cbop lists and watches Secrets only through a label selector.
    collections = [e for e in cbop_requests(cluster) if e["verb"] in ("list", "watch")]
    assert collections
    for e in collections:
        assert "labelSelector=" in e["requestURI"], e["requestURI"]
    reads = {
        (e.get("objectRef") or {}).get("name") for e in cbop_requests(cluster) if e["verb"] == "get"
    }
    assert "unlabelled" not in reads
    assert "not-shared" not in reads


# ---------------------------------------------------------------- the dry run, the leaks


def test_the_dry_run_shows_keys_sizes_and_changes_never_values(cluster: Cluster) -> None:
    """cbop stopped, a source renewed: ``--once --dry-run`` names the key that would change
    and its size, says that values are never shown, and shows none."""
    kube = cluster.kube
    ns = namespace(kube, "dry-run")
    old, new, same = cluster.value("old"), cluster.value("new"), cluster.value("same")
    make_secret(kube, ns, "src", {"token": old, "same": same}, labels=SOURCE_LABELS)
    kube.create(CONFIGBUNDLES, ns, secret_bundle("app", [{"secret": {"name": "src"}}], type_=None))
    wait_reason(kube, ns, "app", "Synced")
    running = cluster.operators.pop()
    assert running.stop() in (0, -9)
    try:
        renew(cluster, ns, "src", token=new)
        result = run_cli(
            cluster.service_account, "--once", "--dry-run", "--secrets", f"--namespace={ns}"
        )
        # Read before cbop runs again: once it is back, it writes the new token.
        after_dry_run = decoded(kube.get(SECRETS, ns, "app"))["token"]
    finally:
        cluster.start("--secrets")
    out = result.stdout + result.stderr
    cluster.printed("dry run", out)
    assert result.returncode == EXIT_PENDING, out
    assert "values are never shown" in out
    changed = [line for line in out.splitlines() if "bytes, changed)" in line]
    assert len(changed) == 1, out
    assert "token" in changed[0]
    assert f"{len(new)} bytes" in changed[0]
    assert old not in out
    assert new not in out
    assert same not in out
    assert after_dry_run == old  # nothing written
    wait_for(
        lambda: decoded(kube.get(SECRETS, ns, "app"))["token"] == new,
        WAIT,
        message="the real run writes it",
    )


def test_no_secret_value_reaches_any_output(cluster: Cluster) -> None:
    """Every value used above (and the unkeyed digest of one content): in no log line,
    Event, bundle status or spec, metric or dry-run output."""
    assert len(cluster.values) > 10
    # A value planted in one output is found there, and nothing else is.
    canary = cluster.value("canary")
    cluster.printed("a planted output", f"text around {canary} and more")
    assert cluster.leaks() == [f"{canary} in a planted output"]
