"""The APF scenario: each operator throttled by API Priority and Fairness.

Each operator runs as its own ServiceAccount (bound to the shipped ``cbop`` ClusterRole in
its namespace) and a fresh FlowSchema (precedence 100, matching only that ServiceAccount)
sends every request it makes to a fresh PriorityLevelConfiguration: ``Limited``,
``nominalConcurrencyShares: 1``, no lending or borrowing, ``limitResponse: Reject``, so
kube-apiserver answers 429 with its own Retry-After once the level's few seats are taken.
The bench's admin client (exempt from APF) creates ``bundles`` bundles, then patches the
spec of the first ``patches`` of them; the time to converge is from the first create to
the moment the watches show every ConfigMap with its final content and every bundle
Ready for its final generation.

Counts come from kube-apiserver's own metrics for that priority level
(``apiserver_flowcontrol_rejected_requests_total``, ``..._dispatched_requests_total``),
scraped before the first create and once everything converged, and from each operator's
client metrics (``rest_client_requests_total{code="429"}``; cbop also exports its retries
and the Retry-After seconds it waited).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.operators import cluster
from bench.operators.apiserver import samples, wait_api_quiet
from bench.operators.cluster import CANARY, CANARY_INDEX, names_for
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.observer import Observer
from bench.operators.scenario import Defaults, Run
from bench.operators.tables import num, table
from cbop.api import content_hash
from cbop.kube import CONFIGBUNDLES, ApiError, KubeClient, Resource
from cbop_testing.envtest.flowcontrol import (
    FLOW_SCHEMAS,
    PRIORITY_LEVELS,
    rejecting_flow_schema,
    rejecting_priority_level,
)

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLE = cluster.REPO / "manifests" / "rbac" / "cluster_role.yaml"

#: Operators the scenario runs (kopf is not: it needs cluster-wide reads beyond cbop's role).
IMPLEMENTATIONS = ("cbop", "controller-runtime")


@dataclass(frozen=True)
class Options:
    """The APF scenario's sizes.

    Attributes:
        rounds: repetitions of every (workers, operator) run.
        workers: concurrent reconciles per operator, each a separate run.
        bundles: bundles created.
        patches: bundles whose spec is then patched.
    """

    rounds: int = 1
    workers: tuple[int, ...] = (4, 32)
    bundles: int = 500
    patches: int = 200


#: ``(namespace, service account) -> kubeconfig path`` with that account's token.
KubeconfigFor = Callable[[str, str], Path]


def ensure_cluster_role(kube: KubeClient) -> None:
    """Create the shipped ``cbop`` ClusterRole if it does not exist."""
    with contextlib.suppress(ApiError):
        kube.create(CLUSTER_ROLES, None, yaml.safe_load(CLUSTER_ROLE.read_text()))


def bind(kube: KubeClient, namespace: str, account: str) -> None:
    """Bind the ``cbop`` ClusterRole to ``account`` in ``namespace`` (a RoleBinding)."""
    kube.create(
        ROLE_BINDINGS,
        namespace,
        {
            "metadata": {"name": account},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cbop",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )


def throttle(kube: KubeClient, name: str, namespace: str, account: str) -> None:
    """Create the priority level and FlowSchema; wait until kube-apiserver has taken them in.

    The API server's APF configuration controller marks a FlowSchema's ``Dangling``
    condition once it has processed it; before that the account's requests may still
    land in the default levels.
    """
    kube.create(PRIORITY_LEVELS, None, rejecting_priority_level(name))
    kube.create(FLOW_SCHEMAS, None, rejecting_flow_schema(name, namespace, account))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conditions = kube.get(FLOW_SCHEMAS, None, name).get("status", {}).get("conditions") or ()
        if any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions):
            return
        time.sleep(0.2)
    raise TimeoutError(f"FlowSchema {name} was not taken in by kube-apiserver within 30 s")


def unthrottle(kube: KubeClient, name: str) -> None:
    for res in (FLOW_SCHEMAS, PRIORITY_LEVELS):
        try:
            kube.delete(res, None, name)
        except ApiError as err:
            if not err.is_not_found:
                raise


def flowcontrol_counts(kube: KubeClient, level: str) -> dict[str, float]:
    """kube-apiserver's rejected (by reason) and dispatched request counts for one level.

    Returns ``{"rejected": total, "rejected:<reason>": n, ..., "dispatched": n}``. Only
    the two families' lines are parsed (the whole page is megabytes).
    """
    out = {"rejected": 0.0, "dispatched": 0.0}
    families = {
        "apiserver_flowcontrol_rejected_requests_total": "rejected",
        "apiserver_flowcontrol_dispatched_requests_total": "dispatched",
    }
    for family, labels, count in samples(kube, *families):
        if labels.get("priority_level") != level:
            continue
        key = families[family]
        out[key] += count
        if key == "rejected":
            reason = f"rejected:{labels.get('reason', '?')}"
            out[reason] = out.get(reason, 0.0) + count
    return out


def client_counts(metrics_port: int) -> dict[str, float]:
    """An operator's client metrics: answers 429 (in all, and by HTTP method), all requests,
    retries, Retry-After waited.

    Read from its ``/metrics``: ``rest_client_requests_total`` (both operators),
    ``rest_client_request_retries_total`` and ``cbop_rest_client_retry_wait_seconds_total``
    (cbop only; client-go retries 429s too but controller-runtime exports no count of it).
    """
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {"requests": 0.0, "throttled": 0.0, "retries": 0.0, "retry_wait_seconds": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            method = sample.labels.get("method", "?")
            if sample.name == "rest_client_requests_total":
                out["requests"] += sample.value
                if sample.labels.get("code") == "429":
                    out["throttled"] += sample.value
                    out[f"throttled:{method}"] = out.get(f"throttled:{method}", 0.0) + sample.value
            elif sample.name == "rest_client_request_retries_total":
                out["retries"] += sample.value
            elif sample.name == "cbop_rest_client_retry_wait_seconds_total":
                out["retry_wait_seconds"] += sample.value
    return out


def _minus(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def patched_data(index: int) -> dict[str, str]:
    """The merge patch of a patched bundle's ``spec.data`` (one value changed)."""
    return {"index": f"patched-{index}"}


def final_expectations(bundles: int, patches: int) -> dict[str, cluster.Expected]:
    """What every ConfigMap must carry at the end: patched bundles with their new value."""
    out = {}
    for i, name in enumerate(names_for(bundles)):
        want = cluster.expected(name, i)
        if i < patches:
            data = {**want.data, **patched_data(i)}
            binary = {k: base64.b64decode(v) for k, v in want.binary_data.items()}
            want = cluster.Expected(
                data=data,
                binary_data=want.binary_data,
                labels=want.labels,
                content_hash=content_hash(data, binary),
            )
        out[name] = want
    out[CANARY] = cluster.expected(CANARY, CANARY_INDEX)
    return out


def longest_gap(times: Sequence[float], start: float) -> float:
    """The longest stretch (seconds) in which no bundle converged, from ``start`` on."""
    points = [start, *sorted(times)]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def run_one(
    bench: Bench,
    kubeconfig_for: KubeconfigFor,
    impl: str,
    workers: int,
    *,
    bundles: int,
    patches: int,
    round_: int = 1,
) -> dict[str, Any]:
    """One operator, throttled, through ``bundles`` creates and ``patches`` patches.

    Returns the record (seconds to converge, APF rejected/dispatched counts, client
    counts). Raises TimeoutError when the operator never becomes ready.
    """
    kube = bench.kube
    ns = bench.namespace(impl, f"apf-w{workers}")
    account = f"bench-{impl}"
    level = f"bench-apf-{ns}"[:63]
    ensure_cluster_role(kube)
    kubeconfig = kubeconfig_for(ns, account)
    bind(kube, ns, account)
    throttle(kube, level, ns, account)
    expected = final_expectations(bundles, patches)
    names = names_for(bundles)
    observer: Observer | None = None
    try:
        op = bench.start(
            impl, ns, namespace=ns, kubeconfig=kubeconfig, workers=workers, ready_timeout=180
        )
        observer = Observer(kube, ns, expected).start()
        bench.canary(ns, observer, None)
        apf0 = flowcontrol_counts(kube, level)
        client0 = client_counts(op.metrics_port)
        log(f"APF {impl} workers={workers}: {bundles} creates, {patches} patches ({ns})")
        t0 = time.monotonic()
        bench.create_bundles(ns, [(name, i) for i, name in enumerate(names)], {})
        loaded = time.monotonic() - t0

        def patch(i: int) -> None:
            kube.patch(CONFIGBUNDLES, ns, names[i], {"spec": {"data": patched_data(i)}})

        run_parallel(patch, range(patches), bench.s.loader_threads)
        patched = time.monotonic() - t0
        complete = observer.wait_done(names, timeout=900)
        done = observer.done_times()
        apf1 = flowcontrol_counts(kube, level)
        client1 = client_counts(op.metrics_port)
    finally:
        if observer is not None:
            observer.stop()
        bench.stop()
        unthrottle(kube, level)
    finished = [t for x in names if (t := done[x]) is not None]
    seconds = (max(finished) - t0) if finished else float("nan")
    apf = _minus(apf1, apf0)
    client = _minus(client1, client0)
    record: dict[str, Any] = {
        "impl": impl,
        "workers": workers,
        "round": round_,
        "namespace": ns,
        "bundles": bundles,
        "patches": patches,
        "complete": complete,
        "converged": len(finished),
        "seconds": seconds,
        "load_seconds": loaded,
        "patch_seconds": patched,
        "longest_gap": longest_gap(finished, t0),
        "apf": apf,
        "rejected_per_second": apf["rejected"] / seconds if seconds else float("nan"),
        "client": client,
    }
    log(
        f"APF {impl} workers={workers}: {len(finished)}/{bundles} in {seconds:.2f} s, "
        f"APF rejected {apf['rejected']:.0f} ({record['rejected_per_second']:.1f}/s), "
        f"dispatched {apf['dispatched']:.0f}; client 429s {client['throttled']:.0f}, "
        f"retries {client['retries']:.0f}, waited {client['retry_wait_seconds']:.1f} s"
    )
    cluster.delete_namespace(kube, ns)
    return record


def run_all(
    bench: Bench, kubeconfig_for: KubeconfigFor, impls: Sequence[str], options: Options
) -> list[dict[str, Any]]:
    """Every (round, workers, operator) in turn, the operators interleaved within a setting.

    The operators' order alternates from one round to the next (so neither always runs
    right after the other's namespace was deleted), and each run waits until the API
    server has no bundle, ConfigMap or Event request left from the one before it.
    """
    chosen = [i for i in impls if i in IMPLEMENTATIONS]
    records = []
    for round_ in range(1, options.rounds + 1):
        for count in options.workers:
            for impl in chosen if round_ % 2 else chosen[::-1]:
                wait_api_quiet(bench.kube)
                records.append(
                    run_one(
                        bench,
                        kubeconfig_for,
                        impl,
                        count,
                        bundles=options.bundles,
                        patches=options.patches,
                        round_=round_,
                    )
                )
    return records


class Apf(Defaults):
    """The APF scenario, once for the run, for cbop and controller-runtime."""

    names = ("apf",)
    defaults = Options()
    quick: Mapping[str, Any] = {"bundles": 100, "patches": 40}

    def accepts(self, impl: str) -> bool:
        return impl in IMPLEMENTATIONS

    def run(self, run: Run, options: Options, impl: str | None) -> None:
        run.results["apf"] = run_all(run.bench, run.kubeconfig_for, run.impls, options)

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return tables(results)


APF = Apf()


# --------------------------------------------------------------------------- report


def _div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _share(record: Mapping[str, Any]) -> float:
    """The share of an operator's requests that APF turned away: rejected / (rejected +
    dispatched), a figure that, unlike rejected/s, does not grow when it converges sooner."""
    apf = record["apf"]
    return _div(apf["rejected"], apf["rejected"] + apf["dispatched"])


def tables(results: Mapping[str, Any]) -> list[str]:
    """Markdown for the APF records of a run, with the cbop / controller-runtime ratios."""
    recs = results.get("apf") or []
    if not recs:
        return []
    r0 = recs[0]
    out = [
        f"### APF: throttled as its own ServiceAccount, {r0['bundles']:,} bundles created "
        f"and {r0['patches']:,} patched by an unthrottled admin",
        "",
        "FlowSchema (precedence 100) for the operator's ServiceAccount -> PriorityLevel "
        "`Limited`, `nominalConcurrencyShares: 1`, lending and borrowing 0, `Reject`. "
        "Rejected and dispatched: kube-apiserver's `apiserver_flowcontrol_*_requests_total` "
        "for that level over the window; rejected/s = rejected / converge time; rejected "
        "share = rejected / (rejected + dispatched). 429s, "
        "retries and wait: the operator's own `rest_client_*` metrics (controller-runtime "
        "exports no retry count). Longest gap: the longest stretch, from the first create, "
        "with no bundle converging (the first bundles converge only after their patch).",
        "",
    ]
    header = [
        "round",
        "workers",
        "implementation",
        "converge s",
        "longest gap s",
        "APF rejected",
        "rejected/s",
        "APF dispatched",
        "rejected share",
        "client 429s",
        "retries",
        "retry wait s",
    ]
    rows = []
    by = {(r["round"], r["workers"], r["impl"]): r for r in recs}
    for r in recs:
        c, a = r["client"], r["apf"]
        cbop_only = r["impl"].startswith("cbop")
        rows.append(
            [
                str(r["round"]),
                str(r["workers"]),
                r["impl"],
                num(r["seconds"]) + ("" if r["complete"] else " (incomplete)"),
                num(r["longest_gap"]),
                num(a["rejected"], 0),
                num(r["rejected_per_second"], 1),
                num(a["dispatched"], 0),
                f"{num(100 * _share(r), 1)} %",
                num(c["throttled"], 0),
                num(c["retries"], 0) if cbop_only else "-",
                num(c["retry_wait_seconds"], 1) if cbop_only else "-",
            ]
        )
    lines = table(header, rows, "rrl" + "r" * (len(header) - 3))
    out += [*lines, ""]
    ratio_header = [
        "round",
        "workers",
        "converge time cbop / controller-runtime",
        "rejected/s cbop / controller-runtime",
        "rejected (total) cbop / controller-runtime",
        "rejected share cbop / controller-runtime",
    ]
    ratio_rows = []
    goals = []
    for (round_, workers, impl), r in sorted(by.items()):
        peer = by.get((round_, workers, "controller-runtime"))
        if impl != "cbop" or peer is None:
            continue
        t = _div(r["seconds"], peer["seconds"])
        rej = _div(r["rejected_per_second"], peer["rejected_per_second"])
        ratio_rows.append(
            [
                str(round_),
                str(workers),
                f"{num(t)}x",
                f"{num(rej)}x",
                f"{num(_div(r['apf']['rejected'], peer['apf']['rejected']))}x",
                f"{num(_div(_share(r), _share(peer)))}x",
            ]
        )
        verdict_t = "met" if t <= 1.0 else "**missed**"
        ok_rej = r["rejected_per_second"] <= peer["rejected_per_second"]
        verdict_r = "met" if ok_rej else "**missed**"
        goals.append(
            f"- APF round {round_}, {workers} workers: converge {num(t)}x controller-runtime "
            f"(goal <= 1.0x) — {verdict_t}; rejected/s {num(r['rejected_per_second'], 1)} vs "
            f"{num(peer['rejected_per_second'], 1)} (goal no more) — {verdict_r}"
        )
    if ratio_rows:
        out += [*table(ratio_header, ratio_rows, "rrrrrr"), "", *goals, ""]
    return out
