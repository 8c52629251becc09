"""tests/builds.py: the slow builds that the selected tests need start in the
background right after collection, and only those; their lanes stop as a whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.builds import Lane, start

REPO = Path(__file__).resolve().parents[2]

#: A plugin for an inner ``pytest --collect-only``: writes the lanes that three
#: selections of the collected tests need to $LANES_OUT.
DUMP_PLUGIN = """
import json
import os
from pathlib import Path

from tests.builds import HACK, needed_lanes


def pytest_collection_finish(session):
    items = session.items
    selections = {
        "node": [i for i in items if i.get_closest_marker("node")],
        "helm": [i for i in items if i.nodeid.startswith("tests/e2e/test_helm.py")],
        "unit": [i for i in items if i.nodeid.startswith("tests/unit/")],
    }
    # Each command as its script's path under hack/, without the suffix.
    out = {
        name: [
            [lane.name, [str(Path(c[0]).relative_to(HACK).with_suffix("")) for c in lane.commands]]
            for lane in needed_lanes(chosen)
        ]
        for name, chosen in selections.items()
        if chosen
    }
    with open(os.environ["LANES_OUT"], "w") as handle:
        json.dump(out, handle)
"""


@pytest.mark.timeout(300)
def test_the_lanes_follow_the_selection_and_collect_only_starts_none(tmp_path: Path) -> None:
    (tmp_path / "lanes_dump.py").write_text(DUMP_PLUGIN)
    out = tmp_path / "lanes.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"),
            *("-p", "lanes_dump", f"--basetemp={tmp_path / 'base'}", "tests"),
        ],
        cwd=REPO,
        env={**env, "LANES_OUT": str(out), "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lanes = json.loads(out.read_text())
    go = ["build-control-plane", "build-node", "build-helm"]
    assert lanes == {
        "node": [["images", ["image/build", "image/pause"]], ["go", go]],
        "helm": [["go", ["build-control-plane", "build-helm"]]],
        "unit": [],
    }
    # --collect-only: no lane was started.
    assert not list((tmp_path / "base").rglob("builds"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_lane_runs_its_commands_in_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    record = tmp_path / "record"
    step = ("bash", "-c", f'echo "$0" >> {record}')
    lanes = [
        Lane("ok", ((*step, "one"), (*step, "two"))),
        Lane("fails", ((*step, "three"), ("false",), (*step, "never"))),
    ]
    codes = start(lanes, tmp_path / "logs").wait(timeout=30)
    assert codes == [0, 1]
    assert sorted(record.read_text().split()) == ["one", "three", "two"]
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {"ok.log", "fails.log"}


def test_stopping_a_lane_ends_the_processes_it_started(tmp_path: Path) -> None:
    # A build script's compilers are its children's children: the lane's whole
    # process group must go.
    pid_file = tmp_path / "pid"
    grandchild = ("bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait")
    running = start([Lane("slow", (grandchild,))], tmp_path / "logs")
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the lane did not start"
        time.sleep(0.05)
    sleeper = int(pid_file.read_text())
    assert _alive(sleeper)
    running.stop()
    deadline = time.monotonic() + 10
    while _alive(sleeper):
        assert time.monotonic() < deadline, "the lane's grandchild outlived stop()"
        time.sleep(0.05)
    assert running.procs[0].returncode is not None
