"""The collection of pins entries nothing references, on the fake API server and a fake clock.

docs/revisions.md: an entry of a namespace's ``cbop-revisions`` goes once no ReplicaSet,
ControllerRevision or opted-in workload carries its digest, and it is older than the
grace period; never while a rollout of the process has claimed it lately; and a rollout
to a digest whose entry was just dropped writes it again whatever its cache says.
"""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api import content_hash
from cbop.api.revisions import (
    LABEL_REVISION_OF,
    PARAMS_NAME,
    is_frozen,
    owner_pins_key,
    parse_pins,
    pins_key,
    pins_value,
    revision_name,
)
from cbop.kube import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, ApiError
from cbop.rollout import CONFIGMAP_INDEX, Action, RolloutReconciler, index_by_configmap
from cbop.rollout.history import DIGEST_INDEX, index_by_digest
from cbop.rollout.pins import PinsGuard
from cbop.rollout.unpin import (
    DIGEST_CHANGED,
    OWNER_INDEX,
    PINS_ONLY,
    PinsCollector,
    index_by_owner_without_digest,
    pins_key_of,
)
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker
from cbop_testing.objects import configmap, workload

GRACE = 60.0
KEY = f"demo/{PARAMS_NAME}"


def digest(n: int) -> str:
    return "sha256:" + f"{n:02x}" * 32


def replicaset(name: str, of: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"cbop.dev/config-hash": of}}, "spec": {}}
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "spec": {"template": template},
    }


def controller_revision(name: str, of: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"cbop.dev/config-hash": of}}}
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "data": {"spec": {"template": template}},
    }


class World:
    """The fake API server, the caches the collection reads, one guard and clock."""

    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        self.kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
        self.configmaps = CacheLister()
        history = {DIGEST_INDEX: index_by_digest, OWNER_INDEX: index_by_owner_without_digest}
        self.replicasets = CacheLister(indexers=history)
        self.revisions = CacheLister(indexers=history)
        self.workloads = CacheLister(
            indexers={CONFIGMAP_INDEX: index_by_configmap, DIGEST_INDEX: index_by_digest}
        )
        self.guard = PinsGuard(grace=GRACE, clock=self.clock)
        self.collector = self.new_collector()

    def new_collector(self) -> PinsCollector:
        return PinsCollector(
            client=self.kube,
            configmaps=self.configmaps,
            history=[self.replicasets, self.revisions],
            workloads={"Deployment": self.workloads},
            guard=self.guard,
        )

    def pins(self, *digests: str) -> None:
        """Make the pins hold an entry for each of ``digests``."""
        self.pins_data(
            {pins_key(d): pins_value({"web-conf": f"web-conf-{d[7:17]}"}) for d in digests}
        )

    def pins_data(self, data: dict[str, str]) -> None:
        """Make the namespace's pins ConfigMap hold ``data``, and sync the caches."""
        self.kube.tracker.add(
            CONFIGMAPS,
            {
                "metadata": {
                    "name": PARAMS_NAME,
                    "namespace": "demo",
                    "labels": {"app.kubernetes.io/managed-by": "cbop"},
                },
                "data": data,
            },
        )
        self.sync()

    def revision(self, plain: str, data: dict[str, str]) -> dict[str, Any]:
        """Add bundle ``app``'s revision of ``data`` under ConfigMap ``plain``; return it."""
        rev = configmap(revision_name(plain, content_hash(data, {})), data, bundle="app")
        rev["metadata"]["labels"][LABEL_REVISION_OF] = "app"
        rev["metadata"]["ownerReferences"][0]["controller"] = False
        self.kube.tracker.add(CONFIGMAPS, rev)
        return rev

    def rollout(self) -> RolloutReconciler:
        """A Deployment rollout reconciler on this world's caches and pins guard."""
        return RolloutReconciler(
            resource=DEPLOYMENTS,
            client=self.kube,
            workloads=self.workloads,
            configmaps=self.configmaps,
            pins_guard=self.guard,
        )

    def sync(self) -> None:
        self.configmaps.sync(self.kube.tracker, CONFIGMAPS)

    def entries(self) -> list[str]:
        return sorted(self.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME).get("data") or {})

    def collect(self) -> Any:
        self.kube.clear_actions()
        result = self.collector.reconcile(KEY)
        self.sync()
        return result


def test_unreferenced_entries_go_after_the_grace_in_one_merge_patch() -> None:
    w = World()
    in_history, statefulset, current, stray, other = (digest(n) for n in (1, 2, 3, 4, 5))
    w.pins(in_history, statefulset, current, stray, other)
    w.replicasets.add(replicaset("web-1", in_history))
    w.revisions.add(controller_revision("db-1", statefulset))
    # A workload's current annotation whose ReplicaSet the cache has not seen yet.
    w.workloads.add(workload("web", volumes=["web-conf"], annotation=current))

    first = w.collect()
    assert first.dropped == ()
    assert first.requeue_after == GRACE  # young: looked at again once old enough
    assert w.kube.write_actions() == []
    w.clock.step(GRACE / 2)
    assert w.collect().requeue_after == GRACE / 2

    w.clock.step(GRACE / 2)
    stale_version = w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)["metadata"]
    result = w.collect()
    assert result.dropped == tuple(sorted([pins_key(stray), pins_key(other)]))
    assert result.requeue_after is None
    (patch,) = w.kube.write_actions()
    assert (patch.verb, patch.name, patch.options.get("patch_type", "merge")) == (
        "patch",
        PARAMS_NAME,
        "merge",
    )
    assert patch.body == {
        "metadata": {"resourceVersion": stale_version["resourceVersion"]},
        "data": {pins_key(stray): None, pins_key(other): None},
    }
    assert w.entries() == sorted(pins_key(d) for d in (in_history, statefulset, current))
    # Steady state: nothing written.
    assert w.collect().dropped == ()
    assert w.kube.write_actions() == []

    # revisionHistoryLimit drops the ReplicaSet: its entry (old by now) goes at once.
    w.replicasets.delete("demo/web-1")
    assert w.collect().dropped == (pins_key(in_history),)
    assert w.entries() == sorted(pins_key(d) for d in (statefulset, current))


def test_a_restarted_collection_waits_the_grace_out_again() -> None:
    w = World()
    w.pins(digest(1))
    w.clock.step(10 * GRACE)
    w.collector = w.new_collector()  # a new process: it has never seen the entry
    assert w.collect().dropped == ()
    w.clock.step(GRACE)
    assert w.collect().dropped == (pins_key(digest(1)),)


def test_an_entry_a_rollout_claimed_lately_stays() -> None:
    w = World()
    w.pins(digest(1))
    w.clock.step(GRACE)
    # The rollout wrote the entry and is about to write the annotation.
    assert w.guard.pinning("demo", pins_key(digest(1))) is False
    result = w.collect()
    assert result.dropped == ()
    assert result.requeue_after == GRACE
    assert w.kube.write_actions() == []
    w.clock.step(GRACE)
    assert w.collect().dropped == (pins_key(digest(1)),)


def test_a_rollout_to_a_digest_just_dropped_writes_its_entry_whatever_the_cache_says() -> None:
    """A revert to a template whose entry the collection drops while the rollout looks."""
    w = World()
    data = {"k": "1"}
    w.kube.tracker.add(CONFIGMAPS, configmap("web-conf", data, bundle="app"))
    w.revision("web-conf", data)
    w.sync()
    reconciler = w.rollout()
    # The workload's template: an old digest; its content now: the revision's.
    w.kube.tracker.add(
        DEPLOYMENTS,
        workload("web", volumes=["web-conf"], annotation=digest(9), baseline=digest(9)[7:47]),
    )
    w.workloads.sync(w.kube.tracker, DEPLOYMENTS)
    reconciler.reconcile("demo/web")
    wanted = w.kube.tracker.get(DEPLOYMENTS, "demo", "web")["spec"]["template"]["metadata"]
    key = pins_key(wanted["annotations"]["cbop.dev/config-hash"])
    assert key in w.entries()
    w.sync()
    assert w.collect().dropped == ()  # first seen; claimed by the rollout besides
    stale = w.configmaps.get("demo", PARAMS_NAME)
    assert stale is not None
    # The collection drops the entry (old, nothing carries it); the rollout's cache
    # still shows it.
    w.workloads.delete("demo/web")
    w.clock.step(2 * GRACE)
    w.kube.clear_actions()
    assert w.collector.reconcile(KEY).dropped == (key,)
    assert key not in w.entries()
    w.configmaps.add(stale)
    # The workload goes back to an old template; the rollout rolls to the digest again.
    w.kube.tracker.add(
        DEPLOYMENTS,
        workload("web", volumes=["web-conf"], annotation=digest(9), baseline=digest(9)[7:47]),
    )
    w.workloads.sync(w.kube.tracker, DEPLOYMENTS)
    w.kube.clear_actions()
    assert reconciler.reconcile("demo/web").written
    assert [(a.verb, a.resource) for a in w.kube.write_actions()] == [
        ("patch", "configmaps"),
        ("patch", "deployments"),
    ]
    assert key in w.entries()
    # And the claim keeps the collection off it for the grace period.
    w.workloads.delete("demo/web")
    w.sync()
    assert w.collect().dropped == ()


def test_a_lost_race_is_retried_and_a_gone_configmap_ends() -> None:
    w = World()
    w.pins(digest(1))
    assert w.collect().dropped == ()
    w.clock.step(GRACE)
    # The rollout added an entry the cache has not seen: the patch's precondition fails.
    w.kube.tracker.add(
        CONFIGMAPS,
        {
            **w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME),
            "data": {pins_key(digest(1)): "a=b\n", pins_key(digest(2)): "a=c\n"},
        },
    )
    with pytest.raises(ApiError) as err:
        w.collector.reconcile(KEY)
    assert err.value.is_conflict
    assert w.entries() == sorted([pins_key(digest(1)), pins_key(digest(2))])
    # Gone from the server, still in the cache: nothing to do.
    w.kube.tracker.delete(CONFIGMAPS, "demo", PARAMS_NAME)
    assert w.collector.reconcile(KEY).dropped == ()
    # Gone from the cache: nothing read, nothing written.
    w.sync()
    w.kube.clear_actions()
    assert w.collector.reconcile(KEY).dropped == ()
    assert w.collector.reconcile("demo/web-conf").dropped == ()
    assert w.kube.write_actions() == []


def test_what_wakes_the_collection() -> None:
    rs = replicaset("web-1", digest(1))
    assert pins_key_of(rs) == [KEY]
    assert pins_key_of(controller_revision("db-1", digest(1))) == [KEY]
    assert pins_key_of(workload("web", annotation=digest(1))) == [KEY]
    assert pins_key_of(workload("web")) == [KEY]  # its own entry, if never rolled
    status_only = {**rs, "status": {"replicas": 3}}
    assert not DIGEST_CHANGED.update(rs, status_only)
    assert DIGEST_CHANGED.update(rs, replicaset("web-1", digest(2)))
    assert DIGEST_CHANGED.delete(rs)
    pins = {"metadata": {"name": PARAMS_NAME, "namespace": "demo"}}
    assert PINS_ONLY.create(pins)
    assert PINS_ONLY.update(pins, pins)
    assert PINS_ONLY.delete(pins)
    other = configmap("web-conf", {"k": "1"})
    assert not PINS_ONLY.create(other)
    assert not PINS_ONLY.update(other, other)


def test_a_workload_never_rolled_has_its_own_entry_until_its_first_rollout_freezes_it() -> None:
    w = World()
    v1, v2 = {"k": "1"}, {"k": "2"}
    for data in (v1, v2):
        rev = w.revision("web-conf", data)
    w.kube.tracker.add(CONFIGMAPS, configmap("web-conf", v1, bundle="app"))
    w.sync()
    reconciler = w.rollout()
    w.kube.tracker.add(DEPLOYMENTS, workload("web", volumes=["web-conf"]))
    w.workloads.sync(w.kube.tracker, DEPLOYMENTS)
    first = revision_name("web-conf", content_hash(v1, {}))

    # The baseline: the entry Deployment.web (the pods carry no digest), then the label.
    w.kube.clear_actions()
    assert reconciler.reconcile("demo/web").action is Action.RECORD
    assert [(a.verb, a.resource) for a in w.kube.write_actions()] == [
        ("create", "configmaps"),
        ("patch", "deployments"),
    ]
    assert w.entries() == ["Deployment.web"]
    assert parse_pins(
        w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)["data"]["Deployment.web"]
    ) == {"web-conf": first}
    # Steady state: nothing written.
    w.sync()
    w.workloads.sync(w.kube.tracker, DEPLOYMENTS)
    w.kube.clear_actions()
    assert reconciler.reconcile("demo/web").action is Action.NONE
    assert w.kube.write_actions() == []

    # The first content change: the entry frozen, the digest's entry, the annotation.
    w.kube.tracker.add(CONFIGMAPS, configmap("web-conf", v2, bundle="app"))
    w.sync()
    w.kube.clear_actions()
    result = reconciler.reconcile("demo/web")
    assert result.action is Action.APPLY
    assert [(a.verb, a.resource, a.body) for a in w.kube.write_actions()][:2] == [
        ("patch", "configmaps", {"data": {"Deployment.web": f"web-conf={first}\n#frozen\n"}}),
        (
            "patch",
            "configmaps",
            {"data": {pins_key(result.digest): pins_value({"web-conf": rev["metadata"]["name"]})}},
        ),
    ]
    data = w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)["data"]
    assert is_frozen(data["Deployment.web"])
    assert parse_pins(data["Deployment.web"]) == {"web-conf": first}  # what its pods ran
    # Frozen: never written again, whatever the content.
    w.sync()
    w.workloads.sync(w.kube.tracker, DEPLOYMENTS)
    w.kube.tracker.add(CONFIGMAPS, configmap("web-conf", v1, bundle="app"))
    w.sync()
    w.kube.clear_actions()
    assert reconciler.reconcile("demo/web").action is Action.APPLY  # back to v1: a roll
    assert all(
        "Deployment.web" not in (a.body or {}).get("data", {}) for a in w.kube.write_actions()
    )
    assert w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)["data"]["Deployment.web"] == (
        f"web-conf={first}\n#frozen\n"
    )


def test_a_workloads_own_entry_stays_while_the_workload_does() -> None:
    w = World()
    assert owner_pins_key("Deployment", "web") == "Deployment.web"
    assert owner_pins_key("Job", "web") == ""
    assert owner_pins_key("StatefulSet", "x" * 250) == ""
    w.pins_data({"Deployment.web": "a=a-1\n", "Deployment.gone": "a=a-1\n", "Job.x": "a=a-1\n"})
    w.workloads.add(workload("web"))
    assert w.collect().dropped == ()
    w.clock.step(GRACE)
    assert w.collect().dropped == ("Deployment.gone", "Job.x")
    w.workloads.delete("demo/web")
    assert w.collect().dropped == ("Deployment.web",)


def test_a_frozen_entry_stays_while_a_template_without_digest_may_come_back() -> None:
    w = World()
    w.pins()
    frozen = "a=a-1\n#frozen\n"
    w.kube.tracker.add(
        CONFIGMAPS,
        {**w.kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME), "data": {"Deployment.web": frozen}},
    )
    w.sync()
    w.workloads.add(workload("web", annotation=digest(1)))  # rolled
    old = replicaset("web-1", "")
    old["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": "u",
            "controller": True,
        }
    ]
    assert index_by_owner_without_digest(old) == ["demo/Deployment.web"]
    assert index_by_owner_without_digest(replicaset("web-2", digest(1))) == []
    w.replicasets.add(old)
    assert w.collect().dropped == ()
    w.clock.step(GRACE)
    assert w.collect().dropped == ()  # the old ReplicaSet may be rolled back to
    w.replicasets.delete("demo/web-1")
    assert w.collect().dropped == ("Deployment.web",)
