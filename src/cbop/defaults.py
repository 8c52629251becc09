"""Every default setting of the operator, defined once.

This module owns the values cbop uses when a flag (or its ``CBOP_*`` variable) is not
given: the CLI shows them in ``cbop --help`` and passes them on, and the layers below
(the API client, the informers, the leader elector, the manager) take the same values
as their keyword defaults, so a setting cannot differ between ``cbop`` and code that
builds the parts directly. Where a default comes from controller-runtime or client-go,
its comment says so. Durations are seconds.

It is a bottom layer, like ``cbop.clock``: it imports nothing from cbop, and every layer
may import it.
"""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------------- API client

#: Client-side request rate limit, requests per second; ``0`` = no client-side limit.
#: As controller-runtime since v0.21 (PR #3119), cbop leaves fairness to the API
#: server's API Priority and Fairness (GA since Kubernetes 1.29) instead of throttling
#: itself; the API server's 429 answers are retried after their ``Retry-After``.
KUBE_API_QPS: Final = 0.0
#: Client-side burst, requests; ``0`` = one second's worth of ``KUBE_API_QPS`` (at
#: least 1). Only used when a QPS limit is set.
KUBE_API_BURST: Final = 0
#: How often a 429/5xx answer with ``Retry-After`` is retried (client-go's
#: ``maxRetries``, 10).
KUBE_API_MAX_RETRIES: Final = 10

# ---------------------------------------------------------------- informers, workers

#: Concurrent reconciles (controller-runtime's MaxConcurrentReconciles is 1; cbop's
#: reconciles wait on the API server, so a few run at once).
WORKERS: Final = 4
#: Informer resync period: controller-runtime's default SyncPeriod, 10 hours.
RESYNC_PERIOD: Final = 36000.0
#: A watch connection silent this long is dead and re-established. The API server sends
#: a bookmark about once a minute, so 90 s leaves room for one lost bookmark.
WATCH_READ_TIMEOUT: Final = 90.0
#: How long the long-running operator waits for the first list of every informer
#: (controller-runtime's CacheSyncTimeout, 2 minutes); time while a list is refused
#: (CRD missing, 403) does not count.
CACHE_SYNC_TIMEOUT: Final = 120.0
#: The same wait for ``cbop --once``, which reports a refusal at once instead.
ONCE_CACHE_SYNC_TIMEOUT: Final = 60.0
#: Time in-flight reconciles get to finish on shutdown (controller-runtime's
#: GracefulShutdownTimeout, 30 s).
SHUTDOWN_TIMEOUT: Final = 30.0

# ---------------------------------------------------------------- endpoints, logging

#: Address of ``/metrics`` (controller-runtime's ``:8080``); ``0`` disables it.
METRICS_BIND_ADDRESS: Final = ":8080"
#: Address of ``/healthz`` and ``/readyz`` (kubebuilder's ``:8081``); ``0`` disables it.
HEALTH_PROBE_BIND_ADDRESS: Final = ":8081"
#: Log level.
LOG_LEVEL: Final = "info"
#: Which Events are written: notable (what a user must look at), all, none.
EVENTS: Final = "notable"

# ------------------------------------------------------------------------ rollout

#: Run the rollout controllers (docs/rollout.md). Off in the binary: with RBAC that
#: lacks the ``apps`` rules their informers are refused, and the manager waits for
#: every informer before any controller starts, so the ConfigBundle controller would
#: wait too. The shipped manifests and Helm chart, whose RBAC has the rules, turn it on.
ROLLOUT: Final = True

# ------------------------------------------------------------------ cluster bundles

#: Run the ClusterConfigBundle controller (docs/cluster-bundles.md). It waits for its
#: own caches only, so without its RBAC (or its CRD) the other controllers run as usual.
CLUSTER_BUNDLES: Final = True

# ------------------------------------------------------------------------ secrets

#: Serve bundles whose target is a Secret, and read Secret sources (docs/secrets.md).
#: Off: the RBAC for Secrets is a role of its own, installed only with them on.
SECRETS: Final = False
#: ``namespace/name`` of the Secret holding the key of the keyed digests of Secret
#: content; cbop makes it when it is absent.
SECRETS_DIGEST_KEY: Final = "cbop-system/cbop-digest-key"

# ----------------------------------------------------------------- leader election

#: Name of the Lease.
LEADER_ELECTION_ID: Final = "cbop-leader"
#: How long a standby waits before taking over an unrenewed lease (controller-runtime's
#: LeaseDuration, 15 s).
LEASE_DURATION: Final = 15.0
#: How long the leader retries renewing before it stops writing (RenewDeadline, 10 s).
RENEW_DEADLINE: Final = 10.0
#: Time between renewals and acquire attempts (RetryPeriod, 2 s).
RETRY_PERIOD: Final = 2.0

# ------------------------------------------------------------------------ sharding

#: Shards the bundles are spread over (``--shards``, docs/sharding.md); ``1``: one
#: leader does all the work, as without sharding. More than 1 needs leader election.
SHARDS: Final = 1
