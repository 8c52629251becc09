"""S11's counts: cbop's writes from the audit log, and the revisions against what holds them.

Writes are counted per client from kube-apiserver's audit log (the policy rules of
:func:`audit_write_rules`). The census reads the cluster as it is: the revisions of each
bundle, the ReplicaSets that exist and the ``cbop.dev/revisions`` mapping of their
templates, and (cbop 0.2.0) each namespace's pins ConfigMap (``cbop-revisions``), whose
entries say which revisions a template digest reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from bench.operators.apiserver import WRITE_VERBS, AuditLog, wait_api_quiet
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, DEPLOYMENTS, REPLICASETS, KubeClient
from cbop.revisions.legacy import PARAMS_NAME, owner_pins_key, parse_pins, pins_key
from cbop.revisions.model import mapping_of
from cbop.rollout import ANNOTATION_CONFIG_HASH

#: Resources whose writes the audit log records for S11 and the quiet waits watch.
WATCHED = frozenset({"configbundles", "configmaps", "events", "deployments", "replicasets", "pods"})
#: The resource name the write counts give the pins ConfigMaps (``cbop-revisions``),
#: apart from the bundles' ConfigMaps and revisions.
PINS_RESOURCE = "configmaps(pins)"
#: Seconds the bench waits at most for the pins to settle (cbop's ``--pins-grace`` is 60).
PINS_SETTLE_TIMEOUT = 300.0
#: Audit verbs that are writes (the audit log also records some GETs, for S5).
AUDIT_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def audit_write_rules() -> str:
    """Audit policy rules (YAML list items) that log every write on :data:`WATCHED`
    at ``Metadata`` level: verb, resource, subresource, answer code and user agent."""
    return """\
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
    resources:
      - group: ""
        resources: ["configmaps", "events", "pods"]
      - group: "cbop.dev"
        resources: ["configbundles", "configbundles/status"]
      - group: "apps"
        resources: ["deployments", "replicasets", "replicasets/scale"]
      - group: "events.k8s.io"
        resources: ["events"]
"""


def client_of(agent: str) -> str:
    """The client a user agent names: ``cbop``, ``cbop-bench``, or
    ``kube-controller-manager/<controller>`` (its last path segment)."""
    first = agent.split(" ", maxsplit=1)[0].split("/", maxsplit=1)[0]
    if first == "kube-controller-manager":
        return f"{first}/{agent.rsplit('/', 1)[-1]}"
    return first or "?"


def writes_since(audit: AuditLog, namespaces: Iterable[str] | None = None) -> dict[str, int]:
    """``client|verb|resource[/subresource]|code`` -> count of what the audit log recorded
    since its mark on :data:`WATCHED`, for objects in ``namespaces`` (all when None)."""
    keep = set(namespaces) if namespaces is not None else None

    def key(event: dict[str, Any]) -> str | None:
        if event.get("stage") != "ResponseComplete":
            return None
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?")
        if resource not in WATCHED or (keep is not None and ref.get("namespace") not in keep):
            return None
        sub = ref.get("subresource")
        what = f"{resource}/{sub}" if sub else resource
        if resource == "configmaps" and ref.get("name") == PARAMS_NAME:
            what = PINS_RESOURCE
        code = (event.get("responseStatus") or {}).get("code", 0)
        return "|".join(
            (client_of(str(event.get("userAgent", "?"))), event["verb"], what, str(code))
        )

    return audit.count(key)


def by_client(writes: Mapping[str, int], client: str) -> dict[str, int]:
    """The writes of ``client`` (``cbop``, or a prefix such as ``kube-controller-manager``)
    as ``verb resource code`` -> count."""
    out: dict[str, int] = {}
    for key, n in writes.items():
        who, verb, what, code = key.split("|")
        if verb in AUDIT_WRITES and (who == client or who.startswith(client + "/")):
            k = f"{verb} {what} {code}"
            out[k] = out.get(k, 0) + n
    return dict(sorted(out.items()))


def wait_writes_quiet(kube: KubeClient, quiet: float = 4.0, timeout: float = 300.0) -> float:
    """Wait until no write touches :data:`WATCHED` for ``quiet`` s; return the seconds waited."""
    return wait_api_quiet(kube, resources=WATCHED, verbs=WRITE_VERBS, quiet=quiet, timeout=timeout)


def list_all(kube: KubeClient, res: Any, namespaces: list[str], **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ns in namespaces:
        out += kube.list(res, ns, **kw)["items"]
    return out


def deployments_baselined(kube: KubeClient, namespaces: list[str]) -> int:
    return sum(
        1
        for d in list_all(kube, DEPLOYMENTS, namespaces)
        if "cbop.dev/config-baseline" in (d["metadata"].get("labels") or {})
    )


def generations(kube: KubeClient, namespaces: list[str]) -> dict[str, int]:
    return {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": int(d["metadata"]["generation"])
        for d in list_all(kube, DEPLOYMENTS, namespaces)
    }


def _digest_of(obj: Mapping[str, Any]) -> str:
    template = (obj.get("spec") or {}).get("template") or {}
    return str(
        ((template.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CONFIG_HASH, "")
    )


def held_pins_keys(kube: KubeClient, ns: str) -> set[str]:
    """The pins keys something in ``ns`` still carries: the template digest of every
    ReplicaSet and Deployment (:func:`pins_key`), and ``Deployment.<name>``
    (:func:`owner_pins_key`) of a Deployment whose template or one of whose ReplicaSets
    carries no digest."""
    keys: set[str] = set()
    for d in kube.list(DEPLOYMENTS, ns)["items"]:
        digest = _digest_of(d)
        if digest:
            keys.add(pins_key(digest))
        else:
            keys.add(owner_pins_key("Deployment", d["metadata"]["name"]))
    for rs in kube.list(REPLICASETS, ns)["items"]:
        digest = _digest_of(rs)
        if digest:
            keys.add(pins_key(digest))
            continue
        for ref in rs["metadata"].get("ownerReferences") or ():
            if ref.get("kind") == "Deployment" and ref.get("controller"):
                keys.add(owner_pins_key("Deployment", ref["name"]))
    return keys


def pins_state(kube: KubeClient, namespaces: list[str]) -> dict[str, Any]:
    """Per namespace, the pins ConfigMap's entries, size (bytes of its data as compact
    JSON) and stale entries (keys nothing in :func:`held_pins_keys` carries)."""
    entries: dict[str, int] = {}
    size: dict[str, int] = {}
    stale: dict[str, int] = {}
    versions: dict[str, str] = {}
    for ns in namespaces:
        cm = _pins_cm(kube, ns)
        data = dict(cm.get("data") or {})
        entries[ns] = len(data)
        size[ns] = len(json.dumps(data, separators=(",", ":")))
        versions[ns] = str((cm.get("metadata") or {}).get("resourceVersion", ""))
        stale[ns] = len(set(data) - held_pins_keys(kube, ns)) if data else 0
    return {"entries": entries, "bytes": size, "stale": stale, "versions": versions}


def wait_pins_settled(
    kube: KubeClient, namespaces: list[str], timeout: float = PINS_SETTLE_TIMEOUT
) -> dict[str, Any]:
    """Wait until every pins ConfigMap of ``namespaces`` holds no stale entry
    (:func:`pins_state`), then for the writes that follow (revisions released) to stop.

    Returns:
        ``settled`` (bool), ``seconds`` waited in all, ``stale_at_start`` (entries),
        ``seconds_to_no_stale``.
    """
    t0 = time.monotonic()
    first = pins_state(kube, namespaces)
    state = first
    while sum(state["stale"].values()) and time.monotonic() - t0 < timeout:
        time.sleep(2.0)
        state = pins_state(kube, namespaces)
    to_clean = time.monotonic() - t0
    wait_writes_quiet(kube, quiet=6.0)
    return {
        "settled": not sum(state["stale"].values()),
        "seconds": time.monotonic() - t0,
        "seconds_to_no_stale": to_clean,
        "stale_at_start": sum(first["stale"].values()),
        "stale_at_end": sum(state["stale"].values()),
    }


def census(kube: KubeClient, namespaces: list[str], keep: int) -> dict[str, Any]:
    """The revisions that exist against what holds them (see the module docstring)."""
    revisions = list_all(kube, CONFIGMAPS, namespaces, label_selector=LABEL_REVISION_OF)
    replicasets = list_all(kube, REPLICASETS, namespaces)
    live_rs = {rs["metadata"]["uid"] for rs in replicasets}
    referenced: dict[str, set[str]] = {}  # bundle key -> revision names the history reads
    rs_per_deployment: dict[str, int] = {}
    rs_with_pods = 0
    for ns in namespaces:
        pins = _pins_data(kube, ns)
        for key in held_pins_keys(kube, ns):
            for plain, revision in parse_pins(pins.get(key, "")).items():
                referenced.setdefault(f"{ns}/{plain}", set()).add(revision)
        for rs in (r for r in replicasets if r["metadata"]["namespace"] == ns):
            owners: list[dict[str, Any]] = rs["metadata"].get("ownerReferences") or [{}]
            owner = owners[0].get("name", "?")
            rs_per_deployment[f"{ns}/{owner}"] = rs_per_deployment.get(f"{ns}/{owner}", 0) + 1
            if int((rs.get("spec") or {}).get("replicas") or 0) > 0:
                rs_with_pods += 1
            template = (rs.get("spec") or {}).get("template") or {}
            digest = ((template.get("metadata") or {}).get("annotations") or {}).get(
                ANNOTATION_CONFIG_HASH, ""
            )
            # The template's own mapping (cbop 0.3.0), then 0.2.0's pins entry.
            for plain, revision in mapping_of(rs).items():
                referenced.setdefault(f"{ns}/{plain}", set()).add(revision)
            entry = pins.get(pins_key(digest)) if digest else None
            if entry is None:
                continue
            for plain, revision in parse_pins(entry).items():
                referenced.setdefault(f"{ns}/{plain}", set()).add(revision)
    existing: dict[str, set[str]] = {}
    held_by_bundle: dict[str, set[str]] = {}
    orphans = ownerless = held_by_history_only = 0
    for cm in revisions:
        meta = cm["metadata"]
        key = f"{meta['namespace']}/{meta['labels'][LABEL_REVISION_OF]}"
        existing.setdefault(key, set()).add(meta["name"])
        refs = meta.get("ownerReferences") or ()
        bundle = any(r.get("kind") == CONFIGBUNDLES.kind for r in refs)
        history = any(r.get("kind") == "ReplicaSet" and r.get("uid") in live_rs for r in refs)
        if bundle:
            held_by_bundle.setdefault(key, set()).add(meta["name"])
        elif history:
            held_by_history_only += 1
        else:
            orphans += 1
            ownerless += not refs
    over_bound = missing = 0
    bound_total = 0
    for key in set(existing) | set(referenced):
        have = existing.get(key, set())
        refs_ = referenced.get(key, set())
        bound = keep + len(refs_)
        bound_total += bound
        over_bound += max(0, len(have) - bound)
        missing += len(refs_ - have)
    per_bundle = [len(v) for v in existing.values()]
    pins = pins_state(kube, namespaces)
    return {
        "revisions": len(revisions),
        "bundles_with_revisions": len(existing),
        "max_per_bundle": max(per_bundle, default=0),
        "held_by_bundle": sum(len(v) for v in held_by_bundle.values()),
        "max_held_by_bundle": max((len(v) for v in held_by_bundle.values()), default=0),
        # Held by the bundle past its newest keep though the history names none of them.
        "held_unreferenced_over_keep": sum(
            max(0, len(v - referenced.get(k, set())) - keep) for k, v in held_by_bundle.items()
        ),
        "held_by_history_only": held_by_history_only,
        "orphans": orphans,
        "ownerless": ownerless,
        "referenced": sum(len(v) for v in referenced.values()),
        "referenced_missing": missing,
        "bound": bound_total,
        "over_bound": over_bound,
        "replicasets": len(replicasets),
        "max_replicasets_per_deployment": max(rs_per_deployment.values(), default=0),
        "replicasets_with_replicas": rs_with_pods,
        "pins_bytes": pins["bytes"],
        "pins_entries": pins["entries"],
        "pins_stale": pins["stale"],
    }


def _pins_cm(kube: KubeClient, ns: str) -> dict[str, Any]:
    try:
        return dict(kube.get(CONFIGMAPS, ns, PARAMS_NAME))
    except Exception:  # noqa: BLE001 - none there
        return {}


def _pins_data(kube: KubeClient, ns: str) -> dict[str, Any]:
    return dict(_pins_cm(kube, ns).get("data") or {})
