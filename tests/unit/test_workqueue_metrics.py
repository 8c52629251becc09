"""Workqueue metrics: what is counted when, through a recording provider and Prometheus.

The contracts run against ``RateLimitingQueue`` and ``PriorityQueue``; depth by priority
is the priority queue's own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from cbop.metrics.workqueue import LATENCY_BUCKETS, PrometheusWorkqueueMetricsProvider
from cbop.workqueue import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    CounterMetric,
    DelayingQueue,
    GaugeMetric,
    HistogramMetric,
    Interface,
    MetricsProvider,
    NoopMetricsProvider,
    PriorityGaugeMetric,
    PriorityMetricsProvider,
    PriorityQueue,
    Queue,
    RateLimitingQueue,
    get_provider,
    set_provider,
)
from cbop_testing.clock import FakeClock

JOIN = 5.0  # real seconds; only bounds a hung test


@dataclass
class Gauge:
    value: float = 0.0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1

    def set(self, value: float, /) -> None:
        self.value = value


@dataclass
class Counter:
    value: int = 0

    def inc(self) -> None:
        self.value += 1


@dataclass
class Histogram:
    observations: list[float] = field(default_factory=list)

    def observe(self, value: float, /) -> None:
        self.observations.append(value)


@dataclass
class Recorded:
    depth: Gauge = field(default_factory=Gauge)
    adds: Counter = field(default_factory=Counter)
    latency: Histogram = field(default_factory=Histogram)
    work_duration: Histogram = field(default_factory=Histogram)
    unfinished_work: Gauge = field(default_factory=Gauge)
    longest_running: Gauge = field(default_factory=Gauge)
    retries: Counter = field(default_factory=Counter)


class RecordingProvider:
    """A MetricsProvider keeping every queue's metrics in memory, by queue name."""

    def __init__(self) -> None:
        self.queues: dict[str, Recorded] = {}
        self.calls: list[str] = []

    def _for(self, name: str, metric: str) -> Recorded:
        self.calls.append(metric)
        return self.queues.setdefault(name, Recorded())

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return self._for(name, "depth").depth

    def new_adds_metric(self, name: str) -> CounterMetric:
        return self._for(name, "adds").adds

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return self._for(name, "latency").latency

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return self._for(name, "work_duration").work_duration

    def new_unfinished_work_seconds_metric(self, name: str) -> GaugeMetric:
        return self._for(name, "unfinished_work").unfinished_work

    def new_longest_running_processor_seconds_metric(self, name: str) -> GaugeMetric:
        return self._for(name, "longest_running").longest_running

    def new_retries_metric(self, name: str) -> CounterMetric:
        return self._for(name, "retries").retries


@dataclass
class GaugeByPriority:
    values: dict[int, int] = field(default_factory=dict)

    def inc(self, priority: int, /) -> None:
        self.values[priority] = self.values.get(priority, 0) + 1

    def dec(self, priority: int, /) -> None:
        self.values[priority] = self.values.get(priority, 0) - 1


class PriorityRecordingProvider(RecordingProvider):
    """A RecordingProvider that also keeps depth by priority, per queue name."""

    def __init__(self) -> None:
        super().__init__()
        self.depth_by_priority: dict[str, GaugeByPriority] = {}

    def new_depth_with_priority_metric(self, name: str) -> PriorityGaugeMetric:
        self.calls.append("depth_by_priority")
        return self.depth_by_priority.setdefault(name, GaugeByPriority())


def metrics_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"workqueue-metrics[{name}]"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def provider() -> RecordingProvider:
    return RecordingProvider()


@pytest.fixture(params=[RateLimitingQueue, PriorityQueue], ids=["ratelimiting", "priority"])
def q(
    clock: FakeClock, provider: RecordingProvider, request: pytest.FixtureRequest
) -> Iterator[RateLimitingQueue[str]]:
    queue: RateLimitingQueue[str] = request.param(name="cb", clock=clock, metrics_provider=provider)
    yield queue
    queue.shut_down()


@pytest.fixture
def m(q: RateLimitingQueue[str], provider: RecordingProvider) -> Recorded:
    return provider.queues["cb"]


class TestWhichQueuesAreMeasured:
    def test_named_queue_creates_each_metric_once(self, provider: RecordingProvider) -> None:
        q = Queue[str](name="x", clock=FakeClock(), metrics_provider=provider)
        q.shut_down()
        assert sorted(provider.calls) == sorted(
            [
                "depth",
                "adds",
                "latency",
                "work_duration",
                "unfinished_work",
                "longest_running",
                "retries",
            ]
        )

    @pytest.mark.parametrize(
        "make",
        [
            pytest.param(lambda p: Queue[str](metrics_provider=p), id="queue"),
            pytest.param(lambda p: DelayingQueue[str](metrics_provider=p), id="delaying"),
            pytest.param(lambda p: RateLimitingQueue[str](metrics_provider=p), id="ratelimiting"),
            pytest.param(lambda p: PriorityQueue[str](metrics_provider=p), id="priority"),
        ],
    )
    def test_unnamed_queue_has_no_metrics(
        self, provider: RecordingProvider, make: Callable[[MetricsProvider], Interface[str]]
    ) -> None:
        q = make(provider)
        q.add("a")
        q.shut_down()
        assert provider.calls == []

    def test_default_provider_is_used_when_none_is_given(self, provider: RecordingProvider) -> None:
        previous = set_provider(provider)
        try:
            assert get_provider() is provider
            q = Queue[str](name="global", clock=FakeClock())
            q.add("a")
            q.shut_down()
        finally:
            set_provider(previous)
        assert provider.queues["global"].adds.value == 1
        assert get_provider() is previous

    def test_set_provider_none_restores_the_no_op_provider(
        self, provider: RecordingProvider
    ) -> None:
        previous = set_provider(provider)
        try:
            set_provider(None)
            assert isinstance(get_provider(), NoopMetricsProvider)
        finally:
            set_provider(previous)

    def test_no_op_provider_skips_bookkeeping_and_the_updater(self) -> None:
        q = Queue[str](name="noop-fast-path", metrics_provider=NoopMetricsProvider())
        assert metrics_threads("noop-fast-path") == []
        q.shut_down()


class TestAddsAndDepth:
    def test_only_adds_creating_a_dirty_entry_count(
        self, q: RateLimitingQueue[str], m: Recorded
    ) -> None:
        for key in ["a", "b", "a", "a"]:
            q.add(key)
        assert (m.adds.value, m.depth.value) == (2, 2)
        q.get()  # a
        assert (m.adds.value, m.depth.value) == (2, 1)
        q.add("a")  # processing, not dirty: a new dirty entry
        q.add("a")
        assert (m.adds.value, m.depth.value) == (3, 2)
        q.done("a")  # re-queued by done: not a new add
        assert (m.adds.value, m.depth.value) == (3, 2)
        q.get()
        q.get()
        assert (m.adds.value, m.depth.value) == (3, 0)

    def test_adds_while_shutting_down_are_not_counted(
        self, q: RateLimitingQueue[str], m: Recorded
    ) -> None:
        q.shut_down()
        q.add("a")
        assert (m.adds.value, m.depth.value) == (0, 0)


class TestDurations:
    def test_queue_latency_runs_from_first_add_to_get(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add("a")
        clock.step(1.0)
        q.add("a")  # duplicate: does not restart the clock
        clock.step(2.0)
        q.get()
        assert m.latency.observations == [3.0]

    def test_work_duration_runs_from_get_to_done(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add("a")
        q.get()
        clock.step(0.25)
        q.done("a")
        assert m.work_duration.observations == [0.25]
        q.done("a")  # not processing any more: nothing observed
        assert m.work_duration.observations == [0.25]

    def test_add_during_processing_is_timed_from_that_add(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add("a")
        q.get()  # t=0, latency 0
        clock.step(1.0)
        q.add("a")  # t=1
        clock.step(1.0)
        q.done("a")  # t=2, worked 2 s
        clock.step(1.0)
        q.get()  # t=3, waited 2 s since the add at t=1
        assert m.latency.observations == [0.0, 2.0]
        assert m.work_duration.observations == [2.0]


class TestRetries:
    def test_every_delayed_add_counts_once(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add_after("a", 1.0)
        q.add_after("a", 0.5)  # moves earlier
        q.add_after("a", 9.0)  # ignored for scheduling, but still a delayed add
        assert m.retries.value == 3
        q.add_after("b", 0.0)  # immediate: a plain add
        q.add_after("c", -1.0)
        assert m.retries.value == 3
        q.add_rate_limited("d")  # 5 ms: delayed
        assert m.retries.value == 4
        q.shut_down()
        q.add_after("e", 1.0)
        assert m.retries.value == 4

    def test_delayed_item_counts_as_an_add_when_released(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add_after("a", 1.0)
        assert m.adds.value == 0
        assert clock.wait_for_waiter(1.0)
        clock.step(1.5)
        q.get()
        assert m.adds.value == 1
        # Released at t=1.5 and got at once: latency runs from the release (the real add),
        # not from add_after at t=0.
        assert m.latency.observations == [0.0]


class TestUnfinishedWork:
    def test_on_demand_refresh_sums_and_maxes_processing_ages(
        self, q: RateLimitingQueue[str], m: Recorded, clock: FakeClock
    ) -> None:
        q.add("a")
        q.add("b")
        q.get()  # a at t=0
        clock.step(1.0)
        q.get()  # b at t=1
        clock.step(2.0)
        q.update_unfinished_work()
        assert (m.unfinished_work.value, m.longest_running.value) == (5.0, 3.0)
        q.done("a")
        q.update_unfinished_work()
        assert (m.unfinished_work.value, m.longest_running.value) == (2.0, 2.0)
        q.done("b")
        q.update_unfinished_work()
        assert (m.unfinished_work.value, m.longest_running.value) == (0.0, 0.0)

    def test_background_updater_refreshes_every_half_second_of_clock_time(
        self, provider: RecordingProvider, clock: FakeClock
    ) -> None:
        q = Queue[str](name="updater", clock=clock, metrics_provider=provider)
        m = provider.queues["updater"]
        q.add("a")
        q.get()
        assert clock.wait_for_waiter(0.5)
        clock.step(0.4)
        assert m.unfinished_work.value == 0.0  # parked until 0.5
        clock.step(0.1)
        assert clock.wait_for_waiter(1.0)  # refreshed at 0.5, now parked for the next tick
        assert (m.unfinished_work.value, m.longest_running.value) == (0.5, 0.5)
        clock.step(2.2)  # ticks at 1.0..2.5 were missed: one refresh, next tick at 3.0
        assert clock.wait_for_waiter(3.0)
        assert m.unfinished_work.value == pytest.approx(2.7)
        q.shut_down()
        for thread in metrics_threads("updater"):
            thread.join(JOIN)
            assert not thread.is_alive()
        assert not clock.has_waiters()


def sample(
    registry: CollectorRegistry, metric: str, queue: str = "bundles", **labels: str
) -> float | None:
    return registry.get_sample_value(metric, {"name": queue, "controller": queue, **labels})


class TestPrometheusProvider:
    def test_values_are_exported_with_controller_runtime_names(self) -> None:
        registry = CollectorRegistry()
        clock = FakeClock()
        q = RateLimitingQueue[str](
            name="bundles",
            clock=clock,
            metrics_provider=PrometheusWorkqueueMetricsProvider(registry),
        )
        try:
            q.add("a")
            q.add("a")
            q.add("b")
            clock.step(0.5)
            q.get()  # a, waited 0.5 s
            clock.step(2.0)
            q.done("a")  # worked 2 s
            q.add_after("c", 1.0)
            q.update_unfinished_work()  # nothing processing
        finally:
            q.shut_down()
        assert sample(registry, "workqueue_adds_total") == 2.0
        assert sample(registry, "workqueue_depth", priority="") == 1.0
        assert sample(registry, "workqueue_retries_total") == 1.0
        assert sample(registry, "workqueue_queue_duration_seconds_count") == 1.0
        assert sample(registry, "workqueue_queue_duration_seconds_sum") == 0.5
        assert sample(registry, "workqueue_work_duration_seconds_sum") == 2.0
        assert sample(registry, "workqueue_unfinished_work_seconds") == 0.0
        assert sample(registry, "workqueue_longest_running_processor_seconds") == 0.0

    def test_histogram_buckets_span_ten_nanoseconds_to_a_thousand_seconds(self) -> None:
        assert tuple(10.0**e for e in range(-8, 4)) == LATENCY_BUCKETS
        registry = CollectorRegistry()
        q = Queue[str](
            name="bundles",
            clock=FakeClock(),
            metrics_provider=PrometheusWorkqueueMetricsProvider(registry),
        )
        q.shut_down()
        bounds = [
            sample.labels["le"]
            for family in registry.collect()
            if family.name == "workqueue_work_duration_seconds"
            for sample in family.samples
            if sample.name.endswith("_bucket") and sample.labels["name"] == "bundles"
        ]
        assert bounds == [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]

    def test_queues_and_providers_share_one_registration_per_registry(self) -> None:
        registry = CollectorRegistry()
        first = PrometheusWorkqueueMetricsProvider(registry)
        second = PrometheusWorkqueueMetricsProvider(registry)  # no duplicate error
        queues = [
            Queue[str](name="one", clock=FakeClock(), metrics_provider=first),
            Queue[str](name="two", clock=FakeClock(), metrics_provider=second),
        ]
        for q in queues:
            q.add("a")
            q.shut_down()
        queues[1].add("late")  # dropped
        for name in ("one", "two"):
            assert sample(registry, "workqueue_adds_total", name) == 1.0

    def test_provider_satisfies_the_protocol(self) -> None:
        provider: MetricsProvider = PrometheusWorkqueueMetricsProvider(CollectorRegistry())
        assert provider is not None


class TestDepthByPriority:
    @pytest.fixture
    def pprovider(self) -> PriorityRecordingProvider:
        return PriorityRecordingProvider()

    @pytest.fixture
    def pq(
        self, clock: FakeClock, pprovider: PriorityRecordingProvider
    ) -> Iterator[PriorityQueue[str]]:
        queue = PriorityQueue[str](name="pq", clock=clock, metrics_provider=pprovider)
        yield queue
        queue.shut_down()

    def test_priority_queue_uses_the_by_priority_gauge_instead_of_depth(
        self, pq: PriorityQueue[str], pprovider: PriorityRecordingProvider
    ) -> None:
        assert "depth_by_priority" in pprovider.calls
        assert "depth" not in pprovider.calls
        plain = Queue[str](name="plain", clock=FakeClock(), metrics_provider=pprovider)
        plain.shut_down()
        assert pprovider.calls.count("depth") == 1  # plain queues keep the plain gauge

    def test_depth_follows_each_item_priority(
        self, pq: PriorityQueue[str], pprovider: PriorityRecordingProvider, clock: FakeClock
    ) -> None:
        depth = pprovider.depth_by_priority["pq"]
        m = pprovider.queues["pq"]
        pq.add("a", LOW_PRIORITY)
        pq.add("b", LOW_PRIORITY)
        pq.add("c")
        assert depth.values == {LOW_PRIORITY: 2, NORMAL_PRIORITY: 1}
        pq.add("a", NORMAL_PRIORITY)  # raised: moves, not a new add
        assert depth.values == {LOW_PRIORITY: 1, NORMAL_PRIORITY: 2}
        assert m.adds.value == 3
        pq.add("b", LOW_PRIORITY - 1)  # lower: ignored
        assert depth.values == {LOW_PRIORITY: 1, NORMAL_PRIORITY: 2}
        assert pq.get_with_priority() == ("c", NORMAL_PRIORITY, False)
        assert pq.get_with_priority() == ("a", NORMAL_PRIORITY, False)
        assert depth.values == {LOW_PRIORITY: 1, NORMAL_PRIORITY: 0}
        pq.add("a", LOW_PRIORITY)  # while processing: counted at once, queued on done
        pq.add("a", NORMAL_PRIORITY)
        assert depth.values == {LOW_PRIORITY: 1, NORMAL_PRIORITY: 1}
        pq.done("a")
        assert pq.get_with_priority() == ("a", NORMAL_PRIORITY, False)
        assert pq.get_with_priority() == ("b", LOW_PRIORITY, False)
        assert depth.values == {LOW_PRIORITY: 0, NORMAL_PRIORITY: 0}

    def test_delayed_item_counts_under_its_priority_when_released(
        self, pq: PriorityQueue[str], pprovider: PriorityRecordingProvider, clock: FakeClock
    ) -> None:
        depth = pprovider.depth_by_priority["pq"]
        pq.add_after("a", 1.0, LOW_PRIORITY)
        assert depth.values == {}
        assert pprovider.queues["pq"].retries.value == 1
        assert clock.wait_for_waiter(1.0)
        clock.step(1.0)
        assert pq.get_with_priority() == ("a", LOW_PRIORITY, False)
        assert depth.values == {LOW_PRIORITY: 0}

    def test_prometheus_exports_depth_labelled_by_priority(self, clock: FakeClock) -> None:
        registry = CollectorRegistry()
        provider = PrometheusWorkqueueMetricsProvider(registry)
        pq = PriorityQueue[str](name="bundles", clock=clock, metrics_provider=provider)
        plain = Queue[str](name="plain", clock=clock, metrics_provider=provider)
        try:
            # Both standard priorities are exported from the start, at 0.
            assert sample(registry, "workqueue_depth", priority="0") == 0.0
            assert sample(registry, "workqueue_depth", priority="-100") == 0.0
            assert sample(registry, "workqueue_depth", priority="") is None
            for key in ("a", "b", "c"):
                pq.add(key, LOW_PRIORITY)
            pq.add("d")
            pq.add("e", 7)
            plain.add("x")
        finally:
            pq.shut_down()
            plain.shut_down()
        assert sample(registry, "workqueue_depth", priority="-100") == 3.0
        assert sample(registry, "workqueue_depth", priority="0") == 1.0
        assert sample(registry, "workqueue_depth", priority="7") == 1.0
        assert sample(registry, "workqueue_depth", "plain", priority="") == 1.0
        assert sample(registry, "workqueue_adds_total") == 5.0

    def test_prometheus_provider_satisfies_the_priority_protocol(self) -> None:
        provider: PriorityMetricsProvider = PrometheusWorkqueueMetricsProvider(CollectorRegistry())
        assert provider is not None
