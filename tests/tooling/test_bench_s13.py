"""S13's accounting (bench/operators/scenarios/secret_renewal.py), without a control plane:
whose GETs the audit log shows, the goals' verdicts, and what ``--runs`` pools."""

from __future__ import annotations

import typing

from bench.operators import cluster, pooling
from bench.operators.scenarios import secret_renewal as s13
from bench.operators.scenarios import secret_renewal_report as report

PEER_AGENT = "controller-runtime-peer-bb1843028a2f315c/v0.0.0 (linux/amd64) kubernetes/$Format"


def _get(agent: str, resource: str | None, uri: str = "/api") -> dict[str, typing.Any]:
    event: dict[str, typing.Any] = {
        "verb": "get",
        "stage": "ResponseComplete",
        "userAgent": agent,
        "requestURI": f"{uri}?timeout=32s",
    }
    if resource:
        event["objectRef"] = {"resource": resource}
    return event


def test_an_audited_get_is_counted_for_its_client_only() -> None:
    cbop = s13._get_by_client(_get("cbop/0.3.0 (python)", "secrets"))
    peer = s13._get_by_client(_get(PEER_AGENT, "configbundles"))
    gc = s13._get_by_client(
        _get("kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/x/garbage-collector", None)
    )
    assert cbop == "cbop secrets"
    assert peer is not None
    assert peer.endswith(" configbundles")
    assert gc == "kube-controller-manager/garbage-collector /api"
    assert s13._is_operator(cbop, "cbop")
    assert not s13._is_operator(cbop, "controller-runtime")
    assert s13._is_operator(peer, "controller-runtime")
    assert not s13._is_operator(peer, "cbop")
    assert not s13._is_operator(gc, "cbop")
    assert not s13._is_operator(gc, "controller-runtime")
    # The bench's own reads (the request counts from /metrics) are not cbop's.
    bench = s13._get_by_client(_get(cluster.BENCH_AGENT, None, "/metrics"))
    assert bench == "cbop-bench /metrics"
    assert not s13._is_operator(bench, "cbop")
    assert s13._get_by_client({**_get("cbop/0.3.0", "secrets"), "verb": "list"}) is None


def _change(gets: int, writes: int, ones: int, seconds: float, cpu: float) -> dict[str, typing.Any]:
    return {
        "load": "1 1 1",
        "seconds": seconds,
        "cpu_seconds": cpu,
        "spread": [0.1, 0.2, seconds],
        "operator_gets": gets,
        "gets_by_client": {"kube-controller-manager/garbage-collector /api": 2},
        "secret_gets": 0.0,
        "secret_writes": float(writes),
        "writes_per_target": writes / 10,
        "status_writes": 10.0,
        "writes_by_code": {"PUT|secrets||200": float(writes), "PATCH|secrets||200": 1.0},
        "modified_per_secret": {"1": ones, "2": 10 - ones},
        "requests": {"PUT|secrets|": float(writes)},
    }


def _doc(
    cbop: dict[str, typing.Any], rss: tuple[float, float] = (90.0, 90.0)
) -> dict[str, typing.Any]:
    peer = _change(0, 10, 10, 2.0, 1.0)
    return {
        "settings": {"workers": 4},
        "s13": {
            "bundles": 10,
            "raw": {"load": "1 1 1", "seconds": 1.0, "spread": [0.1, 0.5, 1.0]},
            "peer": {"converge": {"load": "1", "seconds": 3.0, "complete": True}, "change": peer},
            "cbop": {
                "converge": {"load": "1", "seconds": 3.0, "complete": True},
                "change": cbop,
                "idle": {"seconds": 10.0, "writes": 0.0, "by_kind": {}},
                "rss_converged_mib": 89.0,
                "rss_mib": rss[0],
                "rss_unlabelled_mib": rss[1],
                "unlabelled": 100,
            },
            "ratio": cbop["seconds"],
            "peer_ratio": 2.0,
            "cbop_peer_ratio": cbop["seconds"] / 2.0,
            "cbop_peer_cpu_ratio": cbop["cpu_seconds"] / 1.0,
        },
    }


def test_the_goals_miss_a_get_a_second_write_and_a_higher_rss() -> None:
    met = report.goals(_doc(_change(0, 10, 10, 1.5, 1.1)))
    assert len(met) == 5
    assert all(line.endswith(": met") for line in met), met
    same = report.goals(_doc(_change(0, 10, 10, 1.5, 1.1), rss=(88.13, 88.14)))
    assert all(line.endswith(": met") for line in same), same
    missed = report.goals(_doc(_change(1, 12, 8, 2.5, 1.3), rss=(90.0, 90.4)))
    assert all(line.endswith(": missed") for line in missed), missed
    # The other clients' GETs (the garbage collector's discovery) are no operator's.
    table = "\n".join(report.markdown(_doc(_change(0, 10, 10, 1.5, 1.1))))
    assert (
        "| cbop: its GETs, any resource (audit log) / GETs of Secrets by anyone | 0 / 0 |" in table
    )
    assert "kube-controller-manager/garbage-collector /api: 2" in table


def test_runs_pool_the_counts_and_sum_the_seconds() -> None:
    runs = pooling.pooled([_doc(_change(0, 10, 10, 1.5, 1.1)), _doc(_change(0, 10, 10, 2.5, 0.9))])
    assert "| s13.cbop.change.operator_gets | 0 / 0 | same |" in runs
    assert "| s13.cbop.change.secret_writes | 10 / 10 | same |" in runs
    assert "| s13.cbop.change.seconds | 4 |" in runs
    assert "| s13.cbop.change.cpu_seconds | 2 |" in runs
    assert "| s13.peer.change.cpu_seconds | 2 |" in runs
