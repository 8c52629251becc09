"""S6 (restart with a new bundle) and S7 (scale): N converged bundles and a restart.

For each implementation and N (``--scale-n``, default 10,000):

- **S7 converge**: N bundles created by the loader threads (S1's burst at N); seconds
  until every one is done, compared with the raw floor's at the same N.
- Then a fresh operator is started on the N converged bundles (the one that converged
  them is stopped first), and 1 s after its process started one new bundle is created:
- **S6**: seconds from that create request to the new bundle being done (Ready, its
  ConfigMap correct). An operator that works through the N keys of its initial list in
  order makes the new bundle wait behind them; a priority queue does not.
- **S7 restart-to-quiet**: seconds from the process start until it uses under 3 % of a
  core over 3 s (the start of that window, from CPU samples every 0.25 s; the coarse
  figure of whole 3 s windows polled after the new bundle is done is kept as
  ``restart_to_quiet_coarse_seconds``); then **steady RSS** (mean VmRSS over 10 s) and
  the peak RSS of the restart.

The raw floor has no restart; it runs the converge step only.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from bench.operators import cluster
from bench.operators.procs import Operator, Sampler, cbop_revision, wait_quiet
from bench.operators.scenarios import Bench, expectations, log, profiler
from bench.operators.watch import Observer
from cbop.kube import CONFIGBUNDLES

SCENARIOS = frozenset({"s6", "s7"})
#: Implementations the scale scenarios run (kopf takes hours at N = 10,000).
IMPLS = ("raw", "cbop", "controller-runtime")
NEW = "s6-new"
NEW_INDEX = 2_000_000
#: Seconds after the operator's process start at which the new bundle is created.
NEW_AFTER = 1.0
#: The quiet-window of :func:`wait_quiet` (seconds), subtracted from its wait.
_QUIET_WINDOW = 3.0


def measure(bench: Bench, impl: str, n: int) -> dict[str, Any]:
    """Run S7 (and, for operators, the restart with S6) at ``n``; return the record."""
    burst = bench.burst(impl, n, keep=impl != "raw")
    record: dict[str, Any] = {
        "impl": impl,
        "n": n,
        "complete": burst["complete"],
        "converge_seconds": burst["seconds"],
        "converge_cpu_seconds": burst["cpu_seconds"],
        "converge_cpu_share": burst.get("cpu_share", {}),
        "burst_peak_mib": burst.get("peak_rss_mib"),
    }
    if impl == "raw":
        return record
    bench.stop()
    ns = burst["namespace"]
    try:
        record |= restart(bench, impl, ns, n)
    finally:
        bench.stop()
        cluster.delete_namespace(bench.kube, ns, timeout=cluster.deletion_timeout(n))
    return record


def restart(bench: Bench, impl: str, ns: str, n: int) -> dict[str, Any]:
    """Start ``impl`` on ``ns``'s ``n`` converged bundles, create one more 1 s in."""
    expected = expectations(n)
    expected[NEW] = cluster.expected(NEW, NEW_INDEX)
    cluster.wait_api_quiet(bench.kube)
    observer = Observer(bench.kube, ns, expected).start()
    try:
        op = Operator(
            impl,
            bench.s.kubeconfig,
            ns,
            workers=bench.s.workers,
            resync=0.0,
            log_path=bench.s.logs / f"{ns}-restart.log",
        )
        if impl.startswith("cbop"):
            bench.revisions.add(cbop_revision())
        bench.current = op
        sampler = Sampler(op.pid, interval=0.25).start()
        spy = None
        if bench.s.profile is not None and impl.startswith("cbop"):
            spy = profiler(op.pid, bench.s.profile / f"{impl}-s7-restart-{n}.collapsed")
        try:
            pause = op.started + NEW_AFTER - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sent = time.monotonic()
            bench.kube.create(CONFIGBUNDLES, ns, cluster.bundle_body(NEW, NEW_INDEX))
            if not observer.wait_done([NEW], timeout=120 + 0.1 * n):
                raise TimeoutError(f"S6 {impl}: the new bundle never became Ready")
            done = observer.done_times()[NEW]
            assert done is not None
            new_ready = done - sent
            ready_after = op.wait_ready()
            waited = wait_quiet(op.pid, timeout=180 + 0.05 * n)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            coarse = time.monotonic() - _QUIET_WINDOW - op.started
            steady_from = time.monotonic()
            time.sleep(bench.s.steady_seconds)
            steady = sampler.mean_rss_mib(steady_from)
            fine = sampler.quiet_from(op.started + ready_after)
            quiet = coarse if fine is None else min(coarse, fine - op.started)
        finally:
            sampler.stop()
    finally:
        observer.stop()
    log(
        f"S6 {impl} N={n}: new bundle Ready {new_ready:.2f} s after its create; "
        f"S7 restart quiet after {quiet:.1f} s, steady {steady:.1f} MiB "
        f"(peak {sampler.peak_mib():.1f} MiB)"
    )
    return {
        "new_bundle_ready_seconds": new_ready,
        "ready_endpoint_seconds": ready_after,
        "restart_to_quiet_seconds": quiet,
        "restart_to_quiet_coarse_seconds": coarse,
        "quiet_wait_seconds": waited,
        "steady_mib": steady,
        "restart_peak_mib": sampler.peak_mib(),
    }


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _busy(share: dict[str, float]) -> str:
    """The machine's busy share of its CPU during a burst, e.g. ``"97 %"`` (``-`` unknown)."""
    total = share.get("machine total")
    if not total:
        return "-"
    return f"{100 * share.get('machine busy', 0.0) / total:.0f} %"


def markdown(results: dict[str, Any]) -> str:
    """The S6/S7 section of the results file ("" when they did not run)."""
    rows = results.get("scale") or []
    if not rows:
        return ""
    out = [
        "",
        "### S6 restart with N converged bundles, one new bundle 1 s after start; "
        "S7 converge, restart and memory at large N",
        "",
        "| implementation | N | converge s | / raw | CPU s | kube-apiserver CPU s "
        "| machine busy | new bundle Ready s (S6) "
        "| restart-to-quiet s | steady RSS MiB | restart peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    raw = {r["n"]: r["converge_seconds"] for r in rows if r["impl"] == "raw"}
    for r in rows:
        floor = raw.get(r["n"])
        ratio = r["converge_seconds"] / floor if floor else None
        share = r.get("converge_cpu_share") or {}
        out.append(
            f"| {r['impl']} | {r['n']:,} | {r['converge_seconds']:.1f} | {_num(ratio, '.2f')}x "
            f"| {r['converge_cpu_seconds']:.1f} | {_num(share.get('kube-apiserver'), '.1f')} "
            f"| {_busy(share)} | {_num(r.get('new_bundle_ready_seconds'), '.2f')} "
            f"| {_num(r.get('restart_to_quiet_seconds'), '.1f')} "
            f"| {_num(r.get('steady_mib'), '.1f')} | {_num(r.get('restart_peak_mib'), '.1f')} |"
        )
    return "\n".join(out) + "\n"
