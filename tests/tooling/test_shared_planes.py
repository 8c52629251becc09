"""A shared control plane of the e2e fixtures (tests/e2e/fixtures.py, ``SHARED_PLANES``)
runs from its first user to the end of the last module that uses it: later tests do not
share the two cores with it, and its module's own fixtures still have it.

The tests run an inner pytest session with the e2e plugins on two small modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FIRST = """
import os
from pathlib import Path

from cbop_testing.envtest.process import processes_mentioning

RECORD = Path(os.environ["SHARED_PLANE_RECORD"])


def test_uses_the_plane(workload_control_plane):
    assert workload_control_plane.running
    RECORD.write_text(str(workload_control_plane.workdir))


def test_later_in_the_same_module_it_still_runs():
    assert processes_mentioning(RECORD.read_text() + os.sep)
"""

SECOND = """
import os
from pathlib import Path

from cbop_testing.envtest.process import processes_mentioning

RECORD = Path(os.environ["SHARED_PLANE_RECORD"])


def test_in_the_next_module_it_is_gone():
    assert not processes_mentioning(RECORD.read_text() + os.sep)
"""


@pytest.mark.timeout(300)
def test_a_shared_plane_stops_after_the_last_module_that_uses_it(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_first.py").write_text(textwrap.dedent(FIRST))
    (inner / "test_second.py").write_text(textwrap.dedent(SECOND))
    record = tmp_path / "workdir.txt"
    env = {**os.environ, "SHARED_PLANE_RECORD": str(record), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.e2e.control_plane",
            "-p",
            "tests.e2e.fixtures",
            f"--rootdir={inner}",
            f"--basetemp={tmp_path / 'base'}",
            str(inner / "test_first.py"),
            str(inner / "test_second.py"),
        ],
        cwd=inner,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout, result.stdout
    assert record.read_text().startswith(str(tmp_path / "base")), record.read_text()
