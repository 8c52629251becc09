"""The plan before the change: which labelled workloads a dry run's pending changes roll.

Workloads and ConfigMaps live on the fake API server; the plan lists the workloads as
``cbop --once --dry-run`` does and asks the rollout's own decision about each, with
the pending ConfigMaps in place. The last tests run ``run_once`` itself on the fake.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from typing import Any

import pytest
import structlog

from cbop.api import Reason, content_hash
from cbop.api.revisions import revision_name
from cbop.cli import build_parser, run_once
from cbop.cli.once import _table
from cbop.cli.plan import (
    ROLLOUTS_OFF,
    Plan,
    Rolled,
    changed_namespaces,
    list_workloads,
    plan_rollouts,
)
from cbop.configbundle import Action, Result
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    STATEFULSETS,
    Resource,
)
from cbop.rollout import ANNOTATION_CONFIG_HASH, config_digest
from cbop.rollout.decision import managed_references
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker, errors, fail
from cbop_testing.objects import bundle, configmap, with_baseline, workload, written


class Cluster:
    """A fake API server with namespaces ``demo`` and ``prod``, its managed ConfigMaps
    mirrored in a CacheLister (the ``--once`` informer cache)."""

    def __init__(self) -> None:
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        for ns in ("demo", "prod"):
            self.kube.tracker.add(NAMESPACES, {"metadata": {"name": ns}})
        self.configmaps = CacheLister()

    def configmap(self, name: str, data: dict[str, str], namespace: str = "demo") -> None:
        """Store a managed ConfigMap (bundle of the same name) and cache it."""
        self.configmaps.add(
            self.kube.tracker.add(CONFIGMAPS, configmap(name, data, namespace=namespace))
        )

    def workload(
        self, obj: dict[str, Any], resource: Resource = DEPLOYMENTS, *, seen: bool = True
    ) -> dict[str, Any]:
        """Store ``obj``; ``seen``: with the baseline of the ConfigMaps it reads now."""
        if seen:
            namespace = obj["metadata"]["namespace"]
            cms = {
                name: cm
                for name in ("app", "other", "second")
                if (cm := self.configmaps.get(namespace, name)) is not None
            }
            obj = with_baseline(obj, config_digest(managed_references(obj, cms)))
        return self.kube.tracker.add(resource, obj)

    def plan(
        self, *results: Result, namespaces: tuple[str, ...] = ("demo",), cluster: bool = False
    ) -> dict[str, Plan]:
        """List the workloads as ``--once`` does and plan ``results``."""
        needed = [ns for ns in changed_namespaces(results, self.configmaps) if ns in namespaces]
        found, unknown = list_workloads(self.kube.list, needed, cluster_scope=cluster)
        return plan_rollouts(results, self.configmaps, found, unknown)


def pending(name: str, data: dict[str, str], namespace: str = "demo") -> Result:
    """A dry run's result: bundle ``name`` would update its ConfigMap ``name`` to ``data``."""
    return Result(
        f"{namespace}/{name}",
        Action.UPDATE,
        ready="True",
        reason=Reason.SYNCED,
        config_map=name,
        pending=True,
        written=configmap(name, data, namespace=namespace),
    )


def names(plan: Plan) -> list[str]:
    return [str(w) for w in plan.workloads]


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    c.configmap("app", {"k": "1"})
    c.configmap("other", {"k": "1"})
    return c


def test_exactly_the_labelled_readers_of_the_changed_configmap(cluster: Cluster) -> None:
    """Mounted, envFrom, a StatefulSet and a DaemonSet: listed, Deployments first. Not
    listed: no label, a reader of another ConfigMap."""
    cluster.workload(workload("web", volumes=["app"]))
    cluster.workload(workload("api", env_from=["app"]))
    cluster.workload(workload("db", volumes=["app"]), STATEFULSETS)
    cluster.workload(workload("agent", env_from=["app", "other"]), DAEMONSETS)
    cluster.workload(workload("plain", volumes=["app"], opted_in=False))
    cluster.workload(workload("elsewhere", volumes=["other"]))
    plans = cluster.plan(pending("app", {"k": "2"}))
    assert plans == {
        "demo/app": Plan(
            (
                Rolled("Deployment", "api"),
                Rolled("Deployment", "web"),
                Rolled("StatefulSet", "db"),
                Rolled("DaemonSet", "agent"),
            )
        )
    }
    # Listed as the rollout's informers list them: by label, the three kinds.
    lists = [a for a in cluster.kube.actions if a.verb == "list"]
    assert [(a.resource, a.namespace) for a in lists] == [
        ("deployments", "demo"),
        ("statefulsets", "demo"),
        ("daemonsets", "demo"),
    ]
    assert {a.options["label_selector"] for a in lists} == {"cbop.dev/rollout=true"}
    assert cluster.kube.write_actions() == []


def test_what_the_rollout_would_not_roll_is_not_listed(cluster: Cluster) -> None:
    """Baseline already equal to the new content; never seen by the rollout (no
    baseline: it would record one); being deleted; another namespace."""
    new = configmap("app", {"k": "2"})
    ahead = with_baseline(
        workload("ahead", volumes=["app"]),
        config_digest(managed_references(workload(volumes=["app"]), {"app": new})),
    )
    cluster.workload(ahead, seen=False)
    cluster.workload(workload("unseen", volumes=["app"]), seen=False)
    going = workload("going", volumes=["app"])
    going["metadata"]["finalizers"] = ["example.com/hold"]
    cluster.workload(going)
    cluster.kube.delete(DEPLOYMENTS, "demo", "going")
    cluster.workload(workload("web", volumes=["app"], namespace="prod"))
    assert cluster.plan(pending("app", {"k": "2"})) == {"demo/app": Plan()}


def test_a_change_of_labels_only_or_no_pending_write_plans_nothing(cluster: Cluster) -> None:
    cluster.workload(workload("web", volumes=["app"]))
    relabelled = pending("app", {"k": "1"})
    assert relabelled.written is not None
    relabelled.written["metadata"]["labels"]["team"] = "a"
    finalizer_only = Result("demo/other", Action.NONE, ready="True", pending=True)
    in_sync = Result("demo/app", Action.NONE, ready="True")
    assert cluster.plan(relabelled, finalizer_only, in_sync) == {}
    # Nothing to plan: no list request at all.
    assert [a for a in cluster.kube.actions if a.verb == "list"] == []


def test_two_bundles_changed_together_are_judged_together(cluster: Cluster) -> None:
    """A workload reading both changed ConfigMaps is listed under each (the rollout
    coalesces them into one rollout); one already at the content of both is not."""
    cluster.workload(workload("both", volumes=["app", "other"]))
    new = {"app": configmap("app", {"k": "2"}), "other": configmap("other", {"k": "2"})}
    at_both = workload("done", volumes=["app", "other"])
    cluster.workload(
        with_baseline(at_both, config_digest(managed_references(at_both, new))), seen=False
    )
    plans = cluster.plan(pending("app", {"k": "2"}), pending("other", {"k": "2"}))
    assert {key: names(plan) for key, plan in plans.items()} == {
        "demo/app": ["Deployment/both"],
        "demo/other": ["Deployment/both"],
    }


def test_a_new_managed_configmap_joins_the_digest(cluster: Cluster) -> None:
    """A bundle created for a ConfigMap a seen workload already references rolls it
    (the rollout rolls when a ConfigMap becomes managed), also one that read no other
    managed ConfigMap (its baseline is the digest of nothing); a workload the rollout
    has never seen only gets its baseline recorded."""
    cluster.workload(workload("web", volumes=["app", "second"]))
    cluster.workload(workload("solo", volumes=["second"]))
    cluster.workload(workload("unseen", volumes=["second"]), seen=False)
    created = pending("second", {"x": "1"})
    plans = cluster.plan(Result(**{**_fields(created), "action": Action.CREATE}))
    assert names(plans["demo/second"]) == ["Deployment/solo", "Deployment/web"]


def _fields(result: Result) -> dict[str, Any]:
    return {f: getattr(result, f) for f in Result.__dataclass_fields__}


def test_paused_and_conflicting_workloads_are_listed_as_held(cluster: Cluster) -> None:
    """As the rollout treats them: a paused Deployment rolls once resumed; a workload
    whose annotation another manager applies is not rolled (RolloutConflict); one whose
    annotation a plain update wrote is taken back and rolls."""
    cluster.workload(workload("paused", volumes=["app"], paused=True))
    digest = config_digest(
        managed_references(workload(volumes=["app"]), {"app": configmap("app", {"k": "1"})})
    )
    for name, manager in (("gitops", "argocd-controller"), ("undone", "kubectl-rollout")):
        obj = cluster.workload(workload(name, volumes=["app"]))
        patch = {
            "spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}}}
        }
        if manager == "argocd-controller":
            body = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "demo"},
                **patch,
            }
            cluster.kube.patch(
                DEPLOYMENTS,
                "demo",
                name,
                body,
                patch_type="apply",
                field_manager=manager,
                force=True,
            )
        else:
            cluster.kube.patch(
                DEPLOYMENTS,
                "demo",
                obj["metadata"]["name"],
                patch,
                patch_type="merge",
                field_manager=manager,
            )
    plans = cluster.plan(pending("app", {"k": "2"}))
    assert plans["demo/app"].workloads == (
        Rolled(
            "Deployment",
            "gitops",
            f"not rolled: argocd-controller applies {ANNOTATION_CONFIG_HASH} (RolloutConflict)",
        ),
        Rolled("Deployment", "paused", "paused; rolls once resumed"),
        Rolled("Deployment", "undone"),
    )


def test_a_refused_list_makes_the_workloads_unknown_not_an_error(cluster: Cluster) -> None:
    """RBAC without the ``apps`` rules: the plan says why, in that namespace only."""
    cluster.configmap("app", {"k": "1"}, namespace="prod")
    cluster.workload(workload("web", volumes=["app"], namespace="prod"))
    cluster.kube.prepend_reactor(
        "list",
        "statefulsets",
        fail(
            lambda a: errors.forbidden(STATEFULSETS, "list", a.namespace),
            when=lambda a: a.namespace == "demo",
        ),
    )
    plans = cluster.plan(
        pending("app", {"k": "2"}), pending("app", {"k": "2"}, "prod"), namespaces=("demo", "prod")
    )
    assert plans["demo/app"].workloads == ()
    assert plans["demo/app"].unknown.startswith(
        'forbidden to list statefulsets.apps in namespace "demo" (403)'
    )
    assert plans["prod/app"] == Plan((Rolled("Deployment", "web"),))


def test_at_cluster_scope_each_kind_is_listed_once(cluster: Cluster) -> None:
    cluster.configmap("app", {"k": "1"}, namespace="prod")
    cluster.workload(workload("web", volumes=["app"]))
    cluster.workload(workload("web", volumes=["app"], namespace="prod"))
    plans = cluster.plan(pending("app", {"k": "2"}, "prod"), namespaces=("prod",), cluster=True)
    assert plans == {"prod/app": Plan((Rolled("Deployment", "web"),))}
    lists = [(a.resource, a.namespace) for a in cluster.kube.actions if a.verb == "list"]
    assert lists == [("deployments", None), ("statefulsets", None), ("daemonsets", None)]

    cluster.kube.prepend_reactor("list", "daemonsets", fail(errors.connection_refused()))
    refused = cluster.plan(pending("app", {"k": "2"}, "prod"), namespaces=("prod",), cluster=True)
    assert "list daemonsets.apps at cluster scope" in refused["prod/app"].unknown


def test_lists_are_followed_page_by_page(cluster: Cluster) -> None:
    for i in range(3):
        cluster.workload(workload(f"web-{i}", volumes=["app"]))
    pages = {"": ("a", ["web-0"]), "a": ("b", ["web-1"]), "b": ("", ["web-2"])}

    def paged(res: Resource, namespace: str | None, **options: Any) -> dict[str, Any]:
        token, wanted = pages[options.get("continue_") or ""] if res is DEPLOYMENTS else ("", [])
        items = [cluster.kube.get(res, namespace, n) for n in wanted]
        return {"metadata": {"continue": token}, "items": items}

    found, unknown = list_workloads(paged, ["demo"], cluster_scope=False)
    assert unknown == {}
    assert [w.name for w in found["demo"]] == ["web-0", "web-1", "web-2"]


def test_the_table_names_the_workloads_under_the_bundle() -> None:
    results = [pending("app", {"k": "2"}), pending("other", {"k": "2"}), pending("x", {})]
    plans = {
        "demo/app": Plan((Rolled("Deployment", "web"), Rolled("StatefulSet", "db"))),
        "demo/other": Plan(),
        "demo/x": Plan(unknown="forbidden to list deployments.apps"),
    }
    table = _table(results, dry_run=True, plans=plans)
    sections = table.split("\n\n")[1:]
    assert [s.splitlines()[1] for s in sections] == [
        "# would roll: Deployment/web, StatefulSet/db",
        "# would roll: none",
        "# workloads unknown: forbidden to list deployments.apps",
    ]


# ---------------------------------------------------------------- run_once on the fake


def _run_once(kube: FakeKube, *flags: str) -> tuple[int, str]:
    args = build_parser().parse_args(["--once", "--dry-run", "--namespace=demo", *flags])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        code = run_once(args, kube)
    return code, out.getvalue()


@pytest.fixture
def changed() -> FakeKube:
    """A bundle ``app`` read by a seen, labelled Deployment, then changed; not reconciled."""
    kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
    kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
    stored = kube.tracker.add(CONFIGBUNDLES, bundle({"data": {"a": "1"}}, name="app"))
    cm = kube.tracker.add(CONFIGMAPS, written(stored))
    web = workload("web", volumes=["app"])
    kube.tracker.add(
        DEPLOYMENTS, with_baseline(web, config_digest(managed_references(web, {"app": cm})))
    )
    changed = copy.deepcopy(stored)
    changed["spec"] = {"data": {"a": "2"}}
    kube.tracker.update(CONFIGBUNDLES, "demo", "app", changed)
    return kube


def test_run_once_prints_the_plan_and_writes_nothing(changed: FakeKube) -> None:
    code, out = _run_once(changed, "--output=json")
    assert code == 3
    (row,) = json.loads(out)
    assert row["wouldRoll"] == [{"kind": "Deployment", "name": "web"}]
    assert "workloadsUnknown" not in row
    assert all(a.options.get("dry_run") for a in changed.write_actions())

    code, table = _run_once(changed)
    assert "# would roll: Deployment/web" in table


def test_run_once_names_the_revision_a_change_would_create(changed: FakeKube) -> None:
    app = changed.tracker.get(CONFIGBUNDLES, "demo", "app")
    app["spec"]["revisions"] = {"enabled": True}
    changed.tracker.update(CONFIGBUNDLES, "demo", "app", app)
    revision = revision_name("app", content_hash({"a": "2"}, {}))
    changed.clear_actions()
    code, out = _run_once(changed, "--output=json")
    assert code == 3
    (row,) = json.loads(out)
    assert row["wouldCreateRevision"] == revision
    assert row["message"].startswith(f"would create revision {revision}; would update")
    assert row["wouldRoll"] == [{"kind": "Deployment", "name": "web"}]
    assert all(a.options.get("dry_run") for a in changed.write_actions())
    assert all(a.name != revision for a in changed.actions)
    code, table = _run_once(changed)
    assert f"# demo/app: would create revision {revision}; would update ConfigMap app" in table


def test_run_once_names_no_revision_without_revisions(changed: FakeKube) -> None:
    _, out = _run_once(changed, "--output=json")
    (row,) = json.loads(out)
    assert row["wouldCreateRevision"] is None
    assert "revision" not in row["message"]


def test_run_once_without_rollouts_lists_no_workloads(changed: FakeKube) -> None:
    changed.clear_actions()
    code, out = _run_once(changed, "--output=json", "--no-rollout")
    assert code == 3
    (row,) = json.loads(out)
    assert row["wouldRoll"] is None
    assert row["workloadsUnknown"] == ROLLOUTS_OFF
    assert [a for a in changed.actions if a.resource == "deployments"] == []


def test_run_once_without_the_apps_rules_still_answers(changed: FakeKube) -> None:
    changed.prepend_reactor(
        "list", "deployments", fail(lambda a: errors.forbidden(DEPLOYMENTS, "list", a.namespace))
    )
    code, out = _run_once(changed, "--output=json")
    assert code == 3
    (row,) = json.loads(out)
    assert row["wouldRoll"] is None
    assert row["workloadsUnknown"].startswith(
        'forbidden to list deployments.apps in namespace "demo" (403)'
    )
    code, table = _run_once(changed)
    assert '# workloads unknown: forbidden to list deployments.apps in namespace "demo"' in table
