"""S12 (revisions, shared bundles): 100 Deployments in one namespace read the same 10
bundles, and one of them changes 20 times.

One control plane whose kube-controller-manager also runs the deployment and replicaset
controllers (and, as always, the garbage collector), with the shipped pin policy
installed; the same scenario once per variant, each in a namespace of its own
(``s12-off``, ``s12-on``) with a cbop process of its own (``--rollout
--no-cluster-bundles --revision-grace grace --namespace``):

- ``off``: bundles without revisions; ``on``: ``spec.revisions: {enabled: true, keep}``.
- ``bundles`` (10) bundles ``b0``..``b9``; ``deployments`` (100) Deployments, each
  reading every bundle's ConfigMap as a volume, labelled ``cbop.dev/rollout: "true"``,
  ``replicas`` (1), ``revisionHistoryLimit: history`` (10, Kubernetes' default).
- **pods**: there is no node. With ``ready`` the bench stands in for the kubelet: it
  marks each new pod Ready (its status only, from a watch), so that rollouts complete
  and each Deployment prunes its history, as on a cluster with nodes. Those writes are
  the bench's own (user agent ``cbop-bench/s12``).
- **setup**: the bundles, then the Deployments; until every Deployment is baselined,
  (``on``) carries the mapping of every bundle (opting in with revisions rolls it once)
  and has completed its rollout. cbop's writes, and the ReplicaSets and pods
  kube-controller-manager created meanwhile: the difference between the variants is
  the cost of the roll-once.
- **idle** (``idle`` s): cbop's writes once set up (the goal: zero), and again at the end.
- **rounds**: ``changes`` (20) times, ``b0``'s content changes; the time until ``b0`` is
  Ready with it and every Deployment's template carries its digest (``on``: and names
  its revision) is the round's *converge* time, from watches the bench holds; then
  until every rollout completed and the API server is quiet. cbop's writes by verb and
  object, kube-controller-manager's by controller, cbop's CPU seconds.
- **after the rounds** (``on``): the grace passes, the last collections follow; then the
  census: revisions against ``keep`` plus what the templates of the Deployments,
  ReplicaSets and pods name.
- **RSS**: cbop's steady VmRSS after the rounds.
- **the audit log, object by object** (S12 logs writes on ConfigMaps, Events,
  ConfigBundles and Deployments in its namespaces at ``RequestResponse`` level): cbop's
  requests answered 409 and their retries, the largest body cbop sent and the largest
  object it wrote, and its status writes by what they changed (those only the
  ``Pinned`` condition caused).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import AuditLog
from bench.operators.harness import Bench, log, percentile, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import load_average, wait_cpu_quiet
from bench.operators.scenario import Defaults, Needs, Run
from bench.operators.scenarios import revisions_audit as audited
from bench.operators.scenarios import revisions_fanout_report as report
from bench.operators.scenarios.revisions_census import (
    audit_write_rules,
    by_client,
    by_controller,
    census,
    install_pin_policy,
    wait_writes_quiet,
    write_events,
    writes_since,
)
from bench.operators.scenarios.revisions_fanout_watch import CHANGING, Fanout, ReadyPods
from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.kube import CONFIGBUNDLES, DEPLOYMENTS, KubeClient
from cbop.rollout import LABEL_ROLLOUT

CONTROLLERS = ("deployment-controller", "replicaset-controller")
BENCH_AGENT = "cbop-bench/s12"
VARIANTS = ("off", "on")
FILLER = "".join(f"setting-{i:02d}=value-{i:02d}\n" for i in range(20))
#: Seconds past the grace before the bench counts the collections as done.
GRACE_MARGIN = 5.0
#: Seconds any one wait may take.
TIMEOUT = 900.0


def namespace_of(variant: str) -> str:
    return f"s12-{variant}"


@dataclass(frozen=True)
class Options:
    """The sizes of one S12 run.

    Attributes:
        deployments: Deployments per variant, each reading every bundle.
        bundles: bundles per variant.
        changes: content changes of ``b0`` (rounds).
        keep: ``spec.revisions.keep`` of the ``on`` variant.
        history: the Deployments' ``revisionHistoryLimit``.
        replicas: the Deployments' ``replicas``.
        ready: the bench marks new pods Ready (see the module docstring).
        idle: seconds of each steady-state window.
        grace: cbop's ``--revision-grace`` (seconds).
        variants: the variants in the order they run.
    """

    deployments: int = 100
    bundles: int = 10
    changes: int = 20
    keep: int = 3
    history: int = 10
    replicas: int = 1
    ready: bool = True
    idle: float = 30.0
    grace: float = 60.0
    variants: tuple[str, ...] = VARIANTS


# ---------------------------------------------------------------------------- inputs


def bundle_names(sizes: Options) -> list[str]:
    return [f"b{k}" for k in range(sizes.bundles)]


def deployment_name(d: int) -> str:
    return f"d{d:03d}"


def data_of(name: str, round_: int) -> dict[str, str]:
    return {"app.conf": f"bundle={name}\nround={round_}\n{FILLER}"}


def bundle_body(name: str, revisions: Mapping[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"data": data_of(name, 0)}
    if revisions is not None:
        spec["revisions"] = dict(revisions)
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def deployment_body(d: int, sizes: Options) -> dict[str, Any]:
    labels = {"app": deployment_name(d)}
    names = bundle_names(sizes)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(d), "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
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
                                {"name": n, "mountPath": f"/etc/app/{n}"} for n in names
                            ],
                        }
                    ],
                    "volumes": [{"name": n, "configMap": {"name": n}} for n in names],
                },
            },
        },
    }


# ------------------------------------------------------------------------------- run


def _start(bench: Bench, namespace: str, tag: str, sizes: Options) -> Operator:
    return bench.start(
        "cbop",
        f"s12-{tag}",
        extra_args=[
            "--rollout",
            "--no-cluster-bundles",
            f"--revision-grace={sizes.grace:g}",
            f"--namespace={namespace}",
        ],
    )


def run(bench: Bench, sizes: Options) -> dict[str, Any]:
    """Run S12 once (see the module docstring); return its record."""
    if bench.s.audit is None:
        raise RuntimeError("S12 counts writes from the audit log: the control plane needs one")
    kube = KubeClient.from_config(
        kubeconfig=str(bench.s.kubeconfig), qps=0, pool_size=32, user_agent=BENCH_AGENT
    )
    variants: dict[str, Any] = {}
    rec: dict[str, Any] = {
        "sizes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(sizes).items()},
        "variants": variants,
    }
    try:
        rec["policy_seconds"] = install_pin_policy(kube, "s12-policy-probe")
        for variant in sizes.variants:
            log(f"=== S12 variant {variant}")
            variants[variant] = _variant(bench, kube, sizes, variant)
    finally:
        bench.stop()
        kube.close()
    on, off = variants.get("on"), variants.get("off")
    if on and off:
        rec["rss_ratio"] = on["rss"]["steady_mib"] / off["rss"]["steady_mib"]
    return rec


def _wait(tracker: Fanout, holds: Any, what: str) -> bool:
    ok = tracker.wait_until(holds, TIMEOUT)
    if not ok:
        log(f"S12: timed out waiting for {what}")
    return ok


def _variant(bench: Bench, kube: KubeClient, sizes: Options, variant: str) -> dict[str, Any]:
    assert bench.s.audit is not None
    audit, whole = AuditLog(bench.s.audit), AuditLog(bench.s.audit)
    revisions = {"enabled": True, "keep": sizes.keep} if variant == "on" else None
    on = revisions is not None
    ns = namespace_of(variant)
    names = bundle_names(sizes)
    rec: dict[str, Any] = {"load": {}}
    threads = bench.s.loader_threads
    epochs: dict[str, float] = {}
    # Rollouts complete when pods become available: none to wait for, or marked Ready.
    complete = sizes.ready or sizes.replicas == 0

    cluster.create_namespace(kube, ns)
    wait_writes_quiet(kube, quiet=2.0)
    whole.mark()
    op = _start(bench, ns, f"{variant}-run", sizes)
    kubelet = ReadyPods(kube, ns).start() if sizes.ready else None
    tracker = Fanout(kube, ns, names).start()
    try:
        # ---- setup
        rec["load"]["setup"] = load_average()
        epochs["setup"] = time.time()
        audit.mark()
        t0 = time.monotonic()
        run_parallel(lambda n: kube.create(CONFIGBUNDLES, ns, bundle_body(n, revisions)), names, 4)
        ok = _wait(tracker, lambda: tracker.bundles_ready(on), "the bundles")
        t_bundles = time.monotonic() - t0
        run_parallel(
            lambda d: kube.create(DEPLOYMENTS, ns, deployment_body(d, sizes)),
            range(sizes.deployments),
            threads,
        )
        ok = (
            _wait(tracker, lambda: tracker.set_up(sizes.deployments, on, complete), "the set-up")
            and ok
        )
        t_set_up = time.monotonic() - t0
        wait_writes_quiet(kube)
        writes = writes_since(audit, [ns])
        rec["setup"] = {
            "complete": ok,
            "bundles_seconds": t_bundles,
            "seconds": t_set_up,
            "cbop": by_client(writes, "cbop"),
            "kcm": by_controller(writes),
        }
        log(
            f"S12 {variant}: set up in {t_set_up:.1f} s, "
            f"cbop writes {sum(rec['setup']['cbop'].values())}"
        )
        rec["idle_set_up"] = _idle(op, audit, ns, sizes.idle)

        # ---- rounds
        epochs["rounds"] = time.time()
        rounds = []
        for r in range(1, sizes.changes + 1):
            rec["load"][f"round {r}"] = load_average()
            rounds.append(
                _round(bench, kube, audit, tracker, op, ns=ns, r=r, on=on, rollouts=complete)
            )
        rec["rounds"] = rounds
        rec["after_rounds"] = _after_grace(kube, audit, ns, sizes, on=on, since=time.monotonic())
        rec["idle_end"] = _idle(op, audit, ns, sizes.idle)
        epochs["end"] = time.time()
        rec["census"] = census(kube, [ns], sizes.keep if on else 0)
        log(f"S12 {variant}: census {rec['census']}")
        rec["rss"] = bench.steady(op)
        log(f"S12 {variant}: steady RSS {rec['rss']['steady_mib']:.1f} MiB")
    finally:
        tracker.stop()
        if kubelet is not None:
            kubelet.stop()
        bench.stop()
    rec["pods_marked_ready"] = kubelet.patched if kubelet is not None else 0
    rec["audit"] = _audit(whole, ns, epochs)
    return rec


def _round(
    bench: Bench,
    kube: KubeClient,
    audit: AuditLog,
    tracker: Fanout,
    op: Operator,
    *,
    ns: str,
    r: int,
    on: bool,
    rollouts: bool,
) -> dict[str, Any]:
    """One content change of the changing bundle, measured (see the module docstring)."""
    want = content_hash(data_of(CHANGING, r), {})
    wait_writes_quiet(kube)
    audit.mark()
    share = bench.cpu_share(cbop=op.pid)
    tracker.arm(want, revision_name(CHANGING, want) if on else None)
    t0 = time.monotonic()
    kube.patch(CONFIGBUNDLES, ns, CHANGING, {"spec": {"data": data_of(CHANGING, r)}})
    converged = _wait(tracker, tracker.converged, f"round {r} to converge")
    bundle_at, rolled_at = tracker.times()
    rolled = [t - t0 for t in rolled_at]
    t_converge = max([(bundle_at or t0) - t0, *rolled])
    complete = not rollouts or _wait(tracker, tracker.complete, f"round {r}'s rollouts")
    t_complete = time.monotonic() - t0
    wait_writes_quiet(kube)
    seconds = time.monotonic() - t0
    writes = writes_since(audit, [ns])
    cbop = by_client(writes, "cbop")
    out = {
        "complete": converged and complete,
        "converge_seconds": t_converge,
        "bundle_seconds": (bundle_at or t0) - t0,
        "rolled_p50_seconds": percentile(rolled, 0.5),
        "complete_seconds": t_complete,
        "seconds": seconds,
        "cpu_share": share.stop(),
        "cbop": cbop,
        "kcm": by_controller(writes),
    }
    log(
        f"S12 round {r}: converged in {t_converge:.1f} s, complete at {t_complete:.1f} s, "
        f"quiet at {seconds:.1f} s, cbop writes {sum(cbop.values())}"
    )
    return out


def _after_grace(
    kube: KubeClient, audit: AuditLog, ns: str, sizes: Options, *, on: bool, since: float
) -> dict[str, Any]:
    """With revisions, wait until ``grace`` (plus :data:`GRACE_MARGIN`) has passed since
    ``since`` (monotonic), then for the writes to stop; cbop's writes meanwhile."""
    audit.mark()
    t0 = time.monotonic()
    if on:
        time.sleep(max(0.0, since + sizes.grace + GRACE_MARGIN - time.monotonic()))
    wait_writes_quiet(kube, quiet=6.0)
    writes = writes_since(audit, [ns])
    return {
        "seconds": time.monotonic() - t0,
        "cbop": by_client(writes, "cbop"),
        "kcm": by_controller(writes),
    }


def _idle(op: Operator, audit: AuditLog, ns: str, seconds: float) -> dict[str, Any]:
    wait_cpu_quiet(op.pid, timeout=120)
    audit.mark()
    time.sleep(seconds)
    cbop = by_client(writes_since(audit, [ns]), "cbop")
    log(f"S12 idle {seconds:.0f} s: cbop writes {sum(cbop.values())}")
    return {"seconds": seconds, "cbop": cbop}


def _audit(whole: AuditLog, ns: str, epochs: Mapping[str, float]) -> dict[str, Any]:
    """The audit log's object-by-object view of the variant (see :mod:`revisions_audit`)."""
    events = list(write_events(whole, [ns]))
    end = epochs.get("end", time.time()) + 1.0
    windows = {
        "setup": (epochs["setup"], epochs.get("rounds", end)),
        "rounds": (epochs.get("rounds", end), end),
    }
    out: dict[str, Any] = {"status": audited.status_writes(events, windows)}
    for name, (start, stop) in windows.items():
        part = audited.within(events, start, stop)
        out[name] = {"conflicts": audited.conflicts(part), "sizes": audited.sizes(part)}
    return out


class Fanned(Defaults):
    """S12, once for the run, when cbop is among the implementations: its control plane
    runs the Deployment controllers and audits S12's writes in full."""

    names = ("s12",)
    defaults = Options()
    needs = Needs(
        controllers=CONTROLLERS,
        audit_rules=audited.request_response_rules([namespace_of(v) for v in VARIANTS])
        + audit_write_rules(),
    )

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S12: 100 Deployments reading the same bundles, one changing")
        run_.results["s12"] = run(run_.bench, options)

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return report.markdown(results)

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return report.goals(results)


FANOUT = Fanned()
