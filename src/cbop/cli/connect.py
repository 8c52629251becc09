"""The ``cbop`` command's connection to the API server, checked before anything runs.

This module owns :func:`connect`, which builds the API client from the kubeconfig
flags and makes one LIST of ConfigBundles per ``--namespace`` to turn a missing CRD,
missing RBAC or an unreachable server into a one-line error (except where the operator
waits for them), and :func:`pool_size`, how many connections that client keeps.
:mod:`cbop.cli.command` calls it once at start.
"""

from __future__ import annotations

import argparse

from cbop.cli.exits import fail
from cbop.cli.parser import controller_settings
from cbop.kube import CONFIGBUNDLES, ApiError, ConfigError, ConnectionFailed, KubeClient
from cbop.manager import enabled_controllers

__all__ = ["connect", "pool_size"]


def pool_size(args: argparse.Namespace) -> int:
    """Return how many connections to the API server the client keeps (urllib3 ``maxsize``).

    One per open watch and one per concurrent reconcile, for every shard a replica may
    hold (all ``--shards`` of them, when it is the only one), plus a few for Leases and
    Events; at least 16. Each informer (one per resource and ``--namespace``) holds a
    watch: the resources the enabled controllers declare (shared ones once, plus their
    ``more_informers``, such as the source ConfigMaps' own informer, and the informers
    of their opt-ins that are on, such as the Secrets' two); each of
    their controllers has ``--workers`` workers. A pool that is too small opens and
    drops a connection per request beyond it (urllib3's "Connection pool is full"
    warning).
    """
    settings = controller_settings(args)
    enabled = enabled_controllers(settings)
    kinds = len({resource for d in enabled for resource in d.resources})
    kinds += sum(len(d.more_informers) for d in enabled)
    kinds += sum(len(o.informers) for d in enabled for o in d.opt_ins if o.on(settings))
    controllers = sum(d.controllers for d in enabled)
    scopes = len(args.namespaces or [None])
    per_shard: int = kinds * scopes + controllers * args.workers
    shards: int = args.shards
    return max(16, per_shard * shards + 4)


def connect(args: argparse.Namespace) -> KubeClient:
    """Return the API client for ``args``, having listed ConfigBundles once per namespace.

    Raises:
        SystemExit(2): no configuration, no answer, or a refusal the command cannot
            go on from (see :func:`cbop.cli.exits.fail`).
    """
    try:
        client = KubeClient.from_config(
            kubeconfig=args.kubeconfig,
            context=args.context,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            pool_size=pool_size(args),
        )
    except ConfigError as err:
        fail(str(err))
    namespaces = args.namespaces or [None]
    for ns in namespaces:
        try:
            client.list(CONFIGBUNDLES, ns, limit=1)
        except ConnectionFailed as err:
            fail(f"cannot reach the API server at {client.host}: {err.message}")
        except ApiError as err:
            if not args.once and (err.is_not_found or err.is_forbidden):
                # The operator waits for its CRD and its RBAC (applied in any order by
                # GitOps tools): the informers retry and /readyz says what is missing.
                break
            if err.is_not_found:
                fail(
                    "the ConfigBundle API (configbundles.cbop.dev) is not installed; "
                    "apply manifests/crd/ (make install)"
                )
            if err.status in (401, 403):
                where = f" in namespace {ns}" if ns else " in all namespaces"
                fail(f"not allowed to list ConfigBundles{where}: {err.message}")
            fail(f"the API server refused to list ConfigBundles: {err}")
    return client
