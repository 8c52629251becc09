"""Test-suite wiring: the control-plane fixtures (tests/e2e/control_plane.py) and the
operator's e2e fixtures (tests/e2e/fixtures.py), for the e2e and the tooling tests."""

pytest_plugins = ["tests.e2e.control_plane", "tests.e2e.fixtures"]
