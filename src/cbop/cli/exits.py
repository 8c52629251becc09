"""How the ``cbop`` command ends: its exit codes, and the one-line fatal error.

This module owns the exit codes (one meaning each, in every mode) and :func:`fail`,
which every part of the command (:mod:`cbop.cli.connect`, :mod:`cbop.cli.once`,
:mod:`cbop.cli.command`) calls to stop on an error it cannot go on from:

- 0 (:data:`EXIT_OK`): success; with ``--once``, every bundle is Ready; with
  ``--dry-run``, every bundle is also in sync (nothing would be written);
- 1 (:data:`EXIT_NOT_READY`): a bundle is not Ready (``--once``) or would not be Ready
  even after the pending changes (``--dry-run``: invalid spec, name conflict, a write
  the API server refuses, suspended); or the operator stopped on an error (lost lease);
- 2 (:data:`EXIT_ERROR`): usage, configuration or connection errors (argparse's code),
  reported in one line without a traceback;
- 3 (:data:`EXIT_PENDING`): ``--dry-run`` only: changes are pending, and every bundle
  would be Ready once they are made (what ``--once`` would then return 0 for).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import structlog

__all__ = ["EXIT_ERROR", "EXIT_NOT_READY", "EXIT_OK", "EXIT_PENDING", "fail"]

log = structlog.get_logger("cbop.cli")

EXIT_OK = 0
EXIT_NOT_READY = 1
EXIT_ERROR = 2
EXIT_PENDING = 3


def fail(message: str) -> NoReturn:
    """Report a fatal error in one line (in the log format once logging is set up).

    Raises:
        SystemExit: always, with :data:`EXIT_ERROR`.
    """
    if structlog.is_configured():
        log.error(message)
    else:
        print(f"cbop: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_ERROR)
