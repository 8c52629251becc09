"""The cbop wheel holds the runtime only, and every module it ships imports.

A user who runs ``pip install cbop`` gets the wheel and its declared dependencies, nothing
else. The wheel once shipped the local control plane (test support needing
``cryptography``, then only a dev dependency), so ``import cbop.envtest`` from the wheel
alone raised ImportError. This builds the wheel from the checkout, installs it with its
declared dependencies (from the package index, as the image build does) into a fresh
virtualenv that sees nothing of the checkout or of .venv, and imports every module the
wheel ships. Test support lives in the ``cbop-testing`` distribution (``testing/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Run by the fresh virtualenv's interpreter: imports each module named in argv[1] (a
#: JSON list) and prints a JSON object of the failures, module -> "ExcType: message".
IMPORT_EACH = """
import importlib, json, sys
failures = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
"""


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH or virtualenv of the caller leaks into the fresh one.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _modules(wheel: Path) -> list[str]:
    """Dotted names of every Python module in the wheel (``cbop.__main__`` excluded)."""
    names = []
    for member in zipfile.ZipFile(wheel).namelist():
        if not member.endswith(".py") or ".dist-info/" in member:
            continue
        parts = member.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__":
            continue  # importing it runs the command; `-m cbop --help` below covers it
        names.append(".".join(parts))
    return sorted(names)


@pytest.mark.timeout(900)
def test_the_wheel_alone_imports_every_module_it_ships(tmp_path: Path) -> None:
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", "dist", str(REPO)],
        tmp_path,
        600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("cbop-*.whl")
    modules = _modules(wheel)
    assert {"cbop.cli", "cbop.clock", "cbop.manager"} <= set(modules), modules
    tops = {name.split(".")[0] for name in modules}
    assert tops == {"cbop"}, f"the wheel ships more than the cbop package: {sorted(tops)}"

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], tmp_path, 300)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installed = _run([python, "-m", "pip", "install", "--quiet", str(wheel)], tmp_path, 600)
    assert installed.returncode == 0, installed.stderr

    # -I: no user site, no PYTHON* variables, no script directory on sys.path.
    imported = _run([python, "-I", "-c", IMPORT_EACH, json.dumps(modules)], tmp_path, 300)
    assert imported.returncode == 0, imported.stderr
    failures = json.loads(imported.stdout)
    assert failures == {}, f"modules of the wheel that do not import: {failures}"

    where = _run(
        [
            python,
            "-I",
            "-c",
            "import cbop, importlib.util as u; "
            "print(cbop.__file__); print(u.find_spec('cbop_testing'))",
        ],
        tmp_path,
        60,
    )
    assert where.returncode == 0, where.stderr
    cbop_file, testing_spec = where.stdout.splitlines()
    assert cbop_file.startswith(str(venv)), f"cbop imported from {cbop_file}, not the wheel"
    assert testing_spec == "None", "test support is installed with the cbop wheel"

    cli = _run([python, "-I", "-m", "cbop", "--help"], tmp_path, 60)
    assert cli.returncode == 0, cli.stderr
    assert "--metrics-bind-address" in cli.stdout
    assert "cbop release --help" in " ".join(cli.stdout.split())
    # The commands a user of the wheel runs without a checkout, from its console script.
    for command in ("release", "migrate-storage"):
        helped = _run([str(venv / "bin" / "cbop"), command, "--help"], tmp_path, 60)
        assert helped.returncode == 0, helped.stderr
        assert helped.stdout.startswith(f"usage: cbop {command}"), helped.stdout
