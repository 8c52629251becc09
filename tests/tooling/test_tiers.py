"""The test tiers: every test is in exactly one of ``unit``, ``tooling`` and ``e2e``, and a
test that needs the local node (kubelet, containerd, podman) says so with ``node``.

tests/conftest.py marks each test by its directory; the ``node`` marker is the tests' own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
#: What in a test module's source means that it needs the local node or podman.
NODE_NEEDS = re.compile(
    r"cbop_image\(|pause_image\(|cbop_testing\.envtest\.node import|WITH_NODE=1|build-node\.sh"
)


def _selected(marker_expression: str) -> str:
    """Return the ``pytest --collect-only -q -m marker_expression`` listing of tests/."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker_expression,
            str(TESTS),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # 5: no test selected.
    assert result.returncode in (0, 5), result.stdout + result.stderr
    return result.stdout


@pytest.mark.timeout(300)
def test_every_test_is_in_exactly_one_tier() -> None:
    listing = _selected(
        "not (unit or tooling or e2e) or (unit and tooling) or (unit and e2e) or (tooling and e2e)"
    )
    assert re.search(r"^no tests collected \(\d+ deselected\)", listing, re.M), listing


def test_each_test_module_that_needs_the_node_is_marked_node() -> None:
    unmarked = [
        str(path.relative_to(REPO))
        for path in sorted(TESTS.rglob("test_*.py"))
        if path.name != Path(__file__).name
        and NODE_NEEDS.search(text := path.read_text())
        and "pytest.mark.node" not in text
    ]
    assert not unmarked, f"modules that need the node but carry no node marker: {unmarked}"


def test_operator_unit_tests_need_no_node() -> None:
    marked = [
        str(path.relative_to(REPO))
        for path in sorted((TESTS / "unit").rglob("test_*.py"))
        if "pytest.mark.node" in path.read_text()
    ]
    assert not marked, marked


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in helper modules (cbop_testing, tests/e2e/harness.py, ...), so
    collecting or changing one test module never drags in another's fixtures and tests."""
    importing = re.compile(
        r"^\s*(from\s+(\.|tests\.\w+\.)test_\w*\s+import|import\s+tests\.\w+\.test_)"
    )
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if importing.match(line)
    ]
    assert offenders == []
