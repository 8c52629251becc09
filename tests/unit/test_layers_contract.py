"""pyproject.toml's layers contract, and the README's table of them, name every top-level module.

A module the contract does not name may import anything and be imported from anywhere:
import-linter checks only the modules it lists. So the outermost contract (the one
without ``containers``) must list each package and module directly under ``cbop``, and
the README's "How it is built" says what each one owns. Every controller package of
the registry is in the ``independence`` contract, and in one layer with the others.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import cbop
from cbop.controllers import CONTROLLERS

REPO = Path(__file__).resolve().parents[2]
#: Entry points, never imported by another module.
ENTRY_POINTS = {"cbop.__init__", "cbop.__main__"}


def _top_level_modules() -> set[str]:
    package = Path(cbop.__file__).parent
    found = {f"cbop.{path.stem}" for path in package.glob("*.py")}
    found |= {f"cbop.{path.parent.name}" for path in package.glob("*/__init__.py")}
    return found - ENTRY_POINTS


def _outer_layers() -> list[str]:
    config: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = (
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and not c.get("containers")
    )
    layers: list[str] = contract["layers"]
    return layers


def test_every_top_level_module_is_in_one_layer() -> None:
    named = [name for layer in _outer_layers() for name in re.split(r"[|:]", layer)]
    named = [name.strip() for name in named]
    assert len(named) == len(set(named)), "a module is in two layers"
    modules = _top_level_modules()
    assert modules - set(named) == set(), "not in the layers contract of pyproject.toml"
    assert set(named) - modules == set(), "in the layers contract, but not in src/cbop"


def test_the_readme_table_of_layers_names_every_top_level_module() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## How it is built", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `cbop")]
    named = {name for row in rows for name in re.findall(r"`(cbop\.\w+)`", row)}
    assert named == _top_level_modules()


def test_every_registered_controller_package_is_an_independent_peer() -> None:
    config: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = (
        c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "independence"
    )
    registered = {".".join(d.install.__module__.split(".")[:2]) for d in CONTROLLERS}
    assert set(contract["modules"]) == registered
    layers = [{n.strip() for n in re.split(r"[|:]", layer)} for layer in _outer_layers()]
    assert any(registered <= layer for layer in layers), "not all in one layer"
