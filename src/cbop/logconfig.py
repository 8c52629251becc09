"""Logging setup: structlog, JSON lines by default, a console renderer on a TTY.

Every line the process writes to stderr goes to the stream of one handler on the
standard library's root logger, under that handler's lock, in the chosen format with the
same fields: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger`` and ``event``. Foreign
``logging`` records (urllib3, the Kubernetes client, ``warnings.warn`` through
:func:`logging.captureWarnings`) are formatted by structlog's
:class:`structlog.stdlib.ProcessorFormatter`; cbop's own structlog loggers render their
line in structlog's processor chain and write it to the same stream directly
(:class:`HandlerLogger`), without a ``logging.LogRecord`` (two per line through the
formatter, which copies the record) or the standard library's caller lookup. The same
processors run on both paths. JSON is rendered by ``orjson`` (compact separators). Libraries
log at WARNING and above (their debug output may carry whole request bodies); cbop's
own loggers at the chosen level. No field of a line is longer than
:data:`MAX_FIELD_CHARS`: a longer one is cut in the middle with a marker that gives the
number of bytes left out, so no log line ever carries a whole ConfigMap value.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Literal

import orjson
import structlog

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error")

#: The longest a field of a log line may be, in characters (the head and the tail of a
#: longer one are kept, with a marker in between).
MAX_FIELD_CHARS = 2048


def shorten(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """Return ``text`` (str) cut in the middle when longer than ``limit`` characters.

    A longer text keeps its head and tail around a ``[... N bytes ...]`` marker, N the
    UTF-8 bytes left out; a text of at most ``limit`` characters is returned as is.
    The result has at most ``limit`` characters plus the marker (about 30 more).
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = text[head : len(text) - tail]
    return f"{text[:head]}[... {len(cut.encode('utf-8', 'replace')):,} bytes ...]{text[-tail:]}"


def bound_fields(logger: Any, method: str, event_dict: Any) -> Any:
    """Shorten (a structlog processor) every field longer than :data:`MAX_FIELD_CHARS`.

    Strings are shortened with :func:`shorten`; a container (list, dict, ...) whose
    ``repr`` is too long is replaced by its shortened ``repr``. Numbers, booleans and
    None pass unchanged.
    """
    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            if len(value) > MAX_FIELD_CHARS:
                event_dict[key] = shorten(value)
        elif isinstance(value, list | tuple | set | frozenset | Mapping):
            text = repr(value)
            if len(text) > MAX_FIELD_CHARS:
                event_dict[key] = shorten(text)
        elif not isinstance(value, int | float | bool | type(None)):
            # Rendered as str() (JSON) or repr() (console): bound what will be shown.
            text = str(value)
            if len(text) > MAX_FIELD_CHARS:
                event_dict[key] = shorten(text)
    return event_dict


def _strip_event(logger: Any, method: str, event_dict: Any) -> Any:
    """Drop the trailing newline of a foreign message (``warnings`` formats end in one)."""
    event = event_dict.get("event")
    if isinstance(event, str):
        event_dict["event"] = event.rstrip()
    return event_dict


def _fallback(obj: Any) -> Any:
    """JSON for what orjson cannot serialise: ``__structlog__()`` if defined, else ``repr``."""
    custom = getattr(obj, "__structlog__", None)
    return custom() if callable(custom) else repr(obj)


def render_json(logger: Any, method: str, event_dict: Any) -> str:
    """Render ``event_dict`` (a structlog processor, the last) as one JSON object (str).

    Keys keep their order; values orjson does not know are given by :func:`_fallback`,
    as structlog's ``JSONRenderer`` does. A dict that orjson refuses whole (an integer
    beyond 64 bits) is rendered by the standard library's ``json`` instead.
    """
    try:
        return orjson.dumps(event_dict, default=_fallback, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(event_dict, default=_fallback, separators=(",", ":"))


class HandlerLogger:
    """The logger structlog wraps for cbop's own loggers: writes rendered lines to a handler.

    Args:
        name: the logger's name (``cbop.configbundle``), the ``logger`` field.
        handler: the :class:`logging.StreamHandler` whose stream and lock every line of
            the process goes through, foreign records included, so lines never interleave.

    Every level method writes its one argument (the rendered line, a str) and a newline,
    then flushes; level filtering happens before, in the bound logger. A failing write
    is dropped, whatever it raises (a closed stream; a ``RuntimeError`` for a reentrant
    write, when a signal handler logs while the main thread was writing), as the
    standard library's ``StreamHandler.emit`` never lets a write failure reach its
    caller.
    """

    def __init__(self, name: str, handler: logging.StreamHandler[Any]) -> None:
        self.name = name
        self._handler = handler

    def msg(self, message: str) -> None:
        """Write ``message`` as one line."""
        handler = self._handler
        handler.acquire()
        try:
            stream = handler.stream
            stream.write(message + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging must never break its caller
            pass
        finally:
            handler.release()

    debug = info = warning = warn = error = critical = fatal = exception = log = msg


class HandlerLoggerFactory:
    """structlog's logger factory for :class:`HandlerLogger`: one per name, one handler."""

    def __init__(self, handler: logging.StreamHandler[Any]) -> None:
        self._handler = handler

    def __call__(self, *args: Any) -> HandlerLogger:
        """Return the logger for ``args[0]`` (cbop names every logger; ``cbop`` if not)."""
        return HandlerLogger(str(args[0]) if args else "cbop", self._handler)


def configure_logging(level: str = "info", fmt: LogFormat | None = None) -> None:
    """Configure structlog and stdlib logging for the process.

    Args:
        level: one of debug, info, warning, error (cbop's own loggers; other
            libraries log at WARNING and above whatever the level).
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
        else render_json
    )
    # Applied to cbop's structlog events and to foreign records (urllib3, kubernetes,
    # warnings) in the formatter: the same fields.
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    # Tracebacks become an ``exception`` string in both formats, so they are bounded too.
    final: list[structlog.types.Processor] = [
        structlog.processors.format_exc_info,
        bound_fields,
        renderer,
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, _strip_event],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
        )
    )
    structlog.configure(
        processors=[*shared, *final],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=HandlerLoggerFactory(handler),
        cache_logger_on_first_use=True,
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))
    logging.getLogger("cbop").setLevel(numeric)
    logging.captureWarnings(True)
