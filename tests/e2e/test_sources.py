"""ConfigBundle sources on a real control plane (docs/sources.md).

One control plane and one cluster-wide cbop serve the whole module: a bundle reads
sources of other namespaces and a ClusterConfigBundle feeds every namespace, so cbop
must watch them all and cannot share the session's control plane with tests that scope
cbop to their own namespace. Each test uses namespaces of its own. The inputs are the
field reports of issue 35: precedence not as documented (cmmc#7), a merge order that
changed between runs (cloudflare-operator#26), a changed source never noticed (trustyai
PR#710, knative/serving#805), a deleted source that silently emptied the result and
cross-namespace reads nobody allowed (kubernetes-replicator#73).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cbop.cli.exits import EXIT_PENDING
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    CONFIGMAPS,
    NAMESPACES,
    ApiError,
    KubeClient,
)
from cbop_testing.envtest import ControlPlane

from .clusterbundles import bundle_plane
from .harness import Operator, apiserver_writes, bundle, raw_get, run_cli, wait_for
from .releases import release_tree

#: Generous bound for a change to travel through cbop.
WAIT = 30.0
#: Seconds of 2 s resyncs a converged cbop is watched for writes.
QUIET = 6.0


@dataclass
class Cluster:
    """The module's control plane, an admin client, and the running cbop."""

    control: ControlPlane
    kube: KubeClient
    tmp: Path
    operators: list[Operator] = field(default_factory=list)

    def start(
        self, namespaces: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> Operator:
        """Start this checkout's cbop (cluster-wide), or the one of ``env``'s PYTHONPATH."""
        op = Operator(
            self.control.kubeconfig_path,
            namespaces,
            args=["--resync-period", "2s"],
            log_path=self.tmp / f"cbop-{len(self.operators)}.log",
            env=env,
        )
        self.operators.append(op)
        op.wait_ready(60)
        return op

    def stop(self) -> None:
        code = self.operators[-1].stop()
        assert code in (0, -9), f"cbop did not stop cleanly ({code})"


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with bundle_plane(request.config, tmp_path_factory, "sources") as (control, kube):
        found = Cluster(control, kube, tmp_path_factory.mktemp("sources"))
        found.start()
        yield found
        for op in found.operators:
            code = op.stop()
            assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()[-4000:]}"


# ---------------------------------------------------------------------- helpers


def namespace(kube: KubeClient, name: str, labels: dict[str, str] | None = None) -> str:
    kube.create(NAMESPACES, None, {"metadata": {"name": name, "labels": labels or {}}})
    return name


def source(
    kube: KubeClient,
    ns: str,
    name: str,
    data: dict[str, str],
    *,
    share_with: str | None = None,
    labelled: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labelled:
        meta["labels"] = {"cbop.dev/source": "true"}
    if share_with is not None:
        meta["annotations"] = {"cbop.dev/share-with": share_with}
    return kube.create(CONFIGMAPS, ns, {"metadata": meta, "data": data})


def edit_source(kube: KubeClient, ns: str, name: str, patch: dict[str, Any]) -> None:
    kube.patch(CONFIGMAPS, ns, name, patch)


def listed(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap ``ns/name`` read with a LIST (GETs are what some tests count)."""
    for cm in kube.list(CONFIGMAPS, ns)["items"]:
        if cm["metadata"]["name"] == name:
            return dict(cm)
    return None


def data_of(kube: KubeClient, ns: str, name: str) -> dict[str, str] | None:
    found = listed(kube, ns, name)
    return None if found is None else dict(found.get("data") or {})


def ready_condition(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    found = kube.list(CONFIGBUNDLES, ns)["items"]
    for b in found:
        if b["metadata"]["name"] == name:
            for cond in (b.get("status") or {}).get("conditions") or ():
                if cond["type"] == "Ready":
                    return dict(cond)
    return {}


def status_of(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    for b in kube.list(CONFIGBUNDLES, ns)["items"]:
        if b["metadata"]["name"] == name:
            return dict(b.get("status") or {})
    return {}


def wait_reason(kube: KubeClient, ns: str, name: str, reason: str) -> dict[str, Any]:
    got: dict[str, Any] = wait_for(
        lambda: (c := ready_condition(kube, ns, name)).get("reason") == reason and c,
        WAIT,
        message=f"{ns}/{name} reason {reason}",
    )
    return got


def wait_data(kube: KubeClient, ns: str, name: str, expected: dict[str, str]) -> None:
    wait_for(
        lambda: data_of(kube, ns, name) == expected,
        WAIT,
        message=f"{ns}/{name} data {expected}; have {data_of(kube, ns, name)}",
    )


def apiserver_requests(kube: KubeClient, verb: str, resource: str) -> float:
    """``apiserver_request_total`` summed over codes for one verb and resource."""
    total = 0.0
    for family in text_string_to_metric_families(raw_get(kube, "/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if (
                sample.name.endswith("_total")
                and sample.labels.get("verb") == verb
                and sample.labels.get("resource") == resource
            ):
                total += sample.value
    return total


def configmap_updates(kube: KubeClient) -> float:
    """ConfigMap updates (PUT) that landed (200): how cbop writes a changed ConfigMap.

    Tests PATCH sources. A repeated PUT refused with 409 (cbop's cache not yet showing
    its own first write) lands nothing and is not counted.
    """
    return apiserver_writes(kube, ("configmaps",), codes=("200",)).get(("PUT", "configmaps"), 0.0)


def all_writes(kube: KubeClient) -> dict[tuple[str, str], float]:
    return apiserver_writes(kube, ("configmaps", "configbundles"))


LOG_DEFAULTS = "level: info\nsinks: [stdout, file]\nformat:\n  time: iso\n  color: true\n"


# ---------------------------------------------------------------------- tests


def test_precedence_and_structured_merge_as_documented(cluster: Cluster) -> None:
    """cmmc#7, kustomize#1468: later sources win, spec.data wins over all, maps merge."""
    kube = cluster.kube
    platform = namespace(kube, "prec-platform")
    app = namespace(kube, "prec-app")
    source(
        kube,
        platform,
        "logging-defaults",
        {"log.yaml": LOG_DEFAULTS, "a": "platform", "b": "platform", "c": "platform"},
        share_with="team-x,prec-app",
    )
    source(
        kube,
        app,
        "team-overrides",
        {"log.yaml": "sinks: [stdout]\nformat: {color: false}\n", "b": "team", "c": "team"},
    )
    spec = {
        "sources": [
            {"configMap": {"name": "logging-defaults", "namespace": platform}},
            {"configMap": {"name": "team-overrides"}},
        ],
        "data": {"c": "spec", "log.yaml": "# a comment\nlevel: debug\n"},
        "merge": [{"key": "log.yaml", "format": "yaml"}],
    }
    kube.create(CONFIGBUNDLES, app, bundle("app", spec))
    wait_reason(kube, app, "app", "Synced")
    assert data_of(kube, app, "app") == {
        "a": "platform",
        "b": "team",
        "c": "spec",
        "log.yaml": "level: debug\nsinks: [stdout]\nformat:\n  time: iso\n  color: false\n",
    }
    status = status_of(kube, app, "app")
    assert [(s["namespace"], s["name"]) for s in status["sources"]] == [
        (platform, "logging-defaults"),
        (app, "team-overrides"),
    ]
    assert all(s["contentHash"].startswith("sha256:") for s in status["sources"])
    assert status["keySources"] == {
        "a": "prec-platform/logging-defaults",
        "b": "prec-app/team-overrides",
        "c": "spec",
        "log.yaml": "prec-platform/logging-defaults+prec-app/team-overrides+spec",
    }

    # A value that does not parse: InvalidSource naming source and key, and no write.
    before = listed(kube, app, "app")
    edit_source(kube, app, "team-overrides", {"data": {"log.yaml": "sinks: [stdout\n"}})
    cond = wait_reason(kube, app, "app", "InvalidSource")
    assert "prec-app/team-overrides" in cond["message"]
    assert "'log.yaml'" in cond["message"]
    assert listed(kube, app, "app") == before


def test_order_is_stable_over_restarts_and_dry_run_shows_a_source_change(
    cluster: Cluster,
) -> None:
    """cloudflare-operator#26: the same sources, the same bytes, run after run."""
    kube = cluster.kube
    ns = namespace(kube, "stable")
    keys = {f"key-{i:02d}": str(i) for i in range(30)}
    source(kube, ns, "zz-first", {**keys, "m.json": json.dumps({"z": 1, "a": {"y": 1}})})
    source(kube, ns, "aa-second", {"key-07": "second", "m.json": '{"a": {"x": 2}}'})
    spec = {
        "sources": [{"configMap": {"name": "zz-first"}}, {"configMap": {"name": "aa-second"}}],
        "merge": [{"key": "m.json", "format": "json"}],
    }
    kube.create(CONFIGBUNDLES, ns, bundle("stable", spec))
    wait_reason(kube, ns, "stable", "Synced")
    first = listed(kube, ns, "stable")
    assert first is not None
    assert first["data"]["key-07"] == "second"
    assert json.loads(first["data"]["m.json"]) == {"a": {"x": 2, "y": 1}, "z": 1}

    cluster.stop()
    cluster.start()
    before = all_writes(kube)
    time.sleep(QUIET)
    assert all_writes(kube) == before, "a restart over converged sources wrote something"
    assert listed(kube, ns, "stable") == first

    # cbop down, a source changes: --once --dry-run shows the change as any other.
    cluster.stop()
    edit_source(kube, ns, "aa-second", {"data": {"key-07": "changed"}})
    out = run_cli(cluster.control.kubeconfig_path, "--once", "--dry-run", f"--namespace={ns}")
    assert out.returncode == EXIT_PENDING, out.stdout + out.stderr
    assert "update (dry run)" in out.stdout
    assert "key-07: changed" in out.stdout
    assert data_of(kube, ns, "stable") == first["data"]
    writes = configmap_updates(kube)
    cluster.start()
    wait_for(lambda: (data_of(kube, ns, "stable") or {}).get("key-07") == "changed", WAIT)
    wait_reason(kube, ns, "stable", "Synced")
    assert configmap_updates(kube) - writes == 1


def test_a_changed_deleted_and_recreated_source(cluster: Cluster) -> None:
    """trustyai PR#710, knative/serving#805, kubernetes-replicator#73."""
    kube = cluster.kube
    ns = namespace(kube, "lifecycle")
    source(kube, ns, "base", {"greeting": "hello", "level": "info"})
    spec = {"sources": [{"configMap": {"name": "base"}}], "data": {"owner": "me"}}
    kube.create(CONFIGBUNDLES, ns, bundle("app", spec))
    wait_data(kube, ns, "app", {"greeting": "hello", "level": "info", "owner": "me"})

    # Changed: one write reaches the ConfigMap.
    writes = configmap_updates(kube)
    edit_source(kube, ns, "base", {"data": {"level": "debug"}})
    wait_data(kube, ns, "app", {"greeting": "hello", "level": "debug", "owner": "me"})
    wait_reason(kube, ns, "app", "Synced")
    assert configmap_updates(kube) - writes == 1

    # Deleted: the last good content stays, Ready=False names the source.
    kube.delete(CONFIGMAPS, ns, "base")
    cond = wait_reason(kube, ns, "app", "SourceNotFound")
    assert cond["status"] == "False"
    assert f"{ns}/base" in cond["message"]
    assert data_of(kube, ns, "app") == {"greeting": "hello", "level": "debug", "owner": "me"}

    # Re-created without the label: still not found; labelled: healed.
    source(kube, ns, "base", {"greeting": "bonjour"}, labelled=False)
    cond = wait_reason(kube, ns, "app", "SourceNotFound")
    assert "label it" in cond["message"]
    edit_source(kube, ns, "base", {"metadata": {"labels": {"cbop.dev/source": "true"}}})
    wait_data(kube, ns, "app", {"greeting": "bonjour", "owner": "me"})
    wait_reason(kube, ns, "app", "Synced")

    # A bundle whose required source never existed creates no ConfigMap.
    kube.create(
        CONFIGBUNDLES, ns, bundle("waiting", {"sources": [{"configMap": {"name": "later"}}]})
    )
    wait_reason(kube, ns, "waiting", "SourceNotFound")
    assert listed(kube, ns, "waiting") is None
    source(kube, ns, "later", {"k": "v"})
    wait_data(kube, ns, "waiting", {"k": "v"})


def test_cross_namespace_reads_are_refused_until_shared(cluster: Cluster) -> None:
    """kubernetes-replicator#73: reads nobody allowed."""
    kube = cluster.kube
    owner = namespace(kube, "share-owner")
    reader = namespace(kube, "share-reader")
    source(kube, owner, "secretish", {"k": "v"})
    spec = {"sources": [{"configMap": {"name": "secretish", "namespace": owner}}]}
    kube.create(CONFIGBUNDLES, reader, bundle("app", spec))
    cond = wait_reason(kube, reader, "app", "SourceNotShared")
    assert "cbop.dev/share-with" in cond["message"]
    assert listed(kube, reader, "app") is None
    edit_source(
        kube, owner, "secretish", {"metadata": {"annotations": {"cbop.dev/share-with": "other"}}}
    )
    wait_reason(kube, reader, "app", "SourceNotShared")
    edit_source(
        kube,
        owner,
        "secretish",
        {"metadata": {"annotations": {"cbop.dev/share-with": "other, share-reader"}}},
    )
    wait_data(kube, reader, "app", {"k": "v"})
    wait_reason(kube, reader, "app", "Synced")
    # Sharing withdrawn: refused again, the last good content stays.
    edit_source(
        kube, owner, "secretish", {"metadata": {"annotations": {"cbop.dev/share-with": None}}}
    )
    wait_reason(kube, reader, "app", "SourceNotShared")
    assert data_of(kube, reader, "app") == {"k": "v"}


def test_a_configmap_cbop_writes_is_never_a_source(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "loops")
    kube.create(
        CONFIGBUNDLES,
        ns,
        bundle("first", {"data": {"k": "v"}, "labels": {"cbop.dev/source": "true"}}),
    )
    wait_reason(kube, ns, "first", "Synced")
    kube.create(
        CONFIGBUNDLES, ns, bundle("second", {"sources": [{"configMap": {"name": "first"}}]})
    )
    cond = wait_reason(kube, ns, "second", "InvalidSource")
    assert "ConfigBundle loops/first" in cond["message"]
    assert listed(kube, ns, "second") is None


def test_a_source_feeds_a_cluster_bundle_with_per_namespace_overrides(cluster: Cluster) -> None:
    kube = cluster.kube
    platform = namespace(kube, "ccbsrc-platform")
    label = {"ccbsrc.test/logging": "yes"}
    team_a = namespace(kube, "ccbsrc-a", label)
    team_b = namespace(kube, "ccbsrc-b", label)
    source(kube, platform, "logging", {"log.yaml": LOG_DEFAULTS}, share_with="*")
    source(kube, team_a, "overrides", {"log.yaml": "level: debug\n", "team": "a"})
    kube.create(
        CLUSTERCONFIGBUNDLES,
        None,
        {
            "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
            "kind": CLUSTERCONFIGBUNDLES.kind,
            "metadata": {"name": "logging"},
            "spec": {
                "namespaceSelector": {"matchLabels": label},
                "template": {
                    "sources": [
                        {"configMap": {"name": "logging", "namespace": platform}},
                        {"configMap": {"name": "overrides", "optional": True}},
                    ],
                    "merge": [{"key": "log.yaml", "format": "yaml"}],
                },
            },
        },
    )
    base = LOG_DEFAULTS.replace("level: info", "level: {}")
    wait_data(kube, team_a, "logging", {"log.yaml": base.format("debug"), "team": "a"})
    wait_data(kube, team_b, "logging", {"log.yaml": base.format("info")})
    assert status_of(kube, team_a, "logging")["keySources"]["log.yaml"] == (
        "ccbsrc-platform/logging+ccbsrc-a/overrides"
    )

    # The platform source changes: every namespace follows; team-b gets an override.
    edit_source(kube, platform, "logging", {"data": {"log.yaml": "level: warn\n"}})
    source(kube, team_b, "overrides", {"team": "b"})
    wait_data(kube, team_a, "logging", {"log.yaml": "level: debug\n", "team": "a"})
    wait_data(kube, team_b, "logging", {"log.yaml": "level: warn\n", "team": "b"})


def test_source_changes_reach_every_reader_without_gets(cluster: Cluster) -> None:
    """Readers are found through an index: a source change costs no GET of ConfigMaps."""
    kube = cluster.kube
    shared = namespace(kube, "noget-shared")
    readers = [namespace(kube, f"noget-{i}") for i in range(3)]
    source(kube, shared, "common", {"v": "1"}, share_with="*")
    for ns in (shared, *readers):
        for i in range(2):
            spec = {"sources": [{"configMap": {"name": "common", "namespace": shared}}]}
            kube.create(CONFIGBUNDLES, ns, bundle(f"reader-{i}", spec))
    for ns in (shared, *readers):
        for i in range(2):
            wait_data(kube, ns, f"reader-{i}", {"v": "1"})
            wait_reason(kube, ns, f"reader-{i}", "Synced")

    gets = apiserver_requests(kube, "GET", "configmaps")
    writes = configmap_updates(kube)
    edit_source(kube, shared, "common", {"data": {"v": "2"}})
    for ns in (shared, *readers):
        for i in range(2):
            wait_data(kube, ns, f"reader-{i}", {"v": "2"})
    assert apiserver_requests(kube, "GET", "configmaps") == gets
    assert configmap_updates(kube) - writes == 8  # one per reader


def test_invalid_sources_and_merge_are_refused_at_admission(cluster: Cluster) -> None:
    kube = cluster.kube
    ns = namespace(kube, "admission")
    for spec, words in (
        (
            {"merge": [{"key": "a", "format": "yaml"}, {"key": "a", "format": "json"}]},
            "Duplicate value",
        ),
        ({"merge": [{"key": "a", "format": "toml"}]}, "Unsupported value"),
        ({"sources": [{"configMap": {"namespace": "x"}}]}, "Required value"),
        (
            {
                "sources": [
                    {
                        "configMap": {
                            "name": "s",
                            "items": [{"key": "a", "path": "p"}, {"key": "b", "path": "p"}],
                        }
                    }
                ]
            },
            "each path may appear once",
        ),
    ):
        with pytest.raises(ApiError) as err:
            kube.create(CONFIGBUNDLES, ns, bundle("bad", spec))
        assert err.value.status == 422
        assert words in err.value.message, err.value.message


#: Case 21's ``app.yaml``: YAML 1.1 would read a bool, 1.1, 750, 493, a bool key, a
#: datetime; nothing in it is overridden.
APP_YAML = (
    "enabled: NO\n"
    "version: 1.10\n"
    "time: 12:30\n"
    "mode: 0755\n"
    "country: NO\n"
    "on: x\n"
    "stamp: 2001-12-14t21:59:43.10-05:00\n"
    "# the on-call team relies on this\n"
)


def test_a_merge_keeps_every_value_nobody_overrode(cluster: Cluster) -> None:
    """Case 21: every leaf but ``level`` as ``base`` wrote it, and the comment stays."""
    kube = cluster.kube
    ns = namespace(kube, "keep-values")
    source(kube, ns, "base", {"app.yaml": APP_YAML})
    source(kube, ns, "team", {"app.yaml": "level: debug\n"})
    spec = {
        "sources": [{"configMap": {"name": "base"}}, {"configMap": {"name": "team"}}],
        "merge": [{"key": "app.yaml", "format": "yaml"}],
    }
    kube.create(CONFIGBUNDLES, ns, bundle("app", spec))
    cond = wait_reason(kube, ns, "app", "Synced")
    assert cond["status"] == "True"
    assert data_of(kube, ns, "app") == {"app.yaml": APP_YAML + "level: debug\n"}
    assert status_of(kube, ns, "app")["keySources"] == {"app.yaml": f"{ns}/base+{ns}/team"}

    # The override changes: one write, and only its leaf changes.
    writes = configmap_updates(kube)
    edit_source(kube, ns, "team", {"data": {"app.yaml": "level: 'warn'\nmode: 0600\n"}})
    expected = APP_YAML.replace("mode: 0755", "mode: 0600") + "level: 'warn'\n"
    wait_data(kube, ns, "app", {"app.yaml": expected})
    wait_reason(kube, ns, "app", "Synced")
    time.sleep(QUIET)
    assert configmap_updates(kube) - writes == 1

    # A duplicate key: InvalidSource naming the source, the key and the line; no write.
    before = listed(kube, ns, "app")
    edit_source(kube, ns, "team", {"data": {"app.yaml": "level: a\nlevel: b\n"}})
    cond = wait_reason(kube, ns, "app", "InvalidSource")
    assert cond["status"] == "False"
    assert f"source ConfigMap {ns}/team: key 'app.yaml' is not valid yaml" in cond["message"]
    assert 'duplicate key "level"' in cond["message"]
    assert "line 2" in cond["message"]
    assert listed(kube, ns, "app") == before


def test_json_stays_json(cluster: Cluster) -> None:
    """Case 22: NaN and 1e400 are InvalidSource naming source, key and member; no write."""
    kube = cluster.kube
    ns = namespace(kube, "strict-json")
    source(kube, ns, "svc", {"svc.json": '{"timeoutSeconds": 30, "ratio": 0.50}'})
    source(kube, ns, "limits", {"svc.json": '{"limit": 1e400}'})
    for name, src in (("app", "svc"), ("capped", "limits")):
        spec = {
            "sources": [{"configMap": {"name": src}}],
            "data": {"svc.json": '{"timeoutSeconds": 10}'},
            "merge": [{"key": "svc.json", "format": "json"}],
        }
        kube.create(CONFIGBUNDLES, ns, bundle(name, spec))
    # Beyond a double's range: refused from the start, no ConfigMap created.
    cond = wait_reason(kube, ns, "capped", "InvalidSource")
    assert cond["status"] == "False"
    assert f"source ConfigMap {ns}/limits: key 'svc.json' is not valid json" in cond["message"]
    assert "1e400 is beyond the range of a double, at /limit" in cond["message"]
    assert listed(kube, ns, "capped") is None

    wait_reason(kube, ns, "app", "Synced")
    good = '{\n  "timeoutSeconds": 10,\n  "ratio": 0.50\n}\n'
    assert data_of(kube, ns, "app") == {"svc.json": good}

    # NaN in a source that was good: refused, the last good content stays.
    before = listed(kube, ns, "app")
    edit_source(kube, ns, "svc", {"data": {"svc.json": '{"timeoutSeconds": 30, "ratio": NaN}'}})
    cond = wait_reason(kube, ns, "app", "InvalidSource")
    assert f"source ConfigMap {ns}/svc: key 'svc.json'" in cond["message"]
    assert "NaN is not a JSON value (RFC 8259), at /ratio" in cond["message"]
    assert listed(kube, ns, "app") == before


def test_an_upgrade_from_0_2_0_rewrites_a_merged_configmap_once(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """0.2.0 wrote merged values canonically; this cbop writes them once, then never."""
    kube = cluster.kube
    ns = namespace(kube, "upgrade-merge")
    source(kube, ns, "base", {"app.yaml": "country: NO\nversion: 1.10\n"})
    spec = {
        "sources": [{"configMap": {"name": "base"}}],
        "data": {"app.yaml": "level: debug\n"},
        "merge": [{"key": "app.yaml", "format": "yaml"}],
    }
    cluster.stop()
    old = release_tree("v0.2.0", tmp_path_factory.mktemp("v0.2.0"))
    cluster.start((ns,), env={"PYTHONPATH": str(old / "src")})
    kube.create(CONFIGBUNDLES, ns, bundle("app", spec))
    wait_data(kube, ns, "app", {"app.yaml": "country: false\nlevel: debug\nversion: 1.1\n"})
    wait_reason(kube, ns, "app", "Synced")
    cluster.stop()

    writes = configmap_updates(kube)
    cluster.start()
    wait_data(kube, ns, "app", {"app.yaml": "country: NO\nversion: 1.10\nlevel: debug\n"})
    wait_reason(kube, ns, "app", "Synced")
    first = listed(kube, ns, "app")
    time.sleep(QUIET)
    assert configmap_updates(kube) - writes == 1
    assert listed(kube, ns, "app") == first
