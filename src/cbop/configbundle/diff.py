"""Unified diffs of ConfigMaps, for ``cbop --once --dry-run``, bounded in size.

The ConfigMaps are shown as YAML, as ``kubectl diff`` shows them: a multi-line value is
a literal block (``|``), one diff line per line of the value. The output is bounded
whatever the values:

- a diff line longer than :data:`MAX_LINE_CHARS` characters is shown as its head and the
  text around the change (the first differing character between a removed line and the
  added line that replaces it), with ``[... N bytes ...]`` markers giving the UTF-8 bytes
  left out;
- a ``binaryData`` value is shown as its size and SHA-256, never its bytes;
- a diff is cut after :data:`MAX_DIFF_LINES` lines or :data:`MAX_DIFF_BYTES` bytes, with a
  last line saying how many lines and bytes were not shown.

A Secret's diff (:func:`secret_diff`) never shows a value, nor a digest of one: each key
of its ``data`` is shown as its size in bytes, marked ``changed`` when its bytes change,
and the diff says so in its first line (docs/secrets.md).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from cbop.api import ANNOTATION_CONTENT_HASH, decode_binary

_SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")
#: The first line of every Secret diff.
SECRET_VALUES_HIDDEN = (
    "# a Secret's values are never shown: each key shows its size in bytes, and "
    "'changed' when its bytes change\n"
)

#: A diff line longer than this (characters) is shown as excerpts.
MAX_LINE_CHARS = 200
#: Characters of a long line shown from its start (the key, for a one-line value).
HEAD_CHARS = 40
#: Characters shown on each side of a change, and of a long change, in a long line.
CONTEXT_CHARS = 40
#: The most lines one ConfigMap's diff shows.
MAX_DIFF_LINES = 1000
#: The most bytes (UTF-8) one ConfigMap's diff shows, about.
MAX_DIFF_BYTES = 64 * 1024

_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _BlockDumper(_Dumper):  # type: ignore[valid-type,misc]
    """A safe YAML dumper that writes multi-line strings as literal blocks (``|``)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # YAML falls back to a quoted scalar when a literal block cannot hold the text
    # exactly (e.g. trailing spaces on a line).
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def _binary_summary(value: Any) -> str:
    """Describe a base64 ``binaryData`` value by its size and SHA-256, never its bytes."""
    try:
        raw = base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raw = str(value).encode()
    return f"(binary) {len(raw):,} bytes, sha256:{hashlib.sha256(raw).hexdigest()}"


def _as_yaml(obj: Mapping[str, Any] | None) -> list[str]:
    if obj is None:
        return []
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_FIELDS}
    shown = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
    shown["metadata"] = meta
    if isinstance(shown.get("binaryData"), Mapping):
        shown["binaryData"] = {k: _binary_summary(v) for k, v in shown["binaryData"].items()}
    text = yaml.dump(
        shown,
        Dumper=_BlockDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=2**31 - 1,  # never fold a long line: a fold would move the diff around
    )
    return text.splitlines(keepends=True)


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b`` (binary search on slices: C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _change_span(line: str, other: str) -> tuple[int, int]:
    """Return the span ``[start, end)`` of ``line`` that differs from ``other``."""
    start = _common_prefix(line, other)
    limit = min(len(line), len(other)) - start
    suffix = _common_prefix(line[::-1], other[::-1]) if limit > 0 else 0
    return start, max(start, len(line) - min(suffix, limit))


def excerpt(line: str, span: tuple[int, int] | None = None) -> str:
    """Return ``line`` (str) bounded: whole when short, else excerpts with byte counts.

    A line of at most :data:`MAX_LINE_CHARS` characters is returned unchanged. A longer
    one keeps its first :data:`HEAD_CHARS` characters and, when ``span`` (``[start,
    end)`` character offsets of a change) is given, :data:`CONTEXT_CHARS` characters
    around each end of the change; every gap becomes ``[... N bytes ...]`` (N in UTF-8
    bytes). A trailing newline is kept.
    """
    newline = "\n" if line.endswith("\n") else ""
    body = line[: len(line) - len(newline)]
    if len(body) <= MAX_LINE_CHARS:
        return line
    shown = [(0, HEAD_CHARS)]
    if span is not None:
        start, end = span
        if end - start <= 2 * CONTEXT_CHARS:
            shown.append((start - CONTEXT_CHARS, end + CONTEXT_CHARS))
        else:
            shown += [
                (start - CONTEXT_CHARS, start + CONTEXT_CHARS),
                (end - CONTEXT_CHARS, end + CONTEXT_CHARS),
            ]
    parts: list[str] = []
    pos = 0
    for lo, hi in sorted((max(0, lo), min(len(body), hi)) for lo, hi in shown):
        if hi <= pos:
            continue
        if lo > pos:
            parts.append(f"[... {_nbytes(body[pos:lo]):,} bytes ...]")
        parts.append(body[max(lo, pos) : hi])
        pos = hi
    if pos < len(body):
        parts.append(f"[... {_nbytes(body[pos:]):,} bytes ...]")
    return "".join(parts) + newline


def _bounded_lines(lines: Sequence[str]) -> Iterator[str]:
    """Yield the unified diff ``lines`` with long lines excerpted around their change.

    A run of removed lines followed by a run of added lines pairs them in order (the
    i-th removed line with the i-th added one), and each long line of a pair is shown
    around where it differs from the other. The first two lines are the file headers.
    """
    yield from lines[:2]
    i = 2
    while i < len(lines):
        line = lines[i]
        if not line.startswith("-"):
            yield excerpt(line)
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("-"):
            j += 1
        k = j
        while k < len(lines) and lines[k].startswith("+"):
            k += 1
        removed, added = lines[i:j], lines[j:k]
        for n, old in enumerate(removed):
            new = added[n] if n < len(added) else None
            yield excerpt(old, None if new is None else _change_span(old[1:], new[1:]))
        for n, new in enumerate(added):
            old_line = removed[n] if n < len(removed) else None
            yield excerpt(new, None if old_line is None else _change_span(new[1:], old_line[1:]))
        i = k


def _capped(lines: Iterator[str], all_lines: Sequence[str]) -> str:
    """Join ``lines`` up to the caps; say what was cut, counted on ``all_lines``."""
    out: list[str] = []
    size = 0
    for n, line in enumerate(lines):
        size += _nbytes(line)
        if n >= MAX_DIFF_LINES or size > MAX_DIFF_BYTES:
            rest = all_lines[n:]
            out.append(
                f"# diff cut after {n:,} lines: {len(rest):,} more lines "
                f"({sum(map(_nbytes, rest)):,} bytes) not shown\n"
            )
            break
        out.append(line)
    return "".join(out)


def configmap_diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> str:
    """Return a bounded unified diff (str) from ``current`` to ``desired`` ConfigMap bodies.

    Server-set metadata (resourceVersion, uid, managedFields, ...) is left out; either
    side may be None (creation, or nothing to write). Returns "" when nothing changes.
    Multi-line values are YAML literal blocks; long lines, binary values and the total
    size are bounded as the module docstring says, so the result stays below about
    :data:`MAX_DIFF_BYTES` plus one line whatever the ConfigMaps hold.
    """
    if desired is None:
        return ""
    name = desired.get("metadata", {}).get("name", "configmap")
    lines = list(
        difflib.unified_diff(
            _as_yaml(current),
            _as_yaml(desired),
            fromfile=f"configmap/{name} (live)" if current is not None else "/dev/null",
            tofile=f"configmap/{name} (desired)",
        )
    )
    return _capped(_bounded_lines(lines), lines)


def _secret_view(
    secret: Mapping[str, Any] | None, other: Mapping[str, Any] | None, *, mark: bool
) -> dict[str, Any] | None:
    """Return ``secret`` as shown: values as sizes, the content digest hidden.

    With ``mark``, a value whose bytes differ from ``other``'s under the same key is
    marked ``changed``.
    """
    if secret is None:
        return None
    theirs = decode_binary((other or {}).get("data")) or {}
    shown: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            raw = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raw = str(value).encode()
        changed = mark and key in theirs and theirs[key] != raw
        shown[key] = f"({len(raw):,} bytes{', changed' if changed else ''})"
    meta = dict(secret.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if ANNOTATION_CONTENT_HASH in annotations:
        annotations[ANNOTATION_CONTENT_HASH] = "(keyed digest, not shown)"
        meta["annotations"] = annotations
    view = {**secret, "metadata": meta}
    if shown:
        view["data"] = shown
    return view


def secret_diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> str:
    """Return a bounded unified diff (str) of two Secret bodies that shows no value.

    As :func:`configmap_diff`, with each ``data`` value shown as ``(N bytes)`` on the
    live side and ``(N bytes, changed)`` on the desired side when its bytes change (a
    key added or removed shows on its side only), the keyed digest annotation hidden,
    and :data:`SECRET_VALUES_HIDDEN` as the first line. "" when nothing changes.
    """
    if desired is None:
        return ""
    name = desired.get("metadata", {}).get("name", "secret")
    lines = list(
        difflib.unified_diff(
            _as_yaml(_secret_view(current, desired, mark=False)),
            _as_yaml(_secret_view(desired, current, mark=True)),
            fromfile=f"secret/{name} (live)" if current is not None else "/dev/null",
            tofile=f"secret/{name} (desired)",
        )
    )
    if not lines:
        return ""
    return SECRET_VALUES_HIDDEN + _capped(_bounded_lines(lines), lines)
