"""Every line cbop writes to stderr is in the log format, its libraries' lines included.

Issue 11, item 6: urllib3's plain ``WARNING:urllib3.connectionpool:Retrying ...`` line
appeared among the JSON lines. cbop runs as a subprocess against a closed loopback port,
so urllib3 logs its connection retry and cbop its fatal error.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cbop.logconfig import MAX_FIELD_CHARS, HandlerLogger, bound_fields, shorten

FIELDS = {"timestamp", "level", "logger", "event"}
CONSOLE_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[(debug|info|warning|error)\s*\] "
)


def _closed_port_kubeconfig(tmp_path: Path) -> Path:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Closed now: connections to it are refused, and urllib3 logs a retry.
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("level", ["debug", "info"])
def test_every_stderr_line_is_json_with_the_standard_fields(tmp_path: Path, level: str) -> None:
    kubeconfig = _closed_port_kubeconfig(tmp_path)
    proc = _run(
        "-m",
        "cbop",
        "--once",
        f"--kubeconfig={kubeconfig}",
        "--log-format=json",
        f"--log-level={level}",
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    for record in records:
        assert record.keys() >= FIELDS, record
    loggers = [r["logger"] for r in records]
    assert "urllib3.connectionpool" in loggers, proc.stderr
    retry = records[loggers.index("urllib3.connectionpool")]
    assert retry["level"] == "warning"
    assert retry["event"].startswith("Retrying")
    assert records[-1]["level"] == "error"
    assert records[-1]["event"].startswith("cannot reach the API server")


def test_console_format_lines_have_the_same_shape(tmp_path: Path) -> None:
    kubeconfig = _closed_port_kubeconfig(tmp_path)
    proc = _run("-m", "cbop", "--once", f"--kubeconfig={kubeconfig}", "--log-format=console")
    lines = proc.stderr.splitlines()
    assert any("[urllib3.connectionpool]" in line for line in lines), proc.stderr
    for line in lines:
        assert CONSOLE_LINE.match(line), line


def test_warnings_and_library_loggers_go_through_the_format() -> None:
    code = (
        "import logging, warnings\n"
        "from cbop.logconfig import configure_logging\n"
        "configure_logging('info', 'json')\n"
        "warnings.warn('deprecated thing')\n"
        "logging.getLogger('kubernetes.client.rest').warning('from %s', 'kubernetes')\n"
        "logging.getLogger('kubernetes.client.rest').debug('response body: secret')\n"
        "logging.getLogger('urllib3.connectionpool').info('Starting new connection')\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    logging.getLogger('somelib').exception('it broke')\n"
    )
    proc = _run("-c", code)
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("py.warnings", "warning"),
        ("kubernetes.client.rest", "warning"),
        ("somelib", "error"),
    ]
    assert records[0]["event"].endswith("UserWarning: deprecated thing")
    assert records[1]["event"] == "from kubernetes"
    assert "ZeroDivisionError" in records[2]["exception"]
    for record in records:
        assert record.keys() >= FIELDS


def test_long_fields_are_shortened_with_a_byte_count() -> None:
    value = "é" * 100_000
    event = bound_fields(None, "info", {"event": "x", "error": value, "n": 3, "items": [value]})
    assert event["n"] == 3
    assert len(event["error"]) < MAX_FIELD_CHARS + 40
    assert len(event["items"]) < MAX_FIELD_CHARS + 40
    elided = 100_000 - MAX_FIELD_CHARS
    assert f"[... {2 * elided:,} bytes ...]" in event["error"]
    assert shorten("short") == "short"


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_traceback_carrying_a_whole_value_is_bounded(fmt: str) -> None:
    code = (
        "import structlog\n"
        "from cbop.logconfig import configure_logging\n"
        f"configure_logging('info', '{fmt}')\n"
        "try:\n"
        "    raise ValueError('v' * 1_000_000)\n"
        "except ValueError:\n"
        "    structlog.get_logger('cbop.test').exception('write failed')\n"
    )
    proc = _run("-c", code)
    assert "write failed" in proc.stderr
    assert "ValueError" in proc.stderr
    assert len(proc.stderr) < 3 * MAX_FIELD_CHARS, len(proc.stderr)


def test_own_and_foreign_lines_share_one_stream_in_order() -> None:
    """cbop's own lines are written by structlog straight to the root handler's stream
    (no LogRecord); foreign records go through the formatter; both keep their order and
    the same fields, and values JSON cannot hold are still rendered."""
    code = (
        "import logging, structlog\n"
        "from cbop.logconfig import configure_logging\n"
        "from cbop.runtime.reconcile import reconcile_context\n"
        "configure_logging('info', 'json')\n"
        "log = structlog.get_logger('cbop.configbundle')\n"
        "with reconcile_context('configbundle', 'ns/b'):\n"
        "    log.info('reconciled', action='update', duration=0.0125, big=2**70, obj=object())\n"
        "    log.debug('not at info')\n"
        "logging.getLogger('urllib3.connectionpool').warning('retrying %s', 'x')\n"
        "log.warning('after', keys={1: 'a'})\n"
    )
    proc = _run("-c", code)
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [(r["logger"], r["level"], r["event"]) for r in records] == [
        ("cbop.configbundle", "info", "reconciled"),
        ("urllib3.connectionpool", "warning", "retrying x"),
        ("cbop.configbundle", "warning", "after"),
    ]
    first = records[0]
    assert first.keys() >= FIELDS | {"controller", "namespace", "name", "reconcile_id"}
    assert (first["namespace"], first["name"], first["action"]) == ("ns", "b", "update")
    assert first["duration"] == 0.0125
    assert first["big"] == 2**70
    assert first["obj"].startswith("<object object at ")
    assert records[2]["keys"] == {"1": "a"}


def test_console_format_renders_own_lines_too() -> None:
    code = (
        "import structlog\n"
        "from cbop.logconfig import configure_logging\n"
        "configure_logging('debug', 'console')\n"
        "structlog.get_logger('cbop.test').debug('hello', n=1)\n"
    )
    proc = _run("-c", code)
    (line,) = proc.stderr.splitlines()
    assert CONSOLE_LINE.match(line), line
    assert "hello" in line
    assert "[cbop.test]" in line


class _ReentrantStream(io.StringIO):
    """A stream whose write fails as a buffered stream does when re-entered."""

    def write(self, s: str) -> int:
        raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")


def test_a_line_whose_write_fails_is_dropped_and_the_handler_stays_usable() -> None:
    # A signal handler that logs while the main thread is writing re-enters the stream;
    # the line is lost, never the handler's caller (the signal handler's stop request).
    handler: logging.StreamHandler[io.StringIO] = logging.StreamHandler(_ReentrantStream())
    HandlerLogger("cbop.cli", handler).info('{"event":"lost"}')
    handler.setStream(io.StringIO())
    HandlerLogger("cbop.cli", handler).info('{"event":"kept"}')  # the lock was released
    assert handler.stream.getvalue() == '{"event":"kept"}\n'
