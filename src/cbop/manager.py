"""The manager: runs the controller with metrics, probes and leader election.

As controller-runtime's Manager, it owns the process lifecycle: it starts the metrics
endpoint and the health probes, starts the informers (a standby keeps warm caches),
takes part in leader election when asked, runs the workers only while leading, and
shuts down gracefully: on a stop request it stops intake and drops the queued keys
(the successor lists everything anew), lets in-flight reconciles finish (bounded by
``shutdown_timeout``), releases the lease so a successor takes over at once, and
returns.

Under leader election every write goes through a fenced client (see
``KubeClient.with_fence``): a create, update, patch or delete is sent only while
:meth:`cbop.leaderelection.LeaderElector.holds_lease` is true. Losing the lease, or a
write finding the fence closed, is fatal: the workers stop taking keys at once, the
queue is dropped, nothing is drained or released, and the process exits 1 so that a
restarted pod rejoins as a clean candidate (as controller-runtime skips its graceful
shutdown when the lease is lost). Caches that never sync exit 1 too.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry, start_http_server

from cbop.controller import CONTROLLER_NAME, Controller
from cbop.gcpolicy import freeze_caches
from cbop.health import ProbeServer, parse_bind_address
from cbop.kube import KubeClient
from cbop.leaderelection import LeaderElector
from cbop.metrics.controller import (
    BundleReadinessCollector,
    ControllerMetrics,
    EventSinkCollector,
    InformerConnectedCollector,
    LeaderElectionMetrics,
)
from cbop.metrics.restclient import PrometheusRestClientMetrics
from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from cbop.reconciler import EventLevel, EventRecorder

log = structlog.get_logger("cbop.manager")

_SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Options:
    """Runtime options of :class:`Manager` (the CLI's flags).

    Attributes:
        namespaces: namespaces to watch; empty means all.
        workers: concurrent reconciles.
        resync_period: informer resync period, seconds (0 disables).
        metrics_bind_address: ``host:port`` for ``/metrics``; ``0`` disables.
        health_probe_bind_address: ``host:port`` for ``/healthz`` and ``/readyz``; ``0``
            disables.
        leader_elect: take part in leader election on a Lease.
        leader_election_id: the Lease's name.
        leader_election_namespace: the Lease's namespace (None: the pod's namespace).
        lease_duration, renew_deadline, retry_period: leader election timings, seconds
            (controller-runtime's 15 / 10 / 2 by default).
        shutdown_timeout: how long in-flight reconciles may take on shutdown, seconds.
        cache_sync_timeout: how long to wait for the first list, seconds; time while a
            list is refused (CRD not installed, 403) does not count: that is waited out.
        read_timeout: informer watch socket read timeout, seconds.
        priority_queue: a priority workqueue (initial list and resyncs behind real
            changes); False: the plain rate-limiting queue.
        identity: this candidate's identity (default: hostname plus a random suffix).
        events: which Events are written (``notable``, ``all``, ``none``; see
            :class:`cbop.reconciler.EventRecorder`).
    """

    namespaces: Sequence[str] = ()
    workers: int = 4
    resync_period: float = 36000.0
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    leader_election_id: str = "cbop-leader"
    leader_election_namespace: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    shutdown_timeout: float = 30.0
    cache_sync_timeout: float = 120.0
    read_timeout: float = 90.0
    priority_queue: bool = True
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    events: EventLevel = "notable"


def pod_namespace() -> str | None:
    """Return the namespace this pod runs in (from the service-account mount), or None."""
    try:
        with open(_SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return os.environ.get("POD_NAMESPACE")


@contextlib.contextmanager
def _bind_errors(flag: str, address: str) -> Iterator[None]:
    """Re-raise a bad or unusable bind address as an error naming the flag and address.

    Raises:
        ValueError: the address does not parse.
        OSError: the socket cannot be bound (the port is taken, the host is not local).
    """
    try:
        yield
    except ValueError as err:
        raise ValueError(f"{flag} {address}: {err}") from err
    except OSError as err:
        raise OSError(f"{flag} {address}: cannot listen: {err.strerror or err}") from err


class Manager:
    """Runs cbop until stopped.

    Args:
        client: the shared API client.
        options: see :class:`Options`.
        registry: Prometheus registry (a fresh one by default).

    Raises:
        ValueError: from the constructor, for a bad bind address or leader-election
            timings that break lease duration > renew deadline > 1.2 x retry period, or
            leader election without a namespace.
        OSError: a bind address that cannot be bound (the probe address from the
            constructor, the metrics address from :meth:`run`); the message names the
            flag and the address.
    """

    def __init__(
        self,
        client: KubeClient,
        options: Options,
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.options = options
        self.registry = registry or CollectorRegistry()
        self._client = client
        with _bind_errors("--metrics-bind-address", options.metrics_bind_address):
            self._metrics_address = parse_bind_address(options.metrics_bind_address)
        with _bind_errors("--health-probe-bind-address", options.health_probe_bind_address):
            self._probe_address = parse_bind_address(options.health_probe_bind_address)
        self.metrics = ControllerMetrics(CONTROLLER_NAME, self.registry)
        self.stop_event = threading.Event()
        # Set only after the workers stopped, so the lease is released after the last write.
        self._elector_stop = threading.Event()
        self._lost_lease = threading.Event()
        self._sync_failed = False
        self._workers_started = threading.Event()
        self.elector: LeaderElector | None = None
        # REST client metrics first: the fenced client below reports through them too.
        client.set_metrics(PrometheusRestClientMetrics(self.registry))
        # Every write of the reconciler and the Event sink goes through this client.
        writer = client.with_fence(self._fence) if options.leader_elect else client
        self.recorder = EventRecorder(writer, instance=options.identity, level=options.events)
        self.controller = Controller(
            writer,
            namespaces=options.namespaces,
            workers=options.workers,
            resync_period=options.resync_period,
            metrics=self.metrics,
            queue_metrics=PrometheusWorkqueueMetricsProvider(self.registry),
            recorder=self.recorder,
            read_timeout=options.read_timeout,
            priority_queue=options.priority_queue,
        )
        self.registry.register(BundleReadinessCollector(self.controller.bundles.list))
        recorder = self.recorder
        self.registry.register(EventSinkCollector(lambda: (recorder.dropped, recorder.failed)))
        informers = self.controller.informers
        self.registry.register(
            InformerConnectedCollector(lambda: {i.name: i.healthy() for i in informers})
        )
        if options.leader_elect:
            namespace = options.leader_election_namespace or pod_namespace()
            if not namespace:
                raise ValueError(
                    "--leader-elect needs --leader-election-namespace when not running in a pod"
                )
            self.elector = LeaderElector(
                client.with_limits(qps=0, burst=0, max_retries=0),
                lease_name=options.leader_election_id,
                namespace=namespace,
                identity=options.identity,
                lease_duration=options.lease_duration,
                renew_deadline=options.renew_deadline,
                retry_period=options.retry_period,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
                metrics=LeaderElectionMetrics(options.leader_election_id, self.registry),
            )
        self.probes: ProbeServer | None = None
        if self._probe_address is not None:
            with _bind_errors("--health-probe-bind-address", options.health_probe_bind_address):
                self.probes = ProbeServer(
                    self._probe_address,
                    liveness={"informers-and-workers": self.controller.healthy},
                    # An API server outage shows here (and in logs and metrics), not on
                    # /healthz: restarting every replica would not end it.
                    readiness={
                        **self.controller.readiness_checks(),
                        "informers-connected": self.controller.connected,
                    },
                )

    def _fence(self) -> bool:
        """Return whether a write may be sent: the fence of the writing client.

        True while the elector holds the lease by its own clock. The first False also
        ends the work as a lost lease does (a write that finds the fence closed means
        the lease may be someone else's by now).
        """
        elector = self.elector
        if elector is not None and elector.holds_lease():
            return True
        if not self._elector_stop.is_set():
            # Not while releasing after a graceful stop: that closed the fence on purpose.
            self._lose_lease("a write found the leader lease no longer valid")
        return False

    def _lose_lease(self, why: str) -> None:
        """Stop every worker at once, drop the queue, and have :meth:`run` exit 1."""
        if self._lost_lease.is_set():
            return
        self._lost_lease.set()
        log.error(f"{why}; stopping at once so a fresh candidate can take over")
        self.controller.stop_workers()
        self.stop_event.set()

    def _start_leading(self) -> None:
        log.info("became leader; starting workers", identity=self.options.identity)
        if not self._wait_for_cache_sync():
            if self.stop_event.is_set():
                return
            log.error(
                "caches did not sync in time; giving up leadership",
                timeout=self.options.cache_sync_timeout,
            )
            self._sync_failed = True
            self.stop_event.set()
            return
        if self.stop_event.is_set():
            return
        self.controller.start_workers()
        self._workers_started.set()

    def _wait_for_cache_sync(self) -> bool:
        # A missing CRD or RBAC not applied yet (GitOps tools apply manifests in any
        # order) is waited out, not ended in a restart loop: the informers retry with
        # backoff and /readyz names what is missing. The timeout only counts while
        # nothing is refused.
        synced = self.controller.wait_for_cache_sync(
            self.options.cache_sync_timeout, stop=self.stop_event, wait_out_refusals=True
        )
        if synced:
            freeze_caches()  # full collections stop rescanning the synced caches
        return synced

    def _stop_leading(self) -> None:
        if self._elector_stop.is_set():
            return  # released on request, after the workers stopped
        self._lose_lease("lost the leader lease")

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; return the process exit code.

        Returns:
            0 after a graceful stop; 1 when the lease was lost (or a write found the
            fence closed) or caches never synced, with or without leader election.
        """
        opts = self.options
        metrics_server = None
        if self._metrics_address is not None:
            with _bind_errors("--metrics-bind-address", opts.metrics_bind_address):
                metrics_server, _ = start_http_server(
                    self._metrics_address[1], self._metrics_address[0], registry=self.registry
                )
        if self.probes is not None:
            self.probes.start()
        log.info(
            "starting",
            namespaces=list(opts.namespaces) or "all",
            workers=opts.workers,
            leader_elect=opts.leader_elect,
            metrics=opts.metrics_bind_address,
            probes=opts.health_probe_bind_address,
        )
        self.controller.start_informers()
        code = 0
        elector_thread = None
        if self.elector is not None:
            elector = self.elector
            elector_thread = threading.Thread(
                target=elector.run,
                args=(self._elector_stop,),
                name="cbop-leader-election",
                daemon=True,
            )
            elector_thread.start()
        elif self._wait_for_cache_sync():
            self.controller.start_workers()
            self._workers_started.set()
        elif not self.stop_event.is_set():
            log.error("caches did not sync in time", timeout=opts.cache_sync_timeout)
            self._sync_failed = True
            self.stop_event.set()
        self.stop_event.wait()

        if self._lost_lease.is_set():
            # No drain and no release: the fence refuses every write anyway, and the
            # lease may already be someone else's.
            log.info("stopping without a drain after losing the leader lease")
            self.controller.shutdown(0.0)
            self.recorder.close(timeout=0.0)
        else:
            log.info("shutting down", timeout=opts.shutdown_timeout)
            finished = self.controller.shutdown(opts.shutdown_timeout)
            if not finished:
                log.warning("in-flight reconciles did not finish in time")
            # Events are best effort: a second for the queued ones, then release.
            self.recorder.close(timeout=min(1.0, opts.shutdown_timeout))
        self._elector_stop.set()
        if elector_thread is not None:
            elector_thread.join(opts.renew_deadline)
        if self.probes is not None:
            self.probes.stop()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        if self._lost_lease.is_set() or self._sync_failed:
            code = 1
        log.info("stopped", exit_code=code)
        return code
