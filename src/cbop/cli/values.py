"""The values of the ``cbop`` flags: durations, whole numbers, booleans, variable names.

This module owns how a flag's text (on the command line or in its ``CBOP_*``
variable) becomes a value: :func:`parse_duration` (and :func:`format_duration`, its
inverse for ``--help``), :func:`positive_int`, :func:`parse_bool` for boolean
variables, and :func:`env_name`, the variable of a long option. The parser
(:mod:`cbop.cli.parser`) uses them; tests and docs checks import them from
:mod:`cbop.cli`.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["env_name", "format_duration", "parse_bool", "parse_duration", "positive_int"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a duration into seconds: plain seconds (``30``, ``0.5``) or Go style (``1h30m``).

    Raises:
        argparse.ArgumentTypeError: the text is neither.
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value < 0:
            raise argparse.ArgumentTypeError(f"duration {text!r} must not be negative")
        return value
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use seconds (30) or units like 10h, 5m, 30s, 1h30m"
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Format ``seconds`` the way :func:`parse_duration` reads it back: ``10h``, ``1m30s``.

    Whole hours, minutes and seconds are spelled with units (``0`` is ``0s``); a
    fractional number of seconds is given as is (``0.5s``).
    """
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    parts: list[str] = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size or (unit == "s" and not parts):
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def positive_int(text: str) -> int:
    """Parse a whole number of at least 1.

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


#: Words a boolean ``CBOP_*`` variable may hold, as strconv.ParseBool and most CLIs accept.
_TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
_FALSE = frozenset({"0", "false", "no", "off", "f", "n", ""})


def env_name(option: str) -> str:
    """Return the variable of a long option: ``--kube-api-qps`` -> ``CBOP_KUBE_API_QPS``."""
    return "CBOP_" + option.lstrip("-").upper().replace("-", "_")


def parse_bool(text: str) -> bool:
    """Parse a boolean environment value (true/false, 1/0, yes/no, on/off; any case).

    Raises:
        argparse.ArgumentTypeError: any other text.
    """
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean: use true or false")
