"""The scenarios: S1 burst (+S5 API cost, S4 burst peak), S2 drift heal, S3 idle, S4 memory."""

from __future__ import annotations

import queue
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.operators import cluster
from bench.operators.cluster import RequestCounts
from bench.operators.procs import (
    CpuShare,
    Operator,
    Sampler,
    bench_python,
    cbop_revision,
    cpu_seconds,
    wait_quiet,
)
from bench.operators.watch import Observer
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, KubeClient

CANARY = "canary"
CANARY_INDEX = 1_000_000
#: KubeClient verbs -> kube-apiserver's verb label.
_VERBS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}
_VERBS |= {"get": "GET", "list": "LIST", "watch": "WATCH"}


@dataclass
class Settings:
    kubeconfig: Path
    logs: Path
    workers: int = 4
    loader_threads: int = 8
    resync_idle: float = 10.0
    idle_seconds: float = 300.0
    heal_bundles: int = 1000
    heal_patches: int = 200
    heal_rate: float = 20.0
    unrelated: int = 10_000
    steady_seconds: float = 10.0
    seed: int = 1
    profile: Path | None = None
    audit: Path | None = None
    #: The control plane's process ids by component name (``ControlPlane.pids``); S1
    #: records their CPU seconds and the machine's during each burst.
    components: Callable[[], Mapping[str, int]] | None = None


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def names_for(n: int) -> list[str]:
    return [f"cb-{i:05d}" for i in range(n)]


def expectations(n: int) -> dict[str, cluster.Expected]:
    out = {name: cluster.expected(name, i) for i, name in enumerate(names_for(n))}
    out[CANARY] = cluster.expected(CANARY, CANARY_INDEX)
    return out


def profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` at 100 Hz into collapsed stacks, only threads holding the GIL.

    With ``--gil`` the samples show where the process spends CPU in Python; threads
    waiting for the API server (the bulk of a worker's wall time) are left out.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = Path(bench_python()).with_name("py-spy")
    cmd = [str(spy), "record", "--pid", str(pid), "--rate", "100", "--format", "raw"]
    return subprocess.Popen(
        [*cmd, "--output", str(out), "--threads", "--gil"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _nothing() -> None:
    pass


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def own_requests(
    before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]
) -> RequestCounts:
    """The bench client's own requests between two snapshots, keyed like the apiserver's."""
    out: RequestCounts = {}
    for (verb, resource), count in after.items():
        diff = count - before.get((verb, resource), 0)
        if diff:
            res, _, sub = resource.partition("/")
            key = (_VERBS.get(verb, verb.upper()), res, sub)
            out[key] = out.get(key, 0.0) + diff
    return out


def subtract(total: RequestCounts, own: RequestCounts) -> RequestCounts:
    out = {k: v - own.get(k, 0.0) for k, v in total.items()}
    return {k: v for k, v in out.items() if v > 0}


class Bench:
    """Runs scenarios against one control plane with one bench client."""

    def __init__(self, kube: KubeClient, settings: Settings) -> None:
        self.kube = kube
        self.s = settings
        self.current: Operator | None = None
        self.revisions: set[str] = set()
        self._seq = 0
        self.audit = cluster.AuditTail(settings.audit) if settings.audit else None

    # ----------------------------------------------------------------- plumbing

    def namespace(self, impl: str, scenario: str) -> str:
        cluster.wait_api_quiet(self.kube)
        self._seq += 1
        ns = f"bench-{self._seq:02d}-{impl}-{scenario}".lower().replace("_", "-")
        cluster.create_namespace(self.kube, ns)
        return ns

    def start(self, impl: str, ns: str, *, resync: float = 0.0, tag: str = "") -> Operator:
        log_path = self.s.logs / f"{ns}{tag}.log"
        op = Operator(
            impl, self.s.kubeconfig, ns, workers=self.s.workers, resync=resync, log_path=log_path
        )
        if impl.startswith("cbop"):
            self.revisions.add(cbop_revision())
        self.current = op
        op.wait_ready()
        return op

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None

    def create_bundles(
        self,
        ns: str,
        items: Sequence[tuple[str, int]],
        sent: dict[str, float],
        then: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Create bundles from ``loader_threads`` threads; record each send time."""
        kube = self.kube

        def one(item: tuple[str, int]) -> None:
            name, index = item
            body = cluster.bundle_body(name, index)
            sent[name] = time.monotonic()
            created = kube.create(CONFIGBUNDLES, ns, body)
            if then is not None:
                then(created)

        with ThreadPoolExecutor(self.s.loader_threads, thread_name_prefix="loader") as pool:
            for _ in pool.map(one, items):
                pass

    def canary(
        self, ns: str, observer: Observer, then: Callable[[dict[str, Any]], None] | None
    ) -> None:
        self.create_bundles(ns, [(CANARY, CANARY_INDEX)], {}, then)
        if not observer.wait_done([CANARY], 180):
            raise TimeoutError(f"canary bundle in {ns} never became Ready")

    # ----------------------------------------------------------------- raw floor

    def raw_workers(
        self, ns: str, expected: dict[str, cluster.Expected]
    ) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
        """The floor: ``workers`` threads doing only the writes an operator must do."""
        raw = cluster.client(self.s.kubeconfig)
        work: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def worker() -> None:
            while (bundle := work.get()) is not None:
                name = bundle["metadata"]["name"]
                want = expected[name]
                raw.create(CONFIGMAPS, ns, cluster.configmap_body(bundle, name, want))
                raw.patch(
                    CONFIGBUNDLES,
                    ns,
                    name,
                    {"status": cluster.ready_status(bundle, name, want)},
                    subresource="status",
                )

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.s.workers)]
        for t in threads:
            t.start()

        def close() -> None:
            for _ in threads:
                work.put(None)
            for t in threads:
                t.join(30)
            raw.close()

        return work.put, close

    # ----------------------------------------------------------------------- S1

    def burst(self, impl: str, n: int, *, keep: bool = False) -> dict[str, Any]:
        """S1 (and S5): create ``n`` bundles, time until all are done. Returns the record."""
        ns = self.namespace(impl, f"s1-{n}")
        expected = expectations(n)
        names = names_for(n)
        feed: Callable[[dict[str, Any]], None] | None = None
        close_raw: Callable[[], None] = _nothing
        op = None
        ready_s = 0.0
        if impl == "raw":
            feed, close_raw = self.raw_workers(ns, expected)
        else:
            op = self.start(impl, ns)
            ready_s = time.monotonic() - op.started
        observer = Observer(self.kube, ns, expected).start()
        sampler = Sampler(op.pid).start() if op is not None else None
        try:
            self.canary(ns, observer, feed)
            before = cluster.apiserver_requests(self.kube)
            own_before = self.kube.request_counts()
            if self.audit is not None:
                self.audit.mark()
            cpu0 = cpu_seconds(op.pid) if op else 0.0
            share = CpuShare(self.s.components() if self.s.components else {})
            sent: dict[str, float] = {}
            spy = None
            if self.s.profile is not None and op is not None and impl.startswith("cbop"):
                spy = profiler(op.pid, self.s.profile / f"{impl}-s1-{n}.collapsed")
            t0 = time.monotonic()
            log(f"S1 {impl} N={n}: loading ({ns})")
            self.create_bundles(ns, [(name, i) for i, name in enumerate(names)], sent, feed)
            loaded = time.monotonic() - t0
            complete = observer.wait_done(names, timeout=120 + 0.6 * n)
            done = observer.done_times()
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            time.sleep(1.0)  # let trailing requests be counted
            cpu1 = cpu_seconds(op.pid) if op else 0.0
            shares = share.stop()
            own = own_requests(own_before, self.kube.request_counts())
            api = subtract(cluster.delta(cluster.apiserver_requests(self.kube), before), own)
            gets = self.audit.gets() if self.audit is not None else {}
            # The garbage collector GETs owners it has not seen yet; not the operator's.
            for who, count in gets.items():
                agent, _, resource = who.partition(" ")
                if agent == "kube-controller-manager":
                    api = subtract(api, {("GET", resource, ""): float(count)})
        finally:
            observer.stop()
            if sampler is not None:
                sampler.stop()
            close_raw()
        finished: list[float] = []
        latencies: list[float] = []
        for x in names:
            t = done[x]
            if t is not None:
                finished.append(t)
                latencies.append(t - sent[x])
        total = (max(finished) - t0) if finished else float("nan")
        record: dict[str, Any] = {
            "impl": impl,
            "n": n,
            "namespace": ns,
            "complete": complete,
            "converged": len(finished),
            "seconds": total,
            "load_seconds": loaded,
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
            "ready_seconds": ready_s,
            "cpu_seconds": cpu1 - cpu0,
            "cpu_share": shares,
            "requests": {"|".join(k): v for k, v in sorted(api.items())},
            "gets_by_client": gets,
            "latencies": sorted(latencies),
        }
        if sampler is not None:
            record["peak_rss_mib"] = sampler.peak_mib()
        log(
            f"S1 {impl} N={n}: {len(finished)}/{n} in {total:.2f} s "
            f"(p50 {record['p50']:.3f} s, p99 {record['p99']:.3f} s)"
        )
        if not keep:
            self.stop()
            cluster.delete_namespace(self.kube, ns, timeout=cluster.deletion_timeout(n))
        return record

    # ----------------------------------------------------------------------- S4

    def memory(self, impl: str, ns: str, label: str) -> dict[str, Any]:
        """Start a fresh operator on a converged namespace; peak and steady RSS."""
        op = self.start(impl, ns, tag=f"-{label}")
        sampler = Sampler(op.pid, interval=0.25).start()
        try:
            quiet = wait_quiet(op.pid, timeout=180)
            steady_from = time.monotonic()
            time.sleep(self.s.steady_seconds)
            steady = sampler.mean_rss_mib(steady_from)
        finally:
            sampler.stop()
            self.stop()
        peak = sampler.peak_mib()
        log(
            f"S4 {impl} {label}: peak {peak:.1f} MiB, steady {steady:.1f} MiB "
            f"(quiet after {quiet:.0f} s)"
        )
        return {
            "impl": impl,
            "label": label,
            "peak_mib": peak,
            "steady_mib": steady,
            "settle_seconds": quiet,
        }

    def unrelated(self, count: int) -> str:
        ns = self.namespace("unrelated", "cms")
        kube = self.kube

        def one(i: int) -> None:
            body = {
                "metadata": {"name": f"other-{i:05d}", "labels": {"app": "unrelated"}},
                "data": {"config.yaml": f"id: {i}\n" + "x: y\n" * 100},
            }
            kube.create(CONFIGMAPS, ns, body)

        start = time.monotonic()
        with ThreadPoolExecutor(self.s.loader_threads) as pool:
            for _ in pool.map(one, range(count)):
                pass
        log(f"created {count} unrelated ConfigMaps in {ns} in {time.monotonic() - start:.1f} s")
        return ns

    # ----------------------------------------------------------------------- S2/S3

    def heal_and_idle(self, impl: str) -> tuple[dict[str, Any], dict[str, Any]]:
        n, count = self.s.heal_bundles, self.s.heal_patches
        ns = self.namespace(impl, "s2")
        expected = expectations(n)
        names = names_for(n)
        self.start(impl, ns)
        observer = Observer(self.kube, ns, expected).start()
        try:
            self.canary(ns, observer, None)
            log(f"S2 {impl}: converging {n} bundles ({ns})")
            self.create_bundles(ns, [(name, i) for i, name in enumerate(names)], {})
            if not observer.wait_done(names, timeout=120 + 0.6 * n):
                raise TimeoutError(f"S2 {impl}: {n} bundles did not converge")
            victims = random.Random(self.s.seed).sample(names, count)
            sent: dict[str, float] = {}
            t0 = time.monotonic()
            for i, name in enumerate(victims):
                pause = t0 + i / self.s.heal_rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                observer.arm_drift(name)
                sent[name] = time.monotonic()
                self.kube.patch(CONFIGMAPS, ns, name, {"data": {"index": "drifted"}})
            observer.wait_healed(victims, timeout=120)
            healed = observer.healed_times()
        finally:
            observer.stop()
            self.stop()
        latencies = [t - sent[x] for x in victims if (t := healed.get(x)) is not None]
        heal = {
            "impl": impl,
            "n": n,
            "patches": count,
            "healed": len(latencies),
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
            "max": max(latencies, default=float("nan")),
            "latencies": sorted(latencies),
        }
        log(
            f"S2 {impl}: {len(latencies)}/{count} healed, "
            f"p50 {heal['p50']:.3f} s, p99 {heal['p99']:.3f} s"
        )

        cluster.wait_api_quiet(self.kube)
        at_start = cluster.apiserver_requests(self.kube)
        op = self.start(impl, ns, resync=self.s.resync_idle, tag="-idle")
        try:
            settle = wait_quiet(op.pid, timeout=120)
            before = cluster.apiserver_requests(self.kube)
            startup = cluster.delta(before, at_start)
            own_before = self.kube.request_counts()
            cpu0 = cpu_seconds(op.pid)
            spy = None
            if self.s.profile is not None and impl.startswith("cbop"):
                spy = profiler(op.pid, self.s.profile / f"{impl}-s3-idle.collapsed")
            log(f"S3 {impl}: idle {self.s.idle_seconds:.0f} s with resync {self.s.resync_idle:g} s")
            time.sleep(self.s.idle_seconds)
            cpu1 = cpu_seconds(op.pid)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            own = own_requests(own_before, self.kube.request_counts())
            api = subtract(cluster.delta(cluster.apiserver_requests(self.kube), before), own)
        finally:
            self.stop()
        cluster.delete_namespace(self.kube, ns)
        writes = {
            k: v
            for k, v in api.items()
            if k[0] in cluster.WRITE_VERBS and k[1] in cluster.BUNDLE_RESOURCES
        }
        idle = {
            "impl": impl,
            "n": n + 1,
            "seconds": self.s.idle_seconds,
            "resync": self.s.resync_idle,
            "settle_seconds": settle,
            "cpu_seconds": cpu1 - cpu0,
            "writes": sum(writes.values()),
            "requests": {"|".join(k): v for k, v in sorted(api.items())},
            "startup_writes": sum(
                v
                for k, v in startup.items()
                if k[0] in cluster.WRITE_VERBS and k[1] in cluster.BUNDLE_RESOURCES
            ),
        }
        log(f"S3 {impl}: {idle['writes']:.0f} writes, {idle['cpu_seconds']:.2f} CPU s")
        return heal, idle
