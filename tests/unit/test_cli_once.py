"""``--once`` exit codes and the dry run's table (issue 11, item 1)."""

from __future__ import annotations

import pytest

from cbop.api import Reason
from cbop.cli import EXIT_NOT_READY, EXIT_OK, EXIT_PENDING, _table, exit_code
from cbop.configbundle import Action, Result

READY = Result("demo/a", Action.NONE, ready="True", reason=Reason.SYNCED, config_map="a")
PENDING = Result(
    "demo/b",
    Action.REPLACE,
    ready="True",
    reason=Reason.SYNCED,
    config_map="b",
    message="would replace ConfigMap b (1 keys, sha256:00)",
    diff="--- configmap/b (live)\n+++ configmap/b (desired)\n",
    pending=True,
)
BROKEN = Result(
    "demo/c", Action.CONFLICT, ready="False", reason=Reason.CONFIGMAP_CONFLICT, config_map="c"
)
RELEASE = Result("demo/d", Action.RELEASE, pending=True)
GONE = Result("demo/e", None)


@pytest.mark.parametrize(
    ("results", "code"),
    [
        ([], EXIT_OK),
        ([READY, GONE], EXIT_OK),
        ([READY, PENDING], EXIT_PENDING),
        ([RELEASE], EXIT_PENDING),
        ([PENDING, BROKEN], EXIT_NOT_READY),
        (
            [Result("demo/s", Action.SUSPENDED, ready="Unknown", reason=Reason.SUSPENDED)],
            EXIT_NOT_READY,
        ),
    ],
    ids=["nothing", "in-sync", "pending", "release", "broken-wins", "suspended"],
)
def test_exit_code(results: list[Result], code: int) -> None:
    assert exit_code(results) == code


def test_dry_run_table_says_pending_and_what_would_be_done() -> None:
    table = _table([READY, PENDING, BROKEN], dry_run=True)
    rows = [" ".join(line.split()) for line in table.splitlines()[1:4]]
    assert rows == [
        "demo a a none Ready",
        "demo b b replace (dry run) Pending (then Ready)",
        "demo c c conflict ConfigMapConflict",
    ]
    assert "# demo/b: would replace ConfigMap b (1 keys, sha256:00)" in table
    assert "+++ configmap/b (desired)" in table
    assert "Ready" not in table.split("\n\n", 1)[1]
