"""Test-suite wiring: the tiers' markers, the control-plane fixtures
(tests/e2e/control_plane.py), the operator's e2e fixtures (tests/e2e/fixtures.py) and
the groups that keep tests together on one pytest-xdist worker (tests/workers.py).

Every test gets the marker of its tier from its directory: ``unit`` (tests/unit),
``tooling`` (tests/tooling) or ``e2e`` (tests/e2e), so ``pytest -m "not e2e"`` and the
like select a tier without a list of paths. ``node`` is set by the tests themselves
(module-wide in tests/e2e/test_pods.py and tests/e2e/test_image.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.e2e.control_plane", "tests.e2e.fixtures", "tests.workers", "tests.builds"]

_HERE = Path(__file__).parent.resolve()
#: The tier marker of each directory under tests/.
TIERS = {"unit": pytest.mark.unit, "tooling": pytest.mark.tooling, "e2e": pytest.mark.e2e}


def tier_of(path: Path) -> str | None:
    """Return the tier (a key of ``TIERS``) of a test file's path, or None outside them."""
    try:
        relative = path.resolve().relative_to(_HERE)
    except ValueError:
        return None
    first = relative.parts[0] if len(relative.parts) > 1 else None
    return first if first in TIERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every collected test with its tier (its directory under tests/)."""
    for item in items:
        tier = tier_of(Path(str(item.path)))
        if tier is not None:
            item.add_marker(TIERS[tier])
