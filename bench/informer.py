"""Benchmark the initial sync of a cbop informer against the official client's models.

Run from the repository root (``PYTHONPATH=src`` unless cbop is installed)::

    python -m bench.informer [--count 10000] [--size 1024] [--repeat 5] [--existing KUBECONFIG]

It starts its own local control plane (``cbop_testing.envtest.ControlPlane``; the binaries come
from ``hack/build-control-plane.sh``), creates ``--count`` ConfigMaps whose data is about
``--size`` bytes, and measures, each in a fresh Python subprocess:

* ``official``: ``CoreV1Api().list_config_map_for_all_namespaces()``, which returns the
  generated ``V1ConfigMapList`` model;
* ``cbop``: a ``SharedInformer`` over all ConfigMaps, from ``start()`` until
  ``has_synced()`` (list with RV 0, JSON parsed into dicts, ``managedFields`` dropped by
  the default transform, indexed by namespace);
* ``cbop (transform=None)``: the same informer keeping objects exactly as served.

Time is wall-clock seconds (best and median of ``--repeat`` runs, each in a new process,
without tracemalloc); "client CPU" is the benchmark process's CPU time (all its threads)
during the operation, which the API server's share of the machine does not inflate.
Memory is measured in separate runs: the tracemalloc peak of the operation (the Python
heap, whatever thread allocates) and the growth of the process's peak RSS (``VmHWM``
after minus ``VmRSS`` before), with the result still referenced. Imports and client
construction happen before the clock starts; TLS connection setup is inside it for every
variant.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODES = ("official", "cbop", "cbop-raw")
LABELS = {
    "official": "official client (models)",
    "cbop": "cbop informer",
    "cbop-raw": "cbop informer (transform=None)",
}


# ----------------------------------------------------------------------------- child


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _quiet_logs() -> None:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _prepare(mode: str, kubeconfig: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    """Return (operation returning the result to keep, cleanup), all imports done."""
    if mode == "official":
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)

        def official() -> Any:
            return core.list_config_map_for_all_namespaces()

        return official, api.close

    from cbop.informers import SharedInformer
    from cbop.kube import CONFIGMAPS, KubeClient

    kube = KubeClient.from_config(kubeconfig=kubeconfig, qps=0)
    kwargs: dict[str, Any] = {"transform": None} if mode == "cbop-raw" else {}
    informer = SharedInformer(kube, CONFIGMAPS, name="bench", **kwargs)

    def sync() -> Any:
        informer.start()
        informer.wait_for_sync()
        return informer.indexer()

    def cleanup() -> None:
        informer.stop()
        kube.close()

    return sync, cleanup


def child(mode: str, kubeconfig: str, trace: bool) -> dict[str, Any]:
    """Run one measurement in this (fresh) process and return its numbers."""
    _quiet_logs()
    op, cleanup = _prepare(mode, kubeconfig)
    rss_before = _status_kib("VmRSS")
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    cpu_start = time.process_time()
    result = op()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    out: dict[str, Any] = {"mode": mode, "seconds": seconds, "cpu": cpu}
    if trace:
        out["traced_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out["rss_delta"] = (_status_kib("VmHWM") - rss_before) * 1024
    items = getattr(result, "items", None)
    out["objects"] = len(items) if isinstance(items, list) else len(result)
    del result
    cleanup()
    return out


# ----------------------------------------------------------------------------- parent


def run_child(mode: str, kubeconfig: str, *, trace: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "bench.informer", "--child", mode, "--kubeconfig", kubeconfig]
    if trace:
        cmd.append("--trace")
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"child {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def populate(kubeconfig: str, count: int, size: int) -> None:
    from cbop.kube import CONFIGMAPS, NAMESPACES, KubeClient

    kube = KubeClient.from_config(kubeconfig=kubeconfig, qps=0)
    kube.create(NAMESPACES, None, {"metadata": {"name": "bench"}})
    chunk = max(1, size // 4)

    def make(i: int) -> None:
        data = {f"key-{k}": (f"{i:08d}-{k}-" * (chunk // 10 + 1))[:chunk] for k in range(4)}
        kube.create(
            CONFIGMAPS,
            "bench",
            {
                "metadata": {
                    "name": f"cm-{i:06d}",
                    "labels": {"app.kubernetes.io/name": "bench", "shard": str(i % 16)},
                    "annotations": {"bench.cbop.dev/index": str(i)},
                },
                "data": data,
            },
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(count)))
    kube.close()


def measure(
    kubeconfig: str, repeat: int
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, dict[str, Any]]]:
    """Run every variant ``repeat`` times for time and once more for memory."""
    times: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    objects: dict[str, int] = {}
    # Interleave the variants so drifting load hits all of them alike.
    for _ in range(repeat):
        for mode in MODES:
            r = run_child(mode, kubeconfig, trace=False)
            times[mode].append(r["seconds"])
            cpus[mode].append(r["cpu"])
            objects[mode] = r["objects"]
    memory = {mode: run_child(mode, kubeconfig, trace=True) for mode in MODES}
    for mode in MODES:
        memory[mode]["cpu_best"] = min(cpus[mode])
    return times, objects, memory


def mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=10_000, help="ConfigMaps to create")
    parser.add_argument("--size", type=int, default=1024, help="bytes of data per ConfigMap")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per variant")
    parser.add_argument(
        "--existing",
        metavar="KUBECONFIG",
        help="measure an already running cluster's ConfigMaps as they are (no control "
        "plane is started and nothing is created)",
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.kubeconfig, args.trace)), flush=True)
        return

    if args.existing:
        times, objects, memory = measure(args.existing, args.repeat)
    else:
        from cbop_testing.envtest import ControlPlane

        with (
            tempfile.TemporaryDirectory(prefix="cbop-bench-") as tmp,
            ControlPlane(workdir=Path(tmp) / "cp") as plane,
        ):
            kubeconfig = str(plane.kubeconfig_path)
            began = time.monotonic()
            populate(kubeconfig, args.count, args.size)
            print(
                f"created {args.count} ConfigMaps of ~{args.size} B data "
                f"in {time.monotonic() - began:.0f} s",
                file=sys.stderr,
            )
            times, objects, memory = measure(kubeconfig, args.repeat)

    best = {m: min(v) for m, v in times.items()}
    median = {m: statistics.median(v) for m, v in times.items()}
    base = "official"
    print(
        f"\nInitial sync of {objects[base]} ConfigMaps (~{args.size} B data each), "
        f"best of {args.repeat} runs, each in a fresh process:\n"
    )
    print(
        "| variant | objects | time (best) | speed-up (best) | time (median) "
        "| speed-up (median) | client CPU (best) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m in MODES:
        print(
            f"| {LABELS[m]} | {objects[m]:,} | {best[m]:.2f} s | {best[base] / best[m]:.1f}x "
            f"| {median[m]:.2f} s | {median[base] / median[m]:.1f}x "
            f"| {memory[m]['cpu_best']:.2f} s |"
        )
    print()
    print("| variant | tracemalloc peak | vs official | peak RSS growth | vs official |")
    print("|---|---:|---:|---:|---:|")
    for m in MODES:
        t = memory[m]["traced_peak"]
        r = memory[m]["rss_delta"]
        print(
            f"| {LABELS[m]} | {mib(t)} | {t / memory[base]['traced_peak']:.2f}x "
            f"| {mib(r)} | {r / memory[base]['rss_delta']:.2f}x |"
        )


if __name__ == "__main__":
    main()
