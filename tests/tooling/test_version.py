"""hack/version.py: one version source, and a check that finds every copy that drifted.

The check runs on this tree (every copy agrees) and on a temp copy of the files that
hold the version, where one copy is changed or removed.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cbop

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "version.py"
#: The files of the tree that hold the version or a copy of it.
COPIES = (
    "src/cbop/__init__.py",
    "pyproject.toml",
    "testing/pyproject.toml",
    "charts/cbop/Chart.yaml",
    "manifests/kustomization.yaml",
    "manifests/migrate/kustomization.yaml",
    "README.md",
    "docs/deploy.md",
    "docs/sharding.md",
    "docs/api-versions.md",
)


def _run(*args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for rel in COPIES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


def test_the_version_is_the_packages_and_every_copy_agrees() -> None:
    printed = _run()
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == cbop.__version__
    # The installed metadata (make venv reinstalls when the source changes).
    assert importlib.metadata.version("cbop") == cbop.__version__
    checked = _run("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout == ""


def test_the_temp_tree_agrees_before_it_is_changed(tree: Path) -> None:
    checked = _run("check", root=tree)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_changed_copy_is_listed_with_its_file_and_line(tree: Path) -> None:
    chart = tree / "charts/cbop/Chart.yaml"
    lines = chart.read_text().splitlines(keepends=True)
    (number,) = [i for i, line in enumerate(lines, 1) if line.startswith("appVersion:")]
    lines[number - 1] = 'appVersion: "9.9.9"\n'
    chart.write_text("".join(lines))
    deploy = tree / "docs/deploy.md"
    deploy.write_text(deploy.read_text() + "\n    docker pull cbop:0.0.1\n")
    deploy_line = len(deploy.read_text().splitlines())

    checked = _run("check", root=tree)
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        f'charts/cbop/Chart.yaml:{number}: \'9.9.9\' in ^appVersion: "([^"]+)"$',
        f"docs/deploy.md:{deploy_line}: '0.0.1' in an example",
    ]


def test_a_missing_copy_is_listed(tree: Path) -> None:
    kustomization = tree / "manifests/migrate/kustomization.yaml"
    text = kustomization.read_text()
    kustomization.write_text(
        "".join(line for line in text.splitlines(True) if "newTag:" not in line)
    )
    checked = _run("check", root=tree)
    assert checked.returncode == 1
    (listed,) = checked.stdout.splitlines()
    assert listed.startswith("manifests/migrate/kustomization.yaml: missing: ")


def test_a_project_with_its_own_version_is_listed(tree: Path) -> None:
    project = tree / "testing/pyproject.toml"
    text = project.read_text().replace('dynamic = ["version"]', 'version = "0.2.0"')
    project.write_text(text)
    checked = _run("check", root=tree)
    assert checked.returncode == 1
    assert [line.split(": ", 1)[0] for line in checked.stdout.splitlines()] == [
        "testing/pyproject.toml",
        "testing/pyproject.toml:10",
    ]


def test_a_new_source_version_makes_every_copy_stale(tree: Path) -> None:
    source = tree / "src/cbop/__init__.py"
    source.write_text(source.read_text().replace(cbop.__version__, "1.0.0"))
    assert _run(root=tree).stdout.strip() == "1.0.0"
    listed = _run("check", root=tree).stdout.splitlines()
    files = {line.split(":", 1)[0] for line in listed}
    assert files >= {
        "charts/cbop/Chart.yaml",
        "manifests/kustomization.yaml",
        "manifests/migrate/kustomization.yaml",
        "docs/deploy.md",
        "docs/sharding.md",
    }
    assert "pyproject.toml" not in files  # it reads the source
