"""cbop under failure: competing writers, restarts, compaction, conflict storms.

Field cases 12, 13 and 14 of ``shared/cases/configbundle-cases.md``, on the real local
control plane, with cbop as real subprocesses.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient
from cbop_testing.envtest import ControlPlane

from .harness import (
    Operator,
    apiserver_writes,
    bundle,
    ready,
    set_spec,
    wait_for,
    wait_no_terminating_namespaces,
)

FAST = ["--kube-api-qps", "500", "--kube-api-burst", "1000", "--resync-period", "10s"]


@pytest.fixture
def operators(cbop: Callable[..., Operator]) -> Callable[..., Operator]:
    """cbop processes with generous client-side limits and a 10 s resync."""

    def start(*args: str, wait: bool = True) -> Operator:
        return cbop(*FAST, *args, wait=wait)

    return start


def _all_converged(kube: KubeClient, namespace: str, expected: dict[str, dict[str, str]]) -> bool:
    cms = {
        c["metadata"]["name"]: c
        for c in kube.list(
            CONFIGMAPS, namespace, label_selector="app.kubernetes.io/managed-by=cbop"
        )["items"]
    }
    if set(cms) != set(expected):
        return False
    return all(cms[name].get("data") == data for name, data in expected.items())


def test_two_operators_without_leader_election_converge_without_flapping(
    kube: KubeClient,
    namespace: str,
    operators: Callable[..., Operator],
) -> None:
    """Case 12: 20 quick spec changes with two cbop processes writing at once."""
    a, b = operators(), operators()
    kube.create(CONFIGBUNDLES, namespace, bundle("twin", {"data": {"v": "0"}}))
    for i in range(1, 21):
        set_spec(kube, namespace, "twin", {"data": {"v": str(i), f"k{i}": "x"}})
        time.sleep(0.05)
    final = {"v": "20", "k20": "x"}
    wait_for(
        lambda: kube.get(CONFIGMAPS, namespace, "twin").get("data") == final,
        30,
        message="final spec",
    )
    generation = kube.get(CONFIGBUNDLES, namespace, "twin")["metadata"]["generation"]
    wait_for(
        lambda: (
            (kube.get(CONFIGBUNDLES, namespace, "twin").get("status") or {}).get(
                "observedGeneration"
            )
            == generation
        ),
        30,
        message="status caught up",
    )
    cm_rv = kube.get(CONFIGMAPS, namespace, "twin")["metadata"]["resourceVersion"]
    b_rv = kube.get(CONFIGBUNDLES, namespace, "twin")["metadata"]["resourceVersion"]
    time.sleep(12)  # more than one resync period of both
    assert kube.get(CONFIGMAPS, namespace, "twin")["metadata"]["resourceVersion"] == cm_rv, (
        "flapping"
    )
    assert kube.get(CONFIGBUNDLES, namespace, "twin")["metadata"]["resourceVersion"] == b_rv, (
        "status flapping"
    )
    assert a.proc.poll() is None
    assert b.proc.poll() is None
    for op in (a, b):
        m = op.metrics()
        assert m['controller_runtime_reconcile_panics_total{controller="configbundle"}'] == 0


def test_restart_mid_work_converges_without_duplicates_and_restart_is_quiet(
    kube: KubeClient,
    namespace: str,
    operators: Callable[..., Operator],
) -> None:
    """Case 13, first half: SIGKILL while creating 500 ConfigMaps, then start again."""
    count = 500
    expected = {f"b{i:03d}": {"n": str(i)} for i in range(count)}
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: kube.create(CONFIGBUNDLES, namespace, bundle(n, {"data": expected[n]})),
                expected,
            )
        )
    first = operators("--kube-api-qps", "40", "--kube-api-burst", "40")

    def created() -> int:
        return len(
            kube.list(CONFIGMAPS, namespace, label_selector="app.kubernetes.io/managed-by=cbop")[
                "items"
            ]
        )

    wait_for(lambda: created() >= count // 4, 60, message="a quarter created")
    first.stop(signal.SIGKILL)
    partial = created()
    assert partial < count, "the kill came too late to be mid-work"

    second = operators()
    wait_for(
        lambda: _all_converged(kube, namespace, expected),
        120,
        interval=0.5,
        message="all converged",
    )
    items = kube.list(CONFIGMAPS, namespace)["items"]
    owned = [c for c in items if c["metadata"].get("ownerReferences")]
    assert len(owned) == count, "no duplicates"
    assert all(len(c["metadata"]["ownerReferences"]) == 1 for c in owned)
    wait_for(
        lambda: all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (b.get("status") or {}).get("conditions", [])
            )
            for b in kube.list(CONFIGBUNDLES, namespace)["items"]
        ),
        60,
        interval=0.5,
        message="all Ready",
    )
    time.sleep(2)
    second.stop()

    # A restart on a converged cluster makes no writes.
    wait_no_terminating_namespaces(kube)
    before = apiserver_writes(kube)
    again = operators()
    wait_for(
        lambda: (
            again.metrics()[
                'controller_runtime_reconcile_total{controller="configbundle",result="success"}'
            ]
            >= count
        ),
        60,
        message="all reconciled once",
    )
    time.sleep(2)
    assert apiserver_writes(kube) == before


def test_compacted_watch_relists_and_sees_deletion_made_in_the_gap(
    kube: KubeClient,
    namespace: str,
    operators: Callable[..., Operator],
    control_plane: ControlPlane,
) -> None:
    """Case 13, second half: 410 Gone -> relist; a bundle deleted meanwhile is handled."""
    op = operators("--resync-period", "0")
    for name in ("keep", "drop"):
        kube.create(CONFIGBUNDLES, namespace, bundle(name, {"data": {"a": name}}))
    wait_for(
        lambda: op.metrics()['cbop_configbundles{ready="True"}'] == 2, 30, message="both Ready"
    )
    op.send(signal.SIGSTOP)  # freeze cbop: its watches fall behind
    try:
        kube.delete(CONFIGBUNDLES, namespace, "drop")
        for i in range(20):  # move etcd's revision along, then compact it away
            kube.create(CONFIGMAPS, namespace, {"metadata": {"name": f"noise{i}"}})
        control_plane.compact_etcd()
        control_plane.restart_apiserver()  # drop cbop's watch connections and the watch cache
    finally:
        op.send(signal.SIGCONT)
    # The relisted cache no longer has "drop", and cbop keeps serving "keep".
    wait_for(
        lambda: op.metrics()['cbop_configbundles{ready="True"}'] == 1,
        60,
        message="deletion seen after relist",
    )
    set_spec(kube, namespace, "keep", {"data": {"a": "changed"}})
    wait_for(
        lambda: kube.get(CONFIGMAPS, namespace, "keep").get("data") == {"a": "changed"},
        30,
        message="new change",
    )
    records = op.log_records()
    assert any(
        "410" in str(r)
        or "relist" in str(r.get("event", "")).lower()
        or "expired" in str(r).lower()
        for r in records
    ), "no relist logged"
    assert op.proc.poll() is None


def test_conflict_storm_converges_quietly(
    kube: KubeClient,
    namespace: str,
    operators: Callable[..., Operator],
) -> None:
    """Case 14: 50 bundles while a script patches their ConfigMaps in a loop."""
    expected = {f"c{i:02d}": {"a": str(i)} for i in range(50)}
    for name, data in expected.items():
        kube.create(CONFIGBUNDLES, namespace, bundle(name, {"data": data}))
    op = operators()
    wait_for(
        lambda: _all_converged(kube, namespace, expected),
        60,
        interval=0.5,
        message="initial convergence",
    )
    stop = threading.Event()
    patched = [0]

    def vandal() -> None:
        rng = random.Random(14)
        while not stop.is_set():
            name = rng.choice(list(expected))
            try:
                cm = kube.get(CONFIGMAPS, namespace, name)
                cm["data"] = {"a": "vandal", "extra": str(rng.random())}
                kube.update(CONFIGMAPS, namespace, name, cm)
                patched[0] += 1
            except ApiError:
                pass

    threads = [threading.Thread(target=vandal) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(15)
    stop.set()
    for t in threads:
        t.join(10)
    assert patched[0] > 100
    wait_for(
        lambda: _all_converged(kube, namespace, expected),
        60,
        interval=0.5,
        message="convergence after the storm",
    )
    m = op.metrics()
    assert m["cbop_drift_corrections_total{}"] >= 50
    assert m['controller_runtime_reconcile_panics_total{controller="configbundle"}'] == 0
    records = op.log_records()
    loud = [r for r in records if r.get("level") in ("warning", "error")]
    assert len(loud) <= 5, f"log flood: {loud[:5]}"


def test_after_a_restart_bundles_needing_work_go_before_the_converged_ones(
    kube: KubeClient,
    namespace: str,
    operators: Callable[..., Operator],
) -> None:
    """A bundle created, and one changed, while cbop was down are the first two
    reconciles after the restart, ahead of the 150 converged bundles of the initial
    list (one worker, so the order of the reconcile log lines is the queue's order)."""
    names = [f"a{i:03d}" for i in range(150)]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: kube.create(CONFIGBUNDLES, namespace, bundle(n, {"data": {"n": n}})),
                names,
            )
        )
    first = operators("--workers", "1")
    wait_for(
        lambda: _all_converged(kube, namespace, {n: {"n": n} for n in names}),
        120,
        message="all converged",
    )
    wait_for(lambda: all(ready(kube, namespace, n, 1) for n in names), 60, message="all Ready")
    assert first.stop() == 0

    kube.create(CONFIGBUNDLES, namespace, bundle("zz-new", {"data": {"n": "new"}}))
    changed = set_spec(kube, namespace, "a075", {"data": {"n": "changed"}})
    second = operators("--workers", "1")
    wait_for(lambda: ready(kube, namespace, "zz-new", 1), 60, message="zz-new Ready")
    wait_for(lambda: ready(kube, namespace, "a075", changed), 60, message="a075 Ready")
    wait_for(lambda: len(_reconciled(second)) >= len(names) + 1, 60, message="every listed bundle")
    order = _reconciled(second)
    assert set(order[:2]) == {"zz-new", "a075"}, order[:10]
    assert sorted(set(order)) == sorted([*names, "zz-new"])


def _reconciled(op: Operator) -> list[str]:
    """The bundle names of the process's ``reconciled`` log lines, in order."""
    return [
        str(r.get("name"))
        for r in op.log_records()
        if r.get("event") == "reconciled" and r.get("controller") == "configbundle"
    ]
