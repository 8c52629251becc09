"""Cluster-side helpers: the CRD, namespaces, bundle inputs, and kube-apiserver's metrics."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    content_hash,
)
from cbop.kube import CONFIGBUNDLES, NAMESPACES, ApiError, KubeClient

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "manifests" / "crd" / "cbop.dev_configbundles.yaml"

#: (verb, resource, subresource) -> count, as kube-apiserver labels apiserver_request_total.
RequestCounts = dict[tuple[str, str, str], float]
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
READ_VERBS = frozenset({"GET", "LIST", "WATCH"})


def client(kubeconfig: Path) -> KubeClient:
    """A client without client-side rate limiting, with a pool large enough for the loader."""
    return KubeClient.from_config(kubeconfig=str(kubeconfig), qps=0, pool_size=32)


def install_crd(kubectl: Path, kubeconfig: Path) -> None:
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    subprocess.run([*base, "apply", "-f", str(CRD)], check=True, capture_output=True)
    subprocess.run(
        [
            *base,
            "wait",
            "--for=condition=Established",
            "crd/configbundles.cbop.dev",
            "--timeout=60s",
        ],
        check=True,
        capture_output=True,
    )


def create_namespace(kube: KubeClient, name: str) -> None:
    kube.create(NAMESPACES, None, {"metadata": {"name": name, "labels": {"bench.cbop.dev": "1"}}})
    # The namespace controller creates the default ServiceAccount right away; let those
    # writes land before anyone takes a baseline of the API server's counters.
    time.sleep(0.5)


def drop_finalizers(kube: KubeClient, namespace: str, threads: int = 8) -> int:
    """Remove finalizers from the bundles in ``namespace``; return how many had some.

    kopf puts its finalizer on objects that have timers; with the operator stopped,
    nothing would remove it and the namespace could never be deleted.
    """
    held = [
        b["metadata"]["name"]
        for b in kube.list(CONFIGBUNDLES, namespace)["items"]
        if b["metadata"].get("finalizers")
    ]

    def drop(name: str) -> None:
        kube.patch(CONFIGBUNDLES, namespace, name, {"metadata": {"finalizers": None}})

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(drop, held):
            pass
    return len(held)


def deletion_timeout(bundles: int) -> float:
    """Seconds to allow for deleting a namespace of ``bundles`` bundles and their ConfigMaps.

    The namespace controller deletes both collections and the garbage collector follows
    the owner references: 300 s, plus 20 ms per bundle beyond the first 10,000.
    """
    return 300.0 + 0.02 * max(0, bundles - 10_000)


def delete_namespace(kube: KubeClient, name: str, timeout: float = 300.0) -> float:
    """Delete a namespace (finalizers dropped first) and wait until it is gone; return seconds."""
    start = time.monotonic()
    try:
        drop_finalizers(kube, name)
        kube.delete(NAMESPACES, None, name)
    except ApiError as err:
        if err.is_not_found:
            return 0.0
        raise
    while time.monotonic() - start < timeout:
        try:
            kube.get(NAMESPACES, None, name)
        except ApiError as err:
            if err.is_not_found:
                return time.monotonic() - start
            raise
        time.sleep(0.5)
    raise TimeoutError(f"namespace {name} still exists after {timeout:.0f} s")


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Expected:
    """What a bundle's ConfigMap must carry to count as matching."""

    data: Mapping[str, str]
    binary_data: Mapping[str, str]
    labels: Mapping[str, str]
    content_hash: str


def bundle_spec(index: int) -> dict[str, Any]:
    """The spec of bundle ``index``: fixed, a little under 1 KiB, all fields a peer handles."""
    seed = hashlib.sha256(f"bundle-{index}".encode()).digest()
    props = "".join(f"key{k}=value-{index}-{k}\n" for k in range(12))
    return {
        "data": {
            "app.properties": props,
            "index": str(index),
            "mode": ("blue", "green", "red")[index % 3],
        },
        "binaryData": {"seed.bin": base64.b64encode(seed * 2).decode()},
        "labels": {"bench.cbop.dev/group": f"g{index % 10}"},
        "annotations": {"bench.cbop.dev/source": "loader"},
    }


def bundle_body(name: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": bundle_spec(index),
    }


def expected(name: str, index: int) -> Expected:
    spec = bundle_spec(index)
    binary = {k: base64.b64decode(v) for k, v in spec["binaryData"].items()}
    labels = {**spec["labels"], LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_BUNDLE: name}
    return Expected(
        data=spec["data"],
        binary_data=spec["binaryData"],
        labels=labels,
        content_hash=content_hash(spec["data"], binary),
    )


def content_ok(cm: Mapping[str, Any], want: Expected) -> bool:
    """Whether a ConfigMap's content, labels and hash annotation are what the bundle says."""
    meta = cm.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        (cm.get("data") or {}) == want.data
        and (cm.get("binaryData") or {}) == want.binary_data
        and all(labels.get(k) == v for k, v in want.labels.items())
        and (meta.get("annotations") or {}).get(ANNOTATION_CONTENT_HASH) == want.content_hash
    )


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == CONFIGBUNDLES.kind:
            return str(ref.get("uid"))
    return None


def bundle_ready(bundle: Mapping[str, Any]) -> bool:
    """Ready=True for the bundle's current generation."""
    meta, status = bundle.get("metadata") or {}, bundle.get("status") or {}
    generation = meta.get("generation")
    if status.get("observedGeneration") != generation:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def ready_status(bundle: Mapping[str, Any], name: str, want: Expected) -> dict[str, Any]:
    """The status the raw floor writes: what an operator reports after creating the ConfigMap."""
    generation = bundle["metadata"].get("generation", 1)
    keys = len(want.data) + len(want.binary_data)
    return {
        "observedGeneration": generation,
        "configMapName": name,
        "contentHash": want.content_hash,
        "keyCount": keys,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": f"ConfigMap {name} matches the spec ({keys} keys, {want.content_hash})",
                "observedGeneration": generation,
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ],
    }


def configmap_body(bundle: Mapping[str, Any], name: str, want: Expected) -> dict[str, Any]:
    """The ConfigMap the raw floor creates (the contract's content, owner and metadata)."""
    meta = bundle["metadata"]
    spec = bundle["spec"]
    return {
        "metadata": {
            "name": name,
            "labels": dict(want.labels),
            "annotations": {**spec["annotations"], ANNOTATION_CONTENT_HASH: want.content_hash},
            "ownerReferences": [
                {
                    "apiVersion": CONFIGBUNDLES.api_version,
                    "kind": CONFIGBUNDLES.kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": dict(want.data),
        "binaryData": dict(want.binary_data),
    }


# ------------------------------------------------------------------ apiserver metrics


def raw_get(kube: KubeClient, path: str) -> str:
    """GET a non-JSON path (``/metrics``) with the client's credentials."""
    api = kube._transport.api_client
    response = api.rest_client.pool_manager.request(
        "GET", api.configuration.host + path, headers=api.default_headers, preload_content=True
    )
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {response.data[:200]!r}")
    return str(response.data.decode())


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def apiserver_requests(kube: KubeClient) -> RequestCounts:
    """``apiserver_request_total`` summed by (verb, resource, subresource).

    Only that family's lines are parsed: the whole page is megabytes, and a full parse
    would take seconds of the CPU the operators under test need.
    """
    out: RequestCounts = {}
    prefix = "apiserver_request_total{"
    for line in raw_get(kube, "/metrics").splitlines():
        if not line.startswith(prefix):
            continue
        labels_text, _, value = line[len(prefix) :].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] = out.get(key, 0.0) + float(value.split()[0])
    return out


BUNDLE_RESOURCES = frozenset({"configbundles", "configmaps", "events"})


def wait_api_quiet(kube: KubeClient, *, quiet: float = 2.0, timeout: float = 60.0) -> float:
    """Wait until no request touches bundles, ConfigMaps or Events for ``quiet`` seconds.

    The garbage collector and namespace controller keep working for a while after a
    namespace is gone; their requests must not be charged to the next operator.
    """
    start = time.monotonic()
    last = apiserver_requests(kube)
    calm_since = time.monotonic()
    while time.monotonic() - start < timeout:
        time.sleep(0.5)
        now = apiserver_requests(kube)
        moved = any(
            k[1] in BUNDLE_RESOURCES and k[0] != "WATCH" and v for k, v in delta(now, last).items()
        )
        last = now
        if moved:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet:
            break
    return time.monotonic() - start


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["get"]
    resources:
      - group: "cbop.dev"
        resources: ["configbundles"]
      - group: ""
        resources: ["configmaps", "events"]
  - level: None
"""


def audit_flags(workdir: Path, extra_rules: str = "") -> list[str]:
    """kube-apiserver flags that log only single-object GETs of our resources, and what
    ``extra_rules`` (audit policy rules, YAML list items) adds.

    apiserver_request_total has no client label; this log tells who made the reads
    outside list/watch (an operator, or kube-controller-manager's garbage collector).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "audit-policy.yaml"
    last = "  - level: None\n"
    policy.write_text(AUDIT_POLICY.replace(last, extra_rules + last))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


class AuditTail:
    """Counts audited GETs by client (user agent's first word) since the last mark."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def gets(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if not self.path.exists():
            return out
        with self.path.open("rb") as f:
            f.seek(self._offset)
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                agent = str(event.get("userAgent", "?")).split("/")[0].split(" ")[0]
                resource = (event.get("objectRef") or {}).get("resource", "?")
                key = f"{agent} {resource}"
                out[key] = out.get(key, 0) + 1
        return out


def delta(after: RequestCounts, before: RequestCounts) -> RequestCounts:
    out = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v > 0}
