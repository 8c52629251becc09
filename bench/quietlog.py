"""The operator's logging for the in-process benches, its output thrown away.

The in-process benches (bench.reconcile, bench.sourcechange, bench.revisioncheck) run
cbop's code with its real logging configuration, so that each log call costs what it
costs in the operator, while their own output stays a readable table.
"""

from __future__ import annotations

import os
import sys

from cbop.logconfig import configure_logging


def quiet_operator_logging() -> None:
    """Configure cbop's logging (info, JSON) with its handler on ``/dev/null``.

    The handler binds the ``sys.stderr`` of the moment, so ``/dev/null`` is opened and
    left open for the life of the process; ``sys.stderr`` is restored at once.
    """
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115
    try:
        configure_logging("info", "json")
    finally:
        sys.stderr = stderr
