"""Benchmark cbop.workqueue's queues against the standard library's queue.Queue.

Run from the repository root (``PYTHONPATH=src`` unless cbop is installed)::

    python -m bench.workqueue [--cycles N] [--threads 1,4,16] [--repeat R] [--keys K]

Throughput: each of T worker threads loops ``add(key) -> get() -> done(item)`` over its
share of N distinct pre-built keys (``put -> get -> task_done`` for queue.Queue), all
threads on one queue; reported as cycles per second, best of R runs. cbop runs an
unnamed ``RateLimitingQueue`` (what a controller uses, no metrics) and, for reference,
a named one exporting Prometheus metrics to a private registry. ``cbop-priority`` is an
unnamed ``PriorityQueue`` with every add at the normal priority, ``cbop-priority-mixed``
the same with every other key added at the low priority (two FIFOs, so each ``get``
also checks ageing), and ``cbop-priority+prometheus`` a named one (depth by priority).
The second table gives each queue's rate as a ratio to queue.Queue and to cbop's plain
rate-limiting queue.

Memory: K distinct keys queued, each queue measured in a fresh subprocess: the
tracemalloc peak while filling the queue and the growth of the process's RSS. The keys
themselves are built before measuring, so only the queue's own structures count.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import functools
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
from cbop.workqueue import LOW_PRIORITY, PriorityQueue, RateLimitingQueue

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


def make_cbop(
    kind: type[RateLimitingQueue[str]] = RateLimitingQueue,
    *,
    metrics: bool = False,
    mixed: bool = False,
) -> tuple[Worker, Close]:
    """A cbop queue of ``kind``; ``mixed``: every other key at the low priority."""
    if metrics:
        provider = PrometheusWorkqueueMetricsProvider(CollectorRegistry())
        q = kind(name="bench", metrics_provider=provider)
    else:
        q = kind()

    def work(keys: Sequence[str]) -> None:
        add, get, done = q.add, q.get, q.done
        for key in keys:
            add(key)
            item, _ = get()
            done(item)  # type: ignore[arg-type]  # never None: the queue is not shut down

    def work_mixed(keys: Sequence[str]) -> None:
        assert isinstance(q, PriorityQueue)
        get, done = q.get, q.done
        adds = (q.add, functools.partial(q.add, priority=LOW_PRIORITY))
        for i, key in enumerate(keys):
            adds[i & 1](key)
            item, _ = get()
            done(item)

    if mixed:
        return work_mixed, q.shut_down
    return work, q.shut_down


MAKERS: dict[str, Callable[[], tuple[Worker, Close]]] = {
    "queue.Queue": make_stdlib,
    "cbop": make_cbop,
    "cbop+prometheus": lambda: make_cbop(metrics=True),
    "cbop-priority": lambda: make_cbop(PriorityQueue),
    "cbop-priority-mixed": lambda: make_cbop(PriorityQueue, mixed=True),
    "cbop-priority+prometheus": lambda: make_cbop(PriorityQueue, metrics=True),
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
    print("| workers | " + " | ".join(MAKERS) + " |")
    print("|---:|" + "---:|" * len(MAKERS))
    ratios: list[str] = []
    for threads in thread_counts:
        best: dict[str, float] = {name: 0.0 for name in MAKERS}
        for _ in range(repeat):
            for name, make in MAKERS.items():  # interleaved, so load drifts hit all alike
                best[name] = max(best[name], run_once(make, threads, keys))
        print(f"| {threads} | " + " | ".join(f"{best[n]:,.0f}" for n in MAKERS) + " |")
        stdlib, plain = best["queue.Queue"], best["cbop"]
        ratios.extend(
            f"| {threads} | {name} | {rate / stdlib:.2f}x | {rate / plain:.2f}x |"
            for name, rate in best.items()
            if name != "queue.Queue"
        )
    print()
    print("| workers | queue | / queue.Queue | / cbop |")
    print("|---:|---|---:|---:|")
    print("\n".join(ratios))
    print()


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; else peak RSS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fill(kind: str, keys: list[str]) -> object:
    if kind in ("cbop", "cbop-priority"):
        q = RateLimitingQueue[str]() if kind == "cbop" else PriorityQueue[str]()
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


MEMORY_KINDS = ("queue.Queue", "cbop", "cbop-priority")


def memory(count: int) -> None:
    print(f"### Memory: {count:,} distinct keys queued (keys themselves excluded)")
    print()
    print("| queue | tracemalloc peak | per key | RSS delta |")
    print("|---|---:|---:|---:|")
    results: dict[str, dict[str, int]] = {}
    for kind in MEMORY_KINDS:
        out = subprocess.run(
            [sys.executable, "-m", "bench.workqueue", "--memory-child", kind, "--keys", str(count)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[kind] = json.loads(out.strip().splitlines()[-1])
        peak, rss = results[kind]["peak"], results[kind]["rss_delta"]
        print(f"| {kind} | {peak / 2**20:.1f} MiB | {peak / count:.0f} B | {rss / 2**20:.1f} MiB |")
    print()
    for kind in MEMORY_KINDS[1:]:
        ratio = results[kind]["peak"] / results["queue.Queue"]["peak"]
        print(f"{kind} / queue.Queue tracemalloc peak: {ratio:.1f}x")
    print()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=50_000, help="cycles per run")
    parser.add_argument("--threads", default="1,4,16", help="comma-separated worker counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; best is kept")
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys for the memory test")
    parser.add_argument("--skip-memory", action="store_true", help="throughput only")
    parser.add_argument("--skip-throughput", action="store_true", help="memory only")
    parser.add_argument("--memory-child", choices=MEMORY_KINDS, help=argparse.SUPPRESS)
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
