"""How the tests are spread over pytest-xdist workers (``make test``, ``make test-e2e``,
``make test-tooling``: ``-n $(TEST_WORKERS) --dist loadgroup``; loaded by tests/conftest.py).

Every test gets an ``xdist_group`` mark, and each group runs on one worker, its tests in
their file order:

* ``node``: every test marked ``node``. They share podman's image tags (``cbop:dev``,
  which tests/e2e/test_image.py builds and checks, tests/e2e/test_pods.py retags) and
  each starts a kubelet node of two busy cores' worth; one after another, as before.
* the name of a shared control plane (tests/e2e/fixtures.py, ``SHARED_PLANES``): every
  other test of a module that uses it, so it starts once, on one worker, and stops after
  its last module there.
* otherwise the test's module, so a module's own fixtures (its control plane, a cbop
  process, a built wheel) are set up once.

A new module that uses the standard fixtures needs nothing more. Each worker is its own
pytest session: its own session control plane, base temporary directory
(``<basetemp>/popen-gw<N>``) and therefore work directories, namespaces and node names;
ports come from :func:`cbop_testing.envtest.process.free_ports`, reserved machine-wide,
so two workers are never given the same one. Without ``-n`` (``TEST_WORKERS=0``) the
marks change nothing.

How the groups reach the scheduler: pytest-xdist's ``loadgroup`` learns a test's group
from a suffix it appends to the node id on the worker, which pytest 9.2's structured
node ids no longer take (pytest-xdist issue 1386: every test then goes its own way,
silently). So each worker writes its tests' groups to a file that the controller named
(``pytest_configure_node``), and the controller's scheduler (``loadgroup``'s, given
:class:`GroupsFromWorkers` by ``pytest_xdist_make_scheduler``) reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fixtures import SHARED_PLANES

#: The group of the tests marked ``node``.
NODE_GROUP = "node"
#: The ``workerinput`` key naming the file where a worker writes its tests' groups.
GROUPS_FILE = "cbop_groups_file"
_GROUPS_DIR = pytest.StashKey[Path]()


def worker_group(item: pytest.Item, module_planes: dict[str, str]) -> str:
    """Return the ``xdist_group`` of ``item``.

    ``module_planes`` maps a module's path (its node id's first part) to the shared
    control plane that some test of it uses (see the module docstring for the rules).
    """
    if item.get_closest_marker("node") is not None:
        return NODE_GROUP
    module = item.nodeid.split("::", 1)[0]
    return module_planes.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its worker group (first: pytest-xdist reads the marks)."""
    module_planes: dict[str, str] = {}
    for item in items:
        if item.get_closest_marker("node") is not None:
            continue
        for name in SHARED_PLANES:
            if name in getattr(item, "fixturenames", ()):
                module_planes.setdefault(item.nodeid.split("::", 1)[0], name)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name=worker_group(item, module_planes)))


def _group_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return item.nodeid.split("::", 1)[0]
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker: write ``{node id: group}`` of the selected tests where asked."""
    workerinput = getattr(session.config, "workerinput", {})
    if GROUPS_FILE in workerinput:
        path = Path(workerinput[GROUPS_FILE])
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({item.nodeid: _group_of(item) for item in session.items}))
        partial.replace(path)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """On the controller: name the file where worker ``node`` writes its tests' groups."""
    config: pytest.Config = node.config
    if _GROUPS_DIR not in config.stash:
        base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        config.stash[_GROUPS_DIR] = Path(base) / "worker-groups"
        config.stash[_GROUPS_DIR].mkdir(exist_ok=True)
    node.workerinput[GROUPS_FILE] = str(config.stash[_GROUPS_DIR] / f"{node.gateway.id}.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: the groups as the workers wrote them (module docstring)."""
    if config.getoption("dist") != "loadgroup" or _GROUPS_DIR not in config.stash:
        return None
    return _scheduler_class()(config, log, config.stash[_GROUPS_DIR])


def _scheduler_class() -> type[Any]:
    from xdist.scheduler import LoadGroupScheduling  # only when xdist runs

    class GroupsFromWorkers(LoadGroupScheduling):  # type: ignore[misc]
        """``loadgroup`` whose groups come from the files the workers wrote, not from
        node-id suffixes: a test without an entry falls back to ``loadgroup``'s rule."""

        def __init__(self, config: pytest.Config, log: Any, directory: Path) -> None:
            super().__init__(config, log)
            self._directory = directory
            self._groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                # Read when first needed: at schedule(), after every worker collected.
                self._groups = {}
                for path in sorted(self._directory.glob("*.json")):
                    self._groups.update(json.loads(path.read_text()))
            group = self._groups.get(nodeid)
            return group if group is not None else str(super()._split_scope(nodeid))

    return GroupsFromWorkers
