"""S6 (restart with a new bundle) and S7 (scale): N converged bundles and a restart.

For each implementation and N (``n``, default 10,000):

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

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import wait_api_quiet
from bench.operators.harness import Bench, log
from bench.operators.observer import Observer
from bench.operators.sampling import Sampler, wait_cpu_quiet
from bench.operators.scenario import Defaults, Run
from bench.operators.scenarios.burst import burst
from bench.operators.tables import busy, by, ratio_goal, verdict
from cbop.kube import CONFIGBUNDLES

#: Implementations the scale scenarios run (kopf takes hours at N = 10,000).
IMPLS = ("raw", "cbop", "controller-runtime")
NEW = "s6-new"
NEW_INDEX = 2_000_000
#: Seconds after the operator's process start at which the new bundle is created.
NEW_AFTER = 1.0
#: The quiet-window of :func:`wait_cpu_quiet` (seconds), subtracted from its wait.
_QUIET_WINDOW = 3.0


@dataclass(frozen=True)
class Options:
    """Attributes: n: the sizes, in order."""

    n: tuple[int, ...] = (10_000,)


def measure(bench: Bench, impl: str, n: int) -> dict[str, Any]:
    """Run S7 (and, for operators, the restart with S6) at ``n``; return the record."""
    converged = burst(bench, impl, n, keep=impl != "raw")
    record: dict[str, Any] = {
        "impl": impl,
        "n": n,
        "complete": converged["complete"],
        "converge_seconds": converged["seconds"],
        "converge_cpu_seconds": converged["cpu_seconds"],
        "converge_cpu_share": converged.get("cpu_share", {}),
        "burst_peak_mib": converged.get("peak_rss_mib"),
        "converge_requests": converged["requests"],
    }
    if impl == "raw":
        return record
    bench.stop()
    ns = converged["namespace"]
    try:
        record |= restart(bench, impl, ns, n)
    finally:
        bench.stop()
        cluster.delete_namespace(bench.kube, ns, timeout=cluster.deletion_timeout(n))
    return record


def restart(bench: Bench, impl: str, ns: str, n: int) -> dict[str, Any]:
    """Start ``impl`` on ``ns``'s ``n`` converged bundles, create one more 1 s in."""
    expected = cluster.expectations(n)
    expected[NEW] = cluster.expected(NEW, NEW_INDEX)
    wait_api_quiet(bench.kube)
    observer = Observer(bench.kube, ns, expected).start()
    try:
        op = bench.start(impl, f"{ns}-restart", namespace=ns, wait=False)
        sampler = Sampler(op.pid, interval=0.25).start()
        spy = bench.profile(op, f"{impl}-s7-restart-{n}")
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
            waited = wait_cpu_quiet(op.pid, timeout=180 + 0.05 * n)
            spy.stop()
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


class Scale(Defaults):
    """S6 and S7, per implementation, at every N of ``n``."""

    names = ("s6", "s7")
    per_implementation = True
    defaults = Options()

    def accepts(self, impl: str) -> bool:
        return impl in IMPLS

    def run(self, run: Run, options: Options, impl: str | None) -> None:
        assert impl is not None
        for n in options.n:
            run.append("scale", measure(run.bench, impl, n))

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        rows = results.get("scale") or []
        if not rows:
            return []
        out = [
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
            share = r.get("converge_cpu_share") or {}
            out.append(
                f"| {r['impl']} | {r['n']:,} | {r['converge_seconds']:.1f} "
                f"| {_num(r['converge_seconds'] / floor if floor else None, '.2f')}x "
                f"| {r['converge_cpu_seconds']:.1f} | {_num(share.get('kube-apiserver'), '.1f')} "
                f"| {busy(share)} | {_num(r.get('new_bundle_ready_seconds'), '.2f')} "
                f"| {_num(r.get('restart_to_quiet_seconds'), '.1f')} "
                f"| {_num(r.get('steady_mib'), '.1f')} | {_num(r.get('restart_peak_mib'), '.1f')} |"
            )
        return [*out, ""]

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        peer = "controller-runtime"
        scale = by(results.get("scale") or [], "impl", "n")
        for (impl, size), rec in sorted(scale.items()):
            if impl != "cbop":
                continue
            raw, other = scale.get(("raw", size)), scale.get((peer, size))
            if raw:
                out += ratio_goal(
                    f"S7 converge seconds at N = {size:,}, cbop / raw",
                    rec["converge_seconds"],
                    raw["converge_seconds"],
                    1.15,
                )
            if other:
                for field, text in (
                    ("steady_mib", "S7 steady RSS MiB"),
                    ("restart_to_quiet_seconds", "S7 restart-to-quiet seconds"),
                    ("new_bundle_ready_seconds", "S6 new bundle Ready seconds"),
                ):
                    out += ratio_goal(
                        f"{text} at N = {size:,}, cbop / {peer}",
                        rec.get(field),
                        other.get(field),
                        1.0,
                    )
            ready = rec.get("new_bundle_ready_seconds")
            if ready is not None:
                out.append(
                    f"- S6 new bundle Ready within 2 s at N = {size:,}: {ready:.2f} s — "
                    f"{verdict(ready <= 2.0)}"
                )
        return out


SCALE = Scale()
