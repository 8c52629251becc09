"""Cost of one JSON log line: cbop's logging against structlog's standard-library bridge.

Each variant writes the line a reconcile logs after an update (``reconciled`` with the
reconcile id, key, action, duration, ready and reason bound), N times, to a handler on
``/dev/null``, and reports the best of R repetitions as microseconds per line:

- ``stdlib-bridge``: structlog's documented standard-library integration, the setup cbop
  used before: ``structlog.stdlib.LoggerFactory``, ``ProcessorFormatter.wrap_for_formatter``
  and a ``ProcessorFormatter`` with structlog's ``JSONRenderer`` on the handler, so every
  line becomes a ``logging.LogRecord``;
- ``cbop``: :func:`cbop.logconfig.configure_logging` as the operator calls it (the same
  processors; the line rendered by orjson and written to the handler's stream directly).

    PYTHONPATH=src .venv/bin/python -m bench.logline                 # 20,000 lines, best of 5
    PYTHONPATH=src .venv/bin/python -m bench.logline --lines 5000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

import structlog

VARIANTS = ("stdlib-bridge", "cbop")


def _bridge() -> None:
    """structlog's standard-library bridge, with the processors cbop's setup runs."""
    from cbop.logconfig import bound_fields

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                bound_fields,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def measure(variant: str, lines: int, repeat: int) -> dict[str, Any]:
    """Run one variant in this process (stderr on /dev/null); return its figures."""
    from cbop.logconfig import configure_logging

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    if variant == "cbop":
        configure_logging("info", "json")
    else:
        _bridge()
    log = structlog.get_logger("cbop.configbundle").bind(
        reconcile_id="9f1c2d3e-4b5a-6789-abcd-ef0123456789", key="s10-b-17/b-0042"
    )
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(lines):
            log.info(
                "reconciled",
                action="update",
                duration=0.01734,
                ready=True,
                reason="Synced",
            )
        best = min(best, time.perf_counter() - start)
    return {"variant": variant, "us_per_line": best / lines * 1e6}


def main(argv: list[str] | None = None) -> None:
    """Measure every variant in a fresh subprocess; print a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=20_000, help="lines per repetition")
    p.add_argument("--repeat", type=int, default=5, help="repetitions (best is kept)")
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.variant:
        print(json.dumps(measure(args.variant, args.lines, args.repeat)))
        return
    results = []
    for variant in VARIANTS:
        out = subprocess.run(
            [
                *(sys.executable, "-m", "bench.logline", "--variant", variant),
                *("--lines", str(args.lines), "--repeat", str(args.repeat)),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = results[0]["us_per_line"]
    print(f"{args.lines:,} lines, best of {args.repeat}\n")
    print("| variant | µs per line | against stdlib-bridge |")
    print("|---|---:|---:|")
    for r in results:
        print(f"| {r['variant']} | {r['us_per_line']:.1f} | {r['us_per_line'] / base:.2f}x |")


if __name__ == "__main__":
    main()
