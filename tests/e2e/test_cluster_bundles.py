"""ClusterConfigBundles on a real control plane (kube-apiserver, etcd, and
kube-controller-manager with the garbage collector and the namespace controller).

One control plane and one cluster-wide cbop serve the whole module (cbop must watch
every namespace, so it cannot share the session's control plane with tests that scope
cbop to their own namespace). Each test selects its own namespaces by a label of its
own, so the tests do not see each other's ClusterConfigBundles. Most important first:
selection, a namespace created later, relabelling in and out; a stamp edited or
deleted by hand; conflicts (a foreign ConfigBundle, a foreign ConfigMap, two
ClusterConfigBundles keeping one ConfigMap name, an admission policy); deletion under
both policies; a terminating namespace; a restart that writes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.api import LABEL_CLUSTER_BUNDLE, label_value
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    ApiError,
    KubeClient,
)
from cbop_testing.envtest import ControlPlane

from .clusterbundles import (
    BINDINGS,
    POLICIES,
    WAIT,
    bundle_plane,
    configmap_data,
    get,
    make_ccb,
    make_namespace,
    relabel,
    status,
    wait_status,
)
from .harness import REPO, Operator, apiserver_writes, wait_for

#: Seconds a selected namespace created or relabelled gets its ConfigMap within.
SERVE_WITHIN = 2.0
#: Seconds from a namespace created or relabelled in to its ConfigMap, as measured
#: (written to cluster-bundles.json in the base temp directory).
FIGURES: dict[str, list[float]] = {"created": [], "relabelled": []}


@dataclass
class Cluster:
    """The module's control plane, an admin client, and the running cbop."""

    control: ControlPlane
    kube: KubeClient
    tmp: Path
    operators: list[Operator] = field(default_factory=list)

    @property
    def op(self) -> Operator:
        return self.operators[-1]

    def start(self, *args: str, namespaces: tuple[str, ...] = ()) -> Operator:
        op = Operator(
            self.control.kubeconfig_path,
            list(namespaces),
            args=["--resync-period", "2s", *args],
            log_path=self.tmp / f"cbop-{len(self.operators)}.log",
        )
        self.operators.append(op)
        op.wait_ready(60)
        return op


def _wait_for_garbage_collection(kube: KubeClient) -> None:
    """Wait until the garbage collector watches both kinds (it discovers new resources
    every 30 s): a ConfigMap owned by each is deleted with its owner."""
    make_namespace(kube, "gc-probe")
    owners = [
        kube.create(
            CONFIGBUNDLES,
            "gc-probe",
            {
                "apiVersion": CONFIGBUNDLES.api_version,
                "kind": "ConfigBundle",
                "metadata": {"name": "gc-probe"},
                "spec": {"suspend": True},
            },
        ),
        make_ccb(kube, "gc-probe", {"matchLabels": {"gc.probe/none": "x"}}),
    ]
    for i, owner in enumerate(owners):
        ref = {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
        kube.create(
            CONFIGMAPS,
            "gc-probe",
            {"metadata": {"name": f"dependent-{i}", "ownerReferences": [ref]}},
        )
    kube.delete(CONFIGBUNDLES, "gc-probe", "gc-probe")
    kube.delete(CLUSTERCONFIGBUNDLES, None, "gc-probe")
    wait_for(
        lambda: (
            not any(
                cm["metadata"]["name"].startswith("dependent-")
                for cm in kube.list(CONFIGMAPS, "gc-probe")["items"]
            )
        ),
        120,
        interval=1,
        message="the garbage collector collects dependents of both kinds",
    )


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with bundle_plane(request.config, tmp_path_factory, "cluster-bundles") as (control, kube):
        _wait_for_garbage_collection(kube)
        found = Cluster(control, kube, tmp_path_factory.mktemp("cluster-bundles"))
        found.start()
        yield found
        path = tmp_path_factory.getbasetemp() / "cluster-bundles.json"
        path.write_text(json.dumps(FIGURES, indent=2) + "\n")
        for op in found.operators:
            code = op.stop()
            assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()[-4000:]}"


# ---------------------------------------------------------------------- helpers


def ready_reason(found: dict[str, Any]) -> tuple[str, str]:
    (cond,) = [c for c in found.get("conditions") or () if c["type"] == "Ready"]
    return cond["status"], cond["reason"]


# ---------------------------------------------------------------------- tests


def test_selected_namespaces_get_the_configmap_including_new_and_relabelled_ones(
    cluster: Cluster,
) -> None:
    kube = cluster.kube
    label = {"sel.test/ca": "yes"}
    make_namespace(kube, "sel-a", label)
    make_namespace(kube, "sel-b")
    make_ccb(kube, "sel-ca", {"matchLabels": label})
    wait_for(lambda: configmap_data(kube, "sel-a", "sel-ca"), WAIT, message="ConfigMap in sel-a")
    assert configmap_data(kube, "sel-a", "sel-ca") == {"ca.crt": "CA-1"}
    stamp = kube.get(CONFIGBUNDLES, "sel-a", "sel-ca")
    assert stamp["metadata"]["labels"][LABEL_CLUSTER_BUNDLE] == "sel-ca"
    (ref,) = stamp["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("ClusterConfigBundle", "sel-ca", True)
    got = wait_status(kube, "sel-ca", selected=1, ready=1, failed=0)
    assert ready_reason(got) == ("True", "AllNamespacesReady")
    assert get(kube, CONFIGBUNDLES, "sel-b", "sel-ca") is None

    # A namespace created later is served within a second or two.
    started = time.monotonic()
    make_namespace(kube, "sel-c", label)
    wait_for(lambda: configmap_data(kube, "sel-c", "sel-ca"), WAIT, interval=0.05)
    served_after = time.monotonic() - started
    FIGURES["created"].append(round(served_after, 3))
    assert served_after < SERVE_WITHIN, f"new namespace served after {served_after:.2f} s"

    # Relabelled in: served; relabelled out: the stamp and (deletionPolicy Delete) its
    # ConfigMap go.
    started = time.monotonic()
    relabel(kube, "sel-b", label)  # type: ignore[arg-type]
    wait_for(lambda: configmap_data(kube, "sel-b", "sel-ca"), WAIT, interval=0.05)
    FIGURES["relabelled"].append(round(time.monotonic() - started, 3))
    assert FIGURES["relabelled"][-1] < SERVE_WITHIN
    relabel(kube, "sel-a", {"sel.test/ca": None})
    wait_for(
        lambda: get(kube, CONFIGBUNDLES, "sel-a", "sel-ca") is None, WAIT, message="stamp gone"
    )
    wait_for(
        lambda: get(kube, CONFIGMAPS, "sel-a", "sel-ca") is None, WAIT, message="ConfigMap gone"
    )
    wait_status(kube, "sel-ca", selected=2, ready=2, failed=0)
    gauges = cluster.op.metrics()
    for state, value in (("selected", 2.0), ("ready", 2.0), ("failed", 0.0)):
        sample = f'cbop_clusterconfigbundle_namespaces{{name="sel-ca",state="{state}"}}'
        assert gauges.get(sample) == value, (sample, gauges.get(sample))

    def reasons() -> set[str]:
        return {
            e["reason"]
            for e in kube.list(EVENTS, "default")["items"]
            if e["involvedObject"].get("name") == "sel-ca"
        }

    wait_for(lambda: {"NamespaceServed", "NamespaceReleased"} <= reasons(), WAIT)

    # A template change reaches every namespace.
    kube.patch(
        CLUSTERCONFIGBUNDLES,
        None,
        "sel-ca",
        {"spec": {"template": {"data": {"ca.crt": "CA-2"}}}},
    )
    for ns in ("sel-b", "sel-c"):
        wait_for(
            lambda ns=ns: configmap_data(kube, ns, "sel-ca") == {"ca.crt": "CA-2"},  # type: ignore[misc]
            WAIT,
            message=f"new content in {ns}",
        )
    wait_status(kube, "sel-ca", selected=2, ready=2, failed=0)


def test_a_stamp_edited_or_deleted_by_hand_is_put_back(cluster: Cluster) -> None:
    kube = cluster.kube
    label = {"edit.test/ca": "yes"}
    make_namespace(kube, "edit-a", label)
    make_ccb(kube, "edit-ca", {"matchLabels": label})
    wait_status(kube, "edit-ca", selected=1, ready=1)
    stamp = kube.get(CONFIGBUNDLES, "edit-a", "edit-ca")
    stamp["spec"]["data"] = {"ca.crt": "hand edit"}
    kube.update(CONFIGBUNDLES, "edit-a", "edit-ca", stamp)
    wait_for(
        lambda: kube.get(CONFIGBUNDLES, "edit-a", "edit-ca")["spec"]["data"] == {"ca.crt": "CA-1"},
        WAIT,
        message="stamp spec put back",
    )
    # The ConfigBundle controller may have written the edited spec meanwhile (the two
    # controllers hear the edit at once); it writes the template's back in turn.
    wait_for(
        lambda: configmap_data(kube, "edit-a", "edit-ca") == {"ca.crt": "CA-1"},
        WAIT,
        message="ConfigMap put back",
    )
    uid = kube.get(CONFIGBUNDLES, "edit-a", "edit-ca")["metadata"]["uid"]
    kube.delete(CONFIGBUNDLES, "edit-a", "edit-ca")
    recreated = wait_for(
        lambda: (
            (get(kube, CONFIGBUNDLES, "edit-a", "edit-ca") or {}).get("metadata", {}).get("uid")
            not in (None, uid)
        ),
        WAIT,
        message="stamp recreated",
    )
    assert recreated
    wait_for(lambda: configmap_data(kube, "edit-a", "edit-ca") == {"ca.crt": "CA-1"}, WAIT)
    wait_status(kube, "edit-ca", selected=1, ready=1)


def test_conflicts_are_reported_and_the_foreign_objects_left_alone(cluster: Cluster) -> None:
    kube = cluster.kube
    label = {"conf.test/ca": "yes"}
    make_namespace(kube, "conf-bundle", label)
    make_namespace(kube, "conf-map", label)
    make_namespace(kube, "conf-ok", label)
    foreign_bundle = kube.create(
        CONFIGBUNDLES,
        "conf-bundle",
        {
            "apiVersion": CONFIGBUNDLES.api_version,
            "kind": "ConfigBundle",
            "metadata": {"name": "conf-ca"},
            "spec": {"configMapName": "someone-elses", "data": {"mine": "1"}},
        },
    )
    foreign_map = kube.create(
        CONFIGMAPS,
        "conf-map",
        {"metadata": {"name": "conf-ca"}, "data": {"theirs": "1"}},
    )
    make_ccb(kube, "conf-ca", {"matchLabels": label})
    got = wait_status(kube, "conf-ca", selected=3, ready=1, failed=2)
    assert ready_reason(got) == ("False", "NamespacesFailing")
    failed = {f["namespace"]: f["reason"] for f in got["failedNamespaces"]}
    assert failed == {"conf-bundle": "ConfigBundleConflict", "conf-map": "ConfigMapConflict"}
    # Reported, never fought: the foreign objects are as they were (the foreign bundle
    # has a status of its own now, written by the ConfigBundle controller).
    after = kube.get(CONFIGBUNDLES, "conf-bundle", "conf-ca")
    for part in ("generation", "labels", "ownerReferences"):
        assert after["metadata"].get(part) == foreign_bundle["metadata"].get(part), part
    assert after["spec"] == foreign_bundle["spec"]
    assert (
        kube.get(CONFIGMAPS, "conf-map", "conf-ca")["metadata"]["resourceVersion"]
        == (foreign_map["metadata"]["resourceVersion"])
    )
    # The conflict resolved (the foreign bundle deleted): the namespace is served.
    kube.delete(CONFIGBUNDLES, "conf-bundle", "conf-ca")
    wait_for(lambda: configmap_data(kube, "conf-bundle", "conf-ca"), WAIT)
    wait_status(kube, "conf-ca", selected=3, ready=2, failed=1)


def test_the_older_of_two_cluster_bundles_keeping_one_configmap_name_wins(
    cluster: Cluster,
) -> None:
    kube = cluster.kube
    label = {"two.test/ca": "yes"}
    make_namespace(kube, "two-a", label)
    make_ccb(kube, "two-first", {"matchLabels": label}, {"configMapName": "ca", "data": {"v": "1"}})
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    make_ccb(
        kube, "two-second", {"matchLabels": label}, {"configMapName": "ca", "data": {"v": "2"}}
    )
    wait_status(kube, "two-first", selected=1, ready=1, failed=0)
    got = wait_status(kube, "two-second", selected=1, ready=0, failed=1)
    (failure,) = got["failedNamespaces"]
    assert (failure["namespace"], failure["reason"]) == ("two-a", "ConfigMapNameConflict")
    assert "two-first" in failure["message"]
    assert configmap_data(kube, "two-a", "ca") == {"v": "1"}
    assert get(kube, CONFIGBUNDLES, "two-a", "two-second") is None


def test_deletion_policies_when_leaving_the_selector_and_when_deleting(cluster: Cluster) -> None:
    kube = cluster.kube
    label = {"del.test/ca": "yes"}
    for ns in ("del-a", "del-b"):
        make_namespace(kube, ns, label)
    make_ccb(
        kube, "del-keep", {"matchLabels": label}, {"data": {"k": "1"}, "deletionPolicy": "Orphan"}
    )
    make_ccb(kube, "del-drop", {"matchLabels": label}, {"data": {"k": "2"}})
    wait_status(kube, "del-keep", selected=2, ready=2)
    wait_status(kube, "del-drop", selected=2, ready=2)

    # Leaving the selector: Orphan releases the ConfigMap, Delete removes it.
    relabel(kube, "del-a", {"del.test/ca": None})
    wait_for(lambda: get(kube, CONFIGBUNDLES, "del-a", "del-keep") is None, WAIT)
    wait_for(lambda: get(kube, CONFIGBUNDLES, "del-a", "del-drop") is None, WAIT)
    wait_for(lambda: get(kube, CONFIGMAPS, "del-a", "del-drop") is None, WAIT)
    kept = kube.get(CONFIGMAPS, "del-a", "del-keep")
    assert kept["data"] == {"k": "1"}
    assert not kept["metadata"].get("ownerReferences")

    # Deleting the ClusterConfigBundle: garbage collection takes the stamps, and their
    # ConfigMaps follow the template's deletionPolicy.
    kube.delete(CLUSTERCONFIGBUNDLES, None, "del-keep")
    kube.delete(CLUSTERCONFIGBUNDLES, None, "del-drop")
    wait_for(lambda: get(kube, CONFIGBUNDLES, "del-b", "del-keep") is None, WAIT)
    wait_for(lambda: get(kube, CONFIGBUNDLES, "del-b", "del-drop") is None, WAIT)
    wait_for(lambda: get(kube, CONFIGMAPS, "del-b", "del-drop") is None, WAIT)
    released = kube.get(CONFIGMAPS, "del-b", "del-keep")
    assert released["data"] == {"k": "1"}
    assert not released["metadata"].get("ownerReferences")


def test_a_terminating_namespace_is_skipped(cluster: Cluster) -> None:
    kube = cluster.kube
    label = {"term.test/ca": "yes"}
    make_namespace(kube, "term-live", label)
    make_namespace(kube, "term-going", label)
    # A finalizer holds the namespace in Terminating.
    kube.create(
        CONFIGMAPS,
        "term-going",
        {"metadata": {"name": "hold", "finalizers": ["example.com/hold"]}},
    )
    kube.delete(NAMESPACES, None, "term-going")
    wait_for(
        lambda: kube.get(NAMESPACES, None, "term-going")["status"].get("phase") == "Terminating",
        WAIT,
    )
    make_ccb(kube, "term-ca", {"matchLabels": label})
    got = wait_status(kube, "term-ca", selected=1, ready=1, failed=0)
    assert ready_reason(got) == ("True", "AllNamespacesReady")
    assert get(kube, CONFIGBUNDLES, "term-going", "term-ca") is None
    time.sleep(3)  # a few resyncs: still no stamp, no failure, no retry storm
    assert get(kube, CONFIGBUNDLES, "term-going", "term-ca") is None
    assert status(kube, "term-ca")["namespaces"]["failed"] == 0
    kube.patch(CONFIGMAPS, "term-going", "hold", {"metadata": {"finalizers": None}})


def test_the_protected_namespace_policy_refuses_a_stamp_and_is_reported(
    cluster: Cluster,
) -> None:
    kube = cluster.kube
    policy, binding = yaml.safe_load_all(
        (REPO / "manifests" / "policy" / "protected_namespaces.yaml").read_text()
    )
    kube.create(POLICIES, None, policy)
    kube.create(BINDINGS, None, binding)
    label = {"prot.test/ca": "yes"}
    make_namespace(kube, "prot-ok", label)
    try:
        # The policy takes a moment to be enforced: wait until it refuses a bundle.
        def refused() -> bool:
            try:
                kube.create(
                    CONFIGBUNDLES,
                    "kube-public",
                    {
                        "apiVersion": CONFIGBUNDLES.api_version,
                        "kind": "ConfigBundle",
                        "metadata": {"name": "probe"},
                        "spec": {},
                    },
                    dry_run=True,
                )
            except ApiError as err:
                return err.status in (403, 422)
            return False

        wait_for(refused, WAIT, interval=0.5, message="the policy enforced")
        before = apiserver_writes(kube, ("configbundles",), codes=("403", "422"))
        relabel(kube, "kube-public", label)  # type: ignore[arg-type]
        make_ccb(kube, "prot-ca", {"matchLabels": label})
        got = wait_status(kube, "prot-ca", selected=2, ready=1, failed=1)
        (failure,) = got["failedNamespaces"]
        assert (failure["namespace"], failure["reason"]) == ("kube-public", "Refused")
        assert "protected namespace kube-public" in failure["message"]
        assert get(kube, CONFIGBUNDLES, "kube-public", "prot-ca") is None
        # Retried with backoff, not in a loop: a handful of refused creates, no more.
        time.sleep(3)
        after = apiserver_writes(kube, ("configbundles",), codes=("403", "422"))
        refusals = sum(after.values()) - sum(before.values())
        assert 0 < refusals < 30, (before, after)
    finally:
        relabel(kube, "kube-public", {"prot.test/ca": None})
        kube.delete(BINDINGS, None, binding["metadata"]["name"])
        kube.delete(POLICIES, None, policy["metadata"]["name"])
    wait_status(kube, "prot-ca", selected=1, ready=1, failed=0)


#: A ClusterConfigBundle name of 66 characters: a valid name, past a label value's 63.
LONG_NAME = "platform-trusted-certificate-authorities-for-every-team-namespaces"


def test_a_cluster_bundle_named_past_63_characters_serves_every_namespace(
    cluster: Cluster,
) -> None:
    """Every name the API accepts works: the stamps' ``cbop.dev/cluster-bundle`` label is
    cut and hashed as ``cbop.dev/bundle`` is, so no write is refused (no 422 at all), the
    stamps are found by that label, and a namespace leaving the selector loses its copy."""
    kube = cluster.kube
    assert len(LONG_NAME) == 66
    label = {"long.test/ca": "yes"}
    spaces = [make_namespace(kube, f"long-{i}", label) for i in range(3)]
    codes = ("400", "422")
    before = apiserver_writes(kube, ("configbundles", "configmaps"), codes=codes)
    make_ccb(kube, LONG_NAME, {"matchLabels": label})
    got = wait_status(kube, LONG_NAME, selected=3, ready=3, failed=0)
    assert ready_reason(got) == ("True", "AllNamespacesReady")
    assert got["failedNamespaces"] == []
    value = label_value(LONG_NAME)
    assert len(value) <= 63
    for ns in spaces:
        assert configmap_data(kube, ns, LONG_NAME) == {"ca.crt": "CA-1"}
        stamp = kube.get(CONFIGBUNDLES, ns, LONG_NAME)
        assert stamp["metadata"]["labels"][LABEL_CLUSTER_BUNDLE] == value
    selector = f"{LABEL_CLUSTER_BUNDLE}={value}"
    listed = kube.list(CONFIGBUNDLES, None, label_selector=selector)["items"]
    assert sorted(b["metadata"]["namespace"] for b in listed) == spaces

    relabel(kube, spaces[0], {"long.test/ca": None})
    wait_for(
        lambda: get(kube, CONFIGBUNDLES, spaces[0], LONG_NAME) is None, WAIT, message="stamp gone"
    )
    wait_status(kube, LONG_NAME, selected=2, ready=2, failed=0)
    after = apiserver_writes(kube, ("configbundles", "configmaps"), codes=codes)
    assert after == before, "a write was refused"


def test_a_source_no_longer_shared_fails_the_namespaces_and_lists_them(cluster: Cluster) -> None:
    """A template reading a source in another namespace; the source's share-with narrowed
    to leave the stamps' namespaces out: each is failed and listed with SourceNotShared
    and the stamp's message (never pending), the ConfigMaps keep their content, and
    sharing again makes them ready."""
    kube = cluster.kube
    source_ns = make_namespace(kube, "share-src")
    label = {"share.test/ca": "yes"}
    spaces = [make_namespace(kube, f"share-{x}", label) for x in ("a", "b")]
    kube.create(
        CONFIGMAPS,
        source_ns,
        {
            "metadata": {
                "name": "ca-src",
                "labels": {"cbop.dev/source": "true"},
                "annotations": {"cbop.dev/share-with": ",".join(spaces)},
            },
            "data": {"ca.crt": "SHARED-CA"},
        },
    )
    template = {"sources": [{"configMap": {"name": "ca-src", "namespace": source_ns}}]}
    make_ccb(kube, "share-ca", {"matchLabels": label}, template)
    wait_status(kube, "share-ca", selected=2, ready=2, failed=0)
    for ns in spaces:
        assert configmap_data(kube, ns, "share-ca") == {"ca.crt": "SHARED-CA"}

    narrowed = {"metadata": {"annotations": {"cbop.dev/share-with": "someone-else"}}}
    kube.patch(CONFIGMAPS, source_ns, "ca-src", narrowed)
    got = wait_status(kube, "share-ca", selected=2, ready=0, failed=2)
    assert ready_reason(got) == ("False", "NamespacesFailing")
    listed = got["failedNamespaces"]
    assert [(f["namespace"], f["reason"]) for f in listed] == [
        (ns, "SourceNotShared") for ns in spaces
    ]
    for entry in listed:
        stamp = kube.get(CONFIGBUNDLES, entry["namespace"], "share-ca")
        (cond,) = [c for c in stamp["status"]["conditions"] if c["type"] == "Ready"]
        assert entry["message"] == cond["message"]
        assert "cbop.dev/share-with" in entry["message"]
    for ns in spaces:  # the last good content stays
        assert configmap_data(kube, ns, "share-ca") == {"ca.crt": "SHARED-CA"}
    gauges = cluster.op.metrics()
    assert gauges.get('cbop_clusterconfigbundle_namespaces{name="share-ca",state="failed"}') == 2

    kube.patch(CONFIGMAPS, source_ns, "ca-src", {"metadata": {"annotations": {
        "cbop.dev/share-with": "*"}}})  # fmt: skip
    got = wait_status(kube, "share-ca", selected=2, ready=2, failed=0)
    assert ready_reason(got) == ("True", "AllNamespacesReady")


def test_a_stamp_refused_as_invalid_is_reported_and_not_retried_in_a_loop(
    cluster: Cluster,
) -> None:
    """An admission policy refusing stamps with 422 Invalid (the request itself refused):
    the namespace is listed Refused with the server's message and a StampRefused Event,
    and the create is not retried while nothing changes (it was retried with backoff,
    about ten times in the first few seconds and for as long as it existed). A change
    of the namespace tries again."""
    kube = cluster.kube
    label = {"invalid.test/ca": "yes"}
    policy: dict[str, Any] = {
        "apiVersion": POLICIES.api_version,
        "kind": POLICIES.kind,
        "metadata": {"name": "refuse-invalid-stamps"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["cbop.dev"],
                        "apiVersions": ["*"],
                        "resources": ["configbundles"],
                        "operations": ["CREATE"],
                    }
                ],
            },
            "validations": [
                {
                    "expression": "false",
                    "reason": "Invalid",
                    "message": "stamps are refused here as invalid",
                }
            ],
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": BINDINGS.api_version,
        "kind": BINDINGS.kind,
        "metadata": {"name": "refuse-invalid-stamps"},
        "spec": {
            "policyName": "refuse-invalid-stamps",
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"invalid.test/refuse": "yes"}}
            },
        },
    }
    kube.create(POLICIES, None, policy)
    kube.create(BINDINGS, None, binding)
    make_namespace(kube, "invalid-ok", label)
    make_namespace(kube, "invalid-no", {**label, "invalid.test/refuse": "yes"})

    def enforced() -> bool:
        try:
            kube.create(CONFIGBUNDLES, "invalid-no", {
                "apiVersion": CONFIGBUNDLES.api_version, "kind": "ConfigBundle",
                "metadata": {"name": "probe"}, "spec": {}}, dry_run=True)  # fmt: skip
        except ApiError as err:
            return err.status == 422
        return False

    try:
        wait_for(enforced, WAIT, interval=0.5, message="the policy enforced")
        before = apiserver_writes(kube, ("configbundles",), codes=("422",))
        make_ccb(kube, "invalid-ca", {"matchLabels": label})
        got = wait_status(kube, "invalid-ca", selected=2, ready=1, failed=1)
        (failure,) = got["failedNamespaces"]
        assert (failure["namespace"], failure["reason"]) == ("invalid-no", "Refused")
        assert "stamps are refused here as invalid" in failure["message"]
        time.sleep(5)
        after = apiserver_writes(kube, ("configbundles",), codes=("422",))
        refused = sum(after.values()) - sum(before.values())
        assert 1 <= refused <= 2, (before, after)
        events = kube.list(EVENTS, "default")["items"]
        assert any(e["reason"] == "StampRefused" and e["involvedObject"]["name"] == "invalid-ca"
                   for e in events), [e["reason"] for e in events]  # fmt: skip
    finally:
        kube.delete(BINDINGS, None, binding["metadata"]["name"])
        kube.delete(POLICIES, None, policy["metadata"]["name"])
    # The policy gone, a change of the namespace (its labels) brings the stamp work back.
    wait_for(lambda: not enforced(), WAIT, interval=0.5, message="the policy lifted")
    relabel(kube, "invalid-no", {"invalid.test/refuse": None})
    wait_status(kube, "invalid-ca", selected=2, ready=2, failed=0)


def test_with_namespace_the_controller_does_not_run_and_says_so(cluster: Cluster) -> None:
    kube = cluster.kube
    make_namespace(kube, "scoped-only")
    op = Operator(
        cluster.control.kubeconfig_path,
        ["scoped-only"],
        log_path=cluster.tmp / "cbop-scoped.log",
    )
    try:
        op.wait_ready(60)
        records = [
            r for r in op.log_records() if "ClusterConfigBundles need the cluster scope" in str(r)
        ]
        assert len(records) == 1, op.logs()[-3000:]
        assert not any(r.get("controller") == "clusterbundle" for r in op.log_records())
    finally:
        assert op.stop() in (0, -9)


def test_a_restart_with_nothing_to_change_writes_nothing(cluster: Cluster) -> None:
    """Last: it replaces the module's cbop. Everything above has settled; a new process
    lists it all and writes nothing: no stamp, no ConfigMap, no status."""
    kube = cluster.kube
    label = {"quiet.test/ca": "yes"}
    for i in range(5):
        make_namespace(kube, f"quiet-{i}", label)
    make_ccb(kube, "quiet-ca", {"matchLabels": label})
    wait_status(kube, "quiet-ca", selected=5, ready=5)
    time.sleep(2)  # the last status writes land
    code = cluster.op.stop()
    assert code in (0, -9)
    resources = ("configbundles", "configmaps", "clusterconfigbundles")
    before = apiserver_writes(kube, resources)
    before_409 = apiserver_writes(kube, resources, codes=("409",))
    cluster.start()
    time.sleep(6)  # initial lists, every reconcile, and resyncs
    after = apiserver_writes(kube, resources)
    changed = {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k)}
    # The one write allowed: the stamp in conf-map, whose ConfigMap name is held by a
    # ConfigMap cbop does not manage (so not in its cache), tries its create once per
    # start and is refused with 409, as any ConfigBundle in conflict does.
    refused = apiserver_writes(kube, resources, codes=("409",))
    conflicts = {
        k: refused.get(k, 0) - before_409.get(k, 0)
        for k in refused
        if refused[k] != before_409.get(k)
    }
    assert changed == conflicts, (changed, conflicts)
    assert sum(changed.values()) <= 1, changed
    assert status(kube, "quiet-ca")["namespaces"] == {"selected": 5, "ready": 5, "failed": 0}
