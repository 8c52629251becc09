"""S11 (revisions): 1,000 bundles with revisions read by 100 rolled Deployments.

In one run on one control plane whose kube-controller-manager also runs the deployment
and replicaset controllers (so Deployments get ReplicaSets and a history; no scheduler
and no kubelet: each Deployment's one pod stays Pending), the same scenario twice, once
per variant, each in namespaces of its own and with a cbop process of its own
(``--rollout --no-cluster-bundles``, ``--namespace`` for each of them):

- ``off``: bundles without revisions; ``on``: ``spec.revisions: {enabled: true, keep}``.
- ``namespaces`` (10) namespaces with ``bundles`` (1,000) bundles and ``deployments``
  (100) Deployments spread evenly; each Deployment reads 10 bundles' ConfigMaps as
  volumes, is labelled ``cbop.dev/rollout: "true"`` and has ``revisionHistoryLimit:
  history`` (3) and ``replicas: replicas`` (0). Why no replicas by default: a
  Deployment prunes its history (``revisionHistoryLimit``) only once its rollout is
  complete, every replica updated and available; a pod that no node runs stays
  Pending and never becomes available, so with ``replicas: 1`` and no kubelet the old
  ReplicaSets would never be deleted, and no revision collected by the history.
- **converge**: bundles created and Ready, Deployments created and given their baseline.
- **steady state** (``idle`` s, 30): every write by cbop, from kube-apiserver's audit log
  (the goal: zero). Once converged, and again after the rounds (with the history).
- **rounds**: ``changes`` (10) times, every bundle's content changes (all at once, so
  each Deployment's 10 changes coalesce into one rollout or a few); seconds until all
  bundles are Ready with the new content and the API server is quiet, and cbop's writes
  by verb and resource.
- **revisions at the end** (``on``): per bundle, the revisions that exist against
  ``keep`` plus those the history references (the ``cbop.dev/revisions`` mapping of
  the ReplicaSets that exist, or, for cbop 0.2.0, the pins entries of their template
  digests); revisions nothing holds (the goal: none),
  revisions referenced and missing (the goal: none).
- **one content change** of one bundle (read by one Deployment), made after the rounds
  so that its collection writes happen too: every write by client, verb and resource.
- **RSS**: cbop's steady VmRSS (mean over ``steady_seconds``) after the rounds, and of a
  fresh cbop started on the end state (and what that restart writes).

Writes are counted from the audit log (the bench's :func:`audit_write_rules`), by the
client's user agent: ``cbop`` (the operator), ``kube-controller-manager`` (by
controller) and the bench's own client (``cbop-bench``). The load average is taken at
the start of each phase.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.operators import cluster
from bench.operators.clusterbundles import cpu_share_of, goal_word, load, run_parallel
from bench.operators.procs import Operator, Sampler, cbop_revision, wait_quiet
from bench.operators.scenarios import Bench, log
from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    REPLICASETS,
    KubeClient,
)
from cbop.revisions.legacy import PARAMS_NAME, owner_pins_key, parse_pins, pins_key
from cbop.revisions.model import mapping_of
from cbop.rollout import ANNOTATION_CONFIG_HASH, LABEL_ROLLOUT

SCENARIOS = frozenset({"s11"})
#: kube-controller-manager controllers S11 needs besides the control plane's default set.
CONTROLLERS = ("deployment-controller", "replicaset-controller")
#: The bench's own user agent in S11, so the audit log tells its writes from cbop's.
BENCH_AGENT = "cbop-bench/s11"
#: Resources whose writes the audit log records for S11 and the quiet waits watch.
WATCHED = frozenset({"configbundles", "configmaps", "events", "deployments", "replicasets", "pods"})
#: Bundles each Deployment reads.
PER_DEPLOYMENT = 10
FILLER = "".join(f"setting-{i:02d}=value-{i:02d}\n" for i in range(20))
VARIANTS = ("off", "on")
#: The resource name the write counts give the pins ConfigMaps (``cbop-revisions``),
#: apart from the bundles' ConfigMaps and revisions.
PINS_RESOURCE = "configmaps(pins)"
#: Seconds the bench waits at most for the pins to settle (cbop's ``--pins-grace`` is 60).
PINS_SETTLE_TIMEOUT = 300.0
#: Audit verbs that are writes (the audit log also records some GETs, for S5).
AUDIT_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class Sizes:
    """The sizes of one S11 run.

    Attributes:
        bundles: bundles per variant (a multiple of ``PER_DEPLOYMENT * namespaces``).
        deployments: Deployments per variant (``bundles / PER_DEPLOYMENT``).
        namespaces: namespaces per variant.
        changes: content changes of every bundle (rounds).
        keep: ``spec.revisions.keep`` of the ``on`` variant.
        history: the Deployments' ``revisionHistoryLimit``.
        idle: seconds of each steady-state window.
        replicas: the Deployments' ``replicas`` (their pods stay Pending).
        variants: the variants in the order they run.
    """

    bundles: int = 1000
    deployments: int = 100
    namespaces: int = 10
    changes: int = 10
    keep: int = 2
    history: int = 3
    idle: float = 30.0
    replicas: int = 0
    variants: tuple[str, ...] = VARIANTS


# ------------------------------------------------------------------------- audit log


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


class AuditWrites:
    """Reads the writes the audit log recorded since :meth:`mark`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> AuditWrites:
        self._offset = self.path.stat().st_size if self.path.exists() else 0
        return self

    def since(self, namespaces: Iterable[str] | None = None) -> dict[str, int]:
        """``client|verb|resource[/subresource]|code`` -> count, for objects in
        ``namespaces`` (all when None)."""
        keep = set(namespaces) if namespaces is not None else None
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
                if event.get("stage") != "ResponseComplete":
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "?")
                if resource not in WATCHED or (
                    keep is not None and ref.get("namespace") not in keep
                ):
                    continue
                sub = ref.get("subresource")
                what = f"{resource}/{sub}" if sub else resource
                if resource == "configmaps" and ref.get("name") == PARAMS_NAME:
                    what = PINS_RESOURCE
                code = (event.get("responseStatus") or {}).get("code", 0)
                key = "|".join((client_of(str(event.get("userAgent", "?"))), event["verb"], what))
                key += f"|{code}"
                out[key] = out.get(key, 0) + 1
        return out


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


# ---------------------------------------------------------------------------- inputs


def namespace_names(variant: str, sizes: Sizes) -> list[str]:
    return [f"s11-{variant}-{i:02d}" for i in range(sizes.namespaces)]


def bundle_name(d: int, k: int) -> str:
    return f"d{d:03d}-b{k}"


def layout(variant: str, sizes: Sizes) -> list[tuple[str, int]]:
    """(namespace, Deployment index) of every Deployment; its bundles are
    :func:`bundle_name` ``(d, 0..PER_DEPLOYMENT-1)`` in the same namespace."""
    nss = namespace_names(variant, sizes)
    return [(nss[d % len(nss)], d) for d in range(sizes.deployments)]


def data_of(name: str, round_: int) -> dict[str, str]:
    return {"app.conf": f"bundle={name}\nround={round_}\n{FILLER}"}


def bundle_body(name: str, round_: int, revisions: Mapping[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"data": data_of(name, round_)}
    if revisions is not None:
        spec["revisions"] = dict(revisions)
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def deployment_body(d: int, sizes: Sizes) -> dict[str, Any]:
    labels = {"app": f"d{d:03d}"}
    names = [bundle_name(d, k) for k in range(PER_DEPLOYMENT)]
    spec: dict[str, Any] = {
        "replicas": sizes.replicas,
        "revisionHistoryLimit": sizes.history,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.invalid/app:1",
                        "volumeMounts": [
                            {"name": f"c{k}", "mountPath": f"/etc/app/{k}"}
                            for k in range(PER_DEPLOYMENT)
                        ],
                    }
                ],
                "volumes": [
                    {"name": f"c{k}", "configMap": {"name": n}} for k, n in enumerate(names)
                ],
            },
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"d{d:03d}", "labels": {LABEL_ROLLOUT: "true"}},
        "spec": spec,
    }


# ------------------------------------------------------------------------- observing


def list_all(kube: KubeClient, res: Any, namespaces: list[str], **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ns in namespaces:
        out += kube.list(res, ns, **kw)["items"]
    return out


def bundles_done(kube: KubeClient, namespaces: list[str], round_: int, revisions: bool) -> int:
    """How many bundles are Ready for their generation with round ``round_``'s content
    (and, with revisions, ``status.revision`` naming that content's revision)."""
    done = 0
    for b in list_all(kube, CONFIGBUNDLES, namespaces):
        name = b["metadata"]["name"]
        status = b.get("status") or {}
        want = content_hash(data_of(name, round_), {})
        if not cluster.bundle_ready(b) or status.get("contentHash") != want:
            continue
        if revisions and not str(status.get("revision", "")).startswith(name + "-"):
            continue
        if revisions and want.split(":")[-1][:10] not in str(status.get("revision")):
            continue
        done += 1
    return done


def wait_bundles(
    kube: KubeClient, namespaces: list[str], round_: int, revisions: bool, total: int
) -> bool:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if bundles_done(kube, namespaces, round_, revisions) >= total:
            return True
        time.sleep(2.0)
    return False


def wait_writes_quiet(kube: KubeClient, quiet: float = 4.0, timeout: float = 300.0) -> float:
    """Wait until no write touches :data:`WATCHED` for ``quiet`` s; return the seconds waited."""
    start = time.monotonic()
    last = cluster.apiserver_requests(kube)
    calm = time.monotonic()
    while time.monotonic() - start < timeout:
        time.sleep(0.5)
        now = cluster.apiserver_requests(kube)
        moved = any(
            k[0] in cluster.WRITE_VERBS and k[1] in WATCHED for k in cluster.delta(now, last)
        )
        last = now
        if moved:
            calm = time.monotonic()
        elif time.monotonic() - calm >= quiet:
            break
    return time.monotonic() - start


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


# ------------------------------------------------------------------------------- run


def _steady(bench: Bench, op: Operator) -> dict[str, float]:
    sampler = Sampler(op.pid, interval=0.25).start()
    try:
        settle = wait_quiet(op.pid, timeout=180)
        since = time.monotonic()
        time.sleep(bench.s.steady_seconds)
        steady = sampler.mean_rss_mib(since)
    finally:
        sampler.stop()
    return {"steady_mib": steady, "peak_mib": sampler.peak_mib(), "settle_seconds": settle}


def _start(bench: Bench, namespaces: list[str], tag: str) -> Operator:
    op = Operator(
        "cbop",
        bench.s.kubeconfig,
        None,
        workers=bench.s.workers,
        resync=0.0,
        log_path=bench.s.logs / f"s11-{tag}.log",
        extra_args=[
            "--rollout",
            "--no-cluster-bundles",
            *(f"--namespace={ns}" for ns in namespaces),
        ],
    )
    bench.revisions.add(cbop_revision())
    bench.current = op
    op.wait_ready()
    return op


def run(bench: Bench, sizes: Sizes) -> dict[str, Any]:
    """Run S11 once (see the module docstring); return its record."""
    if bench.s.audit is None:
        raise RuntimeError("S11 counts writes from the audit log: the control plane needs one")
    kube = KubeClient.from_config(
        kubeconfig=str(bench.s.kubeconfig), qps=0, pool_size=32, user_agent=BENCH_AGENT
    )
    variants: dict[str, Any] = {}
    rec: dict[str, Any] = {
        "sizes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(sizes).items()},
        "variants": variants,
    }
    try:
        for variant in sizes.variants:
            log(f"=== S11 variant {variant}")
            variants[variant] = _variant(bench, kube, sizes, variant)
    finally:
        bench.stop()
        kube.close()
    on, off = variants.get("on"), variants.get("off")
    if on and off:
        rec["rss_ratio"] = on["rss"]["steady_mib"] / off["rss"]["steady_mib"]
        rec["rss_fresh_ratio"] = on["fresh"]["steady_mib"] / off["fresh"]["steady_mib"]
    return rec


def _variant(bench: Bench, kube: KubeClient, sizes: Sizes, variant: str) -> dict[str, Any]:
    assert bench.s.audit is not None
    audit = AuditWrites(bench.s.audit)
    revisions = {"enabled": True, "keep": sizes.keep} if variant == "on" else None
    with_revisions = revisions is not None
    nss = namespace_names(variant, sizes)
    deployments = layout(variant, sizes)
    bundles = [(ns, bundle_name(d, k)) for ns, d in deployments for k in range(PER_DEPLOYMENT)]
    rec: dict[str, Any] = {"load": {}}
    threads = bench.s.loader_threads

    run_parallel(lambda ns: kube.create(NAMESPACES, None, {"metadata": {"name": ns}}), nss, 4)
    wait_writes_quiet(kube, quiet=2.0)
    op = _start(bench, nss, f"{variant}-run")
    try:
        # ---- converge
        rec["load"]["converge"] = load()
        t0 = time.monotonic()
        run_parallel(
            lambda p: kube.create(CONFIGBUNDLES, p[0], bundle_body(p[1], 0, revisions)),
            bundles,
            threads,
        )
        ok = wait_bundles(kube, nss, 0, with_revisions, len(bundles))
        t_bundles = time.monotonic() - t0
        run_parallel(
            lambda p: kube.create(DEPLOYMENTS, p[0], deployment_body(p[1], sizes)),
            deployments,
            threads,
        )
        deadline = time.monotonic() + 300
        while deployments_baselined(kube, nss) < len(deployments) and time.monotonic() < deadline:
            time.sleep(1.0)
        rec["converge"] = {
            "complete": ok and deployments_baselined(kube, nss) == len(deployments),
            "bundles_seconds": t_bundles,
            "seconds": time.monotonic() - t0,
        }
        log(
            f"S11 {variant}: {len(bundles)} bundles Ready in {t_bundles:.1f} s, "
            f"{len(deployments)} Deployments baselined at {rec['converge']['seconds']:.1f} s"
        )
        wait_writes_quiet(kube)
        rec["settle_converged"] = _settle(kube, audit, nss)
        rec["idle_converged"] = _idle(bench, op, audit, nss, sizes.idle)

        # ---- rounds
        gen0 = generations(kube, nss)
        rounds: list[dict[str, Any]] = []
        for r in range(1, sizes.changes + 1):
            rec["load"][f"round {r}"] = load()
            audit.mark()
            share = cpu_share_of(bench)
            t0 = time.monotonic()
            run_parallel(
                lambda p, r=r: kube.patch(
                    CONFIGBUNDLES, p[0], p[1], {"spec": {"data": data_of(p[1], r)}}
                ),
                bundles,
                threads,
            )
            done = wait_bundles(kube, nss, r, with_revisions, len(bundles))
            t_ready = time.monotonic() - t0
            wait_writes_quiet(kube)
            seconds = time.monotonic() - t0
            writes = audit.since(nss)
            rounds.append(
                {
                    "complete": done,
                    "ready_seconds": t_ready,
                    "seconds": seconds,
                    "cpu_share": share.stop(),
                    "cbop": by_client(writes, "cbop"),
                    "kcm": by_client(writes, "kube-controller-manager"),
                }
            )
            log(
                f"S11 {variant} round {r}: Ready in {t_ready:.1f} s, quiet at {seconds:.1f} s, "
                f"cbop writes {sum(rounds[-1]['cbop'].values())}"
            )
        rec["rounds"] = rounds
        gen1 = generations(kube, nss)
        rec["rollouts"] = sum(gen1[k] - gen0.get(k, gen1[k]) for k in gen1)
        # Let the garbage collector finish, then count.
        wait_writes_quiet(kube, quiet=6.0)
        rec["pins_after_rounds"] = pins_state(kube, nss)
        rec["settle_history"] = _settle(kube, audit, nss)
        rec["census"] = census(kube, nss, sizes.keep if with_revisions else 0)
        log(f"S11 {variant}: census {rec['census']}")
        rec["idle_history"] = _idle(bench, op, audit, nss, sizes.idle)
        rec["rss"] = _steady(bench, op)
        log(f"S11 {variant}: steady RSS {rec['rss']['steady_mib']:.1f} MiB")

        # ---- one content change of one bundle, read by one Deployment
        ns, name = bundles[0]
        wait_writes_quiet(kube)
        rec["load"]["single"] = load()
        audit.mark()
        t0 = time.monotonic()
        kube.patch(CONFIGBUNDLES, ns, name, {"spec": {"data": data_of(name, sizes.changes + 1)}})
        # The rollout waits 1 s after the change; then the Deployment's controllers and
        # the garbage collector follow.
        time.sleep(2.0)
        wait_writes_quiet(kube, quiet=6.0)
        writes = audit.since(nss)
        rec["single"] = {
            "seconds": time.monotonic() - t0,
            "cbop": by_client(writes, "cbop"),
            "kcm": by_client(writes, "kube-controller-manager"),
            "all": writes,
        }
        log(f"S11 {variant} one change: cbop {rec['single']['cbop']}")
        # Then the entry of the ReplicaSet the history dropped goes after the grace,
        # and with it the revision it alone held.
        rec["single_later"] = _settle(kube, audit, nss)
        rec["single_later"]["kcm"] = by_client(audit.since(nss), "kube-controller-manager")
        rec["single_later"]["seconds_after_change"] = time.monotonic() - t0
        rec["census_single"] = census(kube, nss, sizes.keep if with_revisions else 0)
    finally:
        bench.stop()

    # ---- a fresh cbop on the end state
    wait_writes_quiet(kube)
    rec["load"]["fresh"] = load()
    audit.mark()
    op = _start(bench, nss, f"{variant}-fresh")
    try:
        rec["fresh"] = _steady(bench, op)
    finally:
        bench.stop()
    rec["fresh"]["writes"] = by_client(audit.since(nss), "cbop")
    log(
        f"S11 {variant}: fresh cbop steady RSS {rec['fresh']['steady_mib']:.1f} MiB, "
        f"restart writes {sum(rec['fresh']['writes'].values())}"
    )
    return rec


def _settle(kube: KubeClient, audit: AuditWrites, nss: list[str]) -> dict[str, Any]:
    """Wait for the pins to settle (:func:`wait_pins_settled`); the record has cbop's
    writes meanwhile too."""
    audit.mark()
    out = wait_pins_settled(kube, nss)
    out["cbop"] = by_client(audit.since(nss), "cbop")
    out["pins"] = pins_state(kube, nss)
    log(
        f"S11 pins settled={out['settled']} in {out['seconds']:.1f} s "
        f"(stale {out['stale_at_start']} -> {out['stale_at_end']}), "
        f"cbop writes {sum(out['cbop'].values())}"
    )
    return out


def _idle(
    bench: Bench, op: Operator, audit: AuditWrites, nss: list[str], seconds: float
) -> dict[str, Any]:
    wait_quiet(op.pid, timeout=120)
    audit.mark()
    time.sleep(seconds)
    writes = audit.since(nss)
    out: dict[str, Any] = {"seconds": seconds, "cbop": by_client(writes, "cbop"), "all": writes}
    log(f"S11 idle {seconds:.0f} s: cbop writes {sum(out['cbop'].values())}")
    return out


# ---------------------------------------------------------------------------- report


def _sum(d: Mapping[str, float]) -> float:
    return sum(v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES)


def _writes_only(d: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES}


def _count(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def _cells(d: Mapping[str, float]) -> str:
    return ", ".join(f"{k}: {_count(v)}" for k, v in sorted(_writes_only(d).items())) or "none"


def _merge(ds: Iterable[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def markdown(results: dict[str, Any]) -> str:
    """The S11 section of the results file ("" when it did not run)."""
    r: dict[str, Any] | None = results.get("s11")
    if not r:
        return ""
    s = r["sizes"]
    lines = [
        "",
        f"### S11 revisions: {s['bundles']:,} bundles read by {s['deployments']} rolled "
        f"Deployments, {s['changes']} changes each",
        "",
        f"{s['namespaces']} namespaces; each Deployment reads {PER_DEPLOYMENT} bundles, "
        f"`replicas: {s['replicas']}`, `revisionHistoryLimit: {s['history']}`"
        + f"; revisions `keep: {s['keep']}` in variant `on`. Variants in order: "
        + ", ".join(s["variants"])
        + ".",
        "",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"Load average ({name}): " + "; ".join(f"{k} {x}" for k, x in v["load"].items()) + "."
        )
    lines += ["", "| measure | " + " | ".join(r["variants"]) + " | goal |"]
    lines.append("|---|" + "---:|" * len(r["variants"]) + "---|")
    vs = list(r["variants"].values())

    def row(label: str, cells: list[str], goal: str = "") -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {goal} |")

    row("bundles Ready, s", [f"{v['converge']['bundles_seconds']:.1f}" for v in vs])
    if all("settle_converged" in v for v in vs):
        row(
            "converged: pins settle, s (cbop writes meanwhile)",
            [
                f"{v['settle_converged']['seconds']:.1f} "
                f"({_count(_sum(v['settle_converged']['cbop']))})"
                for v in vs
            ],
        )
    idle_c = [_sum(v["idle_converged"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s converged: cbop writes",
        [str(x) for x in idle_c],
        f"0: {goal_word(not any(idle_c))}",
    )
    ready = [[x["ready_seconds"] for x in v["rounds"]] for v in vs]
    quiet = [[x["seconds"] for x in v["rounds"]] for v in vs]
    row(
        "round: all Ready, s (mean / max)", [f"{sum(x) / len(x):.1f} / {max(x):.1f}" for x in ready]
    )
    row(
        "round: API quiet, s (mean / max)", [f"{sum(x) / len(x):.1f} / {max(x):.1f}" for x in quiet]
    )
    per_round = [_sum(_merge(x["cbop"] for x in v["rounds"])) / len(v["rounds"]) for v in vs]
    row("round: cbop writes (mean)", [f"{x:,.0f}" for x in per_round])
    row("rollouts (Deployment generations) over the rounds", [str(v["rollouts"]) for v in vs])
    if all("settle_history" in v for v in vs):
        row(
            "after the rounds: stale pins entries; s until none (cbop writes meanwhile)",
            [
                f"{v['settle_history']['stale_at_start']}; "
                f"{v['settle_history']['seconds_to_no_stale']:.1f} "
                f"({_count(_sum(v['settle_history']['cbop']))})"
                for v in vs
            ],
            "settled: " + goal_word(all(v["settle_history"]["settled"] for v in vs)),
        )
    idle_h = [_sum(v["idle_history"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s with the history: cbop writes",
        [str(x) for x in idle_h],
        f"0: {goal_word(not any(idle_h))}",
    )
    row("steady RSS after the rounds, MiB", [f"{v['rss']['steady_mib']:.1f}" for v in vs])
    row("steady RSS of a fresh cbop, MiB", [f"{v['fresh']['steady_mib']:.1f}" for v in vs])
    fresh_w = [_sum(v["fresh"]["writes"]) for v in vs]
    row("writes of the fresh cbop", [str(x) for x in fresh_w], f"0: {goal_word(not any(fresh_w))}")
    if "rss_ratio" in r:
        lines.append(
            f"| RSS on / off | {r['rss_ratio']:.2f}x (fresh {r['rss_fresh_ratio']:.2f}x) "
            + "| " * (len(vs) - 1)
            + "| |"
        )
    on = r["variants"].get("on")
    if on:
        c = on["census"]
        made = s["bundles"] * (s["changes"] + 1)
        lines += [
            "",
            f"Revisions at the end of the rounds (`on`; {made:,} made):",
            "",
            "| measure | value | goal |",
            "|---|---:|---|",
            f"| revisions in existence | {c['revisions']:,} | <= keep + referenced |",
            f"| keep + what the history references (summed per bundle) | {c['bound']:,} | |",
            f"| revisions beyond that bound | {c['over_bound']} "
            f"| 0: {goal_word(c['over_bound'] == 0)} |",
            f"| held by their bundle (max per bundle) | {c['held_by_bundle']:,} "
            f"({c['max_held_by_bundle']}) | |",
            f"| held by their bundle past keep, referenced by nothing | "
            f"{c.get('held_unreferenced_over_keep', '?')} | 0: "
            f"{goal_word(c.get('held_unreferenced_over_keep') == 0)} |",
            f"| held by a ReplicaSet only | {c['held_by_history_only']:,} | |",
            f"| held by nothing (of which with no owner reference at all) | {c['orphans']} "
            f"({c.get('ownerless', '?')}) | 0: {goal_word(c['orphans'] == 0)} |",
            *(
                [
                    f"| held by nothing once the single change settled "
                    f"| {on['census_single']['orphans']} "
                    f"({on['census_single'].get('ownerless', '?')}) "
                    f"| 0: {goal_word(on['census_single']['orphans'] == 0)} |"
                ]
                if "census_single" in on
                else []
            ),
            f"| referenced by the history (pins of existing ReplicaSets) | {c['referenced']:,} | |",
            f"| referenced and missing | {c['referenced_missing']} "
            f"| 0: {goal_word(c['referenced_missing'] == 0)} |",
            f"| ReplicaSets (max per Deployment) | {c['replicasets']:,} "
            f"({c['max_replicasets_per_deployment']}) | <= {s['history'] + 1} per Deployment: "
            f"{goal_word(c['max_replicasets_per_deployment'] <= s['history'] + 1)} |",
            f"| ReplicaSets with replicas > 0 | {c['replicasets_with_replicas']} | |",
            f"| pins ConfigMap size, bytes (max per namespace) "
            f"| {max(c['pins_bytes'].values(), default=0):,} | |",
        ]
        if "pins_entries" in c:
            stale = sum(c["pins_stale"].values())
            lines += [
                f"| pins entries (max per namespace) | {sum(c['pins_entries'].values()):,} "
                f"({max(c['pins_entries'].values(), default=0)}) | |",
                f"| pins entries nothing carries | {stale} | 0: {goal_word(stale == 0)} |",
                "",
                "Pins ConfigMaps at the end of the rounds (after they settled), per namespace:",
                "",
                "| namespace | entries | bytes |",
                "|---|---:|---:|",
            ]
            for ns in sorted(c["pins_entries"]):
                lines.append(f"| {ns} | {c['pins_entries'][ns]} | {c['pins_bytes'][ns]:,} |")
            if "settle_history" in on:
                w = _sum(on["settle_history"]["cbop"])
                lines += [
                    "",
                    f"While the pins settled after the rounds "
                    f"({on['settle_history']['seconds']:.1f} s, "
                    f"{on['settle_history']['stale_at_start']} stale entries at the start), "
                    f"cbop wrote {_count(w)} times: {_cells(on['settle_history']['cbop'])}.",
                ]
    lines += ["", "One content change of one bundle after the rounds, writes by client:", ""]
    lines += ["| variant | cbop | kube-controller-manager |", "|---|---|---|"]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {_cells(v['single']['cbop'])} | {_cells(v['single']['kcm'])} |")
    if all("single_later" in v for v in r["variants"].values()):
        lines += [
            "",
            "Then, until the pins settled (the dropped ReplicaSet's entry after the grace, "
            "and the revision it alone held), writes by client:",
            "",
            "| variant | s after the change | cbop | kube-controller-manager | cbop in all |",
            "|---|---:|---|---|---:|",
        ]
        for name, v in r["variants"].items():
            later = v["single_later"]
            total = _sum(v["single"]["cbop"]) + _sum(later["cbop"])
            lines.append(
                f"| {name} | {later['seconds_after_change']:.1f} | {_cells(later['cbop'])} "
                f"| {_cells(later['kcm'])} | {_count(total)} |"
            )
    lines += ["", "cbop's writes per round (mean over the rounds):", ""]
    lines += ["| variant | writes |", "|---|---|"]
    for name, v in r["variants"].items():
        merged = _merge(x["cbop"] for x in v["rounds"])
        n = len(v["rounds"])
        lines.append(f"| {name} | {_cells({k: x / n for k, x in merged.items()})} |")
    return "\n".join(lines) + "\n"
