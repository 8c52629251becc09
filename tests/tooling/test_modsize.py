"""hack/modsize.py: lines counted by kind, and the size check of ``make lint``.

The check runs on this tree (every module within the limit), and on temporary trees
where one module is over it, or where documentation is long but code is not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "modsize.py"

SAMPLE = '''\
"""A module docstring
on two lines."""

import os  # a comment after code is code

# a comment alone


class Thing:
    """One line."""

    size: int = 0
    """An attribute's docstring."""

    def run(self) -> str:
        text = """a string that is
        not a docstring"""
        return text + os.sep
'''


def _run(*args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _module(code_lines: int, doc_lines: int = 0) -> str:
    """A module of exactly ``code_lines`` code lines and ``doc_lines`` docstring lines."""
    doc = '"""' + "\n" * max(doc_lines - 1, 0) + '"""\n' if doc_lines else ""
    return doc + "".join(f"x{i} = {i}\n" for i in range(code_lines))


def test_lines_are_counted_by_kind(tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text(SAMPLE, encoding="utf-8")
    table = _run("modules", "sample.py", root=tmp_path)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("sample.py"))
    # lines, code, docstring, comment, blank, the module's own docstring
    assert row.split()[1:7] == ["18", "7", "4", "1", "6", "2"]


def test_this_tree_passes_and_make_lint_runs_the_check() -> None:
    checked = _run("check")
    assert checked.returncode == 0, checked.stderr
    dry = subprocess.run(
        ["make", "-n", "lint"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert "hack/modsize.py check" in dry.stdout


@pytest.mark.parametrize(
    ("code", "doc", "fails"),
    [(401, 0, True), (400, 0, False), (400, 300, False)],
    ids=["one-code-line-over", "at-the-limit", "long-docstrings-do-not-count"],
)
def test_a_module_over_the_limit_fails_the_check(
    tmp_path: Path, code: int, doc: int, fails: bool
) -> None:
    for top in ("src", "testing", "bench", "hack"):
        (tmp_path / top).mkdir()
    (tmp_path / "src" / "small.py").write_text(_module(10), encoding="utf-8")
    (tmp_path / "src" / "big.py").write_text(_module(code, doc), encoding="utf-8")
    checked = _run("check", "src", root=tmp_path)
    assert checked.returncode == (1 if fails else 0)
    if fails:
        assert checked.stderr.strip() == (
            "src/big.py: 401 code lines, over 400: split it where one concept ends "
            "and another begins"
        )
