"""A kopf operator implementing cbop's ConfigBundle contract: a peer for bench/operators.py.

Run (from the bench virtualenv, which has kopf and the kubernetes client)::

    kopf run --standalone --namespace NS bench/peers/kopf/operator.py

What it does, in kopf's own idioms:

- ``@kopf.on.create/update/resume`` on ConfigBundles: create or replace the ConfigMap
  (labels, annotations with the content hash, data, binaryData, a controller owner
  reference) and set ``status`` (Ready, observedGeneration) through kopf's ``patch``,
  which kopf sends to the ``/status`` subresource.
- Two in-memory ``@kopf.index``es, of bundles and of managed ConfigMaps, stand in for
  an informer cache, so handlers read nothing from the API server.
- ``@kopf.on.event`` on managed ConfigMaps heals drift: an edited or deleted ConfigMap
  is put back from its bundle.
- ``BENCH_RESYNC_SECONDS`` > 0 adds a ``@kopf.timer`` per bundle with that interval,
  kopf's way of looking at every object periodically (the analogue of a resync).

Settings: ``settings.execution.max_workers`` (the thread pool that runs synchronous
handlers, i.e. reconciles in flight) is ``BENCH_WORKERS`` (default 4);
``BENCH_KOPF_WORKER_LIMIT`` > 0 sets ``settings.queueing.worker_limit`` (per-object
workers; ``settings.batching`` in older kopf); the rest are kopf's defaults.
"""

# kopf and kubernetes exist only in the bench's virtualenv, not in the one mypy runs in.
# mypy: disable-error-code="import-not-found,misc,untyped-decorator,no-untyped-call,unused-ignore"

from __future__ import annotations

import base64
import datetime
import hashlib
import os
from collections.abc import Mapping
from typing import Any

import kopf
import kubernetes

GROUP, VERSION, PLURAL = "cbop.dev", "v1alpha1", "configbundles"
LABEL_MANAGED_BY, MANAGED_BY = "app.kubernetes.io/managed-by", "cbop"
LABEL_BUNDLE = "cbop.dev/bundle"
ANNOTATION_HASH = "cbop.dev/content-hash"
RESYNC = float(os.environ.get("BENCH_RESYNC_SECONDS", "0"))

_core: Any = None


def core() -> Any:
    """Return the CoreV1Api, built once after login."""
    global _core  # noqa: PLW0603 - one client per process
    if _core is None:
        kubernetes.config.load_kube_config()
        _core = kubernetes.client.CoreV1Api()
    return _core


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Concurrency: the synchronous handlers run in kopf's thread-pool executor, so its
    # size is the number of reconciles in flight, as cbop's and controller-runtime's
    # workers. kopf's queueing.worker_limit (formerly batching.worker_limit) caps the
    # per-object workers instead, each of which lingers for queueing.idle_timeout (5 s)
    # after its object's last event; see bench/README.md for why it is left unset.
    settings.execution.max_workers = int(os.environ.get("BENCH_WORKERS", "4"))
    limit = int(os.environ.get("BENCH_KOPF_WORKER_LIMIT", "0"))
    if limit > 0:
        settings.queueing.worker_limit = limit
    # The CRD's status schema is structural, so kopf's progress records in status would
    # be pruned; keep them in annotations as kopf's docs advise for such CRDs.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()


def content_hash(data: Mapping[str, str], binary_data: Mapping[str, bytes]) -> str:
    """``sha256:<hex>`` over tag, length-prefixed key and value of each entry (as cbop)."""
    digest = hashlib.sha256()
    for tag, items in ((b"d", {k: v.encode() for k, v in data.items()}), (b"b", binary_data)):
        for key in sorted(items):
            raw = key.encode()
            value = items[key]
            digest.update(tag + len(raw).to_bytes(8, "big") + raw)
            digest.update(len(value).to_bytes(8, "big") + value)
    return "sha256:" + digest.hexdigest()


def desired(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap a bundle declares, as a dict."""
    meta, spec = bundle["metadata"], bundle.get("spec") or {}
    data = dict(spec.get("data") or {})
    binary = dict(spec.get("binaryData") or {})
    labels = {
        **(spec.get("labels") or {}),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_BUNDLE: meta["name"],
    }
    digest = content_hash(data, {k: base64.b64decode(v) for k, v in binary.items()})
    annotations = {**(spec.get("annotations") or {}), ANNOTATION_HASH: digest}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": spec.get("configMapName") or meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "data": data,
        "binaryData": binary,
    }
    # A controller owner reference with blockOwnerDeletion (kopf's defaults for it).
    kopf.append_owner_reference(body, owner=kopf.Body(dict(bundle)))
    return body


def matches(current: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether a ConfigMap carries the desired content, labels, hash and owner."""
    if current is None:
        return False
    meta, wmeta = current.get("metadata") or {}, want["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    owner = want["metadata"]["ownerReferences"][0]["uid"]
    return (
        (current.get("data") or {}) == want["data"]
        and (current.get("binaryData") or {}) == want["binaryData"]
        and all(labels.get(k) == v for k, v in wmeta["labels"].items())
        and annotations.get(ANNOTATION_HASH) == wmeta["annotations"][ANNOTATION_HASH]
        and any(
            r.get("uid") == owner and r.get("controller") for r in meta.get("ownerReferences") or ()
        )
    )


@kopf.index(GROUP, VERSION, PLURAL)
def bundles(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): dict(body)}


@kopf.index("", "v1", "configmaps", labels={LABEL_MANAGED_BY: MANAGED_BY})
def configmaps(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): dict(body)}


def one(index: kopf.Index[Any, Any], key: Any) -> Any:
    for value in index.get(key, ()):
        return value
    return None


def write(current: Mapping[str, Any] | None, want: dict[str, Any]) -> None:
    """Create the ConfigMap, or replace it (optimistically, at the version we saw)."""
    meta = want["metadata"]
    api = core()
    if current is None:
        try:
            api.create_namespaced_config_map(meta["namespace"], want)
            return
        except kubernetes.client.ApiException as err:
            if err.status != 409:
                raise
            current = api.read_namespaced_config_map(meta["name"], meta["namespace"]).to_dict()
            current = {"metadata": {"resourceVersion": current["metadata"]["resource_version"]}}
    meta["resourceVersion"] = current["metadata"]["resourceVersion"]
    try:
        api.replace_namespaced_config_map(meta["name"], meta["namespace"], want)
    except kubernetes.client.ApiException as err:
        if err.status == 409:
            raise kopf.TemporaryError("ConfigMap changed meanwhile", delay=1) from err
        raise


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(
    body: kopf.Body,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    configmaps: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    want = desired(body)
    wmeta = want["metadata"]
    current = one(configmaps, (wmeta["namespace"], wmeta["name"]))
    if not matches(current, want):
        write(current, want)
    keys = len(want["data"]) + len(want["binaryData"])
    digest = wmeta["annotations"][ANNOTATION_HASH]
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Synced",
        "message": f"ConfigMap {wmeta['name']} matches the spec ({keys} keys, {digest})",
        "observedGeneration": meta.get("generation"),
    }
    old = {c.get("type"): c for c in status.get("conditions") or ()}.get("Ready") or {}
    unchanged = all(old.get(k) == v for k, v in condition.items())
    if unchanged and status.get("observedGeneration") == meta.get("generation"):
        return
    keep = old.get("status") == "True" and old.get("lastTransitionTime")
    condition["lastTransitionTime"] = keep or _now()
    patch.status["observedGeneration"] = meta.get("generation")
    patch.status["configMapName"] = wmeta["name"]
    patch.status["contentHash"] = digest
    patch.status["keyCount"] = keys
    patch.status["conditions"] = [condition]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@kopf.on.event("", "v1", "configmaps", labels={LABEL_MANAGED_BY: MANAGED_BY})
def heal(
    type: str | None,
    body: kopf.Body,
    bundles: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Put back a managed ConfigMap that was edited or deleted."""
    owner = (body.get("metadata") or {}).get("labels", {}).get(LABEL_BUNDLE)
    bundle = one(bundles, (body["metadata"]["namespace"], owner)) if owner else None
    if bundle is None or (bundle["metadata"].get("deletionTimestamp")):
        return
    want = desired(bundle)
    if type == "DELETED":
        write(None, want)
    elif not matches(body, want):
        write(body, want)


if RESYNC > 0:

    @kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC, idle=0)
    def resync(body: kopf.Body, configmaps: kopf.Index[Any, Any], **_: Any) -> None:
        """Look at the bundle again, as an informer resync would, and heal if needed."""
        want = desired(body)
        wmeta = want["metadata"]
        current = one(configmaps, (wmeta["namespace"], wmeta["name"]))
        if not matches(current, want):
            write(current, want)
