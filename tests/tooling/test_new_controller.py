"""A new controller touches the files docs/writing-a-controller.md lists, and no others.

The test copies the tree, adds the page's own example controller as a package
(``cbop.keycounter``) with its line in ``cbop.controllers.CONTROLLERS``, and runs the
unit tier and import-linter on the copy: the tests that fail are those that ask for
the page's files. Then it makes exactly the changes the page's first table lists; the
unit tier and every import-linter contract pass, and the files changed are those of the
table. A rule no controller declared yet (``get`` on Secrets) makes the RBAC test ask for
the shipped ClusterRoles too (the page's second table).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "writing-a-controller.md"
PACKAGE = "keycounter"


def _copy_tree(to: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if not (REPO / name).is_file():  # deleted in the work tree
            continue
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, to / name)


def _env(tree: Path) -> dict[str, str]:
    # The copy's cbop and cbop_testing come before the editable installs of this checkout.
    path = os.pathsep.join([str(tree / "src"), str(tree / "testing" / "src"), str(tree)])
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def _run_unit_tests(tree: Path, paths: list[str]) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *paths],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    failed = set(re.findall(r"^FAILED (tests/unit/[\w/]+\.py)::", result.stdout, re.MULTILINE))
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    assert (result.returncode == 1) == bool(failed), result.stdout[-3000:]
    return failed


def _failing_unit_tests(tree: Path, *paths: str) -> set[str]:
    """Run the copy's unit tier (or ``paths`` of it); return the modules of failed tests.

    A module that failed is run again, alone: only one that fails twice counts, so that
    a test that fails now and then under load does not pass for a file to touch.
    """
    failed = _run_unit_tests(tree, list(paths or ["tests/unit"]))
    return _run_unit_tests(tree, sorted(failed)) if failed else failed


def _import_contracts(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _add_the_example(tree: Path) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    package = tree / "src" / "cbop" / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text('"""The example controller."""\n', encoding="utf-8")
    (package / "controller.py").write_text(code, encoding="utf-8")
    _edit(
        tree / "src" / "cbop" / "controllers.py",
        "from cbop.runtime.definition import ControllerDefinition\n",
        "from cbop.keycounter.controller import DEFINITION as KEY_COUNTER\n"
        "from cbop.runtime.definition import ControllerDefinition\n",
    )
    _edit(
        tree / "src" / "cbop" / "controllers.py",
        "    CLUSTER_BUNDLES,\n)",
        "    CLUSTER_BUNDLES,\n    KEY_COUNTER,\n)",
    )


def _make_the_listed_changes(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    _edit(
        pyproject,
        '"cbop.configbundle | cbop.rollout | cbop.clusterbundle",',
        '"cbop.configbundle | cbop.rollout | cbop.clusterbundle | cbop.keycounter",',
    )
    _edit(
        pyproject,
        'modules = ["cbop.configbundle", "cbop.rollout", "cbop.clusterbundle"]',
        'modules = ["cbop.configbundle", "cbop.rollout", "cbop.clusterbundle", "cbop.keycounter"]',
    )
    readme = tree / "README.md"
    _edit(
        readme,
        "`cbop.rollout`, `cbop.clusterbundle` |",
        "`cbop.rollout`, `cbop.clusterbundle`, `cbop.keycounter` |",
    )
    _edit(readme, "[--[no-]cluster-bundles]\n", "[--[no-]cluster-bundles] [--key-counter]\n")


def _changed(tree: Path) -> set[str]:
    """The files of the copy that differ from this checkout, or are new (directories whole)."""
    changed = set()
    for path in tree.rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        name = path.relative_to(tree).as_posix()
        if name.startswith(f"src/cbop/{PACKAGE}/"):
            changed.add(f"src/cbop/{PACKAGE}/")
        elif not (REPO / name).is_file() or (REPO / name).read_bytes() != path.read_bytes():
            changed.add(name)
    return changed


def _listed() -> set[str]:
    """The files of the page's first table of "Which files it touches"."""
    section = DOC.read_text(encoding="utf-8").split("## Which files it touches", 1)[1]
    (table, *_) = re.findall(r"(?:^\|.*\n)+", section, re.MULTILINE)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {
        re.findall(r"`([^`]+)`", row.split("|")[1])[0].replace("<package>", PACKAGE) for row in rows
    }


def test_a_new_controller_touches_exactly_the_listed_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _copy_tree(tree)
    _add_the_example(tree)
    assert _failing_unit_tests(tree) == {
        "tests/unit/test_layers_contract.py",
        "tests/unit/test_docs_flags.py",
    }

    _make_the_listed_changes(tree)
    assert _failing_unit_tests(tree) == set()
    contracts = _import_contracts(tree)
    assert contracts.returncode == 0, contracts.stdout[-3000:]
    assert "cbop.keycounter" in (tree / "pyproject.toml").read_text(encoding="utf-8")
    assert _changed(tree) == _listed()

    # A rule the shipped ClusterRoles do not grant yet: the RBAC test asks for them.
    _edit(
        tree / "src" / "cbop" / PACKAGE / "controller.py",
        'rbac=(PolicyRule(("",), ("configmaps",), ("get", "list", "watch", "patch")),),',
        'rbac=(PolicyRule(("",), ("configmaps",), ("get", "list", "watch", "patch")),'
        ' PolicyRule(("",), ("secrets",), ("get",))),',
    )
    rbac = "tests/unit/test_controller_definitions.py"
    assert _failing_unit_tests(tree, rbac) == {rbac}
