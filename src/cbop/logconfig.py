"""Logging setup: structlog, JSON lines by default, a console renderer on a TTY.

Processors are structlog's own (level, ISO timestamp, exception formatting, renderers);
the standard library's ``logging`` is routed to the same output so messages from the
Kubernetes client and urllib3 are not lost, at WARNING and above.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str = "info", fmt: LogFormat | None = None) -> None:
    """Configure structlog and stdlib logging for the process.

    Args:
        level: one of debug, info, warning, error.
        fmt: ``json`` (one JSON object per line) or ``console``; None picks console
            when stderr is a terminal, else JSON.

    Raises:
        ValueError: an unknown level.
    """
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    numeric = logging.getLevelName(level.upper())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if fmt == "json":
        processors.append(structlog.processors.format_exc_info)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr, force=True)
