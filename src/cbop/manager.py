"""cbop's process: the runtime manager with Prometheus metrics and every enabled controller.

:class:`Manager` is :class:`cbop.runtime.Manager` (runnables in ordered groups, scopes,
leader election, graceful shutdown, exit codes: see there) configured from the command
line's :class:`Options`, plus what makes it cbop: the Prometheus registry and the
``/metrics`` server (a runnable of the ``servers`` group), the REST client, workqueue,
controller and leader-election metrics, the Event recorder (flushed when a scope has
drained, closed on shutdown), and the controllers of the registry
(:data:`cbop.controllers.CONTROLLERS`): each enabled definition is installed once
(``install(context, settings)``, its metrics) and its setup runs against every scope.
Nothing here names a controller. With ``--shards N`` (N > 1) a
:class:`cbop.sharding.ShardCoordinator` supplies the scopes; the Event recorder,
``/metrics``, the probes and the collectors stay per process and read every scope.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry, start_http_server

from cbop import defaults
from cbop.controllers import CONTROLLERS
from cbop.health import parse_bind_address
from cbop.informers import SharedInformerFactory
from cbop.kube import KubeInterface, Resource
from cbop.metrics.controller import (
    EventSinkCollector,
    InformerConnectedCollector,
    LeaderElectionMetrics,
    PrometheusControllerMetricsProvider,
)
from cbop.metrics.restclient import PrometheusRestClientMetrics
from cbop.metrics.secure import CertSource, start_secure_metrics_server
from cbop.metrics.sharding import PrometheusShardMetrics
from cbop.metrics.shardobjects import ShardObjectsCollector
from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from cbop.runtime import Coordinator, Hooks, LeaderElection, Sharding
from cbop.runtime import Manager as RuntimeManager
from cbop.runtime.definition import (
    Configured,
    Context,
    ControllerDefinition,
    FlagValues,
    PolicyRule,
    configure_all,
)
from cbop.runtime.events import EventLevel, EventRecorder
from cbop.runtime.runnable import SERVERS
from cbop.sharding import ShardCoordinator, ShardHandler
from cbop.shardrange import ShardRange

log = structlog.get_logger("cbop.manager")

_SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

#: The cluster-wide rules the process needs whatever controllers run (the controllers'
#: own are in their definitions; the Lease rules of leader election are a namespaced
#: Role of their own, manifests/rbac/leader_election_role.yaml).
PROCESS_RBAC: Final = (
    PolicyRule(("",), ("events",), ("create", "patch"), "the Event recorder"),
    PolicyRule(
        ("authentication.k8s.io",),
        ("tokenreviews",),
        ("create",),
        "--metrics-secure: who scrapes /metrics",
    ),
    PolicyRule(
        ("authorization.k8s.io",),
        ("subjectaccessreviews",),
        ("create",),
        "--metrics-secure: whether the scraper may get /metrics",
    ),
)


@dataclass(frozen=True)
class Options:
    """Runtime options of :class:`Manager` (the CLI's flags).

    Attributes:
        namespaces: namespaces to watch; empty means all.
        workers: concurrent reconciles.
        resync_period: informer resync period, seconds (0 disables).
        metrics_bind_address: ``host:port`` for ``/metrics``; ``0`` disables.
        metrics_secure: serve ``/metrics`` over HTTPS to authorized callers only
            (:mod:`cbop.metrics.secure`).
        metrics_cert_dir: ``tls.crt``/``tls.key`` for ``metrics_secure`` (None:
            self-signed).
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
            :class:`cbop.runtime.events.EventRecorder`).
        settings: the controllers' flag values by :attr:`cbop.runtime.definition.Flag.dest`
            (``{"rollout": True}``); missing ones take their defaults. Each controller
            builds its typed settings from them once.
        shards: shards the bundles are spread over by namespace (``--shards``); 1: the
            single leader; more needs ``leader_elect``.
    """

    namespaces: Sequence[str] = ()
    workers: int = defaults.WORKERS
    resync_period: float = defaults.RESYNC_PERIOD
    metrics_bind_address: str = defaults.METRICS_BIND_ADDRESS
    metrics_secure: bool = False
    metrics_cert_dir: str | None = None
    health_probe_bind_address: str = defaults.HEALTH_PROBE_BIND_ADDRESS
    leader_elect: bool = False
    leader_election_id: str = defaults.LEADER_ELECTION_ID
    leader_election_namespace: str | None = None
    lease_duration: float = defaults.LEASE_DURATION
    renew_deadline: float = defaults.RENEW_DEADLINE
    retry_period: float = defaults.RETRY_PERIOD
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    cache_sync_timeout: float = defaults.CACHE_SYNC_TIMEOUT
    read_timeout: float = defaults.WATCH_READ_TIMEOUT
    priority_queue: bool = True
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    events: EventLevel = defaults.EVENTS
    settings: Mapping[str, Any] = field(default_factory=dict)
    shards: int = defaults.SHARDS


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


class Manager(RuntimeManager):
    """Runs cbop until stopped.

    Args:
        client: the shared API client.
        options: see :class:`Options`.
        registry: Prometheus registry (a fresh one by default).
        definitions: the controllers it may run (default: the registry,
            :data:`cbop.controllers.CONTROLLERS`); those their settings enable are
            installed and set up in every scope.

    Raises:
        ValueError: from the constructor, for a bad bind address or leader-election
            timings that break lease duration > renew deadline > 1.2 x retry period, or
            leader election without a namespace, or ``shards`` > 1 without leader
            election.
        OSError: a bind address that cannot be bound (the probe address from the
            constructor, the metrics address from :meth:`run`); the message names the
            flag and the address.
    """

    def __init__(
        self,
        client: KubeInterface,
        options: Options,
        *,
        registry: CollectorRegistry | None = None,
        definitions: Sequence[ControllerDefinition[Any]] = CONTROLLERS,
    ) -> None:
        self.options = options
        self.registry = registry or CollectorRegistry()
        with _bind_errors("--metrics-bind-address", options.metrics_bind_address):
            self._metrics_address = parse_bind_address(options.metrics_bind_address)
        with _bind_errors("--health-probe-bind-address", options.health_probe_bind_address):
            probe_address = parse_bind_address(options.health_probe_bind_address)
        refused = options_error(options.shards, leader_elect=options.leader_elect)
        if refused is not None:
            raise ValueError(refused)
        leader_election = None
        if options.leader_elect:
            namespace = options.leader_election_namespace or pod_namespace()
            if not namespace:
                raise ValueError(
                    "--leader-elect needs --leader-election-namespace when not running in a pod"
                )
            leader_election = LeaderElection(
                lease_name=options.leader_election_id,
                namespace=namespace,
                lease_duration=options.lease_duration,
                renew_deadline=options.renew_deadline,
                retry_period=options.retry_period,
            )
        # Reviews for --metrics-secure go out unfenced: a standby serves metrics too.
        self._review_client = client
        # REST client metrics first: the fenced client reports through them too.
        client.set_metrics(PrometheusRestClientMetrics(self.registry))
        sharding = None
        if leader_election is not None and options.shards > 1:
            sharding = self._sharding(client, leader_election)
        super().__init__(
            client,
            informers=lambda shard: self._informer_factory(client, shard),
            identity=options.identity,
            leader_election=leader_election,
            leader_metrics=(
                LeaderElectionMetrics(options.leader_election_id, self.registry)
                if leader_election is not None and sharding is None
                else None
            ),
            sharding=sharding,
            shutdown_timeout=options.shutdown_timeout,
            cache_sync_timeout=options.cache_sync_timeout,
            controller_metrics=PrometheusControllerMetricsProvider(self.registry),
            queue_metrics=PrometheusWorkqueueMetricsProvider(self.registry),
        )
        # Events go through the process's one scope's fenced client (sharded: the
        # process's own; the reconcilers write through their shard's client).
        self.recorder = EventRecorder(
            self.event_client, instance=options.identity, level=options.events
        )
        # Flushed after each scope drains (its lease still held), closed on shutdown.
        self.add_drain_hook(lambda seconds: self.recorder.flush(timeout=seconds))
        self.add_cleanup(lambda seconds: self.recorder.close(timeout=seconds))
        self._metrics_server: socketserver.BaseServer | None = None
        if self._metrics_address is not None:
            self.add_runnable(
                Hooks("metrics server", self._serve_metrics, lambda _: self._stop_metrics()),
                SERVERS,
            )
        context = Context(
            workers=options.workers,
            priority_queue=options.priority_queue,
            recorder=self.recorder,
            registry=self.registry,
            cached=self._cached,
        )
        configured = configure_all(definitions, FlagValues(options.settings))
        #: The controllers this process runs, with their settings (enabled by them).
        self.configured: tuple[Configured[Any], ...] = tuple(c for c in configured if c.enabled)
        #: The controller definitions this process runs.
        self.definitions = tuple(c.definition for c in self.configured)
        for controller in self.configured:
            self.add_setup(controller.install(context))
        recorder = self.recorder
        self.registry.register(EventSinkCollector(lambda: (recorder.dropped, recorder.failed)))
        self.registry.register(InformerConnectedCollector(self.connection_states))
        if sharding is not None:
            self.registry.register(
                ShardObjectsCollector(
                    lambda: {s.index: s.object_counts() for s in self.held_scopes()}
                )
            )
        if probe_address is not None:
            with _bind_errors("--health-probe-bind-address", options.health_probe_bind_address):
                self.bind_probes(probe_address)

    def _informer_factory(self, client: KubeInterface, shard: ShardRange) -> SharedInformerFactory:
        """Return an informer factory of the options' namespaces, holding ``shard`` only."""
        opts = self.options
        return SharedInformerFactory(
            client,
            namespaces=opts.namespaces,
            resync_period=opts.resync_period,
            read_timeout=opts.read_timeout,
            shard=shard,
        )

    def _sharding(self, client: KubeInterface, election: LeaderElection) -> Sharding:
        """Return the sharding of ``--shards``: per-shard informers and the coordinator."""
        opts = self.options
        metrics = PrometheusShardMetrics(self.registry, shards=opts.shards)

        def coordinator(handler: ShardHandler) -> Coordinator:
            return ShardCoordinator(
                # Lease writes are never throttled, retried or fenced (as the elector's).
                client.with_limits(qps=0, burst=0, max_retries=0),
                group=opts.leader_election_id,
                namespace=election.namespace,
                identity=opts.identity,
                shards=opts.shards,
                lease_duration=election.lease_duration,
                renew_deadline=election.renew_deadline,
                retry_period=election.retry_period,
                handler=handler,
                metrics=metrics,
            )

        return Sharding(shards=opts.shards, coordinator=coordinator)

    def _cached(self, resource: Resource) -> list[Mapping[str, Any]]:
        """Return the objects of ``resource`` in every scope's cache (every held shard's)."""
        return [obj for scope in self.scopes() for obj in scope.cached(resource)]

    def _serve_metrics(self) -> None:
        """Serve ``/metrics`` (HTTPS with ``--metrics-secure``); the ``servers`` group starts it.

        Raises:
            OSError: the address cannot be bound (the message names the flag and address).
        """
        opts = self.options
        address = self._metrics_address
        if address is None:
            return
        with _bind_errors("--metrics-bind-address", opts.metrics_bind_address):
            if opts.metrics_secure:
                certs = CertSource(opts.metrics_cert_dir)
                self._metrics_server = start_secure_metrics_server(
                    address, self.registry, self._review_client, certs
                )
            else:
                self._metrics_server, _ = start_http_server(
                    address[1], address[0], registry=self.registry
                )
        log.info(
            "serving",
            metrics=opts.metrics_bind_address,
            metrics_secure=opts.metrics_secure,
            probes=opts.health_probe_bind_address,
        )

    def _stop_metrics(self) -> None:
        server = self._metrics_server
        if server is not None:
            server.shutdown()
            server.server_close()


def options_error(shards: int, *, leader_elect: bool) -> str | None:
    """Return why these settings cannot run together, or None: the one home of the rule.

    More than one shard needs leader election: each shard is held through a Lease. The
    command line asks before it connects (a usage error, exit 2); :class:`Manager`
    asks again for callers that build :class:`Options` themselves.
    """
    if shards > 1 and not leader_elect:
        return f"--shards {shards} needs --leader-elect (each shard has a Lease)"
    return None


def enabled_controllers(
    settings: Mapping[str, Any], definitions: Sequence[ControllerDefinition[Any]] = CONTROLLERS
) -> tuple[ControllerDefinition[Any], ...]:
    """Return the definitions their settings enable.

    Args:
        settings: flag values by :attr:`cbop.runtime.definition.Flag.dest`; missing
            ones take their flag's default.
        definitions: the registry (default: :data:`cbop.controllers.CONTROLLERS`).

    Raises:
        TypeError: a flag's value is not of its type.
    """
    configured = configure_all(definitions, FlagValues(settings))
    return tuple(c.definition for c in configured if c.enabled)
