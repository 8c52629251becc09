"""``python -m bench.operators``: run the operator benchmark (see bench/README.md).

Starts a fresh local control plane, then runs the selected scenarios of the registry:
those measured per implementation for each implementation in turn (one operator process
at a time, fresh namespaces throughout), then those run once for the whole run. Writes
``<out>/<name>.{md,json}`` and PNG plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.operators import apiserver, cluster, pooling, procs, results, scenario
from bench.operators.harness import Bench, Settings, log
from bench.operators.registry import DEFAULT, SCENARIOS
from cbop_testing.envtest import ControlPlane
from cbop_testing.envtest.binaries import pinned_versions
from cbop_testing.envtest.components import DEFAULT_CONTROLLERS

RESULTS = cluster.REPO / "bench" / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.operators", description=__doc__.split("\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="each scenario's quick sizes")
    p.add_argument(
        "--impls",
        default=",".join((*procs.IMPLEMENTATIONS, *procs.VARIANTS)),
        help="implementations to run, in order (variants run S1 only, at small N)",
    )
    p.add_argument(
        "--scenarios",
        default=",".join(DEFAULT),
        help="scenarios to run (S5 comes from S1, S4 runs on S1's largest N, S3 after S2)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME.FIELD=VALUE",
        help="a scenario's option, e.g. s1.sizes=100,1000 or s9.namespaces=50 (repeatable; "
        "--list shows them)",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and their options")
    p.add_argument("--name", help="results file name without extension (default DATE-HOST)")
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="run it N times, each on a fresh control plane (<name>-run-<i>), then write "
        "<name>-pooled.md: every run's counts and the timings pooled",
    )
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--loader-threads", type=int, default=8)
    p.add_argument(
        "--profile",
        type=Path,
        help="attach py-spy to cbop where a scenario profiles; collapsed stacks go here",
    )
    p.add_argument(
        "--profile-native",
        action="store_true",
        help="with --profile: every running thread, native frames too, at 250 Hz",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    return p.parse_args(argv)


def listing() -> str:
    """Every scenario: its names and its options (default, and under --quick)."""
    lines = []
    for sc in SCENARIOS:
        scope = "per implementation" if sc.per_implementation else "once per run"
        lines.append(f"{', '.join(sc.names)} ({scope}):")
        for f in dataclasses.fields(sc.defaults):
            value = getattr(sc.defaults, f.name)
            quick = f" (--quick: {sc.quick[f.name]})" if f.name in sc.quick else ""
            lines.append(f"  {sc.names[0]}.{f.name} = {value}{quick}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    impls = tuple(i for i in args.impls.split(",") if i)
    selected = frozenset(x for x in args.scenarios.split(",") if x)
    chosen = [
        sc for sc in scenario.chosen(SCENARIOS, selected) if any(sc.accepts(impl) for impl in impls)
    ]
    options = scenario.options(SCENARIOS, args.set, quick=args.quick)
    started = datetime.datetime.now()
    stamp = started.strftime("%Y-%m-%d-%H%M%S") + f"-{os.getpid()}"
    workdir = procs.cache_dir() / "runs" / stamp
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # Build what the peers need before the clock starts.
    if "kopf" in impls or "kopf-wl4" in impls:
        procs.bench_python()
    if {"controller-runtime", "controller-runtime-defaults"} & set(impls):
        procs.controller_runtime_binary()
    settings = Settings(
        kubeconfig=Path(),
        logs=logs,
        workers=args.workers,
        loader_threads=args.loader_threads,
        profile=args.profile,
        profile_native=args.profile_native,
        audit=workdir / "audit" / "audit.log",
    )
    out: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "machine": procs.machine(),
        "kubernetes": "{} / etcd {}".format(*pinned_versions()),
        "impls": list(impls),
        "scenarios": sorted(selected),
        "quick": args.quick,
        "settings": settings.record(),
        "options": scenario.record(
            {scenario.name(sc): options[scenario.name(sc)] for sc in chosen}
        ),
        "limits": "cbop --kube-api-qps 0; controller-runtime's default QPS -1; kopf has none",
        "name": args.name,
    }
    t_start = time.monotonic()
    controllers = tuple(c for sc in chosen for c in sc.needs.controllers)
    cp = ControlPlane(
        workdir=workdir / "cluster",
        extra_apiserver_flags=apiserver.audit_flags(
            workdir / "audit", "".join(sc.needs.audit_rules for sc in chosen)
        ),
        controllers=(*DEFAULT_CONTROLLERS, *controllers),
    )
    bench: Bench | None = None
    try:
        log(f"starting the control plane in {workdir}")
        cp.start(timeout=120)
        settings.kubeconfig = cp.kubeconfig_path
        settings.components = cp.pids
        cluster.install_crd(cp.binaries.kubectl, cp.kubeconfig_path)
        bench = Bench(cluster.client(cp.kubeconfig_path), settings)
        the_run = scenario.Run(
            bench=bench,
            impls=impls,
            selected=selected,
            options=options,
            results=out,
            kubectl=cp.binaries.kubectl,
            kubeconfig_for=cp.kubeconfig_for_service_account,
        )
        for impl in impls:
            log(f"=== {impl}")
            for sc in chosen:
                if sc.per_implementation and sc.accepts(impl):
                    sc.run(the_run, options[scenario.name(sc)], impl)
        for sc in chosen:
            if not sc.per_implementation:
                sc.run(the_run, options[scenario.name(sc)], None)
    finally:
        if bench is not None:
            bench.stop()
            out["cbop_revisions"] = sorted(bench.revisions)
        cp.stop()
        # Keep the logs (operators, control plane, audit), not the etcd data.
        shutil.rmtree(workdir / "cluster" / "etcd", ignore_errors=True)
    out["wall_seconds"] = time.monotonic() - t_start
    out["workdir"] = str(workdir)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print(listing())
        return 0
    try:
        scenario.options(SCENARIOS, args.set, quick=args.quick)
        scenario.chosen(SCENARIOS, [x for x in args.scenarios.split(",") if x])
    except ValueError as err:
        print(f"python -m bench.operators: {err}", file=sys.stderr)
        return 2

    # SIGTERM/SIGHUP become KeyboardInterrupt so every `finally` runs (operators, control plane).
    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    if args.runs == 1:
        path = results.write(run(args), args.out, SCENARIOS)
        print(path.read_text())
        print(f"\nwritten: {path}")
        return 0
    base = args.name or datetime.date.today().isoformat() + "-" + "-".join(
        args.scenarios.split(",")
    )
    recorded = []
    for i in range(1, args.runs + 1):
        args.name = f"{base}-run-{i}"
        recorded.append(run(args))
        print(f"written: {results.write(recorded[-1], args.out, SCENARIOS)}")
    pooled = args.out / f"{base}-pooled.md"
    pooled.write_text(f"# {base}: {args.runs} runs\n\n" + pooling.pooled(recorded))
    print(pooled.read_text())
    print(f"\nwritten: {pooled}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
