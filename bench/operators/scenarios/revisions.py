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
  ``keep`` plus those the history references (the pins entries of the template
  digests of the ReplicaSets that exist); revisions nothing holds (the goal: none),
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

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import AuditLog
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import load_average, wait_cpu_quiet
from bench.operators.scenario import Defaults, Needs, Run
from bench.operators.scenarios import revisions_report as report
from bench.operators.scenarios.revisions_census import (
    audit_write_rules,
    by_client,
    census,
    deployments_baselined,
    generations,
    list_all,
    pins_state,
    wait_pins_settled,
    wait_writes_quiet,
    writes_since,
)
from cbop.api import content_hash
from cbop.kube import CONFIGBUNDLES, DEPLOYMENTS, KubeClient
from cbop.rollout import LABEL_ROLLOUT

#: kube-controller-manager controllers S11 needs besides the control plane's default set.
CONTROLLERS = ("deployment-controller", "replicaset-controller")
#: The bench's own user agent in S11, so the audit log tells its writes from cbop's.
BENCH_AGENT = "cbop-bench/s11"
#: Bundles each Deployment reads.
PER_DEPLOYMENT = report.PER_DEPLOYMENT
FILLER = "".join(f"setting-{i:02d}=value-{i:02d}\n" for i in range(20))
VARIANTS = ("off", "on")


@dataclass(frozen=True)
class Options:
    """The sizes of one S11 run.

    Attributes:
        bundles: bundles per variant (a multiple of ``PER_DEPLOYMENT * namespaces``);
            the Deployments are ``bundles / PER_DEPLOYMENT``.
        namespaces: namespaces per variant.
        changes: content changes of every bundle (rounds).
        keep: ``spec.revisions.keep`` of the ``on`` variant.
        history: the Deployments' ``revisionHistoryLimit``.
        idle: seconds of each steady-state window.
        replicas: the Deployments' ``replicas`` (their pods stay Pending).
        variants: the variants in the order they run.
    """

    bundles: int = 1000
    namespaces: int = 10
    changes: int = 10
    keep: int = 2
    history: int = 3
    idle: float = 30.0
    replicas: int = 0
    variants: tuple[str, ...] = VARIANTS

    @property
    def deployments(self) -> int:
        """Deployments per variant."""
        return self.bundles // PER_DEPLOYMENT


# ---------------------------------------------------------------------------- inputs


def namespace_names(variant: str, sizes: Options) -> list[str]:
    return [f"s11-{variant}-{i:02d}" for i in range(sizes.namespaces)]


def bundle_name(d: int, k: int) -> str:
    return f"d{d:03d}-b{k}"


def layout(variant: str, sizes: Options) -> list[tuple[str, int]]:
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


def deployment_body(d: int, sizes: Options) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------- run


def _start(bench: Bench, namespaces: list[str], tag: str) -> Operator:
    return bench.start(
        "cbop",
        f"s11-{tag}",
        extra_args=[
            "--rollout",
            "--no-cluster-bundles",
            *(f"--namespace={ns}" for ns in namespaces),
        ],
    )


def run(bench: Bench, sizes: Options) -> dict[str, Any]:
    """Run S11 once (see the module docstring); return its record."""
    if bench.s.audit is None:
        raise RuntimeError("S11 counts writes from the audit log: the control plane needs one")
    kube = KubeClient.from_config(
        kubeconfig=str(bench.s.kubeconfig), qps=0, pool_size=32, user_agent=BENCH_AGENT
    )
    variants: dict[str, Any] = {}
    rec: dict[str, Any] = {
        "sizes": {
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(sizes).items()},
            "deployments": sizes.deployments,
        },
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


def _variant(bench: Bench, kube: KubeClient, sizes: Options, variant: str) -> dict[str, Any]:
    assert bench.s.audit is not None
    audit = AuditLog(bench.s.audit)
    revisions = {"enabled": True, "keep": sizes.keep} if variant == "on" else None
    with_revisions = revisions is not None
    nss = namespace_names(variant, sizes)
    deployments = layout(variant, sizes)
    bundles = [(ns, bundle_name(d, k)) for ns, d in deployments for k in range(PER_DEPLOYMENT)]
    rec: dict[str, Any] = {"load": {}}
    threads = bench.s.loader_threads

    run_parallel(lambda ns: cluster.create_namespace(kube, ns), nss, 4)
    wait_writes_quiet(kube, quiet=2.0)
    op = _start(bench, nss, f"{variant}-run")
    try:
        # ---- converge
        rec["load"]["converge"] = load_average()
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
            rec["load"][f"round {r}"] = load_average()
            audit.mark()
            share = bench.cpu_share()
            t0 = time.monotonic()
            patch = functools.partial(_change, kube, r)
            run_parallel(patch, bundles, threads)
            done = wait_bundles(kube, nss, r, with_revisions, len(bundles))
            t_ready = time.monotonic() - t0
            wait_writes_quiet(kube)
            seconds = time.monotonic() - t0
            writes = writes_since(audit, nss)
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
        rec["rss"] = bench.steady(op)
        log(f"S11 {variant}: steady RSS {rec['rss']['steady_mib']:.1f} MiB")

        # ---- one content change of one bundle, read by one Deployment
        ns, name = bundles[0]
        wait_writes_quiet(kube)
        rec["load"]["single"] = load_average()
        audit.mark()
        t0 = time.monotonic()
        kube.patch(CONFIGBUNDLES, ns, name, {"spec": {"data": data_of(name, sizes.changes + 1)}})
        # The rollout waits 1 s after the change; then the Deployment's controllers and
        # the garbage collector follow.
        time.sleep(2.0)
        wait_writes_quiet(kube, quiet=6.0)
        writes = writes_since(audit, nss)
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
        rec["single_later"]["kcm"] = by_client(writes_since(audit, nss), "kube-controller-manager")
        rec["single_later"]["seconds_after_change"] = time.monotonic() - t0
        rec["census_single"] = census(kube, nss, sizes.keep if with_revisions else 0)
    finally:
        bench.stop()

    # ---- a fresh cbop on the end state
    wait_writes_quiet(kube)
    rec["load"]["fresh"] = load_average()
    audit.mark()
    op = _start(bench, nss, f"{variant}-fresh")
    try:
        rec["fresh"] = bench.steady(op)
    finally:
        bench.stop()
    rec["fresh"]["writes"] = by_client(writes_since(audit, nss), "cbop")
    log(
        f"S11 {variant}: fresh cbop steady RSS {rec['fresh']['steady_mib']:.1f} MiB, "
        f"restart writes {sum(rec['fresh']['writes'].values())}"
    )
    return rec


def _change(kube: KubeClient, round_: int, bundle: tuple[str, str]) -> None:
    """Give ``bundle`` (namespace, name) round ``round_``'s content."""
    ns, name = bundle
    kube.patch(CONFIGBUNDLES, ns, name, {"spec": {"data": data_of(name, round_)}})


def _settle(kube: KubeClient, audit: AuditLog, nss: list[str]) -> dict[str, Any]:
    """Wait for the pins to settle (:func:`wait_pins_settled`); the record has cbop's
    writes meanwhile too."""
    audit.mark()
    out = wait_pins_settled(kube, nss)
    out["cbop"] = by_client(writes_since(audit, nss), "cbop")
    out["pins"] = pins_state(kube, nss)
    log(
        f"S11 pins settled={out['settled']} in {out['seconds']:.1f} s "
        f"(stale {out['stale_at_start']} -> {out['stale_at_end']}), "
        f"cbop writes {sum(out['cbop'].values())}"
    )
    return out


def _idle(
    bench: Bench, op: Operator, audit: AuditLog, nss: list[str], seconds: float
) -> dict[str, Any]:
    wait_cpu_quiet(op.pid, timeout=120)
    audit.mark()
    time.sleep(seconds)
    writes = writes_since(audit, nss)
    out: dict[str, Any] = {"seconds": seconds, "cbop": by_client(writes, "cbop"), "all": writes}
    log(f"S11 idle {seconds:.0f} s: cbop writes {sum(out['cbop'].values())}")
    return out


class Revisions(Defaults):
    """S11, once for the run, when cbop is among the implementations: its control plane
    runs the Deployment controllers and audits every write."""

    names = ("s11",)
    defaults = Options()
    needs = Needs(controllers=CONTROLLERS, audit_rules=audit_write_rules())

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S11: revisions, with rolled Deployments and their history")
        run_.results["s11"] = run(run_.bench, options)

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return report.markdown(results)


REVISIONS = Revisions()
