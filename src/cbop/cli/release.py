"""``cbop release``: release the bundles being deleted that wait for cbop's finalizer.

A ConfigBundle with ``deletionPolicy: Orphan`` carries the finalizer ``cbop.dev/orphan``,
which a running cbop removes once it has released the bundle's ConfigMap. With cbop
stopped or uninstalled, such a bundle, its namespace and its CRD stay "being deleted"
for ever. This module owns the subcommand that does what cbop would have done, for
every such bundle being deleted, itself or with its namespace or its CRD (the
namespace controller or the CRD's finalizer deletes it next), in the namespaces given
(``--namespace``) or in all (``--all``):
:func:`cbop.configbundle.release.release_deleted` (the ConfigMap keeps its content and
loses cbop's owner reference, labels and annotations; the finalizer comes off). Bundles
not being deleted are left alone (cbop releases them when they are). It prints one line
per bundle and a summary, and is safe to run while cbop runs, and twice.

Exit codes: 0 done (or nothing to do); 1 a bundle could not be released (named, with
the error; run it again); 2 usage, configuration or connection errors, in one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from cbop.api import FINALIZER_ORPHAN, GROUP, PLURAL
from cbop.cli.exits import EXIT_NOT_READY, EXIT_OK, fail
from cbop.configbundle.decision import has_finalizer
from cbop.configbundle.release import ConfigMapOutcome, Release, release_deleted
from cbop.keys import object_key
from cbop.kube import (
    CONFIGBUNDLES,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    ApiError,
    ConfigError,
    ConnectionFailed,
    KubeClient,
    KubeInterface,
)
from cbop.logconfig import LEVELS, configure_logging
from cbop.runtime import Requeue
from cbop.storagemigration import CrdTooOld, check_versions

__all__ = ["COMMAND", "build_release_parser", "release_main"]

#: The subcommand's name: ``cbop release``.
COMMAND = "release"


def build_release_parser() -> argparse.ArgumentParser:
    """Return the parser of ``cbop release``."""
    parser = argparse.ArgumentParser(
        prog=f"cbop {COMMAND}",
        description=(
            "Release every ConfigBundle being deleted that waits for cbop's finalizer "
            f"{FINALIZER_ORPHAN} (deletionPolicy: Orphan), as cbop would: its ConfigMap "
            "keeps its content and loses cbop's owner reference, labels and annotations, "
            "then the finalizer comes off, so the deletion of the bundle, its namespace or "
            "its CRD finishes. For when cbop is stopped or uninstalled; safe while it runs, "
            "and to run twice. Bundles not being deleted are left alone."
        ),
    )
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all", action="store_true", help="every namespace")
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="a namespace (repeatable)",
    )
    parser.add_argument(
        "--kubeconfig", help="path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context to use")
    parser.add_argument("--log-level", choices=LEVELS, default="warning")
    return parser


def _line(done: Release) -> str:
    if done.configmap is None:
        kept = "its spec names no ConfigMap"
    elif done.outcome is ConfigMapOutcome.RELEASED:
        kept = (
            f"ConfigMap {done.configmap} released (content kept; cbop's owner reference, "
            "labels and annotations removed)"
        )
    elif done.outcome is ConfigMapOutcome.GONE:
        kept = (
            f"ConfigMap {done.configmap} is gone already (deleted with its namespace, or by hand)"
        )
    else:
        kept = (
            f"ConfigMap {done.configmap} is not controlled by it (released already, or "
            "someone else's); left as it is"
        )
    finalizer = (
        f"finalizer {FINALIZER_ORPHAN} removed"
        if done.finalizer_removed
        else f"finalizer {FINALIZER_ORPHAN} already gone"
    )
    return f"ConfigBundle {done.bundle}: {kept}; {finalizer}"


def _terminating(client: KubeInterface, namespaces: Sequence[str | None]) -> set[str]:
    """Return the namespaces among ``namespaces`` (None: all) that are being deleted.

    Their bundles are deleted next by the namespace controller, so they count as being
    deleted. A client not allowed to read Namespaces gets none (then only bundles with
    their own ``deletionTimestamp`` count).
    """
    try:
        if namespaces == [None]:
            found = client.list(NAMESPACES, None)["items"]
        else:
            found = []
            for name in namespaces:
                try:
                    found.append(client.get(NAMESPACES, None, str(name)))
                except ApiError as err:
                    if not err.is_not_found:
                        raise
    except ApiError as err:
        if err.is_forbidden:
            return set()
        raise
    return {
        str(ns["metadata"]["name"])
        for ns in found
        if ns["metadata"].get("deletionTimestamp")
        or (ns.get("status") or {}).get("phase") == "Terminating"
    }


def _crd_terminating(client: KubeInterface) -> bool:
    """Whether the ConfigBundle CRD is being deleted (then every bundle is, next).

    A client not allowed to read CRDs gets False.
    """
    try:
        crd = client.get(CUSTOM_RESOURCE_DEFINITIONS, None, f"{PLURAL}.{GROUP}")
    except ApiError as err:
        if err.is_forbidden or err.is_not_found:
            return False
        raise
    return bool(crd["metadata"].get("deletionTimestamp"))


def _waiting(client: KubeInterface, namespaces: Sequence[str | None]) -> list[Mapping[str, Any]]:
    """Return the listed bundles carrying cbop's finalizer, by namespace and name.

    Raises:
        CrdTooOld: the ConfigBundle CRD is installed but does not serve the version this
            cbop reads (apply the new CRD first).
    """
    found: list[Mapping[str, Any]] = []
    for namespace in namespaces:
        try:
            items = client.list(CONFIGBUNDLES, namespace)["items"]
        except ApiError as err:
            if not err.is_not_found:
                raise
            try:
                crd = client.get(CUSTOM_RESOURCE_DEFINITIONS, None, f"{PLURAL}.{GROUP}")
            except ApiError as missing:
                if missing.is_not_found:
                    return []  # the CRD is not installed: no bundle waits
                raise
            check_versions([crd], then="run cbop release again")
            raise
        found += [b for b in items if has_finalizer(b)]
    return sorted(found, key=object_key)


def _going(bundle: Mapping[str, Any], terminating: set[str], crd_going: bool) -> bool:
    """Whether ``bundle`` is being deleted: itself, with its namespace or with its CRD."""
    meta = bundle["metadata"]
    return crd_going or bool(meta.get("deletionTimestamp")) or meta["namespace"] in terminating


def _release_one(client: KubeInterface, bundle: Mapping[str, Any]) -> bool:
    """Release ``bundle`` (being deleted), print what was done; False if it could not be."""
    try:
        done = release_deleted(client, bundle, being_deleted=True)
    except ConnectionFailed:
        raise
    except (ApiError, Requeue) as err:
        print(f"ConfigBundle {object_key(bundle)}: not released: {err}")
        return False
    if done is not None:
        print(_line(done))
    return True


def release_main(argv: Sequence[str]) -> int:
    """Run ``cbop release`` with ``argv`` (the words after the subcommand).

    Returns:
        The exit code (see the module docstring).
    """
    args = build_release_parser().parse_args(list(argv))
    configure_logging(args.log_level, None)
    try:
        client = KubeClient.from_config(kubeconfig=args.kubeconfig, context=args.context, qps=0)
    except ConfigError as err:
        fail(str(err))
    namespaces: list[str | None] = [None] if args.all else list(dict.fromkeys(args.namespaces))
    try:
        waiting = _waiting(client, namespaces)
        terminating = _terminating(client, namespaces) if waiting else set()
        crd_going = _crd_terminating(client) if waiting else False
        deleting = [b for b in waiting if _going(b, terminating, crd_going)]
        failed = sum(not _release_one(client, bundle) for bundle in deleting)
    except ConnectionFailed as err:
        fail(f"cannot reach the API server at {client.host}: {err.message}")
    except CrdTooOld as err:
        fail(str(err))
    except ApiError as err:
        fail(f"release stopped: {err}")
    finally:
        client.close()
    live = len(waiting) - len(deleting)
    where = "in any namespace" if args.all else "in " + ", ".join(str(n) for n in namespaces)
    if not deleting:
        print(f"no ConfigBundle being deleted waits for {FINALIZER_ORPHAN} {where}; nothing to do")
    else:
        print(f"released {len(deleting) - failed} of {len(deleting)} ConfigBundles being deleted")
    if live:
        print(
            f"{live} ConfigBundle{'s' if live != 1 else ''} with deletionPolicy Orphan "
            "not being deleted left alone (run this again once they are deleted, or let "
            "cbop release them)"
        )
    return EXIT_NOT_READY if failed else EXIT_OK
