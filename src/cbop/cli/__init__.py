"""The ``cbop`` command: run the operator, reconcile once, migrate storage, release bundles.

Every flag has a ``CBOP_*`` environment equivalent (a flag on the command line wins),
and exit codes have one meaning each, in every mode (:mod:`cbop.cli.exits`). The entry
point is :func:`main` (:mod:`cbop.cli.command`); an import-linter contract keeps the
modules in layers, from the modes (``--once``, ``migrate-storage``, ``release``) down to
the parser and the flag values. Everything the command's tests and the docs' checks use
is importable from here.
"""

from cbop.cli.command import main
from cbop.cli.connect import pool_size
from cbop.cli.exits import EXIT_ERROR, EXIT_NOT_READY, EXIT_OK, EXIT_PENDING
from cbop.cli.once import _table as _table
from cbop.cli.once import exit_code, run_once
from cbop.cli.parser import _Repeatable as _Repeatable
from cbop.cli.parser import build_parser, controller_settings
from cbop.cli.values import env_name, format_duration, parse_bool, parse_duration

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_READY",
    "EXIT_OK",
    "EXIT_PENDING",
    "build_parser",
    "controller_settings",
    "env_name",
    "exit_code",
    "format_duration",
    "main",
    "parse_bool",
    "parse_duration",
    "pool_size",
    "run_once",
]
