"""Helpers of the Secret e2e modules: cbop as its ServiceAccount with or without the
Secrets' roles, Secrets made and read, waits on the Ready condition, and the search of
every output for the secret values a module used.

Shared by tests/e2e/test_secrets.py and tests/e2e/test_secret_targets.py, so that no
test module imports another.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    EVENTS,
    NAMESPACES,
    SECRETS,
    KubeClient,
)
from cbop_testing.envtest import ControlPlane

from .harness import REPO, Operator, wait_for

#: Generous bound for a change to travel through cbop.
WAIT = 30.0
MANIFESTS = REPO / "manifests"
#: The Secrets Component's RBAC objects (its Deployment patch is checked by
#: tests/e2e/test_deploy_manifests.py).
SECRET_RBAC = (
    "cluster_role.yaml",
    "cluster_role_binding.yaml",
    "digest_key_role.yaml",
    "digest_key_role_binding.yaml",
)
#: Every Secret request, with its URI (label selectors) and user; nothing else.
SECRETS_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: None
"""
CBOP = "system:serviceaccount:cbop-system:cbop"
#: The labels of a Secret cbop may read as a source.
SOURCE_LABELS = {"cbop.dev/source": "true"}


class Cluster:
    """The module's control plane, an admin client, a directory for logs, and cbop's
    ServiceAccount (manifests/rbac/ applied; the Secrets' roles are not).

    Every value a test puts in a Secret is noted (:meth:`value`), and so is every text
    cbop printed beside its logs (:meth:`printed`): :meth:`leaks` searches them all.
    """

    def __init__(self, control: ControlPlane, kube: KubeClient, tmp: Path) -> None:
        self.control = control
        self.kube = kube
        self.tmp = tmp
        self.operators: list[Operator] = []
        self.log_paths: list[Path] = []
        self.values: set[str] = set()
        self.outputs: list[tuple[str, str]] = []
        self.kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml"))
        self.kubectl("apply", "-k", str(MANIFESTS / "rbac"))
        self.service_account = control.kubeconfig_for_service_account("cbop-system", "cbop")

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True) -> str:
        config = kubeconfig or self.control.kubeconfig_path
        result = subprocess.run(
            [str(self.control.binaries.kubectl), f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout.strip()

    def secret_rbac(self, verb: str) -> None:
        """``apply`` or ``delete`` the Secrets Component's roles and bindings."""
        for name in SECRET_RBAC:
            self.kubectl(verb, "-f", str(MANIFESTS / "secrets" / name))

    def start(self, *args: str, wait: bool = True) -> Operator:
        """Start cbop, cluster-wide, as its ServiceAccount."""
        path = self.tmp / f"cbop-{len(self.log_paths)}.log"
        op = Operator(
            self.service_account, (), args=["--resync-period", "2s", *args], log_path=path
        )
        self.operators.append(op)
        self.log_paths.append(path)
        if wait:
            op.wait_ready(60)
        return op

    # -- secret values and where they must never appear ----------------------------

    def value(self, what: str) -> str:
        """Return a new secret value (random, so that a hit cannot be a coincidence)."""
        made = f"{what}-{secrets.token_hex(16)}"
        self.values.add(made)
        return made

    def printed(self, where: str, text: str) -> None:
        """Note ``text``, which cbop printed (a dry run's output), for :meth:`leaks`."""
        self.outputs.append((where, text))

    def leaks(self) -> list[str]:
        """Return where any noted value (as text, or in base64) appears: cbop's logs, the
        Events, the ConfigBundles and ClusterConfigBundles (spec and status), cbop's
        metrics and printed outputs. Empty: no leak."""
        texts = [(f"log {p.name}", p.read_text(errors="replace")) for p in self.log_paths]
        for resource in (EVENTS, CONFIGBUNDLES, CLUSTERCONFIGBUNDLES):
            items = self.kube.list(resource, None)["items"]
            texts.append((resource.plural, json.dumps(items)))
        for op in self.operators:
            if op.proc.poll() is None:
                texts.append(("metrics", op.metrics_text()))
        texts += self.outputs
        found = []
        for value in sorted(self.values):
            forms = {value, base64.b64encode(value.encode()).decode()}
            found += [f"{value} in {where}" for where, text in texts for f in forms if f in text]
        return found


def namespace(kube: KubeClient, name: str) -> str:
    kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    return name


def make_secret(
    kube: KubeClient,
    ns: str,
    name: str,
    data: Mapping[str, str],
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    type_: str | None = None,
) -> dict[str, Any]:
    """Create Secret ``ns/name`` holding ``data`` (text values)."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"metadata": meta, "data": encode(data)}
    if type_:
        body["type"] = type_
    return kube.create(SECRETS, ns, body)


def encode(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def decoded(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's data, as text."""
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def ready_condition(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    for cond in (kube.get(CONFIGBUNDLES, ns, name).get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return dict(cond)
    return {}


def wait_reason(kube: KubeClient, ns: str, name: str, reason: str) -> dict[str, Any]:
    got: dict[str, Any] = wait_for(
        lambda: (c := ready_condition(kube, ns, name)).get("reason") == reason and c,
        WAIT,
        message=f"{ns}/{name} reason {reason}",
    )
    return got


def can_i(cluster: Cluster, verb: str, resource: str, namespace: str | None) -> bool:
    where = f"--namespace={namespace}" if namespace else "--all-namespaces"
    answer = cluster.kubectl(
        "auth", "can-i", verb, resource, where, kubeconfig=cluster.service_account, check=False
    )
    return answer == "yes"


def cbop_requests(cluster: Cluster, since: float = 0.0) -> list[dict[str, Any]]:
    """cbop's Secret requests audited since ``since`` (the API server's clock, seconds)."""
    out, seen = [], set()
    path = cluster.control.audit_log_path
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (event.get("user") or {}).get("username") != CBOP or event["auditID"] in seen:
            continue
        stamp = event.get("requestReceivedTimestamp", "")
        if stamp and _seconds(stamp) < since:
            continue
        seen.add(event["auditID"])
        out.append(event)
    return out


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
