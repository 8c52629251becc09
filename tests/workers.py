"""How the tests are spread over pytest-xdist workers (``make test``, ``make test-e2e``,
``make test-tooling``: ``-n $(E2E_WORKERS) --dist loadgroup``; loaded by tests/conftest.py).

Every test gets an ``xdist_group`` mark, and ``--dist loadgroup`` runs each group on one
worker, its tests in their file order:

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
so two workers are never given the same one. Without ``-n`` (``E2E_WORKERS=0``) the
marks change nothing.
"""

from __future__ import annotations

import pytest

from tests.e2e.fixtures import SHARED_PLANES

#: The group of the tests marked ``node``.
NODE_GROUP = "node"


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
