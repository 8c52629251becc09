"""Test-suite wiring: the operator's e2e fixtures live in tests/e2e/fixtures.py."""

pytest_plugins = ["tests.e2e.fixtures"]
