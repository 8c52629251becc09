"""The bench's side of every scenario: one client, the operator under test, the loader.

:class:`Bench` owns the bench's client and the one operator process that runs at a time
(:meth:`Bench.start` is the only way a scenario starts one), makes the namespaces, loads
bundles from ``loader_threads`` threads, and measures an operator's steady memory.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.operators import cluster
from bench.operators.apiserver import AuditLog, wait_api_quiet
from bench.operators.observer import Observer
from bench.operators.procs import Operator, bench_python, cbop_revision
from bench.operators.sampling import CpuShare, Sampler, wait_cpu_quiet
from cbop.kube import CONFIGBUNDLES, ApiError, KubeClient, Resource

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Settings:
    """What every scenario shares (per-scenario options live with each scenario).

    Attributes:
        kubeconfig: the admin kubeconfig of the control plane.
        logs: where operator logs go.
        workers: concurrent reconciles of every operator (and the raw floor's threads).
        loader_threads: threads creating the bundles.
        steady_seconds: the window of a steady RSS figure.
        seed: of every random choice.
        profile: directory for py-spy's collapsed stacks of cbop (None: no profiling).
        profile_native: py-spy samples every running thread, native frames too (TLS,
            libcurl, the JSON codec), at 250 Hz, instead of the GIL holder at 100 Hz.
        audit: kube-apiserver's audit log.
        components: the control plane's process ids by component name
            (``ControlPlane.pids``), for their CPU seconds.
    """

    kubeconfig: Path
    logs: Path
    workers: int = 4
    loader_threads: int = 8
    steady_seconds: float = 10.0
    seed: int = 1
    profile: Path | None = None
    profile_native: bool = False
    audit: Path | None = None
    components: Callable[[], Mapping[str, int]] | None = None

    def record(self) -> dict[str, Any]:
        """The settings a results file records."""
        keys = ("workers", "loader_threads", "steady_seconds", "seed")
        return {k: getattr(self, k) for k in keys}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run_parallel(fn: Callable[[T], R], items: Iterable[T], threads: int) -> list[R]:
    """``fn`` over ``items`` on ``threads`` threads; the results in ``items``' order."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


class Profile:
    """py-spy sampling a process at 100 Hz into collapsed stacks, only threads holding the
    GIL, until :meth:`stop` (a no-op when nothing is profiled).

    With ``--gil`` the samples show where the process spends CPU in Python; threads
    waiting for the API server (the bulk of a worker's wall time) are left out.
    """

    def __init__(
        self, pid: int | None = None, out: Path | None = None, *, native: bool = False
    ) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        if pid is None or out is None:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        spy = Path(bench_python()).with_name("py-spy")
        rate = "250" if native else "100"
        cmd = [str(spy), "record", "--pid", str(pid), "--rate", rate, "--format", "raw"]
        # Native: every thread that is running (not waiting), C frames included, so CPU
        # spent without the GIL (TLS, libcurl, the kernel's side of syscalls) shows.
        mode = ["--native"] if native else ["--gil"]
        self._proc = subprocess.Popen(
            [*cmd, "--output", str(out), "--threads", *mode],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def active(self) -> bool:
        return self._proc is not None

    def stop(self, wait: float = 60.0) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            self._proc.wait(wait)
            self._proc = None


class Bench:
    """Runs scenarios against one control plane with one bench client."""

    def __init__(self, kube: KubeClient, settings: Settings) -> None:
        self.kube = kube
        self.s = settings
        self.current: Operator | None = None
        #: The commits the cbop processes started from (``+dirty``: with changes to src/).
        self.revisions: set[str] = set()
        self._seq = 0
        self.audit = AuditLog(settings.audit) if settings.audit else None

    def namespace(self, impl: str, scenario: str) -> str:
        """A fresh namespace ``bench-NN-<impl>-<scenario>``, made once the API is quiet."""
        wait_api_quiet(self.kube)
        self._seq += 1
        ns = f"bench-{self._seq:02d}-{impl}-{scenario}".lower().replace("_", "-")
        cluster.create_namespace(self.kube, ns, labels={"bench.cbop.dev": "1"}, settle=0.5)
        return ns

    def start(
        self,
        impl: str,
        log_name: str,
        *,
        namespace: str | None = None,
        kubeconfig: Path | None = None,
        workers: int | None = None,
        resync: float = 0.0,
        extra_args: Sequence[str] = (),
        wait: bool = True,
        ready_timeout: float = 120.0,
        current: bool = True,
    ) -> Operator:
        """Start the operator ``impl`` (see :class:`Operator`); its log is
        ``<logs>/<log_name>.log``.

        ``namespace``: the one it serves (None: all); ``kubeconfig``: whose credentials
        (default: the admin's); ``workers`` default to the settings'. It becomes the
        current operator (the one :meth:`stop` stops) unless ``current`` is False, and
        this returns once its readiness endpoint answers unless ``wait`` is False.
        Raises what :meth:`Operator.wait_ready` raises.
        """
        op = Operator(
            impl,
            kubeconfig or self.s.kubeconfig,
            namespace,
            workers=self.s.workers if workers is None else workers,
            resync=resync,
            log_path=self.s.logs / f"{log_name}.log",
            extra_args=extra_args,
        )
        if impl.startswith("cbop"):
            self.revisions.add(cbop_revision())
        if current:
            self.current = op
        if wait:
            op.wait_ready(ready_timeout)
        return op

    def stop(self) -> None:
        """Stop the current operator, if any."""
        if self.current is not None:
            self.current.stop()
            self.current = None

    def profile(self, op: Operator | None, name: str) -> Profile:
        """py-spy on ``op`` into ``<profile>/<name>.collapsed`` when ``--profile`` is set and
        ``op`` is cbop; otherwise a :class:`Profile` that does nothing."""
        if self.s.profile is None or op is None or not op.impl.startswith("cbop"):
            return Profile()
        return Profile(op.pid, self.s.profile / f"{name}.collapsed", native=self.s.profile_native)

    def cpu_share(self, **more: int) -> CpuShare:
        """CPU seconds of the control plane's processes, the machine, and ``more`` (name=pid)."""
        return CpuShare({**(self.s.components() if self.s.components else {}), **more})

    def steady(self, op: Operator) -> dict[str, float]:
        """Wait until ``op`` is quiet; its steady RSS over ``steady_seconds``, its peak
        RSS, and the seconds it took to become quiet (``settle_seconds``)."""
        sampler = Sampler(op.pid, interval=0.25).start()
        try:
            settle = wait_cpu_quiet(op.pid, timeout=180)
            since = time.monotonic()
            time.sleep(self.s.steady_seconds)
            steady = sampler.mean_rss_mib(since)
        finally:
            sampler.stop()
        return {"steady_mib": steady, "peak_mib": sampler.peak_mib(), "settle_seconds": settle}

    def delete_bundles(self, pairs: Sequence[tuple[str, str]], timeout: float = 300.0) -> None:
        """Delete the bundles ``(namespace, name)`` from ``loader_threads`` threads, then
        wait (at most ``timeout`` seconds) until no bundle is left in the cluster, so the
        operator still running can clear its finalizers."""
        kube = self.kube
        run_parallel(lambda p: kube.delete(CONFIGBUNDLES, p[0], p[1]), pairs, self.s.loader_threads)
        deadline = time.monotonic() + timeout
        while kube.list(CONFIGBUNDLES, None)["items"] and time.monotonic() < deadline:
            time.sleep(1.0)

    def delete_targets(
        self,
        resource: Resource,
        pairs: Sequence[tuple[str, str]],
        quiet: Collection[str] | None = None,
    ) -> None:
        """Delete the objects ``(namespace, name)`` of ``resource`` from ``loader_threads``
        threads (one already gone, e.g. taken by the garbage collector, is skipped), then
        wait until the API server is quiet (on ``quiet``'s resources when given)."""
        kube = self.kube

        def gone(p: tuple[str, str]) -> None:
            with contextlib.suppress(ApiError):
                kube.delete(resource, p[0], p[1])

        run_parallel(gone, pairs, self.s.loader_threads)
        if quiet is None:
            wait_api_quiet(kube)
        else:
            wait_api_quiet(kube, resources=quiet)

    def create_bundles(
        self,
        ns: str,
        items: Sequence[tuple[str, int]],
        sent: dict[str, float],
        then: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Create bundles ``(name, input index)`` from ``loader_threads`` threads; record
        each send time in ``sent``; hand each created bundle to ``then``."""
        kube = self.kube

        def one(item: tuple[str, int]) -> None:
            name, index = item
            body = cluster.bundle_body(name, index)
            sent[name] = time.monotonic()
            created = kube.create(CONFIGBUNDLES, ns, body)
            if then is not None:
                then(created)

        run_parallel(one, items, self.s.loader_threads)

    def canary(
        self, ns: str, observer: Observer, then: Callable[[dict[str, Any]], None] | None
    ) -> None:
        """Create the canary bundle and wait until it is done (the operator works)."""
        self.create_bundles(ns, [(cluster.CANARY, cluster.CANARY_INDEX)], {}, then)
        if not observer.wait_done([cluster.CANARY], 180):
            raise TimeoutError(f"canary bundle in {ns} never became Ready")
