"""The ``cbop`` command: run the operator, or reconcile once with ``--once``.

Every flag has a ``CBOP_*`` environment equivalent (``--kube-api-qps`` ->
``CBOP_KUBE_API_QPS``; repeatable flags take a comma-separated list); a flag on the
command line wins, and a repeatable flag on the command line replaces the list. Exit
codes have one meaning each, in every mode (:mod:`cbop.cli.exits`).

Modules, outermost first (an import-linter contract keeps them in this order):

- ``cbop.cli.command``: :func:`main`, the entry point of ``cbop`` and
  ``python -m cbop``, and the signal handlers of a running operator;
- ``cbop.cli.once``: ``--once`` (:func:`run_once`, its table or JSON output,
  :func:`exit_code`); ``cbop.cli.migrate``: ``cbop migrate-storage``;
  ``cbop.cli.release``: ``cbop release``;
- ``cbop.cli.connect``: the API client and the ConfigBundle LIST that checks it;
- ``cbop.cli.parser``: :func:`build_parser`, with the ``CBOP_*`` variables applied;
  ``cbop.cli.plan``: the workloads a dry run's pending changes would roll;
- ``cbop.cli.values``: durations, whole numbers, booleans, variable names;
- ``cbop.cli.exits``: the exit codes and the one-line fatal error.

Everything the command's tests and the docs' checks use is importable from here.
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
