"""Every name and path that cbop's docstrings and docs mention exists.

Docstrings and docs name modules, classes, functions and files of the project
(``cbop.runtime.Scope``, :meth:`Scope.start`, ``docs/rollout.md``); when the code moves
they go stale silently. This test resolves each of them: a dotted name starting with
``cbop`` or ``cbop_testing`` is imported, attribute by attribute (an instance attribute
counts when ``__init__`` assigns it); a Sphinx role without a package (``:class:`Scope```)
is looked up from the module it is written in; a path is looked up in the repository
(``cbop/...`` under ``src/``), a Markdown link next to its page.

Read: the docstrings of ``src/cbop`` and ``testing/src/cbop_testing``, README.md,
docs/, bench/README.md and the chart's README. CHANGELOG.md is history, not a
description of the code, and is not checked.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import pkgutil
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The Python trees whose docstrings are checked, with the package each one holds.
PACKAGES = {
    REPO / "src" / "cbop": "cbop",
    REPO / "testing" / "src" / "cbop_testing": "cbop_testing",
}
#: The pages whose names and paths are checked.
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "bench" / "README.md",
    REPO / "charts" / "cbop" / "README.md",
]

#: A dotted name of the project (not the API group ``cbop.dev``, not a file name).
DOTTED = re.compile(r"(?<![\w.])(cbop(?:_testing)?(?:\.(?!dev)[A-Za-z_]\w*)+)")
#: A Sphinx cross-reference, its target (``~`` and a leading ``.`` kept).
ROLE = re.compile(r":(?:mod|class|meth|func|data|attr|exc|obj):`(~?[\w.]+)`")
#: A path in the repository.
PATH = re.compile(
    r"(?<![\w./-])((?:src|docs|hack|tests|testing|bench|manifests|charts|cbop)/[\w.-]*"
    r"(?:/[\w.-]+)*/?)"
)
#: A Markdown link's target.
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@dataclass(frozen=True)
class Mention:
    """One name or path, where it is written and what it is read against."""

    where: str
    text: str
    kind: str  # "dotted", "role", "path" or "link"
    module: str | None = None  # the module a relative role is read in
    scope: str | None = None  # the class it is written in, if any
    base: Path | None = None  # the directory a link is relative to


def _docstrings(tree: ast.AST) -> Iterator[tuple[str, int, str | None]]:
    """Yield (text, line, enclosing class) of every string statement of a module."""

    def visit(node: ast.AST, cls: str | None) -> Iterator[tuple[str, int, str | None]]:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.Expr)
                and isinstance(child.value, ast.Constant)
                and isinstance(child.value.value, str)
            ):
                yield child.value.value, child.lineno, cls
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            yield from visit(child, inner)

    yield from visit(tree, None)


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join([package, *[p for p in parts if p != "__init__"]])


#: Last parts of a dotted word that make it a file name (``cbop.conflist``), not a name.
FILE_SUFFIXES = frozenset({"yaml", "yml", "json", "conflist", "md", "py", "toml", "txt", "sh"})


def _dotted(text: str) -> list[str]:
    return [n for n in DOTTED.findall(text) if n.rpartition(".")[2] not in FILE_SUFFIXES]


def mentions() -> Iterator[Mention]:
    """Every name and path written in the docstrings of the packages and in the pages."""
    for root, package in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            module = _module_name(path, root, package)
            for text, line, cls in _docstrings(ast.parse(path.read_text(encoding="utf-8"))):
                where = f"{path.relative_to(REPO)}:{line}"
                for name in _dotted(text):
                    yield Mention(where, name, "dotted")
                for name in ROLE.findall(text):
                    yield Mention(where, name, "role", module, cls)
                for name in PATH.findall(text):
                    yield Mention(where, name.rstrip("."), "path")
    for page in PAGES:
        for number, row in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{page.relative_to(REPO)}:{number}"
            for name in _dotted(row):
                yield Mention(where, name, "dotted")
            for name in PATH.findall(re.sub(r"\]\([^)]*\)", "]", row)):
                yield Mention(where, name.rstrip("."), "path")
            for target in LINK.findall(row):
                if not re.match(r"[a-z]+:", target):
                    yield Mention(where, target, "link", base=page.parent)


@functools.cache
def _instance_attributes(cls: type) -> frozenset[str]:
    """The attributes ``cls`` declares or assigns to ``self`` in its own body."""
    names = set(getattr(cls, "__annotations__", {}))
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return frozenset(names)
    names.update(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=", source))
    return frozenset(names)


def _assigned_in_class(cls: type, attr: str) -> bool:
    """Whether ``cls`` (or a base) declares ``attr`` or assigns ``self.attr``."""
    return any(attr in _instance_attributes(klass) for klass in cls.__mro__)


def _attribute(obj: Any, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            # An instance attribute is the end: there is nothing further to look into.
            return inspect.isclass(obj) and _assigned_in_class(obj, name)
        obj = getattr(obj, name)
    return True


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from one."""
    parts = dotted.split(".")
    if "__main__" in parts:  # importing it would run the program: look for its file
        return any(
            (root / Path(*parts[1 : parts.index("__main__") + 1])).with_suffix(".py").exists()
            for root, package in PACKAGES.items()
            if package == parts[0]
        )
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _attribute(module, parts[cut:])
    return False


def _package_modules(package: str) -> Iterator[types.ModuleType]:
    """Yield the package ``package`` and each module in it (not in subpackages)."""
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.iter_modules(getattr(root, "__path__", [])):
        if info.name != "__main__":  # importing it would run the program
            yield importlib.import_module(f"{package}.{info.name}")


def _relative(mention: Mention) -> bool:
    """Resolve a role without a package as Sphinx would find it from its module.

    In the module (in its class first), in a class the module has, in a package
    above it, then in a module beside it; ``.name`` is a module beside it.
    """
    target = mention.text.lstrip("~")
    assert mention.module is not None
    module = importlib.import_module(mention.module)
    is_package = hasattr(module, "__path__")
    package = mention.module if is_package else mention.module.rpartition(".")[0]
    if target.startswith("."):
        return resolves(package + target)
    names = target.split(".")
    if mention.scope is not None and _attribute(module, [mention.scope, *names]):
        return True
    if _attribute(module, names) or hasattr(builtins, target):
        return True
    if any(_attribute(v, names) for v in vars(module).values() if inspect.isclass(v)):
        return True
    parts = package.split(".")
    if any(resolves(".".join([*parts[:cut], target])) for cut in range(len(parts), 0, -1)):
        return True
    return any(_attribute(sibling, names) for sibling in _package_modules(package))


def _exists(mention: Mention) -> bool:
    text = mention.text
    if mention.kind == "link":
        assert mention.base is not None
        return (mention.base / text).exists()
    if text.startswith("cbop/"):
        return (REPO / "src" / text).exists()
    return (REPO / text).exists()


def _broken(mention: Mention) -> bool:
    if mention.kind == "dotted":
        return not resolves(mention.text)
    if mention.kind == "role":
        target = mention.text.lstrip("~")
        if target.startswith(("cbop.", "cbop_testing.")):
            return not resolves(target)
        return not _relative(mention)
    return not _exists(mention)


def test_every_mentioned_name_and_path_exists() -> None:
    found = list(mentions())
    assert len(found) > 500, "the patterns found too little to be right"
    broken = sorted({f"{m.where}: {m.text}" for m in found if _broken(m)})
    assert broken == []


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("cbop.runtime.Scope", True),
        ("cbop.runtime.scope.Scope.client", True),  # assigned in __init__
        ("cbop.kube.KubeClient.with_fence", True),
        ("cbop.configbundle.EventRecorder", False),
        ("cbop.nothing", False),
    ],
)
def test_names_are_resolved_through_imports_and_init(text: str, ok: bool) -> None:
    assert resolves(text) is ok
