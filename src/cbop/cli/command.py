"""The ``cbop`` command's entry point: parse, connect, then run the operator or ``--once``.

This module owns :func:`main` (the ``cbop`` console script and ``python -m cbop``, both
through :mod:`cbop.cli`) and the signal handlers of a running operator: the first
SIGTERM or SIGINT stops it gracefully, a second one exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import structlog

from cbop.cli.connect import connect
from cbop.cli.exits import fail
from cbop.cli.migrate import COMMAND as MIGRATE_COMMAND
from cbop.cli.migrate import migrate_main
from cbop.cli.once import run_once
from cbop.cli.parser import build_parser, controller_settings
from cbop.cli.release import COMMAND as RELEASE_COMMAND
from cbop.cli.release import release_main
from cbop.logconfig import configure_logging
from cbop.manager import Manager, Options, options_error

__all__ = ["main"]

log = structlog.get_logger("cbop.cli")


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            # Second signal: the operator asked twice; exit at once.
            os._exit(128 + signum)
        stop.set()  # first: nothing below may keep the stop request from being made
        log.info("signal received; shutting down gracefully", signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cbop`` / ``python -m cbop``; returns the exit code.

    ``cbop migrate-storage ...`` runs :func:`cbop.cli.migrate.migrate_main` instead, and
    ``cbop release ...`` :func:`cbop.cli.release.release_main`.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == [MIGRATE_COMMAND]:
        return migrate_main(words[1:])
    if words[:1] == [RELEASE_COMMAND]:
        return release_main(words[1:])
    parser = build_parser()
    args = parser.parse_args(words)
    if args.dry_run and not args.once:
        parser.error("--dry-run only works with --once")
    refused = options_error(args.shards, leader_elect=args.leader_elect)
    if refused is not None:
        parser.error(refused)
    configure_logging(args.log_level, args.log_format)
    log.debug(
        "effective configuration",
        **{k: v for k, v in sorted(vars(args).items())},
        environment=sorted(k for k in os.environ if k.startswith("CBOP_")),
    )
    client = connect(args)
    if args.once:
        return run_once(args, client)
    try:
        manager = Manager(
            client,
            Options(
                namespaces=tuple(args.namespaces or ()),
                workers=args.workers,
                resync_period=args.resync_period,
                metrics_bind_address=args.metrics_bind_address,
                metrics_secure=args.metrics_secure,
                metrics_cert_dir=args.metrics_cert_dir,
                health_probe_bind_address=args.health_probe_bind_address,
                leader_elect=args.leader_elect,
                leader_election_id=args.leader_election_id,
                leader_election_namespace=args.leader_election_namespace,
                lease_duration=args.leader_election_lease_duration,
                renew_deadline=args.leader_election_renew_deadline,
                retry_period=args.leader_election_retry_period,
                shutdown_timeout=args.shutdown_timeout,
                read_timeout=args.watch_read_timeout,
                priority_queue=args.priority_queue,
                events=args.events,
                settings=controller_settings(args),
                shards=args.shards,
            ),
        )
    except (ValueError, OSError) as err:
        fail(str(err))
    _install_signal_handlers(manager.stop_event)
    try:
        return manager.run()
    except OSError as err:  # e.g. the metrics or probe port is taken
        fail(str(err))
