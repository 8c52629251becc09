"""Benchmark cbop.workqueue against the standard library's queue.Queue.

Run from the repository root (``PYTHONPATH=src`` unless cbop is installed)::

    python -m bench.workqueue [--cycles N] [--threads 1,4,16] [--repeat R] [--keys K]

Throughput: each of T worker threads loops ``add(key) -> get() -> done(item)`` over its
share of N distinct pre-built keys (``put -> get -> task_done`` for queue.Queue), all
threads on one queue; reported as cycles per second, best of R runs. cbop runs an
unnamed ``RateLimitingQueue`` (what a controller uses, no metrics) and, for reference,
a named one exporting Prometheus metrics to a private registry.

Memory: K distinct keys queued, each queue measured in a fresh subprocess: the
tracemalloc peak while filling the queue and the growth of the process's RSS. The keys
themselves are built before measuring, so only the queue's own structures count.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from cbop.workqueue import RateLimitingQueue

Worker = Callable[[Sequence[str]], None]
Close = Callable[[], None]


def make_stdlib() -> tuple[Worker, Close]:
    q: queue.Queue[str] = queue.Queue()

    def work(keys: Sequence[str]) -> None:
        put, get, task_done = q.put, q.get, q.task_done
        for key in keys:
            put(key)
            get()
            task_done()

    return work, lambda: None


def make_cbop(*, metrics: bool = False) -> tuple[Worker, Close]:
    if metrics:
        provider = PrometheusWorkqueueMetricsProvider(CollectorRegistry())
        q = RateLimitingQueue[str](name="bench", metrics_provider=provider)
    else:
        q = RateLimitingQueue[str]()

    def work(keys: Sequence[str]) -> None:
        add, get, done = q.add, q.get, q.done
        for key in keys:
            add(key)
            item, _ = get()
            done(item)  # type: ignore[arg-type]  # never None: the queue is not shut down

    return work, q.shut_down


MAKERS: dict[str, Callable[[], tuple[Worker, Close]]] = {
    "queue.Queue": make_stdlib,
    "cbop": make_cbop,
    "cbop+prometheus": lambda: make_cbop(metrics=True),
}


def run_once(make: Callable[[], tuple[Worker, Close]], threads: int, keys: list[str]) -> float:
    """Return cycles per second for one run with ``threads`` workers."""
    work, close = make()
    shares = [keys[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def worker(share: Sequence[str]) -> None:
        barrier.wait()
        work(share)

    pool = [threading.Thread(target=worker, args=(share,)) for share in shares]
    for thread in pool:
        thread.start()
    gc.collect()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - start
    close()
    return len(keys) / elapsed


def throughput(cycles: int, thread_counts: list[int], repeat: int) -> None:
    keys = [f"ns/bundle-{i}" for i in range(cycles)]
    print(f"### Throughput: add -> get -> done cycles/s ({cycles:,} cycles, best of {repeat})")
    print()
    print(
        "| workers | queue.Queue | cbop | cbop / queue.Queue "
        "| cbop+prometheus | cbop+prometheus / queue.Queue |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for threads in thread_counts:
        best: dict[str, float] = {name: 0.0 for name in MAKERS}
        for _ in range(repeat):
            for name, make in MAKERS.items():  # interleaved, so load drifts hit all alike
                best[name] = max(best[name], run_once(make, threads, keys))
        base = best["queue.Queue"]
        print(
            f"| {threads} | {base:,.0f} | {best['cbop']:,.0f} | {best['cbop'] / base:.2f}x "
            f"| {best['cbop+prometheus']:,.0f} | {best['cbop+prometheus'] / base:.2f}x |"
        )
    print()


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; else peak RSS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fill(kind: str, keys: list[str]) -> object:
    if kind == "cbop":
        q = RateLimitingQueue[str]()
        add = q.add
        for key in keys:
            add(key)
        return q
    stdlib: queue.Queue[str] = queue.Queue()
    put = stdlib.put
    for key in keys:
        put(key)
    return stdlib


def memory_child(kind: str, count: int) -> None:
    """Measure one queue kind holding ``count`` keys; print a JSON line."""
    keys = [f"ns/bundle-{i}" for i in range(count)]
    gc.collect()
    before = rss_bytes()
    q = fill(kind, keys)
    gc.collect()
    rss_delta = rss_bytes() - before
    del q
    gc.collect()
    tracemalloc.start()
    q = fill(kind, keys)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del q
    print(json.dumps({"rss_delta": rss_delta, "peak": peak}))


def memory(count: int) -> None:
    print(f"### Memory: {count:,} distinct keys queued (keys themselves excluded)")
    print()
    print("| queue | tracemalloc peak | per key | RSS delta |")
    print("|---|---:|---:|---:|")
    results: dict[str, dict[str, int]] = {}
    for kind in ("queue.Queue", "cbop"):
        out = subprocess.run(
            [sys.executable, "-m", "bench.workqueue", "--memory-child", kind, "--keys", str(count)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[kind] = json.loads(out.strip().splitlines()[-1])
        peak, rss = results[kind]["peak"], results[kind]["rss_delta"]
        print(f"| {kind} | {peak / 2**20:.1f} MiB | {peak / count:.0f} B | {rss / 2**20:.1f} MiB |")
    ratio = results["cbop"]["peak"] / results["queue.Queue"]["peak"]
    print()
    print(f"cbop / queue.Queue tracemalloc peak: {ratio:.1f}x")
    print()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=50_000, help="cycles per run")
    parser.add_argument("--threads", default="1,4,16", help="comma-separated worker counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; best is kept")
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys for the memory test")
    parser.add_argument("--skip-memory", action="store_true", help="throughput only")
    parser.add_argument("--skip-throughput", action="store_true", help="memory only")
    parser.add_argument("--memory-child", choices=("cbop", "queue.Queue"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child, args.keys)
        return
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print()
    if not args.skip_throughput:
        throughput(args.cycles, [int(t) for t in args.threads.split(",")], args.repeat)
    if not args.skip_memory:
        memory(args.keys)


if __name__ == "__main__":
    main()
