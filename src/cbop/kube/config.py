"""Where the client's configuration comes from: kubeconfig, in-cluster, and the pool.

This module owns the REST configuration, as client-go's ``rest.Config`` and ``clientcmd``
loading rules: which source is used (:func:`load_configuration`), how a kubeconfig or the
pod's service account is read (:func:`load_kubeconfig`, :func:`load_in_cluster`), and the
``kubernetes.client.ApiClient`` built from it with cbop's connection settings
(:func:`new_api_client`). Token files are kept fresh by :mod:`cbop.kube.credentials`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

import cbop
from cbop.clock import Clock
from cbop.kube.credentials import TokenFileRefresher, watch_kubeconfig_token_file
from cbop.kube.errors import ConfigError

__all__ = [
    "DEFAULT_USER_AGENT",
    "in_cluster",
    "load_configuration",
    "load_in_cluster",
    "load_kubeconfig",
    "new_api_client",
]

#: ``User-Agent`` sent when none is given.
DEFAULT_USER_AGENT: Final = f"cbop/{cbop.__version__}"


def load_configuration(*, kubeconfig: str | None, context: str | None, clock: Clock) -> Any:
    """Load a ``kubernetes.client.Configuration`` the way client-go's ``clientcmd`` defaults do.

    Order: an explicit ``kubeconfig`` path; else, inside a pod (:func:`in_cluster`), the
    in-cluster configuration, whose token file is re-read every 60 s of ``clock`` so
    rotated tokens are picked up; else ``$KUBECONFIG`` (a ``:``-separated list) or
    ``~/.kube/config``. A kubeconfig user's ``tokenFile`` is re-read likewise.

    Args:
        kubeconfig: path of a kubeconfig file, or ``None``.
        context: kubeconfig context name (default: the file's current context).
        clock: time source of the token re-reads.

    Raises:
        ConfigError: no configuration found, or it could not be loaded.
    """
    configuration = k8s_client.Configuration()
    if kubeconfig is not None:
        load_kubeconfig(configuration, kubeconfig, context)
        watch_kubeconfig_token_file(configuration, kubeconfig, context, clock)
    elif in_cluster():
        load_in_cluster(configuration, clock)
    else:
        env = os.environ.get("KUBECONFIG", "")
        candidate = env if env else "~/.kube/config"
        paths = [p for p in candidate.split(os.pathsep) if p]
        if not any(Path(p).expanduser().exists() for p in paths):
            raise ConfigError(
                "no Kubernetes configuration found: no kubeconfig given, not running in "
                f"a pod, and {'$KUBECONFIG=' + env if env else '~/.kube/config'} does not exist"
            )
        load_kubeconfig(configuration, candidate, context)
        watch_kubeconfig_token_file(configuration, candidate.split(os.pathsep)[0], context, clock)
    return configuration


def new_api_client(configuration: Any, *, pool_size: int, user_agent: str) -> Any:
    """Tune a loaded ``Configuration`` in place and return a ``kubernetes.client.ApiClient``.

    Sets the pool size (``connection_pool_maxsize``, which the generated
    ``RESTClientObject`` passes to urllib3 as ``maxsize``: idle connections kept per
    host), TCP keepalive (as client-go dials), and urllib3 retries limited to one new
    connection attempt: a request that reached the server is never silently re-sent by
    urllib3.

    Args:
        configuration: a loaded ``kubernetes.client.Configuration``.
        pool_size: idle connections kept per host.
        user_agent: ``User-Agent`` header of every request.
    """
    configuration.connection_pool_maxsize = pool_size
    configuration.keep_alive = True
    configuration.retries = urllib3.util.Retry(
        total=1, connect=1, read=0, redirect=0, status=0, other=0, raise_on_status=False
    )
    api_client = k8s_client.ApiClient(configuration)
    api_client.user_agent = user_agent
    return api_client


def in_cluster() -> bool:
    """Whether this process runs in a pod: service host/port set, token file present."""
    return bool(
        os.environ.get(SERVICE_HOST_ENV_NAME)
        and os.environ.get(SERVICE_PORT_ENV_NAME)
        and os.path.isfile(SERVICE_TOKEN_FILENAME)
    )


def load_kubeconfig(configuration: Any, path: str, context: str | None) -> None:
    """Load kubeconfig ``path`` (a ``:``-separated list is merged) into ``configuration``.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or lacks ``context``;
            the message is one line.
    """
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, KeyError, yaml.YAMLError) as exc:
        where = f" (context {context!r})" if context else ""
        detail = " ".join(str(exc).split())  # YAML errors span lines; errors are one line
        raise ConfigError(f"cannot load kubeconfig {path!r}{where}: {detail}") from exc


def load_in_cluster(
    configuration: Any,
    clock: Clock,
    *,
    token_file: str = SERVICE_TOKEN_FILENAME,
    cert_file: str = SERVICE_CERT_FILENAME,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Load the pod's service-account configuration and keep its token fresh.

    Uses the stock ``InClusterConfigLoader`` for host, CA and the first token, then
    installs a :class:`~cbop.kube.credentials.TokenFileRefresher` (re-read every 60 s of
    ``clock``) as the refresh hook, as client-go's ``rest.InClusterConfig``.

    Raises:
        ConfigError: the service host/port variables, token or CA file are missing.
    """
    try:
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=token_file,
            cert_filename=cert_file,
            try_refresh_token=False,
            environ=os.environ if environ is None else environ,
        ).load_and_set(configuration)
    except (ConfigException, OSError) as exc:
        raise ConfigError(f"cannot load the in-cluster configuration: {exc}") from exc
    configuration.refresh_api_key_hook = TokenFileRefresher(token_file, clock)
