"""``python -m bench.operators``: run the operator benchmark (see bench/README.md).

Starts a fresh local control plane, then for each implementation in turn (raw floor,
cbop, controller-runtime, kopf) runs S1 at every N (S5 from the same runs), S4 on the
largest N, and S2 then S3; one operator process at a time, fresh namespaces throughout.
Writes ``bench/results/<date>-<host>.{md,json}`` and PNG plots; with ``--update-readme``
also the results block of bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from bench.operators import (
    apf,
    cluster,
    clusterbundles,
    procs,
    report,
    revisions,
    scale,
    sharded,
    sources,
)
from bench.operators.scenarios import Bench, Settings, log
from cbop_testing.envtest import ControlPlane
from cbop_testing.envtest.binaries import pinned_versions
from cbop_testing.envtest.components import DEFAULT_CONTROLLERS

RESULTS = cluster.REPO / "bench" / "results"
README = cluster.REPO / "bench" / "README.md"
BEGIN, END = "<!-- operators-results:begin -->", "<!-- operators-results:end -->"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.operators", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--quick", action="store_true", help="N = 100, 300; S2 on 300 bundles; idle 30 s"
    )
    p.add_argument("--sizes", help="S1 sizes, comma-separated (default 100,1000,3000)")
    p.add_argument(
        "--impls",
        default=",".join((*procs.IMPLEMENTATIONS, *procs.VARIANTS)),
        help="implementations to run (variants run S1 only, at small N)",
    )
    p.add_argument(
        "--scenarios",
        default="s1,s2,s3,s4,apf",
        help="scenarios (S5 comes from S1; S3 needs S2; apf: throttled by APF)",
    )
    p.add_argument("--apf-rounds", type=int, default=1, help="repetitions of the apf scenario")
    p.add_argument(
        "--apf-workers", default="4,32", help="apf: worker settings, comma-separated (4,32)"
    )
    p.add_argument(
        "--scale-n",
        default="10000",
        help="N of the S6/S7 scale scenarios and of S8 (sharding), comma-separated "
        "(default 10000; not in the default --scenarios)",
    )
    p.add_argument("--idle", type=float, help="S3 idle seconds (default 300; --quick 30)")
    p.add_argument(
        "--s9-namespaces",
        type=int,
        default=1000,
        help="S9: labelled namespaces in place (default 1000; not in the default --scenarios)",
    )
    p.add_argument("--s9-new", type=int, default=50, help="S9: namespaces created later (50)")
    p.add_argument("--s9-idle", type=float, default=60.0, help="S9: idle seconds (60)")
    p.add_argument(
        "--s10-bundles",
        type=int,
        default=1000,
        help="S10: bundles reading one source, half in its namespace (default 1000; "
        "not in the default --scenarios)",
    )
    p.add_argument("--s10-idle", type=float, default=60.0, help="S10: idle seconds (60)")
    p.add_argument(
        "--s10-unlabelled", type=int, default=10_000, help="S10: unlabelled ConfigMaps (10000)"
    )
    p.add_argument(
        "--s11-bundles",
        type=int,
        default=1000,
        help="S11: bundles with revisions per variant, 10 per Deployment (default 1000; "
        "not in the default --scenarios)",
    )
    p.add_argument("--s11-namespaces", type=int, default=10, help="S11: namespaces (10)")
    p.add_argument("--s11-changes", type=int, default=10, help="S11: changes of each bundle (10)")
    p.add_argument("--s11-keep", type=int, default=2, help="S11: spec.revisions.keep (2)")
    p.add_argument(
        "--s11-history", type=int, default=3, help="S11: the Deployments' revisionHistoryLimit (3)"
    )
    p.add_argument("--s11-idle", type=float, default=30.0, help="S11: idle seconds (30)")
    p.add_argument(
        "--s11-replicas",
        type=int,
        default=0,
        help="S11: the Deployments' replicas (0; their pods stay Pending, which holds the "
        "history: see bench/operators/revisions.py)",
    )
    p.add_argument(
        "--s11-variants", default="off,on", help="S11: variants in the order they run (off,on)"
    )
    p.add_argument("--name", help="results file name without extension (default DATE-HOST)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--loader-threads", type=int, default=8)
    p.add_argument(
        "--unrelated", type=int, help="S4 unrelated ConfigMaps (default 10000; --quick 2000)"
    )
    p.add_argument(
        "--update-readme", action="store_true", help="replace the results block in bench/README.md"
    )
    p.add_argument(
        "--profile",
        type=Path,
        help="attach py-spy to cbop during S1; write collapsed stacks to this directory",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    sizes = [int(x) for x in (args.sizes or ("100,300" if quick else "100,1000,3000")).split(",")]
    impls = [i for i in args.impls.split(",") if i]
    scenarios = set(args.scenarios.split(","))
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
        idle_seconds=args.idle if args.idle is not None else (30.0 if quick else 300.0),
        heal_bundles=300 if quick else 1000,
        heal_patches=60 if quick else 200,
        profile=args.profile,
        unrelated=args.unrelated if args.unrelated is not None else (2000 if quick else 10_000),
    )
    results: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "machine": procs.machine(),
        "kubernetes": "{} / etcd {}".format(*pinned_versions()),
        "impls": impls,
        "quick": quick,
        "settings": {k: v for k, v in vars(settings).items() if not isinstance(v, Path | None)},
        "limits": "cbop --kube-api-qps 0; controller-runtime's default QPS -1; kopf has none",
        "s1": [],
        "s2": [],
        "s3": [],
        "s4": [],
        "scale": [],
        "s8": [],
        "name": args.name,
    }
    results["settings"]["heal_rate"] = settings.heal_rate
    t_start = time.monotonic()
    settings.audit = workdir / "audit" / "audit.log"
    with_s11 = bool(scenarios & revisions.SCENARIOS) and "cbop" in impls
    cp = ControlPlane(
        workdir=workdir / "cluster",
        extra_apiserver_flags=cluster.audit_flags(
            workdir / "audit", revisions.audit_write_rules() if with_s11 else ""
        ),
        # S11's Deployments need their ReplicaSets and history.
        controllers=(*DEFAULT_CONTROLLERS, *revisions.CONTROLLERS)
        if with_s11
        else DEFAULT_CONTROLLERS,
    )
    bench: Bench | None = None
    try:
        log(f"starting the control plane in {workdir}")
        cp.start(timeout=120)
        settings.kubeconfig = cp.kubeconfig_path
        settings.components = cp.pids
        cluster.install_crd(cp.binaries.kubectl, cp.kubeconfig_path)
        kube = cluster.client(cp.kubeconfig_path)
        bench = Bench(kube, settings)
        for impl in impls:
            log(f"=== {impl}")
            if impl in procs.VARIANTS:
                if "s1" in scenarios:
                    upto = procs.VARIANTS[impl]
                    for n in [m for m in sizes if m <= upto] or sizes[:1]:
                        results["s1"].append(bench.burst(impl, n))
                continue
            if "s1" in scenarios:
                for n in sizes:
                    keep = n == sizes[-1] and "s4" in scenarios and impl != "raw"
                    rec = bench.burst(impl, n, keep=keep)
                    results["s1"].append(rec)
                    if keep:
                        results["s4_n"] = n
                        bench.stop()
                        ns = rec["namespace"]
                        results["s4"].append(bench.memory(impl, ns, "plain"))
                        other = bench.unrelated(settings.unrelated)
                        results["s4"].append(bench.memory(impl, ns, "unrelated"))
                        cluster.delete_namespace(kube, other)
                        cluster.delete_namespace(kube, ns)
            if scenarios & scale.SCENARIOS and impl in scale.IMPLS:
                for n in (int(x) for x in args.scale_n.split(",")):
                    results["scale"].append(scale.measure(bench, impl, n))
            if "s2" in scenarios and impl != "raw":
                heal, idle = bench.heal_and_idle(impl)
                results["s2"].append(heal)
                if "s3" in scenarios:
                    results["s3"].append(idle)
        if scenarios & sharded.SCENARIOS and "cbop" in impls:
            log("=== S8: cbop sharded")
            results["s8"] = sharded.run(bench, [int(x) for x in args.scale_n.split(",")])
        if scenarios & clusterbundles.SCENARIOS and "cbop" in impls:
            log("=== S9: one ClusterConfigBundle over many namespaces, against raw")
            clusterbundles.install_crd(cp.binaries.kubectl, cp.kubeconfig_path)
            results["s9"] = clusterbundles.run(
                bench,
                clusterbundles.Sizes(
                    namespaces=args.s9_namespaces, new=args.s9_new, idle=args.s9_idle
                ),
            )
        if scenarios & sources.SCENARIOS and "cbop" in impls:
            log("=== S10: one source read by many bundles, against raw (and the Go peer)")
            half = args.s10_bundles // 2
            results["s10"] = sources.run(
                bench,
                sources.Sizes(
                    local=half,
                    elsewhere=args.s10_bundles - half,
                    unlabelled=args.s10_unlabelled,
                    idle=args.s10_idle,
                ),
                impls=frozenset(impls),
            )
        if with_s11:
            log("=== S11: revisions, with rolled Deployments and their history")
            results["s11"] = revisions.run(
                bench,
                revisions.Sizes(
                    bundles=args.s11_bundles,
                    deployments=args.s11_bundles // revisions.PER_DEPLOYMENT,
                    namespaces=args.s11_namespaces,
                    changes=args.s11_changes,
                    keep=args.s11_keep,
                    history=args.s11_history,
                    idle=args.s11_idle,
                    replicas=args.s11_replicas,
                    variants=tuple(v for v in args.s11_variants.split(",") if v),
                ),
            )
        if "apf" in scenarios:
            results["apf"] = apf.run_all(
                bench,
                cp.kubeconfig_for_service_account,
                impls,
                quick=quick,
                rounds=args.apf_rounds,
                workers=[int(x) for x in args.apf_workers.split(",")],
            )
    finally:
        if bench is not None:
            bench.stop()
            results["cbop_revisions"] = sorted(bench.revisions)
        cp.stop()
        # Keep the logs (operators, control plane, audit), not the etcd data.
        shutil.rmtree(workdir / "cluster" / "etcd", ignore_errors=True)
    results["wall_seconds"] = time.monotonic() - t_start
    results["workdir"] = str(workdir)
    return results


def write(results: dict[str, Any], out: Path, update_readme: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    base = results.get("name") or f"{results['started'][:10]}-{socket.gethostname()}" + (
        "-quick" if results["quick"] else ""
    )
    json_path = out / f"{base}.json"
    json_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    try:
        plots = [p.name for p in procs.run_plot(json_path, out / base)] if results["s1"] else []
    except Exception as exc:  # noqa: BLE001 - the tables matter more than the pictures
        print(f"plots failed: {exc}", file=sys.stderr)
        plots = []
    md = (
        report.markdown(results, plots)
        + scale.markdown(results)
        + sharded.markdown(results)
        + clusterbundles.markdown(results)
        + sources.markdown(results)
        + revisions.markdown(results)
    )
    md_path = out / f"{base}.md"
    md_path.write_text(md)
    if update_readme:
        text = README.read_text()
        body = md.split("\n", 1)[1].replace("](", "](results/").replace("\n### ", "\n#### ")
        block = (
            f"{BEGIN}\n### Latest results\n\n"
            f"Latest full run ([{md_path.name}](results/{md_path.name})):\n{body}\n{END}"
        )
        if BEGIN in text:
            text = re.sub(
                re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S
            )
        else:  # at the end of the "Operators" section
            start = text.index("## Operators")
            nxt = text.find("\n## ", start + 1)
            at = len(text) if nxt < 0 else nxt + 1
            text = text[:at].rstrip("\n") + "\n\n" + block + "\n\n" + text[at:].lstrip("\n")
        README.write_text(text)
    return md_path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    # SIGTERM/SIGHUP become KeyboardInterrupt so every `finally` runs (operators, control plane).
    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    results = run(args)
    path = write(results, args.out, args.update_readme)
    print(path.read_text())
    print(f"\nwritten: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
