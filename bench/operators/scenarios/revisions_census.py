"""The revisions scenarios' counts: writes from the audit log, the pin policy, the census.

Writes are counted per client from kube-apiserver's audit log (the policy rules of
:func:`audit_write_rules`), and each ConfigMap write is told apart by the name it
writes: a revision (``<plain>-<10 hex digits>``) or a plain ConfigMap. The census reads
the cluster as it is: each bundle's revisions against ``keep`` plus the revisions the
templates that may still create a pod name (the ``cbop.dev/revisions`` mapping of the
Deployments, ReplicaSets and pods that exist), and the owner references the revisions
carry.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from bench.operators.apiserver import WRITE_VERBS, AuditLog, wait_api_quiet
from bench.operators.cluster import REPO
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    ApiError,
    KubeClient,
    Resource,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, mapping_of, pod_unpinned

#: Resources whose writes the audit log records and the quiet waits watch.
WATCHED = frozenset({"configbundles", "configmaps", "events", "deployments", "replicasets", "pods"})
#: The resource name the write counts give revisions, apart from plain ConfigMaps.
REVISION_RESOURCE = "configmaps(revision)"
#: Audit verbs that are writes (the audit log also records some GETs, for S5).
AUDIT_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: The shipped pin policy and its binding (docs/revisions.md).
PIN_POLICY = REPO / "manifests" / "revisions" / "pin_pods.yaml"
POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicies",
    "MutatingAdmissionPolicy",
    namespaced=False,
)
BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicybindings",
    "MutatingAdmissionPolicyBinding",
    namespaced=False,
)
_REVISION_NAME = re.compile(r"-[0-9a-f]{10}$")


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


def is_revision_name(name: str) -> bool:
    """Whether ``name`` has the shape of a revision's (``<plain>-<10 hex digits>``)."""
    return bool(_REVISION_NAME.search(name))


def object_of(ref: Mapping[str, Any]) -> str:
    """``resource[/subresource]`` of an audit event's ``objectRef``, a revision's
    ConfigMap as :data:`REVISION_RESOURCE`."""
    resource = str(ref.get("resource", "?"))
    if resource == "configmaps" and is_revision_name(str(ref.get("name", ""))):
        resource = REVISION_RESOURCE
    sub = ref.get("subresource")
    return f"{resource}/{sub}" if sub else resource


def write_events(
    audit: AuditLog, namespaces: Iterable[str] | None = None
) -> Iterable[dict[str, Any]]:
    """The audit events since the mark that completed a write on :data:`WATCHED` in
    ``namespaces`` (all when None)."""
    keep = set(namespaces) if namespaces is not None else None
    for event in audit.events():
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in AUDIT_WRITES:
            continue
        ref = event.get("objectRef") or {}
        if ref.get("resource") not in WATCHED:
            continue
        if keep is not None and ref.get("namespace") not in keep:
            continue
        yield event


def writes_since(audit: AuditLog, namespaces: Iterable[str] | None = None) -> dict[str, int]:
    """``client|verb|object|code`` -> count of the writes the audit log recorded since its
    mark on :data:`WATCHED`, for objects in ``namespaces`` (all when None); the object is
    :func:`object_of`."""
    out: dict[str, int] = {}
    for event in write_events(audit, namespaces):
        code = (event.get("responseStatus") or {}).get("code", 0)
        key = "|".join(
            (
                client_of(str(event.get("userAgent", "?"))),
                event["verb"],
                object_of(event.get("objectRef") or {}),
                str(code),
            )
        )
        out[key] = out.get(key, 0) + 1
    return out


def write_list(audit: AuditLog, namespaces: Iterable[str], client: str) -> list[str]:
    """Every write of ``client`` since the mark, in order: ``verb object name code``."""
    out = []
    for event in write_events(audit, namespaces):
        if client_of(str(event.get("userAgent", "?"))) != client:
            continue
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        out.append(f"{event['verb']} {object_of(ref)} {ref.get('name', '')} {code}")
    return out


def by_client(writes: Mapping[str, int], client: str) -> dict[str, int]:
    """The writes of ``client`` (``cbop``, or a prefix such as ``kube-controller-manager``)
    as ``verb object code`` -> count."""
    out: dict[str, int] = {}
    for key, n in writes.items():
        who, verb, what, code = key.split("|")
        if verb in AUDIT_WRITES and (who == client or who.startswith(client + "/")):
            k = f"{verb} {what} {code}"
            out[k] = out.get(k, 0) + n
    return dict(sorted(out.items()))


def by_controller(writes: Mapping[str, int]) -> dict[str, int]:
    """kube-controller-manager's writes as ``controller verb object code`` -> count."""
    out: dict[str, int] = {}
    for key, n in writes.items():
        who, verb, what, code = key.split("|")
        if who.startswith("kube-controller-manager/") and verb in AUDIT_WRITES:
            k = f"{who.split('/', 1)[1]} {verb} {what} {code}"
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


def deployments_pinned(kube: KubeClient, namespaces: list[str], plains: int) -> int:
    """How many Deployments' templates name a revision of ``plains`` ConfigMaps."""
    return sum(1 for d in list_all(kube, DEPLOYMENTS, namespaces) if len(mapping_of(d)) >= plains)


def generations(kube: KubeClient, namespaces: list[str]) -> dict[str, int]:
    return {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": int(d["metadata"]["generation"])
        for d in list_all(kube, DEPLOYMENTS, namespaces)
    }


# ---------------------------------------------------------------------- the policy


def install_pin_policy(kube: KubeClient, probe_namespace: str, timeout: float = 120.0) -> float:
    """Create the shipped pin policy and binding (:data:`PIN_POLICY`) unless there, and
    wait until it pins a probe pod (created with ``dryRun`` in ``probe_namespace``, made
    here and deleted after); return the seconds waited.

    Raises:
        TimeoutError: no probe pod was pinned within ``timeout`` seconds.
    """
    for doc in yaml.safe_load_all(PIN_POLICY.read_text()):
        res = POLICIES if doc["kind"] == "MutatingAdmissionPolicy" else BINDINGS
        try:
            kube.create(res, None, doc)
        except ApiError as err:
            if not err.is_already_exists:
                raise
    kube.create(NAMESPACES, None, {"metadata": {"name": probe_namespace}})
    probe = {
        "metadata": {
            "generateName": "probe-",
            "labels": {LABEL_PINNED: "true"},
            "annotations": {ANNOTATION_REVISIONS: "probe=probe-0123456789"},
        },
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/probe:1"}],
            "volumes": [{"name": "probe", "configMap": {"name": "probe"}}],
        },
    }
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            pod = kube.create(PODS, probe_namespace, probe, dry_run=True)
            if pod["spec"]["volumes"][0]["configMap"]["name"] == "probe-0123456789":
                return time.monotonic() - t0
            time.sleep(0.5)
    finally:
        kube.delete(NAMESPACES, None, probe_namespace)
    raise TimeoutError(f"the pin policy did not pin a pod within {timeout:.0f} s")


# ----------------------------------------------------------------------- census


def _plain_of(revision: str) -> str:
    return revision[: -(1 + 10)]


def census(kube: KubeClient, namespaces: list[str], keep: int) -> dict[str, Any]:
    """The revisions that exist against what names them (see the module docstring).

    Per plain ConfigMap: its revisions, the current one (the bundle's
    ``status.revision``), the ones named by a Deployment's, ReplicaSet's or pod's
    mapping. ``over_bound``: revisions beyond ``keep`` plus the named ones;
    ``unnamed_past_keep``: revisions neither current, nor among the newest ``keep``
    (creation time, then name), nor named (what collection deletes once the grace has
    passed); ``referenced_missing``: named and gone.
    """
    revisions = list_all(kube, CONFIGMAPS, namespaces, label_selector=LABEL_REVISION_OF)
    replicasets = list_all(kube, REPLICASETS, namespaces)
    deployments = list_all(kube, DEPLOYMENTS, namespaces)
    pods = list_all(kube, PODS, namespaces)
    bundles = list_all(kube, CONFIGBUNDLES, namespaces)
    named: dict[str, set[str]] = {}  # ns/plain -> revisions some template names
    for obj in (*deployments, *replicasets, *pods):
        ns = obj["metadata"]["namespace"]
        for plain, revision in mapping_of(obj).items():
            named.setdefault(f"{ns}/{plain}", set()).add(revision)
    current: dict[str, str] = {}
    for b in bundles:
        rev = (b.get("status") or {}).get("revision")
        if isinstance(rev, str):
            current[f"{b['metadata']['namespace']}/{_plain_of(rev)}"] = rev
    existing: dict[str, list[dict[str, Any]]] = {}
    owners_max = ownerless = other_owners = 0
    size_max = 0
    for cm in revisions:
        meta = cm["metadata"]
        existing.setdefault(f"{meta['namespace']}/{_plain_of(meta['name'])}", []).append(cm)
        refs = meta.get("ownerReferences") or ()
        owners_max = max(owners_max, len(refs))
        ownerless += not refs
        other_owners += any(r.get("kind") != CONFIGBUNDLES.kind for r in refs)
        size_max = max(size_max, len(json.dumps(cm, separators=(",", ":"))))
    over_bound = missing = unnamed_past_keep = bound_total = 0
    for key in set(existing) | set(named):
        have = existing.get(key, [])
        names = {cm["metadata"]["name"] for cm in have}
        refs_ = named.get(key, set())
        bound = keep + len(refs_)
        bound_total += bound
        over_bound += max(0, len(have) - bound)
        missing += len(refs_ - names)
        newest = sorted(
            (cm for cm in have if cm["metadata"]["name"] != current.get(key)),
            key=lambda cm: (cm["metadata"].get("creationTimestamp", ""), cm["metadata"]["name"]),
            reverse=True,
        )[: max(keep - 1, 0)]
        kept = {cm["metadata"]["name"] for cm in newest} | {current.get(key, "")} | refs_
        unnamed_past_keep += len(names - kept)
    per_deployment: dict[str, int] = {}
    for rs in replicasets:
        owners: list[dict[str, Any]] = rs["metadata"].get("ownerReferences") or [{}]
        key = f"{rs['metadata']['namespace']}/{owners[0].get('name', '?')}"
        per_deployment[key] = per_deployment.get(key, 0) + 1
    pinned = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_PINNED) == "true"]
    return {
        "revisions": len(revisions),
        "configmaps_with_revisions": len(existing),
        "max_per_configmap": max((len(v) for v in existing.values()), default=0),
        "named": sum(len(v) for v in named.values()),
        "bound": bound_total,
        "over_bound": over_bound,
        "unnamed_past_keep": unnamed_past_keep,
        "referenced_missing": missing,
        "max_owner_references": owners_max,
        "ownerless": ownerless,
        "owned_by_others": other_owners,
        "max_revision_bytes": size_max,
        "replicasets": len(replicasets),
        "max_replicasets_per_deployment": max(per_deployment.values(), default=0),
        "replicasets_pinned": sum(
            1
            for rs in replicasets
            if ((rs["spec"].get("template") or {}).get("metadata") or {})
            .get("labels", {})
            .get(LABEL_PINNED)
            == "true"
        ),
        "pods": len(pods),
        "pods_pinned_label": len(pinned),
        "pods_reading_plain": sum(1 for p in pinned if pod_unpinned(p)),
    }


def write_json_size(obj: Any) -> int:
    """Bytes of ``obj`` as compact JSON (what a write sends or stores, near enough)."""
    return len(json.dumps(obj, separators=(",", ":")))
