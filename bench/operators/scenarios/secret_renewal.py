"""S13 (secret renewal): one source Secret renewed, reaching 1,000 target Secrets.

S10's layout with Secrets, in one run on one control plane:

- ``namespaces`` (50) namespaces besides the source's own, ``s13-src``; the source
  Secret ``s13-src/s13-tls`` of type ``kubernetes.io/tls`` (``tls.crt``, ``tls.key``,
  ``ca.crt``: about 3 KiB), labelled ``cbop.dev/source: "true"`` and shared with the 50
  others by name (``cbop.dev/share-with``), as docs/secrets.md requires.
- **raw**: 1,000 TLS Secrets laid out as the bundles' targets (``local`` (500) in
  ``s13-src``, the rest over the 50 namespaces) are created, then ``workers`` threads
  update each once with the renewed content (a PUT carrying the resourceVersion the
  create returned). Seconds from the first update until the watch has shown every one
  renewed. The Secrets are deleted after.
- **controller-runtime** (with it among the impls, before cbop): the Go peer with
  ``--secrets`` (S10's ``--sources`` mode for Secret targets and Secret sources), the
  same 4 workers, cluster-wide: 1,000 bundles (``p-*``) converged, then the renewal.
- **cbop**: ``python -m cbop --workers 4 --kube-api-qps 0 --no-rollout
  --no-cluster-bundles --secrets`` (its digest key in ``s13-src``) and 1,000
  ConfigBundles ``target: {kind: Secret, type: kubernetes.io/tls}`` reading the source.
- **the renewal**, for each operator: the source's ``data`` replaced by one merge patch
  (a new ``tls.crt`` and ``tls.key``, as cert-manager renews a certificate). Seconds from
  the patch until the watch has shown every target with the new ``tls.crt``; the
  operator's CPU seconds over that time; kube-apiserver's ``apiserver_request_total``
  (minus the bench's own): GETs (the goal: none, of Secrets or anything else), Secret
  writes by answer, status writes, and MODIFIED events per target Secret (the goal:
  exactly one each).
- **idle** (cbop): ``idle`` seconds (60): writes on Secrets, ConfigBundles and Events.
- **RSS** (cbop): steady VmRSS converged, then after ``unlabelled`` (10,000) Secrets
  without the source label (about 1 KiB each) were created in another namespace (the
  goal: no higher).

The load average is taken at the start of each phase. With ``--profile DIR``, py-spy
records cbop over the renewal (``cbop-s13-renewal-<pid>.collapsed``).
"""

from __future__ import annotations

import base64
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import (
    WRITE_VERBS,
    AuditLog,
    Counter,
    keyed,
    wait_api_quiet,
    writes_on,
)
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import load_average
from bench.operators.scenario import Defaults, Needs, Run
from bench.operators.scenarios import secret_renewal_report as report
from bench.operators.scenarios.revisions_census import client_of
from bench.operators.watch import ChangeTracker, Stream
from cbop.api import ANNOTATION_SHARE_WITH, SOURCE_SELECTOR
from cbop.kube import CONFIGBUNDLES, SECRETS, KubeClient, Resource

#: The Go peer measured against the same floor when it is among the impls.
PEER = "controller-runtime"
SOURCE_NS = "s13-src"
SOURCE = "s13-tls"
TLS = "kubernetes.io/tls"
#: Label on every Secret the watch follows (the bundles' targets and the raw floor's).
OUT_LABEL = "bench.cbop.dev/s13-out"
#: The key the watch reads to tell a target renewed.
KEY = "tls.crt"
#: Resources whose writes count as the operator's (idle window, answers by code).
WRITTEN = frozenset({"configbundles", "secrets", "events"})
#: cbop's digest key (docs/secrets.md), in a namespace the run makes.
DIGEST_KEY = f"{SOURCE_NS}/cbop-digest-key"
#: Audit every GET (any resource, and paths such as discovery) at Metadata level:
#: apiserver_request_total cannot tell the operator's reads from kube-controller-manager's.
AUDIT_GETS = """\
  - level: Metadata
    verbs: ["get"]
"""


@dataclass(frozen=True)
class Options:
    """The sizes of one S13 run.

    Attributes:
        bundles: target Secrets, half in the source's namespace, the rest spread over
            the other namespaces.
        namespaces: the other namespaces.
        unlabelled: Secrets without the source label added for the second RSS figure.
        idle: seconds of the idle window.
    """

    bundles: int = 1000
    namespaces: int = 50
    unlabelled: int = 10_000
    idle: float = 60.0

    @property
    def local(self) -> int:
        """Targets in the source's namespace."""
        return self.bundles // 2


def other_namespaces(sizes: Options) -> list[str]:
    return [f"s13-ns-{i:03d}" for i in range(sizes.namespaces)]


def layout(sizes: Options, prefix: str) -> list[tuple[str, str]]:
    """(namespace, name) of every target: ``local`` in the source's namespace, the rest
    spread over the other namespaces."""
    out = [(SOURCE_NS, f"{prefix}-{i:04d}") for i in range(sizes.local)]
    others = other_namespaces(sizes)
    out += [
        (others[i % len(others)], f"{prefix}-{i:04d}") for i in range(sizes.bundles - sizes.local)
    ]
    return out


def _pem(kind: str, version: int, size: int) -> str:
    """A PEM-shaped block of ``size`` bytes of content, the same for the same arguments."""
    body = base64.b64encode(random.Random(f"{kind}-{version}").randbytes(size)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----", ""])


def tls_data(version: int) -> dict[str, str]:
    """The source's ``data`` (base64, as the API takes it) at ``version``: the certificate
    and key change with it, the CA does not."""
    plain = {
        "tls.crt": _pem("CERTIFICATE", version, 900),
        "tls.key": _pem("PRIVATE KEY", version, 1200),
        "ca.crt": _pem("CERTIFICATE", 0, 900),
    }
    return {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}


def source_body(sizes: Options) -> dict[str, Any]:
    return {
        "metadata": {
            "name": SOURCE,
            "labels": {SOURCE_SELECTOR.split("=")[0]: "true"},
            "annotations": {ANNOTATION_SHARE_WITH: ",".join(other_namespaces(sizes))},
        },
        "type": TLS,
        "data": tls_data(1),
    }


def bundle_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": {
            "target": {"kind": "Secret", "type": TLS},
            "sources": [{"secret": {"name": SOURCE, "namespace": SOURCE_NS}}],
            "labels": {OUT_LABEL: "1"},
        },
    }


def raw_body(name: str, version: int) -> dict[str, Any]:
    """What the raw floor writes: the content a bundle's Secret holds."""
    return {
        "metadata": {"name": name, "labels": {OUT_LABEL: "1"}},
        "type": TLS,
        "data": tls_data(version),
    }


class Watcher(ChangeTracker):
    """A cluster-wide watch on the Secrets labelled :data:`OUT_LABEL`: per Secret, its
    ``data[KEY]`` (base64, as the API server sends it), when it first showed the expected
    value, and its MODIFIED events."""

    def __init__(self, kube: KubeClient) -> None:
        super().__init__(kube, [Stream(SECRETS, None, label_selector=f"{OUT_LABEL}=1")])
        self._want = ""
        self.value: dict[str, str | None] = {}

    def expect(self, value: str) -> None:
        """Expect ``data[KEY] == value`` from now on; the times and MODIFIED counts start
        again."""
        with self._lock:
            self._want = value
            self.seen = {k: time.monotonic() for k, v in self.value.items() if v == value}
            self.modified = {}

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.value.pop(key, None)
            return
        value = (obj.get("data") or {}).get(KEY)
        self.value[key] = value
        if kind == "MODIFIED":
            self.modified[key] = self.modified.get(key, 0) + 1
        if value == self._want and key not in self.seen:
            self.seen[key] = now
            self.changed()


def _keys(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{ns}/{name}" for ns, name in pairs]


# ------------------------------------------------------------------------------ run


def run(bench: Bench, sizes: Options, impls: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Run S13 once (see the module docstring); return its record.

    ``impls``: with :data:`PEER` in it, the Go peer is measured too (before cbop).
    """
    kube = bench.kube
    rec: dict[str, Any] = {"bundles": sizes.bundles}
    namespaces = [SOURCE_NS, *other_namespaces(sizes)]
    run_parallel(lambda ns: cluster.create_namespace(kube, ns), namespaces, bench.s.loader_threads)
    kube.create(SECRETS, SOURCE_NS, source_body(sizes))
    wait_api_quiet(kube, resources=WRITTEN)
    watcher = Watcher(kube).start()
    try:
        rec["raw"] = _raw(bench, watcher, sizes)
        if PEER in impls:
            rec["peer"] = _peer(bench, watcher, sizes)
        rec["cbop"] = _cbop(bench, watcher, sizes)
    finally:
        watcher.stop()
        bench.stop()
    raw_s = rec["raw"]["seconds"]
    cbop_change = rec["cbop"]["change"]
    rec["ratio"] = cbop_change["seconds"] / raw_s if raw_s else float("nan")
    if "peer" in rec:
        peer_change = rec["peer"]["change"]
        rec["peer_ratio"] = peer_change["seconds"] / raw_s if raw_s else float("nan")
        rec["cbop_peer_ratio"] = _ratio(cbop_change["seconds"], peer_change["seconds"])
        rec["cbop_peer_cpu_ratio"] = _ratio(cbop_change["cpu_seconds"], peer_change["cpu_seconds"])
    return rec


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _raw(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    kube = bench.kube
    threads = bench.s.workers
    pairs = layout(sizes, "raw")
    keys = _keys(pairs)
    watcher.expect(tls_data(1)[KEY])
    created = run_parallel(
        lambda p: kube.create(SECRETS, p[0], raw_body(p[1], 1)), pairs, bench.s.loader_threads
    )
    watcher.wait_all(keys, 300)
    wait_api_quiet(kube, resources=WRITTEN)
    rec: dict[str, Any] = {"load": load_average()}
    watcher.expect(tls_data(2)[KEY])

    def update(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        body = raw_body(meta["name"], 2)
        body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        kube.update(SECRETS, meta["namespace"], meta["name"], body)

    log(f"S13 raw: updating {len(created)} Secrets with {threads} threads")
    counter = Counter(kube, codes=WRITTEN).mark()
    share = bench.cpu_share(bench=os.getpid())
    t0 = time.monotonic()
    run_parallel(update, created, threads)
    rec["complete"] = watcher.wait_all(keys, 600)
    rec["cpu_share"] = share.stop()
    last = watcher.last_seen(keys)
    rec["seconds"] = (last - t0) if last is not None else float("nan")
    rec["spread"] = watcher.spread(keys, t0)
    rec["writes_by_code"] = counter.codes()
    rec["modified_per_secret"] = watcher.modified_histogram(keys)
    log(f"S13 raw: {len(keys)} Secrets updated in {rec['seconds']:.2f} s")
    run_parallel(lambda p: kube.delete(SECRETS, p[0], p[1]), pairs, bench.s.loader_threads)
    wait_api_quiet(kube, resources=WRITTEN)
    return rec


def _converge(
    bench: Bench, watcher: Watcher, pairs: list[tuple[str, str]], name: str
) -> dict[str, Any]:
    """Create the bundles of ``pairs`` and wait until every target holds version 1."""
    kube = bench.kube
    keys = _keys(pairs)
    watcher.expect(tls_data(1)[KEY])
    rec: dict[str, Any] = {"load": load_average()}
    t0 = time.monotonic()
    run_parallel(
        lambda p: kube.create(CONFIGBUNDLES, p[0], bundle_body(p[1])),
        pairs,
        bench.s.loader_threads,
    )
    complete = watcher.wait_all(keys, 900)
    last = watcher.last_seen(keys)
    rec["complete"] = complete
    rec["seconds"] = (last - t0) if last is not None else float("nan")
    log(f"S13 {name}: {len(keys)} bundles converged in {rec['seconds']:.2f} s")
    wait_api_quiet(kube, resources=WRITTEN, quiet=3.0, timeout=300)
    return rec


def _renew(
    bench: Bench, watcher: Watcher, keys: list[str], name: str, op: Operator
) -> dict[str, Any]:
    """Renew the source once (version 2) and measure until every target holds it.

    ``name`` names the operator ``op`` in the CPU figures.
    """
    kube = bench.kube
    wait_api_quiet(kube, resources=WRITTEN)
    load = load_average()
    watcher.expect(tls_data(2)[KEY])
    audit = AuditLog(bench.s.audit).mark() if bench.s.audit is not None else None
    counter = Counter(kube, codes=WRITTEN).mark()
    share = bench.cpu_share(**{name: op.pid}, bench=os.getpid())
    spy = bench.profile(op, f"cbop-s13-renewal-{op.pid}")
    if spy.active:
        time.sleep(1.0)  # py-spy attaches
    log(f"S13 {name}: the source is renewed; {len(keys)} targets")
    t0 = time.monotonic()
    kube.patch(SECRETS, SOURCE_NS, SOURCE, {"data": tls_data(2)})
    complete = watcher.wait_all(keys, 900)
    shares = share.stop()
    last = watcher.last_seen(keys)
    wait_api_quiet(kube, resources=WRITTEN)
    spy.stop(30)
    api = counter.since()
    by_client = audit.count(_get_by_client) if audit is not None else {}
    secret_writes = sum(v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] == "secrets")
    rec: dict[str, Any] = {
        "load": load,
        "complete": complete,
        "seconds": (last - t0) if last is not None else float("nan"),
        "cpu_share": shares,
        "cpu_seconds": shares.get(name, float("nan")),
        "secret_gets": api.get(("GET", "secrets", ""), 0.0),
        "gets": {"|".join(k): v for k, v in api.items() if k[0] == "GET"},
        "gets_by_client": by_client,
        "operator_gets": sum(v for k, v in by_client.items() if _is_operator(k, op.impl)),
        "secret_writes": secret_writes,
        "writes_per_target": secret_writes / len(keys) if keys else float("nan"),
        "status_writes": sum(
            v
            for k, v in api.items()
            if k[0] in WRITE_VERBS and k[1] == "configbundles" and k[2] == "status"
        ),
        "writes_by_code": counter.codes(),
        "modified_per_secret": watcher.modified_histogram(keys),
        "spread": watcher.spread(keys, t0),
        "requests": keyed(api),
    }
    log(
        f"S13 {name}: all {len(keys)} Secrets renewed in {rec['seconds']:.2f} s, "
        f"{rec['cpu_seconds']:.2f} CPU s; its GETs {rec['operator_gets']}, Secret writes "
        f"{secret_writes:.0f}, status writes {rec['status_writes']:.0f}, "
        f"MODIFIED per Secret {rec['modified_per_secret']}"
    )
    return rec


def _get_by_client(event: Mapping[str, Any]) -> str | None:
    """``<client> <resource or path>`` of an audited GET (None: another verb)."""
    if event.get("verb") != "get" or event.get("stage") != "ResponseComplete":
        return None
    ref = event.get("objectRef") or {}
    what = ref.get("resource") or str(event.get("requestURI", "?")).split("?")[0]
    return f"{client_of(str(event.get('userAgent', '')))} {what}"


def _is_operator(key: str, impl: str) -> bool:
    """Whether the ``<client> <what>`` key of :func:`_get_by_client` is ``impl``'s (the
    Go peer's client is its binary's name, ``controller-runtime-peer-<digest>``)."""
    client = key.split(" ", 1)[0]
    return client == "cbop" if impl == "cbop" else client.startswith(f"{impl}-peer")


def _peer(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    """The Go peer on the same cluster: converge, one renewal; then cleaned up."""
    kube = bench.kube
    pairs = layout(sizes, "p")
    keys = _keys(pairs)
    try:
        op = bench.start(PEER, "s13-controller-runtime", extra_args=["--secrets"])
        rec = {"converge": _converge(bench, watcher, pairs, PEER)}
        rec["change"] = _renew(bench, watcher, keys, PEER, op)
        # Back to the version the next operator converges on, then the peer's objects go.
        watcher.expect(tls_data(1)[KEY])
        kube.patch(SECRETS, SOURCE_NS, SOURCE, {"data": tls_data(1)})
        watcher.wait_all(keys, 600)
        bench.delete_bundles(pairs)
    finally:
        bench.stop()
    bench.delete_targets(SECRETS, pairs, quiet=WRITTEN)
    return rec


def _cbop(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    kube = bench.kube
    pairs = layout(sizes, "b")
    keys = _keys(pairs)
    args = ["--no-cluster-bundles", "--secrets", f"--secrets-digest-key={DIGEST_KEY}"]
    op = bench.start("cbop", "s13-cbop", extra_args=args)
    rec: dict[str, Any] = {"converge": _converge(bench, watcher, pairs, "cbop")}
    rec["rss_converged_mib"] = bench.steady(op)["steady_mib"]
    rec["change"] = _renew(bench, watcher, keys, "cbop", op)

    wait_api_quiet(kube, resources=WRITTEN)
    counter = Counter(kube).mark()
    log(f"S13 idle {sizes.idle:.0f} s")
    time.sleep(sizes.idle)
    idle = writes_on(counter.since(), WRITTEN)
    rec["idle"] = {"seconds": sizes.idle, "writes": sum(idle.values()), "by_kind": idle}
    log(f"S13 idle: {rec['idle']['writes']:.0f} writes")

    # The two figures compared are taken one after the other, only the Secrets between.
    rec["rss_mib"] = bench.steady(op)["steady_mib"]
    other = "s13-unlabelled"
    cluster.create_namespace(kube, other)

    def unlabelled(i: int) -> None:
        body = {
            "metadata": {"name": f"plain-{i:05d}", "labels": {"app": "unrelated"}},
            "type": "Opaque",
            "stringData": {"token": f"id-{i}-" + "x" * 1000},
        }
        kube.create(SECRETS, other, body)

    t = time.monotonic()
    run_parallel(unlabelled, list(range(sizes.unlabelled)), bench.s.loader_threads)
    log(f"S13: {sizes.unlabelled} unlabelled Secrets in {time.monotonic() - t:.1f} s")
    wait_api_quiet(kube, resources=WRITTEN, quiet=3.0, timeout=300)
    rec["rss_unlabelled_mib"] = bench.steady(op)["steady_mib"]
    rec["unlabelled"] = sizes.unlabelled
    log(
        f"S13 RSS: {rec['rss_mib']:.1f} MiB converged, {rec['rss_unlabelled_mib']:.1f} MiB "
        f"with {sizes.unlabelled} unlabelled Secrets"
    )
    return rec


class SecretRenewal(Defaults):
    """S13, once for the run, when cbop is among the implementations; the Go peer too
    when it is."""

    names = ("s13",)
    defaults = Options()
    quick: Mapping[str, Any] = {"bundles": 100, "namespaces": 5, "unlabelled": 1000, "idle": 10.0}
    needs = Needs(audit_rules=AUDIT_GETS)

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S13: one source Secret renewed, reaching many target Secrets")
        run_.results["s13"] = run(run_.bench, options, impls=frozenset(run_.impls))

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return report.markdown(results)

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return report.goals(results)


SECRET_RENEWAL = SecretRenewal()
