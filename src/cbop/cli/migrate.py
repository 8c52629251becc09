"""``cbop migrate-storage``: rewrite stored objects in their storage version, then trim.

This module owns the subcommand's own small parser and :func:`migrate_main`, which
:func:`cbop.cli.command.main` hands ``cbop migrate-storage ...`` to. The work is
:func:`cbop.storagemigration.migrate_storage`; this prints one line per CRD (or JSON)
and turns the outcome into an exit code:

- 0: every CRD is stored in its storage version alone (now, or already);
- 1: some objects could not be written; those CRDs keep their ``storedVersions``;
- 2: usage, configuration or connection errors, and a CRD that does not serve or store
  the version this cbop writes (the new CRD was not applied; nothing is written), in
  one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence

from cbop.cli.exits import EXIT_NOT_READY, EXIT_OK, fail
from cbop.kube import ApiError, ConfigError, ConnectionFailed, KubeClient
from cbop.logconfig import LEVELS, configure_logging
from cbop.storagemigration import MigrationError, migrate_storage

__all__ = ["COMMAND", "build_migrate_parser", "migrate_main"]

#: The subcommand's name: ``cbop migrate-storage``.
COMMAND = "migrate-storage"


def build_migrate_parser() -> argparse.ArgumentParser:
    """Return the parser of ``cbop migrate-storage``."""
    parser = argparse.ArgumentParser(
        prog=f"cbop {COMMAND}",
        description=(
            "Rewrite every stored object of cbop's CRDs in the CRD's storage version, then "
            "set status.storedVersions to that version alone (safe to run twice and while "
            "cbop runs; writes no spec and no ConfigMap). Run it after an upgrade that "
            "added a storage version, before a release drops the old one. A CRD that does "
            "not serve and store the version this cbop writes stops it before any write "
            "(exit 2): apply the new CRD first."
        ),
    )
    parser.add_argument("--kubeconfig", help="path to a kubeconfig (default: in-cluster)")
    parser.add_argument("--context", help="kubeconfig context to use")
    parser.add_argument(
        "--crd",
        action="append",
        dest="crds",
        help="a CRD to migrate (repeatable; default: every CRD of group cbop.dev)",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--log-level", choices=LEVELS, default="warning")
    return parser


def migrate_main(argv: Sequence[str]) -> int:
    """Run ``cbop migrate-storage`` with ``argv`` (the words after the subcommand).

    Returns:
        The exit code (see the module docstring).
    """
    args = build_migrate_parser().parse_args(list(argv))
    configure_logging(args.log_level, None)
    try:
        client = KubeClient.from_config(kubeconfig=args.kubeconfig, context=args.context, qps=0)
    except ConfigError as err:
        fail(str(err))
    try:
        results = migrate_storage(
            client, args.crds, progress=print if args.output == "text" else None
        )
    except ConnectionFailed as err:
        fail(f"cannot reach the API server at {client.host}: {err.message}")
    except (ApiError, MigrationError) as err:
        fail(f"storage migration stopped: {err}")
    finally:
        client.close()
    if args.output == "json":
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    if not results:
        print("no CRD of group cbop.dev is installed; nothing to do")
    return EXIT_NOT_READY if any(r.failed for r in results) else EXIT_OK
