"""The dry run's ConfigMap diff: YAML literal blocks, and bounded whatever the values."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from cbop.configbundle.diff import MAX_DIFF_BYTES, MAX_LINE_CHARS, configmap_diff, excerpt


def cm(data: dict[str, str], binary: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": "demo", "resourceVersion": "7", "uid": "u"},
        "data": data,
    }
    if binary is not None:
        body["binaryData"] = binary
    return body


def test_multi_line_values_are_literal_blocks_line_by_line() -> None:
    old = cm({"nginx.conf": "server {\n  listen 80;\n}\n"})
    new = cm({"nginx.conf": "server {\n  listen 8080;\n}\n"})
    diff = configmap_diff(old, new)
    assert "   nginx.conf: |\n" in diff
    assert "-      listen 80;\n" in diff
    assert "+      listen 8080;\n" in diff
    assert "\\n" not in diff
    assert "resourceVersion" not in diff


def test_a_long_single_line_value_is_shown_around_the_change() -> None:
    """Issue 11 item 2: 921,600 characters, one changed, printed two 921,606-char lines."""
    value = "x" * 921_600
    changed = value[:500_000] + "Y" + value[500_001:]
    diff = configmap_diff(cm({"a": value}), cm({"a": changed}))
    assert len(diff) < 2_000
    assert max(len(line) for line in diff.splitlines()) < 2 * MAX_LINE_CHARS
    minus = next(line for line in diff.splitlines() if line.startswith("-  a: "))
    plus = next(line for line in diff.splitlines() if line.startswith("+  a: "))
    assert "Y" in plus
    assert "Y" not in minus
    # The markers count the bytes left out: shown + elided = the whole line.
    for line in (minus, plus):
        elided = sum(int(n.replace(",", "")) for n in _markers(line))
        shown = len(line[1:]) - sum(len(m) for m in _marker_texts(line))
        assert shown + elided == len("  a: ") + len(value)


def _marker_texts(line: str) -> list[str]:
    import re

    return re.findall(r"\[\.\.\. [\d,]+ bytes \.\.\.\]", line)


def _markers(line: str) -> list[str]:
    return [m.split()[1] for m in _marker_texts(line)]


def test_byte_counts_are_utf8_bytes() -> None:
    line = "+" + "ї" * 1000 + "\n"
    shown = excerpt(line)
    assert shown.endswith("\n")
    (count,) = _markers(shown)
    # The head keeps "+" and 39 of the 1,000 two-byte characters.
    assert int(count.replace(",", "")) == (1000 - 39) * 2


def test_binary_values_are_shown_by_size_and_hash() -> None:
    raw = bytes(range(256)) * 4000
    encoded = base64.b64encode(raw).decode()
    diff = configmap_diff(None, cm({}, {"blob.bin": encoded}))
    assert encoded[:100] not in diff
    assert f"{len(raw):,} bytes, sha256:{hashlib.sha256(raw).hexdigest()}" in diff


def test_a_whole_diff_is_capped_with_a_note_of_what_was_cut() -> None:
    data = {f"key{i:05}": f"value {i}" for i in range(20_000)}
    diff = configmap_diff(None, cm(data))
    assert len(diff.encode()) <= MAX_DIFF_BYTES + 200
    last = diff.splitlines()[-1]
    assert last.startswith("# diff cut after ")
    assert "more lines" in last
    assert "bytes) not shown" in last


def test_no_change_is_an_empty_diff() -> None:
    assert configmap_diff(cm({"a": "1"}), cm({"a": "1"})) == ""
    assert configmap_diff(cm({"a": "1"}), None) == ""
