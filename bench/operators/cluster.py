"""The cluster side of a scenario: CRDs, namespaces, and the bundles' inputs and outputs.

Every scenario builds its bundles from :func:`bundle_spec` and judges a ConfigMap with
:func:`content_ok`, so all implementations are held to the same content.
"""

from __future__ import annotations

import base64
import hashlib
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
CRDS = REPO / "manifests" / "crd"
#: The ConfigBundle CRD, installed at the start of every run.
CRD = CRDS / "cbop.dev_configbundles.yaml"
#: The bundle every namespace of S1, S2 and APF gets first: the operator is up and working.
CANARY = "canary"
CANARY_INDEX = 1_000_000


#: The bench's own User-Agent: an audit log tells its requests (the /metrics reads of
#: the request counts among them) from cbop's, whose agent is ``cbop/<version>``.
BENCH_AGENT = "cbop-bench/operators"


def client(kubeconfig: Path) -> KubeClient:
    """A client without client-side rate limiting, with a pool large enough for the loader."""
    return KubeClient.from_config(
        kubeconfig=str(kubeconfig), qps=0, pool_size=32, user_agent=BENCH_AGENT
    )


def install_crd(kubectl: Path, kubeconfig: Path, path: Path = CRD) -> None:
    """Apply the CRD in ``path`` (named ``<plural>.<group>`` as its file is) and wait
    until it is Established."""
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    name = path.stem.split("_", 1)[1] + "." + path.stem.split("_", 1)[0]
    subprocess.run([*base, "apply", "-f", str(path)], check=True, capture_output=True)
    # ``kubectl wait`` fails at once while the new CRD is not yet found (a loaded
    # machine): it is asked again until 60 s have passed.
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(
            [*base, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s"],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {name} not Established in 60 s: {done.stderr.strip()}")
        time.sleep(1.0)


def create_namespace(
    kube: KubeClient, name: str, labels: Mapping[str, str] | None = None, settle: float = 0.0
) -> None:
    """Create namespace ``name`` (with ``labels``), then sleep ``settle`` seconds.

    The namespace controller creates the default ServiceAccount right away; a settle
    lets those writes land before anyone takes a baseline of the API server's counters.
    """
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    kube.create(NAMESPACES, None, {"metadata": meta})
    if settle:
        time.sleep(settle)


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


def names_for(n: int) -> list[str]:
    """The names of ``n`` bundles of S1's inputs: ``cb-00000``, ``cb-00001``, ..."""
    return [f"cb-{i:05d}" for i in range(n)]


def expectations(n: int) -> dict[str, Expected]:
    """What the ConfigMaps of ``n`` bundles (:func:`names_for`) and the canary carry."""
    out = {name: expected(name, i) for i, name in enumerate(names_for(n))}
    out[CANARY] = expected(CANARY, CANARY_INDEX)
    return out


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
