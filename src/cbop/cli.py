"""The ``cbop`` command: run the operator, or reconcile once with ``--once``.

Every flag has a ``CBOP_*`` environment equivalent (``--kube-api-qps`` ->
``CBOP_KUBE_API_QPS``; repeatable flags take a comma-separated list); a flag on the
command line wins, and a repeatable flag on the command line replaces the list.

Exit codes (one meaning each, in every mode):

- 0 (:data:`EXIT_OK`): success; with ``--once``, every bundle is Ready; with
  ``--dry-run``, every bundle is also in sync (nothing would be written);
- 1 (:data:`EXIT_NOT_READY`): a bundle is not Ready (``--once``) or would not be Ready
  even after the pending changes (``--dry-run``: invalid spec, name conflict, a write
  the API server refuses, suspended); or the operator stopped on an error (lost lease);
- 2 (:data:`EXIT_ERROR`): usage, configuration or connection errors (argparse's code),
  reported in one line without a traceback;
- 3 (:data:`EXIT_PENDING`): ``--dry-run`` only: changes are pending, and every bundle
  would be Ready once they are made (what ``--once`` would then return 0 for).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

import structlog

from cbop import __version__, defaults
from cbop.configbundle import Result
from cbop.configbundle import controller as configbundle
from cbop.controllers import CONTROLLERS
from cbop.informers import SharedInformerFactory
from cbop.keys import split_key
from cbop.kube import CONFIGBUNDLES, ApiError, ConfigError, ConnectionFailed, KubeClient
from cbop.logconfig import LEVELS, configure_logging
from cbop.manager import Manager, Options, enabled_controllers, options_error
from cbop.runtime.definition import ControllerDefinition
from cbop.runtime.events import EVENT_LEVELS, EventRecorder

log = structlog.get_logger("cbop.cli")

EXIT_OK = 0
EXIT_NOT_READY = 1
EXIT_ERROR = 2
EXIT_PENDING = 3

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a duration into seconds: plain seconds (``30``, ``0.5``) or Go style (``1h30m``).

    Raises:
        argparse.ArgumentTypeError: the text is neither.
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value < 0:
            raise argparse.ArgumentTypeError(f"duration {text!r} must not be negative")
        return value
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use seconds (30) or units like 10h, 5m, 30s, 1h30m"
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Format ``seconds`` the way :func:`parse_duration` reads it back: ``10h``, ``1m30s``.

    Whole hours, minutes and seconds are spelled with units (``0`` is ``0s``); a
    fractional number of seconds is given as is (``0.5s``).
    """
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    parts: list[str] = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size or (unit == "s" and not parts):
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


#: Words a boolean ``CBOP_*`` variable may hold, as strconv.ParseBool and most CLIs accept.
_TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
_FALSE = frozenset({"0", "false", "no", "off", "f", "n", ""})


def env_name(option: str) -> str:
    """Return the variable of a long option: ``--kube-api-qps`` -> ``CBOP_KUBE_API_QPS``."""
    return "CBOP_" + option.lstrip("-").upper().replace("-", "_")


def parse_bool(text: str) -> bool:
    """Parse a boolean environment value (true/false, 1/0, yes/no, on/off; any case).

    Raises:
        argparse.ArgumentTypeError: any other text.
    """
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean: use true or false")


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
    definitions: Sequence[ControllerDefinition] = CONTROLLERS,
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
            "a flag on the command line wins."
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
    flag("workers", defaults.WORKERS, type=_positive_int, help="concurrent reconciles")
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
        type=_positive_int,
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


def _fail(message: str) -> NoReturn:
    """Report a fatal error in one line (in the log format once logging is set up)."""
    if structlog.is_configured():
        log.error(message)
    else:
        print(f"cbop: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_ERROR)


def pool_size(args: argparse.Namespace) -> int:
    """Return how many connections to the API server the client keeps (urllib3 ``maxsize``).

    One per open watch and one per concurrent reconcile, for every shard a replica may
    hold (all ``--shards`` of them, when it is the only one), plus a few for Leases and
    Events; at least 16. Each informer (one per resource and ``--namespace``) holds a
    watch: the resources the enabled controllers declare (shared ones once); each of
    their controllers has ``--workers`` workers. A pool that is too small opens and
    drops a connection per request beyond it (urllib3's "Connection pool is full"
    warning).
    """
    enabled = enabled_controllers(controller_settings(args))
    kinds = len({resource for d in enabled for resource in d.resources})
    controllers = sum(d.controllers for d in enabled)
    scopes = len(args.namespaces or [None])
    per_shard: int = kinds * scopes + controllers * args.workers
    shards: int = args.shards
    return max(16, per_shard * shards + 4)


def controller_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Return the controllers' flag values from parsed ``args``, by flag ``dest``."""
    return {option.dest: getattr(args, option.dest) for d in CONTROLLERS for option in d.flags}


def _connect(args: argparse.Namespace) -> KubeClient:
    try:
        client = KubeClient.from_config(
            kubeconfig=args.kubeconfig,
            context=args.context,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            pool_size=pool_size(args),
        )
    except ConfigError as err:
        _fail(str(err))
    namespaces = args.namespaces or [None]
    for ns in namespaces:
        try:
            client.list(CONFIGBUNDLES, ns, limit=1)
        except ConnectionFailed as err:
            _fail(f"cannot reach the API server at {client.host}: {err.message}")
        except ApiError as err:
            if not args.once and (err.is_not_found or err.is_forbidden):
                # The operator waits for its CRD and its RBAC (applied in any order by
                # GitOps tools): the informers retry and /readyz says what is missing.
                break
            if err.is_not_found:
                _fail(
                    "the ConfigBundle API (configbundles.cbop.dev) is not installed; "
                    "apply manifests/crd/ (make install)"
                )
            if err.status in (401, 403):
                where = f" in namespace {ns}" if ns else " in all namespaces"
                _fail(f"not allowed to list ConfigBundles{where}: {err.message}")
            _fail(f"the API server refused to list ConfigBundles: {err}")
    return client


def _ready_word(result: Result) -> str:
    if result.pending:
        # A dry run never calls a bundle with a pending change Ready: it says what the
        # bundle would be once the change is made.
        after = _ready_word(dataclasses.replace(result, pending=False))
        return f"Pending (then {after})"
    if result.ready == "True":
        return "Ready"
    if result.reason is not None:
        return result.reason.value
    return "-"


def run_once(args: argparse.Namespace, client: KubeClient) -> int:
    """Reconcile every bundle in scope once; print results; return the exit code.

    Returns:
        :data:`EXIT_NOT_READY` when a bundle is not Ready (with ``--dry-run``: would not
        be Ready after the pending changes), else :data:`EXIT_PENDING` when a dry run
        found changes pending, else :data:`EXIT_OK`.
    """
    recorder = None if args.dry_run else EventRecorder(client, level=args.events)
    informers = SharedInformerFactory(client, namespaces=args.namespaces, resync_period=0)
    reconciler = configbundle.new_reconciler(
        client, informers, recorder=recorder, dry_run=args.dry_run
    )
    informers.start()
    try:
        timeout = defaults.ONCE_CACHE_SYNC_TIMEOUT
        if not informers.wait_for_cache_sync(timeout):
            refused = informers.refusals()
            if refused:
                _fail(refused[0].message)
            _fail(f"timed out listing ConfigBundles and ConfigMaps ({timeout:g} s)")
        try:
            results = configbundle.reconcile_all(reconciler, informers.lister(CONFIGBUNDLES))
        except (ApiError, ConnectionFailed) as err:
            _fail(f"reconcile failed: {err}")
    finally:
        informers.shutdown()
        if recorder is not None:
            recorder.close(timeout=5.0)
    if args.output == "json":
        rows = [
            {
                "namespace": split_key(r.key)[0],
                "bundle": split_key(r.key)[1],
                "configMap": r.config_map,
                "action": r.action.value if r.action else None,
                "pending": r.pending,
                "result": _ready_word(r),
                "ready": r.ready,
                "reason": r.reason.value if r.reason else None,
                "message": r.message,
                **({"diff": r.diff} if args.dry_run else {}),
            }
            for r in results
        ]
        print(json.dumps(rows, indent=2))
    else:
        print(_table(results, dry_run=args.dry_run))
    return exit_code(results)


def exit_code(results: Sequence[Result]) -> int:
    """Return the ``--once`` exit code for ``results`` (see the module docstring).

    A bundle with no Ready condition to report (gone, being deleted) counts as neither
    Ready nor broken; in a dry run its pending release still counts as a change.
    """
    if any(r.ready is not None and r.ready != "True" for r in results):
        return EXIT_NOT_READY
    if any(r.pending for r in results):
        return EXIT_PENDING
    return EXIT_OK


def _table(results: Sequence[Result], *, dry_run: bool) -> str:
    header = ("NAMESPACE", "BUNDLE", "CONFIGMAP", "ACTION", "RESULT")
    rows = [
        (
            split_key(r.key)[0] or "",
            split_key(r.key)[1],
            r.config_map or "-",
            (r.action.value if r.action else "-") + (" (dry run)" if r.pending else ""),
            _ready_word(r),
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if not rows:
        lines.append("(no ConfigBundles found)")
    if dry_run:
        for r in results:
            if r.pending:
                lines.extend(["", f"# {r.key}: {r.message}"])
                if r.diff:
                    lines.append(r.diff.rstrip("\n"))
    return "\n".join(lines)


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            # Second signal: the operator asked twice; exit at once.
            os._exit(128 + signum)
        log.info("signal received; shutting down gracefully", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cbop`` / ``python -m cbop``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dry_run and not args.once:
        parser.error("--dry-run only works with --once")
    refused = options_error(args.shards, leader_elect=args.leader_elect)
    if refused is not None:
        parser.error(refused)
    configure_logging(args.log_level, args.log_format)
    log.debug(
        "effective configuration",
        **{k: v for k, v in sorted(vars(args).items())},
        environment=sorted(k for k in os.environ if k.startswith("CBOP_")),
    )
    client = _connect(args)
    if args.once:
        return run_once(args, client)
    try:
        manager = Manager(
            client,
            Options(
                namespaces=tuple(args.namespaces or ()),
                workers=args.workers,
                resync_period=args.resync_period,
                metrics_bind_address=args.metrics_bind_address,
                metrics_secure=args.metrics_secure,
                metrics_cert_dir=args.metrics_cert_dir,
                health_probe_bind_address=args.health_probe_bind_address,
                leader_elect=args.leader_elect,
                leader_election_id=args.leader_election_id,
                leader_election_namespace=args.leader_election_namespace,
                lease_duration=args.leader_election_lease_duration,
                renew_deadline=args.leader_election_renew_deadline,
                retry_period=args.leader_election_retry_period,
                shutdown_timeout=args.shutdown_timeout,
                read_timeout=args.watch_read_timeout,
                priority_queue=args.priority_queue,
                events=args.events,
                settings=controller_settings(args),
                shards=args.shards,
            ),
        )
    except (ValueError, OSError) as err:
        _fail(str(err))
    _install_signal_handlers(manager.stop_event)
    try:
        return manager.run()
    except OSError as err:  # e.g. the metrics or probe port is taken
        _fail(str(err))


if __name__ == "__main__":
    sys.exit(main())
