"""S11 (revisions): 1,000 bundles with revisions read by 100 rolled Deployments.

In one run on one control plane whose kube-controller-manager also runs the deployment
and replicaset controllers (so Deployments get ReplicaSets and a history; no scheduler
and no kubelet), with the shipped pin policy installed (``manifests/revisions/``), the
same scenario twice, once per variant, each in namespaces of its own and with a cbop
process of its own (``--rollout --no-cluster-bundles --revision-grace grace``,
``--namespace`` for each of them):

- ``off``: bundles without revisions; ``on``: ``spec.revisions: {enabled: true, keep}``.
- ``namespaces`` (10) namespaces with ``bundles`` (1,000) bundles and ``deployments``
  (100) Deployments spread evenly; each Deployment reads 10 bundles' ConfigMaps as
  volumes, is labelled ``cbop.dev/rollout: "true"`` and has ``revisionHistoryLimit:
  history`` (3) and ``replicas: replicas`` (0). Why no replicas by default: a
  Deployment prunes its history (``revisionHistoryLimit``) only once its rollout is
  complete, every replica updated and available; a pod that no node runs stays
  Pending and never becomes available, so with ``replicas: 1`` and no kubelet the old
  ReplicaSets would never be deleted, and no revision collected by the history (S12
  marks its pods Ready instead).
- **converge**: bundles created and Ready, then the Deployments created, given their
  baseline and (``on``) pinned: opting in with revisions rolls each once. cbop's and
  kube-controller-manager's writes meanwhile.
- **steady state** (``idle`` s, 30): every write by cbop, from kube-apiserver's audit log
  (the goal: zero). Once converged, and again after the rounds (with the history).
- **rounds**: ``changes`` (10) times, every bundle's content changes (all at once, so
  each Deployment's 10 changes coalesce into one rollout or a few); seconds until all
  bundles are Ready with the new content and the API server is quiet, and cbop's writes
  by verb and object. Then (``on``) the grace passes and the last collections follow.
- **revisions at the end** (``on``): per ConfigMap, the revisions that exist against
  ``keep`` plus those the templates of the Deployments, ReplicaSets and pods that exist
  name; revisions collection should have deleted, revisions named and missing, owner
  references (the goal: none but the bundle's).
- **single changes**: ``singles`` (5) content changes of one bundle, one after the
  other, each followed by the grace (``on``) so that its collection happens too: every
  write of each, by client, verb and object. The Deployment reads 10 bundles that all
  changed in every round: while the ReplicaSets of those rounds leave the history
  (the first ``history - keep + 1`` changes), each also collects the revision of every
  other bundle that only the ReplicaSet leaving named; after that, a change is the one
  bundle's own.
- **garbage collector**: kube-controller-manager's writes over the whole variant, by
  controller (the goal: no ConfigMap write by its garbage collector).
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
    by_controller,
    census,
    deployments_baselined,
    deployments_pinned,
    generations,
    install_pin_policy,
    list_all,
    wait_writes_quiet,
    write_list,
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
#: Seconds past the grace before the bench counts a collection as done.
GRACE_MARGIN = 5.0


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
        singles: content changes of one bundle after the rounds, each counted alone.
        grace: cbop's ``--revision-grace`` (seconds).
        variants: the variants in the order they run.
    """

    bundles: int = 1000
    namespaces: int = 10
    changes: int = 10
    keep: int = 2
    history: int = 3
    idle: float = 30.0
    replicas: int = 0
    singles: int = 5
    grace: float = 60.0
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


def bundles_done(
    kube: KubeClient,
    namespaces: list[str],
    round_: int,
    revisions: bool,
    only: frozenset[str] | None = None,
) -> int:
    """How many bundles (of ``only`` names, or all) are Ready for their generation with
    round ``round_``'s content (and, with revisions, ``status.revision`` naming that
    content's revision)."""
    done = 0
    for b in list_all(kube, CONFIGBUNDLES, namespaces):
        name = b["metadata"]["name"]
        if only is not None and name not in only:
            continue
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
    kube: KubeClient,
    namespaces: list[str],
    round_: int,
    revisions: bool,
    total: int,
    *,
    only: frozenset[str] | None = None,
    poll: float = 2.0,
) -> bool:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if bundles_done(kube, namespaces, round_, revisions, only) >= total:
            return True
        time.sleep(poll)
    return False


# ------------------------------------------------------------------------------- run


def _start(bench: Bench, namespaces: list[str], tag: str, sizes: Options) -> Operator:
    return bench.start(
        "cbop",
        f"s11-{tag}",
        extra_args=[
            "--rollout",
            "--no-cluster-bundles",
            f"--revision-grace={sizes.grace:g}",
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
        rec["policy_seconds"] = install_pin_policy(kube, "s11-policy-probe")
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
    whole = AuditLog(bench.s.audit)
    revisions = {"enabled": True, "keep": sizes.keep} if variant == "on" else None
    with_revisions = revisions is not None
    nss = namespace_names(variant, sizes)
    deployments = layout(variant, sizes)
    bundles = [(ns, bundle_name(d, k)) for ns, d in deployments for k in range(PER_DEPLOYMENT)]
    rec: dict[str, Any] = {"load": {}}
    threads = bench.s.loader_threads

    run_parallel(lambda ns: cluster.create_namespace(kube, ns), nss, 4)
    wait_writes_quiet(kube, quiet=2.0)
    whole.mark()
    op = _start(bench, nss, f"{variant}-run", sizes)
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
        wait_writes_quiet(kube, quiet=2.0)
        audit.mark()
        t1 = time.monotonic()
        run_parallel(
            lambda p: kube.create(DEPLOYMENTS, p[0], deployment_body(p[1], sizes)),
            deployments,
            threads,
        )

        def settled() -> bool:
            if deployments_baselined(kube, nss) < len(deployments):
                return False
            return not with_revisions or (
                deployments_pinned(kube, nss, PER_DEPLOYMENT) == len(deployments)
            )

        deadline = time.monotonic() + 300
        while not settled() and time.monotonic() < deadline:
            time.sleep(1.0)
        done = settled()
        t_deployments = time.monotonic() - t1
        wait_writes_quiet(kube)
        writes = writes_since(audit, nss)
        rec["converge"] = {
            "complete": ok and done,
            "bundles_seconds": t_bundles,
            "deployments_seconds": t_deployments,
            "seconds": time.monotonic() - t0,
            "deployments_cbop": by_client(writes, "cbop"),
            "deployments_kcm": by_controller(writes),
        }
        log(
            f"S11 {variant}: {len(bundles)} bundles Ready in {t_bundles:.1f} s, "
            f"{len(deployments)} Deployments baselined{' and pinned' if with_revisions else ''} "
            f"in {t_deployments:.1f} s"
        )
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
            complete = wait_bundles(kube, nss, r, with_revisions, len(bundles))
            t_ready = time.monotonic() - t0
            wait_writes_quiet(kube)
            seconds = time.monotonic() - t0
            writes = writes_since(audit, nss)
            rounds.append(
                {
                    "complete": complete,
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
        # The revisions the last rounds' rollouts left unnamed go once the grace has passed.
        rec["after_rounds"] = _after_grace(
            kube, audit, nss, sizes, with_revisions=with_revisions, since=time.monotonic()
        )
        rec["census"] = census(kube, nss, sizes.keep if with_revisions else 0)
        log(f"S11 {variant}: census {rec['census']}")
        rec["idle_history"] = _idle(bench, op, audit, nss, sizes.idle)
        rec["rss"] = bench.steady(op)
        log(f"S11 {variant}: steady RSS {rec['rss']['steady_mib']:.1f} MiB")

        # ---- content changes of one bundle, read by one Deployment, one at a time
        ns, name = bundles[0]
        singles = []
        for i in range(1, sizes.singles + 1):
            rec["load"][f"single {i}"] = load_average()
            singles.append(
                _single(
                    kube,
                    audit,
                    nss,
                    sizes,
                    bundle=(ns, name),
                    i=i,
                    with_revisions=with_revisions,
                )
            )
        rec["singles"] = singles
        rec["census_single"] = census(kube, nss, sizes.keep if with_revisions else 0)
    finally:
        bench.stop()
    everything = writes_since(whole, nss)
    rec["kcm_all"] = by_controller(everything)

    # ---- a fresh cbop on the end state
    wait_writes_quiet(kube)
    rec["load"]["fresh"] = load_average()
    audit.mark()
    op = _start(bench, nss, f"{variant}-fresh", sizes)
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


def _after_grace(
    kube: KubeClient,
    audit: AuditLog,
    nss: list[str],
    sizes: Options,
    *,
    with_revisions: bool,
    since: float,
) -> dict[str, Any]:
    """With revisions, wait until ``grace`` (plus :data:`GRACE_MARGIN`) has passed since
    ``since`` (monotonic), then for the writes to stop; cbop's writes meanwhile."""
    audit.mark()
    t0 = time.monotonic()
    if with_revisions:
        time.sleep(max(0.0, since + sizes.grace + GRACE_MARGIN - time.monotonic()))
    wait_writes_quiet(kube, quiet=6.0)
    writes = writes_since(audit, nss)
    cbop = by_client(writes, "cbop")
    log(f"S11 after the grace: cbop writes {sum(cbop.values())}")
    return {"seconds": time.monotonic() - t0, "cbop": cbop}


def _single(
    kube: KubeClient,
    audit: AuditLog,
    nss: list[str],
    sizes: Options,
    *,
    bundle: tuple[str, str],
    i: int,
    with_revisions: bool,
) -> dict[str, Any]:
    """Change ``bundle``'s content once (the ``i``-th time after the rounds) and count
    every write until the grace has passed and the API server is quiet."""
    ns, name = bundle
    round_ = sizes.changes + i
    wait_writes_quiet(kube)
    audit.mark()
    t0 = time.monotonic()
    kube.patch(CONFIGBUNDLES, ns, name, {"spec": {"data": data_of(name, round_)}})
    wait_bundles(kube, [ns], round_, with_revisions, 1, only=frozenset({name}), poll=0.2)
    ready = time.monotonic() - t0
    # The rollout waits 1 s after the change; then the Deployment's controllers follow,
    # and, once the grace has passed, the collection of what the history dropped.
    time.sleep(2.0)
    wait_writes_quiet(kube, quiet=6.0)
    if with_revisions:
        time.sleep(max(0.0, t0 + sizes.grace + GRACE_MARGIN - time.monotonic()))
        wait_writes_quiet(kube, quiet=6.0)
    writes = writes_since(audit, nss)
    cbop = by_client(writes, "cbop")
    log(f"S11 one change {i}: cbop {sum(cbop.values())} writes: {cbop}")
    return {
        "ready_seconds": ready,
        "seconds": time.monotonic() - t0,
        "cbop": cbop,
        "kcm": by_controller(writes),
        "cbop_list": write_list(audit, nss, "cbop"),
    }


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

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return report.goals(results)


REVISIONS = Revisions()
