"""Parallel test workers (tests/workers.py, ``make test`` with ``-n $(TEST_WORKERS)``):
what must stay on one worker does, and what workers share cannot collide.

* Every collected test has one ``xdist_group``: the node tests one of their own, the
  modules of a shared control plane one per plane, every other test its module's; no
  fixture of a module's scope is used on both sides of that split.
* Under ``-n 2 --dist loadgroup`` the modules of a shared control plane run on one worker
  and share one plane.
* :func:`cbop_testing.envtest.process.free_ports` never gives one port to two processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.fixtures import SHARED_PLANES
from tests.workers import NODE_GROUP

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

#: A plugin for an inner ``pytest --collect-only``: writes what each test's group and
#: fixtures are to $GROUPS_OUT.
DUMP_PLUGIN = """
import json
import os

SCOPES = ("class", "module", "package")


def pytest_collection_finish(session):
    out = []
    for item in session.items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        out.append(
            {
                "nodeid": item.nodeid,
                "groups": [
                    m.kwargs.get("name", m.args[0] if m.args else None)
                    for m in item.iter_markers("xdist_group")
                ],
                "node": item.get_closest_marker("node") is not None,
                "fixtures": sorted(getattr(item, "fixturenames", ())),
                "wide": sorted(n for n, d in defs.items() if d and d[-1].scope in SCOPES),
            }
        )
    with open(os.environ["GROUPS_OUT"], "w") as handle:
        json.dump(out, handle)
"""


def _inner_env(**extra: str) -> dict[str, str]:
    """Our environment without pytest-xdist's worker variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return {**env, **extra}


@pytest.mark.timeout(300)
def test_every_test_has_one_group_that_keeps_its_fixtures_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "groups_dump.py").write_text(DUMP_PLUGIN)
    out = tmp_path / "groups.json"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"),
            *("-p", "groups_dump", str(TESTS)),
        ],
        cwd=REPO,
        env=_inner_env(GROUPS_OUT=str(out), PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}"),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tests = json.loads(out.read_text())
    assert len(tests) > 1000, len(tests)

    by_module: dict[str, set[str]] = defaultdict(set)
    wide_by_side: dict[tuple[str, bool], set[str]] = defaultdict(set)
    plane_groups: dict[str, set[str]] = defaultdict(set)
    for test in tests:
        assert len(test["groups"]) == 1, test
        (group,) = test["groups"]
        module = test["nodeid"].split("::", 1)[0]
        assert (group == NODE_GROUP) == test["node"], test
        if not test["node"]:
            by_module[module].add(group)
            for plane in SHARED_PLANES:
                if plane in test["fixtures"]:
                    plane_groups[plane].add(group)
        wide_by_side[(module, test["node"])].update(test["wide"])

    split = {module: groups for module, groups in by_module.items() if len(groups) != 1}
    assert not split, f"modules spread over several groups: {split}"
    for plane, groups in plane_groups.items():
        assert groups == {plane}, (plane, groups)
    planeless = {m: g for m, (g,) in by_module.items() if g != m and g not in SHARED_PLANES}
    assert not planeless, planeless
    # A module-wide fixture used by node and other tests alike would be set up twice.
    both = {
        module: shared
        for (module, node), wide in wide_by_side.items()
        if node and (shared := wide & wide_by_side.get((module, False), set()))
    }
    assert not both, f"module fixtures used on two workers: {both}"
    # The modules that share the workload plane today are kept together.
    assert {g for t in tests for g in t["groups"] if "tests/e2e/test_rollout" in t["nodeid"]} == {
        "workload_control_plane"
    }


USER = """
import os
from pathlib import Path

RECORD = Path(os.environ["SHARED_PLANE_RECORD"])


def test_uses_the_plane(workload_control_plane):
    with RECORD.open("a") as record:
        record.write(f"{os.environ['PYTEST_XDIST_WORKER']} {workload_control_plane.workdir}\\n")


def test_uses_it_again(workload_control_plane):
    test_uses_the_plane(workload_control_plane)
"""

OTHER = """
import pytest


@pytest.mark.parametrize("n", range(3))
def test_needs_no_plane(n):
    pass
"""


@pytest.mark.timeout(300)
def test_modules_of_a_shared_plane_run_on_one_worker_with_one_plane(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    # Spread one test at a time, the users would land on both workers.
    for name in ("test_a.py", "test_c.py", "test_e.py"):
        (inner / name).write_text(textwrap.dedent(USER))
    for name in ("test_b.py", "test_d.py"):
        (inner / name).write_text(textwrap.dedent(OTHER))
    record = tmp_path / "users.txt"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-p", "tests.e2e.control_plane", "-p", "tests.e2e.fixtures", "-p", "tests.workers"),
            *("-n", "2", "--dist", "loadgroup", f"--rootdir={inner}"),
            *(f"--basetemp={tmp_path / 'base'}", str(inner)),
        ],
        cwd=inner,
        env=_inner_env(SHARED_PLANE_RECORD=str(record), PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 passed" in result.stdout, result.stdout
    users = record.read_text().splitlines()
    assert len(users) == 6, users
    assert len(set(users)) == 1, f"two workers or two planes: {users}"
    worker, workdir = users[0].split(" ", 1)
    assert workdir.startswith(str(tmp_path / "base" / f"popen-{worker}")), users


PORTS = """
import sys

from cbop_testing.envtest.process import free_ports

print(" ".join(str(free_ports(1)[0]) for _ in range(int(sys.argv[1]))))
"""


def test_free_ports_never_gives_one_port_to_two_processes(tmp_path: Path) -> None:
    # Each call's socket is closed before the next, so without the machine-wide record
    # the kernel could hand a port out again: 4 x 300 draws from some 14,000 ports
    # would repeat one about 25 times.
    script = tmp_path / "ports.py"
    script.write_text(PORTS)
    env = _inner_env(TMPDIR=str(tmp_path))
    procs = [
        subprocess.Popen([sys.executable, str(script), "300"], env=env, stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    ports: list[int] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        ports += [int(p) for p in out.split()]
    assert len(ports) == 1200
    assert len(set(ports)) == len(ports), sorted(p for p in ports if ports.count(p) > 1)
    held = json.loads((tmp_path / "cbop-envtest-ports.json").read_text())
    assert set(map(int, held)) == set(ports)
