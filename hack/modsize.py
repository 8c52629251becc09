#!/usr/bin/env python3
"""The size of cbop's Python modules by kind of line, and the size check of ``make lint``.

Each line of a module counts once, as ``code`` (a line with any token of a statement,
even if a comment follows), ``docstring`` (a line of a string that is a statement of
its own: the docstrings of modules, classes and functions, and those of attributes),
``comment`` (a comment alone on its line) or ``blank``. The tables also give the lines of
each module's own docstring (``mdoc``, part of ``doc``).

The check bounds **code lines**, :data:`MAX_CODE_LINES` per module: a module is judged
by the code a reader has to follow, so the documentation a public function needs (types,
units, errors, provenance) never pushes a module over, and cutting it never brings one
under. 400 code lines is 600 lines with a third of them documentation, the size cbop's
modules were kept under before the check. tests/ is not checked (see :data:`CHECKED`).

Usage::

    hack/modsize.py check [PATH...]     # name each module over the limit; exit 1 if any
    hack/modsize.py modules [PATH...]   # a row per module, then the total
    hack/modsize.py packages [PATH...]  # a row per directory, then the total

PATH is a file or a directory (searched for ``*.py``), relative to ``--root`` (default:
this repository); without one, :data:`CHECKED`. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
#: The trees checked. Not tests/: a test module is a list of independent cases of one
#: behaviour, read one case at a time, and its module-wide fixtures (a control plane, a
#: cbop process) start once per module, so a split costs start-ups and helps no reader.
CHECKED: Final = ("src", "testing", "bench", "hack")
#: The most code lines a module may have.
MAX_CODE_LINES: Final = 400


@dataclass(frozen=True)
class Size:
    """The lines of one module (or a sum of modules) by kind; each line counts once."""

    path: str
    code: int
    docstring: int
    comment: int
    blank: int
    module_docstring: int = 0

    @property
    def total(self) -> int:
        """Every line of the file."""
        return self.code + self.docstring + self.comment + self.blank


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Return the numbers of the lines of every string that is a statement of its own."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            lines.update(range(node.lineno, end + 1))
    return lines


_LAYOUT: Final = frozenset(
    {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)


def measure(path: Path, *, name: str | None = None) -> Size:
    """Count the lines of the Python file ``path`` by kind.

    Args:
        path: a Python source file (UTF-8).
        name: the path to report (default: ``path`` as given).

    Raises:
        SyntaxError: the file is not valid Python.
    """
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    docstrings = _docstring_lines(tree)
    first = tree.body[0] if tree.body else None
    module_docstring = 0
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        end = first.end_lineno if first.end_lineno is not None else first.lineno
        module_docstring = end - first.lineno + 1
    code: set[int] = set()
    comments: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _LAYOUT:
            continue
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.start[0] not in docstrings:
            code.update(range(token.start[0], token.end[0] + 1))
    total = len(source.splitlines())
    docstring = len(docstrings - code)
    comment = len(comments - code - docstrings)
    return Size(
        path=name if name is not None else str(path),
        code=len(code),
        docstring=docstring,
        comment=comment,
        blank=total - len(code) - docstring - comment,
        module_docstring=module_docstring,
    )


def modules(paths: Iterable[str], root: Path) -> Iterator[Path]:
    """Yield the ``*.py`` files of ``paths`` (files, or directories searched), sorted.

    Raises:
        FileNotFoundError: a path that does not exist under ``root``.
    """
    for given in paths:
        path = root / given
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if ".venv" not in p.parts)
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"{given}: no such file or directory under {root}")


def sizes(paths: Iterable[str], root: Path) -> list[Size]:
    """Measure every module of ``paths``, each named by its path relative to ``root``."""
    return [measure(p, name=p.relative_to(root).as_posix()) for p in modules(paths, root)]


def over(found: Iterable[Size], limit: int = MAX_CODE_LINES) -> list[str]:
    """Return one message per module of ``found`` with more than ``limit`` code lines.

    Largest first; empty when every module is within the limit.
    """
    return [
        f"{size.path}: {size.code} code lines, over {limit}: split it where one concept "
        "ends and another begins"
        for size in sorted(found, key=lambda s: -s.code)
        if size.code > limit
    ]


def _sum(label: str, found: Iterable[Size]) -> Size:
    found = list(found)
    return Size(
        label,
        sum(s.code for s in found),
        sum(s.docstring for s in found),
        sum(s.comment for s in found),
        sum(s.blank for s in found),
        sum(s.module_docstring for s in found),
    )


def table(rows: Iterable[Size]) -> str:
    """Format ``rows`` as a plain-text table (docstring share in the last column)."""
    lines = [
        f"{'module':<52} {'lines':>6} {'code':>6} {'doc':>6} {'comment':>7} {'blank':>6} "
        f"{'mdoc':>5} doc%"
    ]
    for size in rows:
        share = 100 * size.docstring / size.total if size.total else 0.0
        lines.append(
            f"{size.path:<52} {size.total:>6} {size.code:>6} {size.docstring:>6} "
            f"{size.comment:>7} {size.blank:>6} {size.module_docstring:>5} {share:>4.0f}%"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (1: the check found modules over)."""
    parser = argparse.ArgumentParser(prog="hack/modsize.py", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("command", choices=("check", "modules", "packages"))
    parser.add_argument(
        "paths", nargs="*", help=f"files or directories (default: {' '.join(CHECKED)})"
    )
    parser.add_argument("--root", type=Path, default=REPO, help="the tree PATHs are in")
    args = parser.parse_args(argv)
    paths = args.paths or CHECKED
    found = sizes(paths, args.root)
    if args.command == "check":
        messages = over(found)
        for message in messages:
            print(message, file=sys.stderr)
        return 1 if messages else 0
    rows = found
    if args.command == "packages":
        dirs = sorted({str(Path(s.path).parent) for s in found})
        rows = [_sum(d + "/", (s for s in found if str(Path(s.path).parent) == d)) for d in dirs]
    print(table([*rows, _sum("total", found)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
