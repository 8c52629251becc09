"""S8 (sharding): N bundles over N/10 namespaces, cbop sharded over 1, 2 and 3 replicas.

For each setup, in one run on one control plane (``ShardedListAndWatch`` on, as
envtest runs it by default):

- ``single``: one ``cbop --leader-elect`` process (today's single leader);
  every cbop runs ``--no-cluster-bundles`` (no ClusterConfigBundle CRD is installed);
- ``shards=3 x1``, ``x2``, ``x3``: that many ``cbop --leader-elect --shards=3`` processes
  (one group; each replica takes its share of the three shards).

The replicas are started and, for the sharded setups, left to balance the shards
(``cbop_shards_held`` summing to 3); then N bundles (S1's inputs, 10 per namespace,
namespaces made beforehand) are created by the loader threads. Measured: seconds from
the first create until every bundle is done (Ready, its ConfigMap correct, from a
cluster-wide watch), and per replica the CPU seconds spent meanwhile, the peak RSS
(VmHWM), the RSS once converged (mean over ``steady_seconds``) and the objects it
caches (``cbop_shard_objects``). The bundles and ConfigMaps are deleted between setups
(the namespaces stay), so every setup starts from empty namespaces.
"""

from __future__ import annotations

import hashlib
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.operators import cluster
from bench.operators.apiserver import wait_api_quiet
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.observer import Observer
from bench.operators.procs import Operator
from bench.operators.sampling import Sampler, cpu_seconds
from bench.operators.scenario import Defaults, Run
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient

SHARDS = 3
#: Bundles per namespace (the shard key is the namespace).
PER_NAMESPACE = 10
#: (label, replicas, extra cbop flags) of each setup, in the order they run.
SETUPS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("single", 1, ("--leader-elect",)),
    ("shards=3 x1", 1, ("--leader-elect", f"--shards={SHARDS}")),
    ("shards=3 x2", 2, ("--leader-elect", f"--shards={SHARDS}")),
    ("shards=3 x3", 3, ("--leader-elect", f"--shards={SHARDS}")),
)
#: Short Lease timings, so a group settles in seconds (as in the e2e tests).
TIMINGS = (
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
)


def _scrape(op: Operator) -> dict[str, float]:
    """``cbop_shards_held``, ``leader``, and cached ``bundles``/``configmaps`` (summed)."""
    url = f"http://127.0.0.1:{op.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {"held": 0.0, "leader": 0.0, "bundles": 0.0, "configmaps": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "cbop_shards_held":
                out["held"] = s.value
            elif s.name == "leader_election_master_status":
                out["leader"] = max(out["leader"], s.value)
            elif s.name == "cbop_shard_objects":
                kind = {"configbundles": "bundles", "configmaps": "configmaps"}.get(
                    s.labels.get("resource", "")
                )
                if kind is not None:
                    out[kind] += s.value
    return out


def _wait_working(ops: Sequence[Operator], sharded: bool, timeout: float = 120.0) -> None:
    """Wait until the single replica leads, or the group holds all shards, balanced."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scraped = [_scrape(op) for op in ops]
        if sharded:
            held = sorted((int(s["held"]) for s in scraped), reverse=True)
            want = sorted(
                (SHARDS // len(ops) + (1 if r < SHARDS % len(ops) else 0) for r in range(len(ops))),
                reverse=True,
            )
            if held == want:
                return
        elif scraped[0]["leader"] == 1.0:
            return
        time.sleep(0.5)
    raise TimeoutError("the replicas did not take up the work")


def names(n: int) -> list[str]:
    """The namespaces of S8 at ``n``: one per :data:`PER_NAMESPACE` bundles.

    Their names differ from the first character on: the shard hash's top bits barely
    move when only a name's tail changes (``s8-0001``, ``s8-0002``, ... share a shard).
    """
    return [
        f"{hashlib.sha256(f's8-{i}'.encode()).hexdigest()[:8]}-s8"
        for i in range(max(1, n // PER_NAMESPACE))
    ]


def _empty(kube: KubeClient, namespaces: Sequence[str], items: Sequence[tuple[str, int]]) -> float:
    """Delete the bundles and their ConfigMaps (not waiting for the garbage collector);
    return the seconds it took. The namespaces stay, for the next setup."""
    start = time.monotonic()

    def one(item: tuple[str, int]) -> None:
        name, i = item
        ns = namespaces[i // PER_NAMESPACE]
        for res in (CONFIGBUNDLES, CONFIGMAPS):
            try:
                kube.delete(res, ns, name)
            except ApiError as err:
                if not err.is_not_found:
                    raise

    run_parallel(one, items, 8)
    return time.monotonic() - start


def measure(
    bench: Bench,
    namespaces: Sequence[str],
    n: int,
    setup: tuple[str, int, tuple[str, ...]],
) -> dict[str, Any]:
    """Run one setup at ``n`` in empty ``namespaces``; return its record (per-replica
    figures under ``per_replica``) and leave the namespaces empty again.

    ``setup`` is one of :data:`SETUPS`: (label, replicas, cbop flags).
    """
    label, replicas, flags = setup
    tag = label.replace("=", "").replace(" ", "-")
    count = len(namespaces)
    items = [(f"cb-{i:05d}", i) for i in range(n)]
    expected = {name: cluster.expected(name, i) for name, i in items}
    wait_api_quiet(bench.kube)
    group = f"s8-{tag}"
    ops: list[Operator] = []
    samplers: list[Sampler] = []
    observer = Observer(bench.kube, None, expected)
    try:
        for r in range(replicas):
            ops.append(
                bench.start(
                    "cbop",
                    f"s8-{tag}-{n}-{r}",
                    extra_args=(
                        *flags,
                        # ConfigBundles only: no ClusterConfigBundle CRD is installed.
                        "--no-cluster-bundles",
                        "--leader-election-namespace=default",
                        f"--leader-election-id={group}",
                        *TIMINGS,
                    ),
                    wait=False,
                    current=False,
                )
            )
        for op in ops:
            op.wait_ready()
        _wait_working(ops, sharded=len(flags) > 1)
        observer.start()
        samplers = [Sampler(op.pid, interval=0.5).start() for op in ops]
        cpu0 = [cpu_seconds(op.pid) for op in ops]
        log(f"S8 {label} N={n}: loading {n} bundles into {count} namespaces")
        t0 = time.monotonic()

        def one(item: tuple[str, int]) -> None:
            name, i = item
            bench.kube.create(
                CONFIGBUNDLES, namespaces[i // PER_NAMESPACE], cluster.bundle_body(name, i)
            )

        run_parallel(one, items, bench.s.loader_threads)
        names = [name for name, _ in items]
        complete = observer.wait_done(names, timeout=180 + 0.6 * n)
        done = [t for t in observer.done_times().values() if t is not None]
        seconds = (max(done) - t0) if done else float("nan")
        cpu1 = [cpu_seconds(op.pid) for op in ops]
        steady_from = time.monotonic()
        time.sleep(bench.s.steady_seconds)
        per_replica: list[dict[str, Any]] = []
        for op, sampler, c0, c1 in zip(ops, samplers, cpu0, cpu1, strict=True):
            scraped = _scrape(op)
            per_replica.append(
                {
                    "cpu_seconds": c1 - c0,
                    "peak_mib": sampler.peak_mib(),
                    "steady_mib": sampler.mean_rss_mib(steady_from),
                    "shards": scraped["held"] if len(flags) > 1 else None,
                    "bundles": scraped["bundles"] if len(flags) > 1 else None,
                    "configmaps": scraped["configmaps"] if len(flags) > 1 else None,
                }
            )
    finally:
        observer.stop()
        for sampler in samplers:
            sampler.stop()
        for op in ops:
            op.stop()
    deleted = _empty(bench.kube, namespaces, items)
    record = {
        "setup": label,
        "replicas": replicas,
        "n": n,
        "namespaces": count,
        "complete": complete,
        "converged": len(done),
        "converge_seconds": seconds,
        "cpu_seconds_total": sum(r["cpu_seconds"] for r in per_replica),
        "per_replica": per_replica,
        "cleanup_seconds": deleted,
    }
    log(
        f"S8 {label} N={n}: {len(done)}/{n} in {seconds:.1f} s; CPU s "
        + ", ".join(f"{r['cpu_seconds']:.1f}" for r in per_replica)
        + "; steady MiB "
        + ", ".join(f"{r['steady_mib']:.0f}" for r in per_replica)
    )
    return record


def run(bench: Bench, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Every setup at every N, in :data:`SETUPS` order, in one set of namespaces per N
    (left for the control plane's teardown)."""
    out = []
    for n in sizes:
        namespaces = names(n)
        run_parallel(
            lambda ns: cluster.create_namespace(
                bench.kube, ns, labels={"bench.cbop.dev": "1"}, settle=0.5
            ),
            namespaces,
            8,
        )
        out += [measure(bench, namespaces, n, setup) for setup in SETUPS]
    return out


@dataclass(frozen=True)
class Options:
    """Attributes: n: the sizes, in order."""

    n: tuple[int, ...] = (10_000,)


class Sharding(Defaults):
    """S8: cbop alone, single leader and sharded, at every N of ``n``."""

    names = ("s8",)
    defaults = Options()

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S8: cbop sharded")
        run_.results["s8"] = run(run_.bench, list(options.n))

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return markdown(results)


SHARDING = Sharding()


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S8 section of the results file (none when it did not run)."""
    rows = results.get("s8") or []
    if not rows:
        return []
    out = [
        "### S8 sharding: N bundles in N/10 namespaces, single leader vs "
        f"`--shards {SHARDS}` over 1-3 replicas",
        "",
        "| setup | N | converge s | CPU s (all replicas) | replica | shards | bundles cached "
        "| CPU s | peak RSS MiB | steady RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        for i, r in enumerate(row["per_replica"]):
            first = i == 0
            cells = [
                row["setup"] if first else "",
                f"{row['n']:,}" if first else "",
                f"{row['converge_seconds']:.1f}" if first else "",
                f"{row['cpu_seconds_total']:.1f}" if first else "",
                str(i + 1),
                _num(r.get("shards"), ".0f"),
                _num(r.get("bundles"), ",.0f"),
                f"{r['cpu_seconds']:.1f}",
                f"{r['peak_mib']:.1f}",
                f"{r['steady_mib']:.1f}",
            ]
            out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]
