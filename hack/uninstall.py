"""`make uninstall`: delete cbop's CRDs without ever hanging.

The ClusterConfigBundle CRD goes first (nothing holds it), then the ConfigBundle CRD.

Deleting the CRD deletes every ConfigBundle. A bundle with ``deletionPolicy: Orphan``
carries cbop's finalizer ``cbop.dev/orphan``, which a running cbop removes after it has
released the bundle's ConfigMap; without cbop the bundle, and the CRD with it, would stay
"deletion in progress" forever. So this script deletes the CRD, gives a running cbop
``--grace`` seconds, then runs ``cbop release --all`` (:mod:`cbop.cli.release`, the
command a release's users have too), which releases what is still waiting exactly as
cbop does. Finalizers of others are never touched: if they still hold bundles at
``--timeout``, it names them, says how to proceed and exits 1.

Prints what was deleted and which ConfigMaps were left behind. Uses the current
kubeconfig context ($KUBECONFIG, else ~/.kube/config), as kubectl does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from cbop.api import config_map_name_of
from cbop.configbundle.decision import has_finalizer
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    ApiError,
    ConfigError,
    ConnectionFailed,
    KubeClient,
)

CRDS = CUSTOM_RESOURCE_DEFINITIONS
CRD_NAME = "configbundles.cbop.dev"
CLUSTER_CRD_NAME = "clusterconfigbundles.cbop.dev"
#: Seconds between two runs of ``cbop release --all`` while bundles still wait.
RELEASE_EVERY = 5.0

Bundle = Mapping[str, Any]


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _say(message: str) -> None:
    print(f"uninstall: {message}", flush=True)


def _bundles(kube: KubeClient) -> list[dict[str, Any]]:
    try:
        return list(kube.list(CONFIGBUNDLES, None)["items"])
    except ApiError as err:
        if err.is_not_found:  # the CRD is gone, and every bundle with it
            return []
        raise


def _run_release(kubeconfig: str | None) -> None:
    """Run ``cbop release --all`` with this interpreter; its lines go to stdout as they are."""
    command = [sys.executable, "-m", "cbop", "release", "--all"]
    if kubeconfig:
        command.append(f"--kubeconfig={kubeconfig}")
    _say("$ cbop release --all")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    for line in (result.stdout + result.stderr).splitlines():
        _say(f"  {line}")


def _delete_cluster_bundles(kube: KubeClient) -> None:
    """Delete the ClusterConfigBundle CRD first, if installed, without waiting.

    ClusterConfigBundles carry no finalizer, so their CRD goes at once; their stamped
    ConfigBundles go with the ConfigBundle CRD next (or with garbage collection before
    that), their Orphan ConfigMaps released as any bundle's.
    """
    try:
        kube.delete(CRDS, None, CLUSTER_CRD_NAME, propagation_policy="Background")
    except ApiError as err:
        if err.is_not_found:
            return
        raise
    _say(f"deleting CRD {CLUSTER_CRD_NAME} and every ClusterConfigBundle")


def uninstall(
    kube: KubeClient, *, grace: float, timeout: float, kubeconfig: str | None = None
) -> int:
    """Delete the CRD and wait for it to go; return the exit status (0 gone, 1 blocked).

    Args:
        kube: client for the cluster.
        grace: seconds a running cbop gets to release Orphan bundles itself.
        timeout: seconds to wait for the CRD to be gone.
        kubeconfig: the kubeconfig path ``cbop release`` is given (None: as kubectl).
    """
    _delete_cluster_bundles(kube)
    try:
        kube.get(CRDS, None, CRD_NAME)
    except ApiError as err:
        if err.is_not_found:
            _say(f"CRD {CRD_NAME} is not installed; nothing to do")
            return 0
        raise
    before = _bundles(kube)
    orphans = [b for b in before if (b.get("spec") or {}).get("deletionPolicy") == "Orphan"]
    _say(
        f"deleting CRD {CRD_NAME} and with it {_count(len(before), 'ConfigBundle')} "
        f"({len(orphans)} with deletionPolicy Orphan)"
    )
    try:
        kube.delete(CRDS, None, CRD_NAME, propagation_policy="Background")
    except ApiError as err:
        if not err.is_not_found:
            raise
    start = time.monotonic()
    last_release: float | None = None
    waiting: list[dict[str, Any]] = []
    while True:
        try:
            kube.get(CRDS, None, CRD_NAME)
        except ApiError as err:
            if not err.is_not_found:
                raise
            break
        now = time.monotonic()
        waiting = [b for b in _bundles(kube) if b["metadata"].get("deletionTimestamp")]
        ours = [b for b in waiting if has_finalizer(b)]
        due = last_release is None or now - last_release >= RELEASE_EVERY
        if ours and now - start >= grace and due:
            if last_release is None:
                _say(
                    f"cbop did not release {_count(len(ours), 'Orphan bundle')} within {grace:g}s "
                    "(is it running?); releasing them as cbop would"
                )
            _run_release(kubeconfig)
            last_release = now
        elif now - start >= timeout:
            return _blocked(waiting)
        time.sleep(0.5)
    _say(f"CRD {CRD_NAME} and every ConfigBundle deleted")
    left = [key for key in map(_configmap_key, orphans) if _exists(kube, key)]
    if left:
        _say(
            "left behind (deletionPolicy Orphan; delete them yourself if unwanted): "
            + ", ".join(f"ConfigMap {key}" for key in left)
        )
    return 0


def _configmap_key(bundle: Bundle) -> str:
    """``namespace/name`` of the ConfigMap cbop manages for ``bundle``."""
    name = config_map_name_of(bundle) or bundle["metadata"]["name"]
    return f"{bundle['metadata']['namespace']}/{name}"


def _exists(kube: KubeClient, key: str) -> bool:
    namespace, name = key.split("/", 1)
    try:
        kube.get(CONFIGMAPS, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return False
        raise
    return True


def _blocked(waiting: list[dict[str, Any]]) -> int:
    """Say what holds the CRD and how to proceed; return 1."""
    _say(f"CRD {CRD_NAME} is still being deleted; these ConfigBundles hold it:")
    for bundle in waiting:
        finalizers = ", ".join(bundle["metadata"].get("finalizers") or ()) or "none"
        _say(f"  {_key(bundle)}: finalizers {finalizers}")
    if any(has_finalizer(b) for b in waiting):
        _say("cbop release --all could not release those with cbop.dev/orphan (see above)")
    _say(
        "finalizers of other controllers: start those, or remove the finalizers by hand "
        "(kubectl patch configbundle NAME -n NS --type=merge "
        '-p \'{"metadata":{"finalizers":null}}\'); the CRD then goes by itself'
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and run :func:`uninstall`; errors are one line, exit 2."""
    parser = argparse.ArgumentParser(prog="hack/uninstall.py", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: as kubectl)")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds (default 5)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    args = parser.parse_args(argv)
    try:
        kube = KubeClient.from_config(kubeconfig=args.kubeconfig, qps=0)
        return uninstall(kube, grace=args.grace, timeout=args.timeout, kubeconfig=args.kubeconfig)
    except (ApiError, ConfigError, ConnectionFailed) as err:
        print(f"uninstall: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
