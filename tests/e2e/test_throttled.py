"""cbop throttled by API Priority and Fairness, on the real control plane (issue 18).

cbop runs as a ServiceAccount bound to the shipped ClusterRole (in the test namespace),
and a real FlowSchema (precedence 100, matching that ServiceAccount) sends its requests
to a PriorityLevelConfiguration with one nominal share, no lending or borrowing and
``limitResponse: Reject``: the API server answers 429 with its own Retry-After. An
unthrottled admin creates and then patches bundles meanwhile.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient, Resource
from cbop_testing.envtest import ControlPlane
from cbop_testing.envtest.flowcontrol import (
    FLOW_SCHEMAS,
    PRIORITY_LEVELS,
    rejecting_flow_schema,
    rejecting_priority_level,
)

from .harness import REPO, Operator, bundle, raw_get, wait_for

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")

BUNDLES = 80
PATCHED = 30


def _create_ignoring_existing(kube: KubeClient, res: Resource, body: dict[str, Any]) -> None:
    try:
        kube.create(res, None, body)
    except ApiError as err:
        if not err.is_already_exists:
            raise


def _throttle(kube: KubeClient, name: str, namespace: str) -> None:
    """Create the Reject priority level and the FlowSchema sending cbop's SA to it."""
    kube.create(PRIORITY_LEVELS, None, rejecting_priority_level(name))
    kube.create(FLOW_SCHEMAS, None, rejecting_flow_schema(name, namespace, "cbop"))


def _rejected(kube: KubeClient, flow_schema: str) -> float:
    """``apiserver_flowcontrol_rejected_requests_total`` of one FlowSchema."""
    total = 0.0
    for family in text_string_to_metric_families(raw_get(kube, "/metrics")):
        if family.name != "apiserver_flowcontrol_rejected_requests":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("flow_schema") == flow_schema:
                total += sample.value
    return total


def _ready_for_generation(b: dict[str, Any]) -> bool:
    status = b.get("status") or {}
    return status.get("observedGeneration") == b["metadata"]["generation"] and any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ()
    )


def _wrongly_ready(kube: KubeClient, namespace: str) -> list[str]:
    """Bundles Ready for their generation while their ConfigMap differs from the spec.

    The bundles are listed before and after the ConfigMaps; only bundles unchanged
    between the two lists are judged, so a write racing the snapshot is no false alarm.
    """
    before = {b["metadata"]["name"]: b for b in kube.list(CONFIGBUNDLES, namespace)["items"]}
    cms = {
        c["metadata"]["name"]: c.get("data")
        for c in kube.list(CONFIGMAPS, namespace, label_selector="cbop.dev/bundle")["items"]
    }
    wrong = []
    for b in kube.list(CONFIGBUNDLES, namespace)["items"]:
        name = b["metadata"]["name"]
        earlier = before.get(name)
        if (
            earlier is None
            or earlier["metadata"]["resourceVersion"] != b["metadata"]["resourceVersion"]
        ):
            continue
        if _ready_for_generation(b) and cms.get(name) != b["spec"]["data"]:
            wrong.append(name)
    return wrong


def _converged(kube: KubeClient, namespace: str, expected: dict[str, str]) -> bool:
    cms = {
        c["metadata"]["name"]: c.get("data")
        for c in kube.list(CONFIGMAPS, namespace, label_selector="cbop.dev/bundle")["items"]
    }
    if any(cms.get(name) != {"v": value} for name, value in expected.items()):
        return False
    return all(_ready_for_generation(b) for b in kube.list(CONFIGBUNDLES, namespace)["items"])


def test_throttled_by_apf_nothing_lost_nothing_falsely_ready_probes_green(
    kube: KubeClient, namespace: str, control_plane: ControlPlane, tmp_path: Path, crd: None
) -> None:
    name = f"cbop-throttle-{namespace}"[:63]
    role = yaml.safe_load((REPO / "manifests" / "rbac" / "cluster_role.yaml").read_text())
    _create_ignoring_existing(kube, CLUSTER_ROLES, role)
    kubeconfig = control_plane.kubeconfig_for_service_account(namespace, "cbop")
    kube.create(
        ROLE_BINDINGS,
        namespace,
        {
            "metadata": {"name": "cbop"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cbop",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "cbop", "namespace": namespace}],
        },
    )
    _throttle(kube, name, namespace)
    op: Operator | None = None
    stop = threading.Event()
    probe_failures: list[tuple[str, int]] = []
    falsely_ready: list[str] = []
    try:
        op = Operator(
            kubeconfig,
            [namespace],
            args=["--workers", "32", "--kube-api-qps", "500", "--kube-api-burst", "1000"],
            log_path=tmp_path / "cbop.log",
        )
        op.wait_ready(120)
        expected = {f"b{i:03d}": "1" for i in range(BUNDLES)}

        def watch_probes() -> None:
            assert op is not None
            while not stop.is_set():
                for path in ("/healthz", "/readyz"):
                    code = op.get(path)[0]
                    if code != 200:
                        probe_failures.append((path, code))
                falsely_ready.extend(_wrongly_ready(kube, namespace))
                stop.wait(0.5)

        watcher = threading.Thread(target=watch_probes, daemon=True)
        watcher.start()
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: kube.create(
                        CONFIGBUNDLES, namespace, bundle(n, {"data": {"v": expected[n]}})
                    ),
                    expected,
                )
            )
            patched = list(expected)[:PATCHED]
            for n in patched:
                expected[n] = "2"
            list(
                pool.map(
                    lambda n: kube.patch(
                        CONFIGBUNDLES, namespace, n, {"spec": {"data": {"v": expected[n]}}}
                    ),
                    patched,
                )
            )
        wait_for(
            lambda: _converged(kube, namespace, expected),
            300,
            interval=1,
            message="every bundle converged under the throttle",
        )
        took = time.monotonic() - started
        stop.set()
        watcher.join(10)
        assert probe_failures == []
        assert falsely_ready == []
        assert _rejected(kube, name) > 0, "the FlowSchema never rejected anything"
        metrics = op.metrics()
        throttled = sum(
            v for k, v in metrics.items() if k.startswith('rest_client_requests_total{code="429"')
        )
        retries = sum(
            v for k, v in metrics.items() if k.startswith("rest_client_request_retries_total{")
        )
        assert throttled > 0
        assert retries > 0
        waits = [
            r["retry_after"]
            for r in op.log_records()
            if r.get("event") == "retrying after the server asked to wait"
        ]
        assert waits, "no 429 was logged at debug level"
        print(
            f"\nthrottled: converged in {took:.1f} s; {int(throttled)} answers 429, "
            f"{int(retries)} retries; Retry-After seen: min {min(waits)}, median "
            f"{statistics.median(waits)}, max {max(waits)}; APF rejected "
            f"{_rejected(kube, name):.0f}"
        )
    finally:
        stop.set()
        for res in (FLOW_SCHEMAS, PRIORITY_LEVELS):
            try:
                kube.delete(res, None, name)
            except ApiError as err:
                if not err.is_not_found:
                    raise
        if op is not None:
            code = op.stop()
            assert code in (0, -9, -15), f"cbop exited with {code}:\n{op.logs()[-4000:]}"
