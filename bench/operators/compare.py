"""Before and after: the same workload through two versions of the harness, compared.

``python -m bench.operators.compare run --before REV --plan full --runs 3`` extracts the
tree at ``REV`` (``git archive``) into the cache, then runs each group of the plan
``runs`` times with that tree's harness and with this one, alternating (before, after,
before, ...), each run on a fresh control plane, the operators always from this
checkout's ``src/``. It then prints the comparison (``report``). ``--plan small`` is the
same workload at sizes that take minutes.

``python -m bench.operators.compare report DIR`` compares the results files already in
``DIR`` (``<group>-before-<i>.json``, ``<group>-after-<i>.json``):

- **counts** that do not depend on the machine's load (converged objects, writes and
  requests by verb and answer code on the operators' resources, MODIFIED events seen,
  revisions and pins bytes): every run's value, before and after;
- **timings** (seconds, CPU seconds, RSS): pooled over the runs (sums of seconds,
  quantiles over all the latencies, means otherwise), after / before.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from bench.operators import pooling, procs
from bench.operators.cluster import REPO


@dataclass(frozen=True)
class Group:
    """One workload, in the command line of the harness before and after (``before``
    None: the harness before cannot run it)."""

    name: str
    before: tuple[str, ...] | None
    after: tuple[str, ...]


def _same(name: str, *args: str) -> Group:
    return Group(name, args, args)


#: The full benchmark, S1-S11, at the sizes of the results in bench/README.md.
FULL = (
    _same("s1-s5", "--scenarios", "s1,s2,s3,s4,apf"),
    _same("s6-s7", "--impls", "raw,cbop,controller-runtime", "--scenarios", "s6,s7"),
    # S8 at 4d36db5 never starts: its cbop waits for the ClusterConfigBundle CRD, which
    # S8 does not install (this harness runs it with --no-cluster-bundles).
    Group("s8", None, ("--impls", "cbop", "--scenarios", "s8")),
    _same("s9", "--impls", "raw,cbop", "--scenarios", "s9"),
    _same("s10", "--impls", "raw,cbop,controller-runtime", "--scenarios", "s10"),
    _same("s11", "--impls", "cbop", "--scenarios", "s11"),
)
IMPLS_SMALL = "raw,cbop,controller-runtime,kopf,cbop-qps20,controller-runtime-defaults"
#: The same scenarios at sizes that take a few minutes each (counts, not timings).
SMALL = (
    Group(
        "s1-s7",
        (
            *("--quick", "--impls", IMPLS_SMALL),
            *("--scenarios", "s1,s2,s3,s4,s6,s7", "--idle", "20", "--unrelated", "500"),
            *("--scale-n", "300"),
        ),
        (
            *("--quick", "--impls", IMPLS_SMALL),
            *("--scenarios", "s1,s2,s3,s4,s6,s7", "--set", "s2.idle=20"),
            *("--set", "s1.unrelated=500", "--set", "s6.n=300"),
        ),
    ),
    Group("s8", None, ("--impls", "cbop", "--scenarios", "s8", "--set", "s8.n=300")),
    Group(
        "s9-s11",
        (
            *("--quick", "--impls", "raw,cbop,controller-runtime"),
            *("--scenarios", "s9,s10,s11,apf", "--apf-workers", "4"),
            *("--s9-namespaces", "50", "--s9-new", "5", "--s9-idle", "5"),
            *("--s10-bundles", "100", "--s10-unlabelled", "500", "--s10-idle", "5"),
            *("--s11-bundles", "100", "--s11-namespaces", "2", "--s11-changes", "2"),
            *("--s11-idle", "5"),
        ),
        (
            *("--quick", "--impls", "raw,cbop,controller-runtime"),
            *("--scenarios", "s9,s10,s11,apf", "--set", "apf.workers=4"),
            *("--set", "s9.namespaces=50", "--set", "s9.new=5", "--set", "s9.idle=5"),
            *("--set", "s10.bundles=100", "--set", "s10.unlabelled=500", "--set", "s10.idle=5"),
            *("--set", "s11.bundles=100", "--set", "s11.namespaces=2"),
            *("--set", "s11.changes=2", "--set", "s11.idle=5"),
        ),
    ),
)
PLANS = {"full": FULL, "small": SMALL}


def report(directory: Path) -> str:
    """The comparison of every group whose results are in ``directory``."""
    out: list[str] = []
    groups = sorted(
        {re.sub(r"-(before|after)-\d+$", "", p.stem) for p in directory.glob("*-*-[0-9]*.json")}
    )
    for group in groups:
        before = [
            json.loads(p.read_text()) for p in sorted(directory.glob(f"{group}-before-*.json"))
        ]
        after = [json.loads(p.read_text()) for p in sorted(directory.glob(f"{group}-after-*.json"))]
        out += [f"## {group}: {len(before)} runs before, {len(after)} after", ""]
        sides = {"before": before, "after": after}
        out += [*pooling.counts_table(sides), "", *pooling.timings_table(sides), ""]
    return "\n".join(out)


def extract(rev: str) -> Path:
    """The tree at ``rev``, extracted once into the bench's cache; return its path."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    where = procs.cache_dir() / "compare" / sha[:12]
    if not (where / "bench" / "operators").exists():
        tar = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha], capture_output=True, check=True
        )
        with tarfile.open(fileobj=BytesIO(tar.stdout)) as archive:
            archive.extractall(where, filter="data")
    return where


def run(rev: str, plan: Sequence[Group], runs: int, out: Path) -> None:
    """Each group ``runs`` times before and after, alternating; results into ``out``.

    A run whose results are there already is not made again; a run that fails is
    reported and left out."""
    old = extract(rev)
    out.mkdir(parents=True, exist_ok=True)
    for group in plan:
        for i in range(1, runs + 1):
            for side, tree, args in (("before", old, group.before), ("after", REPO, group.after)):
                name = f"{group.name}-{side}-{i}"
                if args is None or (out / f"{name}.json").exists():
                    continue
                cmd = [sys.executable, "-m", "bench.operators", *args, "--name", name]
                print(f"compare: {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
                with (out / f"{name}.log").open("wb") as log:
                    done = subprocess.run(
                        [*cmd, "--out", str(out)], cwd=tree, check=False, stdout=log, stderr=log
                    )
                if done.returncode:
                    print(f"compare: {name} failed ({done.returncode}); see {name}.log")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.operators.compare", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the plan before and after, then report")
    r.add_argument("--before", required=True, help="the commit whose harness is 'before'")
    r.add_argument("--plan", choices=sorted(PLANS), default="full")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--only", help="the plan's groups to run, comma-separated (default: all)")
    r.add_argument("--out", type=Path, default=procs.cache_dir() / "compare" / "results")
    rep = sub.add_parser("report", help="compare the results files in a directory")
    rep.add_argument("directory", type=Path)
    args = p.parse_args(argv)
    if args.command == "run":
        plan = PLANS[args.plan]
        if args.only:
            wanted = set(args.only.split(","))
            unknown = wanted - {g.name for g in plan}
            if unknown:
                p.error(f"--only: no group {', '.join(sorted(unknown))} in plan {args.plan}")
            plan = tuple(g for g in plan if g.name in wanted)
        run(args.before, plan, args.runs, args.out)
        print(report(args.out))
    else:
        print(report(args.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
