"""Leader-election timing flags, and an Event sink that neither dies nor blocks shutdown."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.cli import build_parser
from cbop.kube import EVENTS, LEASES, KubeClient, LeaseNotHeld
from cbop.manager import Manager, Options
from cbop.metrics.controller import EventSinkCollector
from cbop.runtime.events import EventRecorder
from cbop_testing.fakekube import FakeKube, Script, fail
from cbop_testing.leases import LeaseServer

OBJ = {
    "apiVersion": "cbop.dev/v1alpha1",
    "kind": "ConfigBundle",
    "metadata": {"name": "a", "namespace": "demo", "uid": "u"},
}
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_lease_timing_flags_default_to_controller_runtime_and_read_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = build_parser().parse_args([])
    assert (
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    ) == (15.0, 10.0, 2.0)
    monkeypatch.setenv("CBOP_LEADER_ELECTION_LEASE_DURATION", "6s")
    monkeypatch.setenv("CBOP_LEADER_ELECTION_RENEW_DEADLINE", "4s")
    monkeypatch.setenv("CBOP_LEADER_ELECTION_RETRY_PERIOD", "500ms")
    args = build_parser().parse_args(["--leader-election-renew-deadline=3s"])
    assert args.leader_election_lease_duration == 6.0
    assert args.leader_election_renew_deadline == 3.0
    assert args.leader_election_retry_period == 0.5


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10.0, 10.0, 2.0), (15.0, 2.4, 2.0), (15.0, 10.0, 0.0)],
    ids=["lease-equals-renew", "renew-equals-1.2-retry", "zero-retry"],
)
def test_inconsistent_lease_timings_are_refused(lease: float, renew: float, retry: float) -> None:
    """Validated as the elector validates them (the CLI turns this into exit 2)."""
    with pytest.raises(ValueError, match=r"renew deadline|positive"):
        Manager(
            KubeClient(None),
            Options(
                leader_elect=True,
                leader_election_namespace="ns",
                lease_duration=lease,
                renew_deadline=renew,
                retry_period=retry,
                metrics_bind_address="0",
                health_probe_bind_address="0",
            ),
        )


def event_writer(*errors: BaseException) -> FakeKube:
    """A fake API server whose first Event creates raise ``errors``; no patch is expected."""
    kube = FakeKube()
    kube.prepend_reactor("create", "events", Script(*errors))
    kube.prepend_reactor("patch", "*", fail(AssertionError("no repeats here: nothing to patch")))
    return kube


def test_the_event_sink_survives_any_exception_and_counts_it() -> None:
    writer = event_writer(LeaseNotHeld("fenced"), KeyError("bug"))
    recorder = EventRecorder(writer, clock=lambda: NOW)
    for reason in ("One", "Two", "Three"):
        recorder.event(OBJ, "Normal", reason, "m")
    assert recorder.flush(5)
    assert [b["reason"] for b in writer.tracker.objects(EVENTS)] == ["Three"]
    assert recorder.failed == 2
    registry = CollectorRegistry()
    registry.register(EventSinkCollector(lambda: (recorder.dropped, recorder.failed)))
    assert registry.get_sample_value("cbop_events_failed_total") == 2
    assert registry.get_sample_value("cbop_events_dropped_total") == 0
    recorder.close()


def test_close_returns_within_its_timeout_with_a_stuck_sink_and_a_full_queue() -> None:
    gate = threading.Event()

    stuck = event_writer()
    stuck.prepend_reactor("create", "events", lambda action: gate.wait(30) and None)
    recorder = EventRecorder(stuck, clock=lambda: NOW)
    for i in range(1_200):
        recorder.event(OBJ, "Normal", "Created", f"event {i}")
    closed = threading.Thread(target=recorder.close, args=(0.2,))
    closed.start()
    closed.join(5)
    try:
        assert not closed.is_alive(), "close() blocked on a full queue or a stuck request"
        assert recorder.dropped >= 1_000, "queued events are dropped (and counted) at close"
    finally:
        gate.set()


def test_a_leader_whose_caches_never_sync_gives_up_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under leader election the cache-sync verdict comes once leading: a failed sync
    stops the manager with exit code 1, as without leader election."""
    server = LeaseServer("ns")
    manager = Manager(
        server,
        Options(
            leader_elect=True,
            leader_election_namespace="ns",
            metrics_bind_address="0",
            health_probe_bind_address="0",
            cache_sync_timeout=0.0,
            settings={"rollout": False, "cluster_bundles": False},
        ),
    )
    started: list[bool] = []
    synced: list[bool] = []

    def never_synced(*args: Any, **kwargs: Any) -> bool:
        synced.append(False)
        return False

    (scope,) = manager.prepared_scopes()
    monkeypatch.setattr(scope.informers, "wait_for_cache_sync", never_synced)
    monkeypatch.setattr(scope.informers, "start", lambda: None)
    controller = scope.controllers["configbundle"]
    monkeypatch.setattr(controller, "start", lambda: started.append(True))
    assert manager.run() == 1
    assert synced == [False], "the sync is waited for once leading"
    assert started == []
    (lease,) = server.tracker.objects(LEASES)
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
