"""Every flag's default comes from ``cbop.defaults`` and is shown in ``cbop --help``.

And the client-side rate limit is off unless asked for (issue 15): a client built from
the defaults sends requests as fast as the API server takes them.
"""

from __future__ import annotations

import argparse
import re

import pytest
from kubernetes import client as k8s_client

from cbop import defaults
from cbop.cli import build_parser, format_duration, main, parse_duration, pool_size
from cbop.informers import SharedInformer
from cbop.kube import CONFIGMAPS, KubeClient
from cbop.leaderelection import LeaderElector

#: flag -> the ``cbop.defaults`` value it must default to.
FLAG_DEFAULTS = {
    "--kube-api-qps": defaults.KUBE_API_QPS,
    "--kube-api-burst": defaults.KUBE_API_BURST,
    "--workers": defaults.WORKERS,
    "--resync-period": defaults.RESYNC_PERIOD,
    "--metrics-bind-address": defaults.METRICS_BIND_ADDRESS,
    "--health-probe-bind-address": defaults.HEALTH_PROBE_BIND_ADDRESS,
    "--log-level": defaults.LOG_LEVEL,
    "--leader-election-id": defaults.LEADER_ELECTION_ID,
    "--leader-election-lease-duration": defaults.LEASE_DURATION,
    "--leader-election-renew-deadline": defaults.RENEW_DEADLINE,
    "--leader-election-retry-period": defaults.RETRY_PERIOD,
    "--shutdown-timeout": defaults.SHUTDOWN_TIMEOUT,
    "--watch-read-timeout": defaults.WATCH_READ_TIMEOUT,
    "--rollout": defaults.ROLLOUT,
    "--shards": defaults.SHARDS,
}


def _actions() -> dict[str, argparse.Action]:
    return {
        a.option_strings[0]: a
        for a in build_parser()._actions
        if a.option_strings and a.option_strings[0] not in ("-h", "--version")
    }


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in __import__("os").environ if v.startswith("CBOP_")]:
        monkeypatch.delenv(var)


@pytest.mark.parametrize("option", sorted(FLAG_DEFAULTS))
def test_flag_default_is_the_one_in_cbop_defaults(option: str) -> None:
    assert _actions()[option].default == FLAG_DEFAULTS[option]


def test_help_shows_every_default() -> None:
    """Each flag's help says its default: the value, or what happens without it."""
    for option, action in _actions().items():
        assert action.help is not None, option
        assert "default" in action.help, option


@pytest.mark.parametrize(
    ("option", "shown"),
    [
        ("--resync-period", "(default: 10h)"),
        ("--leader-election-lease-duration", "(default: 15s)"),
        ("--watch-read-timeout", "(default: 1m30s)"),
        ("--kube-api-qps", "(default: 0)"),
        ("--workers", "(default: 4)"),
        ("--leader-elect", "(default: false)"),
        ("--shards", "(default: 1)"),
    ],
)
def test_help_shows_defaults_as_the_flag_reads_them(option: str, shown: str) -> None:
    help_text = " ".join(build_parser().format_help().split())
    rest = re.split(f" {option}[ ,]", help_text, maxsplit=1)[1]
    entry = re.split(r" --(?!no-)", rest, maxsplit=1)[0]
    assert shown in entry


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(36000.0, "10h"), (15.0, "15s"), (90.0, "1m30s"), (5400.0, "1h30m"), (0.0, "0s"),
     (0.5, "0.5s"), (3661.0, "1h1m1s")],
)  # fmt: skip
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_no_client_side_rate_limit_by_default() -> None:
    """The flag's default is no limit (the client side is in test_kube_client.py)."""
    assert build_parser().parse_args([]).kube_api_qps == 0


def test_the_parts_default_to_the_same_values() -> None:
    """The informer, the elector and the client take their keyword defaults from there."""
    informer = SharedInformer(KubeClient(k8s_client.ApiClient()), CONFIGMAPS)
    assert informer._resync_period == defaults.RESYNC_PERIOD
    assert informer._reflector._read_timeout == defaults.WATCH_READ_TIMEOUT
    elector = LeaderElector(
        KubeClient(k8s_client.ApiClient()),
        lease_name="l",
        namespace="ns",
        identity="me",
        on_started_leading=lambda: None,
        on_stopped_leading=lambda: None,
    )
    assert (elector._lease_duration, elector._renew_deadline, elector._retry_period) == (
        defaults.LEASE_DURATION,
        defaults.RENEW_DEADLINE,
        defaults.RETRY_PERIOD,
    )


def test_more_than_one_shard_without_leader_election_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each shard is held through a Lease: ``--shards 2`` alone is refused (exit 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(["--shards", "2"])
    assert exit_.value.code == 2
    assert "--shards 2 needs --leader-elect" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--shards", "0"])
    assert exit_.value.code == 2
    assert build_parser().parse_args(["--shards", "3", "--leader-elect"]).shards == 3


@pytest.mark.parametrize(
    ("argv", "size"),
    [
        # The rollout and cluster bundles are on by default: 11 watches per scope (10
        # resources, the pinned ReplicaSets, ControllerRevisions and pods among them,
        # and ConfigMaps twice: the managed ones and the sources), 6 controllers (the
        # cluster bundles' two counted also where they do not run, under --namespace
        # or --shards, and its status controller's one worker as --workers: a few
        # spare connections).
        ([], 11 + 6 * 4 + 4),
        (["--no-rollout", "--no-cluster-bundles"], 16),
        (["--namespace=a", "--namespace=b", "--workers=8"], 11 * 2 + 6 * 8 + 4),
        (
            ["--shards=2", "--leader-elect"] + [f"--namespace=n{i}" for i in range(10)],
            2 * (11 * 10 + 6 * 4) + 4,
        ),
        (
            ["--shards=3", "--leader-elect", "--no-rollout", "--no-cluster-bundles"]
            + [f"--namespace=n{i}" for i in range(10)],
            3 * (6 * 10 + 4) + 4,
        ),
        (["--shards=3", "--leader-elect", "--rollout"], 3 * (11 + 6 * 4) + 4),
    ],
)
def test_the_connection_pool_holds_every_watch_and_worker_of_every_shard(
    argv: list[str], size: int
) -> None:
    """Ten namespaces over two shards hold 40 watches: a pool of 16 dropped connections."""
    assert pool_size(build_parser().parse_args(argv)) == size
