"""The ``cbop`` argument parser, with every flag's ``CBOP_*`` variable applied.

This module owns :func:`build_parser` (every flag of the command, the controllers'
own flags from the registry included) and :func:`controller_settings`, the
controllers' flag values from parsed arguments. A flag on the command line beats its
``CBOP_*`` variable (``--kube-api-qps`` -> ``CBOP_KUBE_API_QPS``; repeatable flags take
a comma-separated list), which beats the built-in default. :mod:`cbop.cli.command`
parses the command line with it; tests and the docs' flag tables build it through
:mod:`cbop.cli`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from cbop import __version__, defaults
from cbop.cli.values import env_name, format_duration, parse_bool, parse_duration, positive_int
from cbop.controllers import CONTROLLERS
from cbop.logconfig import LEVELS
from cbop.runtime.definition import ControllerDefinition
from cbop.runtime.events import EVENT_LEVELS

__all__ = ["build_parser", "controller_settings"]


class _Repeatable(argparse.Action):
    """A repeatable option (``--namespace a --namespace b``).

    Its first use on the command line replaces the default (which may come from the
    environment) instead of adding to it, so flags override the environment for lists too.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        # argparse puts the default object itself on the namespace before parsing.
        items = [] if current is None or current is self.default else list(current)
        items.append(values)
        setattr(namespace, self.dest, items)


def _env_default(parser: argparse.ArgumentParser, action: argparse.Action) -> Any:
    """Return the default of ``action`` with its ``CBOP_*`` variable applied, if set."""
    option = action.option_strings[0]
    text = os.environ.get(env_name(option))
    if text is None:
        return action.default
    try:
        if isinstance(action, argparse.BooleanOptionalAction):
            return parse_bool(text)
        if isinstance(action, _Repeatable):
            return [v for v in text.split(",") if v]
        value = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError) as err:
        parser.error(f"{env_name(option)}: {err}")
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(repr, action.choices))
        parser.error(f"{env_name(option)}: invalid choice {value!r} (choose from {choices})")
    return value


def build_parser(
    definitions: Sequence[ControllerDefinition[Any]] = CONTROLLERS,
) -> argparse.ArgumentParser:
    """Return the argument parser, with the environment applied.

    ``definitions``: the controllers whose flags it offers (default: the registry).

    Precedence, as most CLIs: a flag on the command line beats its ``CBOP_*`` variable,
    which beats the built-in default. A repeatable flag given on the command line
    replaces the variable's comma-separated list; every boolean flag has a ``--no-``
    form (``--no-leader-elect``) to switch off what the environment switched on.

    Raises:
        SystemExit(2): a ``CBOP_*`` variable holds an invalid value (argparse's usage
            error, naming the variable).
    """
    parser = argparse.ArgumentParser(
        prog="cbop",
        description=(
            "The ConfigBundle operator: keeps a managed ConfigMap equal to each "
            "ConfigBundle. Every flag can also be set as CBOP_<FLAG> in the environment; "
            "a flag on the command line wins. `cbop migrate-storage --help`: rewrite stored "
            "objects in the storage version after an upgrade. `cbop release --help`: "
            "release the bundles being deleted that wait for cbop's finalizer, while cbop "
            "is stopped or gone."
        ),
    )

    def flag(name: str, default: Any = None, **kw: Any) -> None:
        if kw.get("action") == "store_true":
            kw["action"] = argparse.BooleanOptionalAction
        elif kw.get("action") == "append":
            kw["action"] = _Repeatable
        if default is not None and "help" in kw:
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            if kw.get("type") is parse_duration:
                shown = format_duration(default)
            elif isinstance(default, float):
                shown = f"{default:g}"
            kw["help"] += f" (default: {shown})"
        action = parser.add_argument(f"--{name}", default=default, **kw)
        action.default = _env_default(parser, action)

    flag("kubeconfig", help="path to a kubeconfig (default: in-cluster, then $KUBECONFIG)")
    flag("context", help="kubeconfig context to use (default: its current context)")
    flag(
        "kube-api-qps",
        defaults.KUBE_API_QPS,
        type=float,
        help="client-side request rate limit, requests/s; 0: none (the API server's "
        "Priority and Fairness limits cbop)",
    )
    flag(
        "kube-api-burst",
        defaults.KUBE_API_BURST,
        type=int,
        help="client-side burst with --kube-api-qps; 0: one second's worth",
    )
    flag(
        "namespace",
        action="append",
        dest="namespaces",
        help="namespace to watch (repeatable; default: all namespaces)",
    )
    flag("workers", defaults.WORKERS, type=positive_int, help="concurrent reconciles")
    flag(
        "resync-period",
        defaults.RESYNC_PERIOD,
        type=parse_duration,
        help="informer resync period, e.g. 10h; 0 disables",
    )
    flag(
        "priority-queue",
        True,
        action=argparse.BooleanOptionalAction,
        help="queue initial-list and resync keys behind real changes, as controller-runtime; "
        "--no-priority-queue: one FIFO for all",
    )
    flag(
        "events",
        defaults.EVENTS,
        choices=EVENT_LEVELS,
        help="Events to write: notable (drift corrected, replaced, adopted, deleted, "
        "orphaned, warnings), all (also Created/Updated), none",
    )
    # Each controller's own flags (cbop.controllers: the registry).
    for definition in definitions:
        for option in definition.flags:
            if isinstance(option.default, bool):
                flag(option.name, option.default, action="store_true", help=option.help)
            else:
                flag(option.name, option.default, type=type(option.default), help=option.help)
    flag(
        "metrics-bind-address",
        defaults.METRICS_BIND_ADDRESS,
        help="address of /metrics; 0 disables",
    )
    flag(
        "metrics-secure",
        False,
        action="store_true",
        help="serve /metrics over HTTPS, only to callers whose bearer token may get /metrics "
        "(TokenReview and SubjectAccessReview, cached 10s)",
    )
    flag(
        "metrics-cert-dir",
        None,
        help="directory with tls.crt and tls.key for --metrics-secure, re-read on change "
        "(default: a self-signed certificate made at start)",
    )
    flag(
        "health-probe-bind-address",
        defaults.HEALTH_PROBE_BIND_ADDRESS,
        help="address of /healthz and /readyz; 0 disables",
    )
    flag("log-level", defaults.LOG_LEVEL, choices=LEVELS, help="log level")
    flag(
        "log-format",
        None,
        choices=("json", "console"),
        help="log format (default: console on a terminal, else json)",
    )
    flag("leader-elect", False, action="store_true", help="use leader election (Lease)")
    flag("leader-election-id", defaults.LEADER_ELECTION_ID, help="name of the Lease")
    flag(
        "leader-election-namespace",
        None,
        help="namespace of the Lease (default: the pod's namespace)",
    )
    flag(
        "leader-election-lease-duration",
        defaults.LEASE_DURATION,
        type=parse_duration,
        help="how long a standby waits before taking over an unrenewed lease",
    )
    flag(
        "leader-election-renew-deadline",
        defaults.RENEW_DEADLINE,
        type=parse_duration,
        help="how long the leader retries renewing before it stops writing",
    )
    flag(
        "leader-election-retry-period",
        defaults.RETRY_PERIOD,
        type=parse_duration,
        help="time between lease renewals and acquire attempts",
    )
    flag(
        "shards",
        defaults.SHARDS,
        type=positive_int,
        help="spread the bundles over this many shards by namespace, each with its own Lease "
        "(<leader-election-id>-shard-<i>), shared out among the replicas; more than 1 needs "
        "leader election (docs/sharding.md)",
    )
    flag(
        "shutdown-timeout",
        defaults.SHUTDOWN_TIMEOUT,
        type=parse_duration,
        help="time in-flight reconciles get on shutdown",
    )
    flag(
        "watch-read-timeout",
        defaults.WATCH_READ_TIMEOUT,
        type=parse_duration,
        help="a watch connection silent for this long is dead and re-established "
        "(bookmarks arrive about once a minute)",
    )
    flag("once", False, action="store_true", help="reconcile every bundle once, then exit")
    flag(
        "dry-run",
        False,
        action="store_true",
        help="with --once: write nothing; show each action and a diff of the ConfigMap",
    )
    flag("output", "table", choices=("table", "json"), help="--once output format")
    parser.add_argument("--version", action="version", version=f"cbop {__version__}")
    return parser


def controller_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Return the controllers' flag values from parsed ``args``, by flag ``dest``."""
    return {option.dest: getattr(args, option.dest) for d in CONTROLLERS for option in d.flags}
