#!/usr/bin/env python3
"""cbop's version: its one source, and the copies that cannot read it.

``__version__`` in ``src/cbop/__init__.py`` is the only place the version is written by
hand. The two Python projects (``pyproject.toml``, ``testing/pyproject.toml``) read it
through hatch's ``[tool.hatch.version]``; what cannot read a file holds a copy that this
script checks: the chart's ``version`` and ``appVersion``, the ``newTag`` of
``manifests/kustomization.yaml`` and ``manifests/migrate/kustomization.yaml``, and every
image or release-file example in the README, ``docs/``, ``manifests/`` and ``charts/``
(``cbop:X.Y.Z``; ``cbop-X.Y.Z.tgz`` and the other files of ``make release``;
``newTag: X.Y.Z``, ``image.tag=X.Y.Z``, ``VERSION=X.Y.Z``). Prose about an older release
(``Upgrading from 0.1.0``) is none of these and is left alone.

Usage::

    hack/version.py                 # prints the version
    hack/version.py check           # lists every copy that differs; exit 1 if any
    hack/version.py --root DIR ...  # the same on another tree (the tests' temp copies)

Standard library only: ``make image`` and ``make release`` run it with any python3.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
#: The one source, relative to the tree's root.
SOURCE: Final = "src/cbop/__init__.py"
_SOURCE_LINE: Final = re.compile(r'^__version__ = "([^"]+)"$', re.M)

#: Copies that must exist: (file, pattern whose group 1 is the version).
PINNED: Final = (
    ("charts/cbop/Chart.yaml", re.compile(r"^version: (\S+)$", re.M)),
    ("charts/cbop/Chart.yaml", re.compile(r'^appVersion: "([^"]+)"$', re.M)),
    ("manifests/kustomization.yaml", re.compile(r"^\s*newTag: (\S+)$", re.M)),
    ("manifests/migrate/kustomization.yaml", re.compile(r"^\s*newTag: (\S+)$", re.M)),
)

#: Python projects that must take the version from SOURCE: (pyproject, its path to SOURCE).
PROJECTS: Final = (("pyproject.toml", SOURCE), ("testing/pyproject.toml", "../" + SOURCE))

#: Where image and chart examples are looked for, and what they look like.
EXAMPLE_FILES: Final = ("README.md", "docs/**/*.md", "manifests/**/*.yaml", "charts/**/*")
_V = r"(\d+\.\d+\.\d+(?:[-.+][0-9A-Za-z.-]+)?)"
EXAMPLES: Final = (
    re.compile(r"\bcbop:" + _V),
    re.compile(r"\bcbop-(\d+\.\d+\.\d+)(?=\.tgz|\.tar|\.oci|-py)"),
    re.compile(r"\bnewTag: " + _V),
    re.compile(r"\bimage\.tag=" + _V),
    re.compile(r"\bVERSION=" + _V),
)


@dataclass(frozen=True)
class Mismatch:
    """One copy of the version that is not the source's.

    ``line`` is 1-based; 0 when the copy is missing altogether. ``found`` is what the copy
    says (empty when missing); ``what`` says which copy it is.
    """

    path: str
    line: int
    found: str
    what: str

    def __str__(self) -> str:
        if not self.line:
            return f"{self.path}: missing: {self.what}"
        return f"{self.path}:{self.line}: {self.found!r} in {self.what}"


def version(root: Path = REPO) -> str:
    """Return ``__version__`` of ``root/src/cbop/__init__.py`` (e.g. ``"0.2.0"``).

    Raises ValueError when the file has no ``__version__ = "..."`` line, OSError when it
    cannot be read.
    """
    match = _SOURCE_LINE.search((root / SOURCE).read_text())
    if match is None:
        raise ValueError(f'{SOURCE}: no line __version__ = "..."')
    return match.group(1)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _pinned(root: Path, want: str) -> Iterator[Mismatch]:
    for rel, pattern in PINNED:
        path = root / rel
        text = path.read_text() if path.is_file() else ""
        match = pattern.search(text)
        if match is None:
            yield Mismatch(rel, 0, "", f"a line matching {pattern.pattern!r}")
        elif match.group(1) != want:
            yield Mismatch(rel, _line_of(text, match.start(1)), match.group(1), pattern.pattern)


def _projects(root: Path) -> Iterator[Mismatch]:
    for rel, source in PROJECTS:
        path = root / rel
        if not path.is_file():
            yield Mismatch(rel, 0, "", "the project file")
            continue
        text = path.read_text()
        data = tomllib.loads(text)
        project = data.get("project", {})
        if "version" in project:
            offset = re.search(r"^version\s*=", text, re.M)
            line = _line_of(text, offset.start()) if offset else 1
            yield Mismatch(rel, line, str(project["version"]), "a static [project] version")
        if "version" not in project.get("dynamic", []):
            yield Mismatch(rel, 0, "", 'dynamic = ["version"] in [project]')
        got = data.get("tool", {}).get("hatch", {}).get("version", {}).get("path")
        if got != source:
            yield Mismatch(rel, 0, "", f'[tool.hatch.version] path = "{source}"')


def _examples(root: Path, want: str) -> Iterator[Mismatch]:
    seen: set[Path] = set()
    for glob in EXAMPLE_FILES:
        for path in sorted(root.glob(glob)):
            if path in seen or not path.is_file():
                continue
            seen.add(path)
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for pattern in EXAMPLES:
                for match in pattern.finditer(text):
                    if match.group(1) != want:
                        rel = path.relative_to(root).as_posix()
                        line = _line_of(text, match.start())
                        yield Mismatch(rel, line, match.group(1), "an example")


def check(root: Path = REPO) -> list[Mismatch]:
    """Return every copy of the version under ``root`` that differs from the source.

    Empty when all agree. Raises what :func:`version` raises when the source is unreadable.
    """
    want = version(root)
    found = [*_projects(root), *_pinned(root, want), *_examples(root, want)]
    return sorted(found, key=lambda m: (m.path, m.line))


def main(argv: list[str] | None = None) -> int:
    """Print the version, or with ``check`` list the copies that differ (exit 1 if any)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", nargs="?", choices=["check"], help="check every copy")
    parser.add_argument("--root", type=Path, default=REPO, help="the tree (default: this one)")
    args = parser.parse_args(argv)
    want = version(args.root)
    if args.command != "check":
        print(want)
        return 0
    mismatches = check(args.root)
    for mismatch in mismatches:
        print(mismatch)
    if mismatches:
        print(f"{len(mismatches)} cop(ies) differ from {SOURCE}'s {want}", file=sys.stderr)
        return 1
    print(f"every copy says {want}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
