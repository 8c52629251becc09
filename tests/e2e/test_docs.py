"""README.md and docs/*.md, as a new user reads them: every example works.

The rule for fenced code blocks, which these tests keep:

* Every block names its kind: ``yaml``, ``sh``, ``console``, ``python`` or ``text``.
* ``yaml``: each document is applied with a server-side dry run (``kubectl apply
  --dry-run=server``), so the API server's validation (CRD schema, base64, CEL) judges it.
* ``sh``: every line is a command, run in order; ``console``: lines starting with ``$ ``
  are commands, run in order, the others are output and only illustrate; ``python``:
  the block is run as a program. Each must exit 0.
* ``text``: illustration (a synopsis, a directory layout); never run.
* A runnable block that cannot run here is preceded by ``<!-- not run: REASON -->``.

Commands run from the repository root against a control plane of this module's own
(they install and delete things), with its kubeconfig in ``KUBECONFIG``, its kubectl
first on ``PATH`` and ``DEV_CLUSTER_DIR`` in a temporary directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from cbop_testing.envtest import ControlPlane, find_binaries

from .harness import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KINDS = {"yaml", "sh", "console", "python", "text"}
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.*?) ?-->$")
NAMESPACE = "docs-examples"


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts, its kind, its text, why it is not run."""

    path: Path
    line: int
    kind: str
    text: str
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[str]:
        if self.kind == "console":
            return [line[2:] for line in self.text.splitlines() if line.startswith("$ ")]
        lines = (re.sub(r"\s+#.*$", "", line).strip() for line in self.text.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = [line for line in lines[:i] if line.strip()]
        marker = NOT_RUN.match(before[-1]) if before else None
        text = "\n".join(lines[i + 1 : end])
        found.append(Block(path, i + 1, match.group(1), text, marker and marker["reason"]))
        i = end + 1
    return found


BLOCKS = [block for path in DOCS for block in _blocks(path)]
RUNNABLE = [b for b in BLOCKS if b.kind not in ("text", "yaml") and b.not_run is None]
YAML = [b for b in BLOCKS if b.kind == "yaml" and b.not_run is None]


def test_every_block_follows_the_rule() -> None:
    assert BLOCKS, "no code blocks found"
    for block in BLOCKS:
        assert block.kind in KINDS, f"{block.id}: a fenced block must say its kind ({KINDS})"
        if block.not_run is not None:
            assert block.kind != "text", f"{block.id}: text blocks are never run anyway"
            assert block.not_run, f"{block.id}: <!-- not run: --> needs a reason"
        if block.kind in ("sh", "console") and block.not_run is None:
            assert block.commands(), f"{block.id}: no command in a {block.kind} block"
    for path in DOCS:
        markers = [ln for ln in path.read_text(encoding="utf-8").splitlines() if "not run:" in ln]
        used = [b for b in BLOCKS if b.path == path and b.not_run is not None]
        assert len(markers) == len(used), f"{path.name}: a not-run marker not before a block"


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A control plane of this module's own, with the CRD and the namespace installed."""
    binaries = find_binaries()
    control = ControlPlane(binaries=binaries, workdir=tmp_path_factory.mktemp("docs-cp"))
    control.start(timeout=120)
    try:
        env = {
            **os.environ,
            "KUBECONFIG": str(control.kubeconfig_path),
            "PATH": f"{binaries.kubectl.parent}{os.pathsep}{os.environ['PATH']}",
            "DEV_CLUSTER_DIR": str(tmp_path_factory.mktemp("docs-dev-cluster")),
        }
        env.pop("REUSE_CLUSTER", None)
        for command in (
            f"kubectl create namespace {NAMESPACE}",
            "kubectl apply -f manifests/crd/",
            "hack/wait-crds.sh",
        ):
            _run(command, env)
        yield env
    finally:
        control.stop()


def _run(command: str, env: dict[str, str], stdin: str | None = None) -> str:
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, (
        f"`{command}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


@pytest.mark.parametrize("block", YAML, ids=[b.id for b in YAML])
def test_yaml_block_is_accepted_by_the_api_server(block: Block, docs_env: dict[str, str]) -> None:
    documents = [d for d in yaml.safe_load_all(block.text) if d]
    assert documents
    for doc in documents:
        if doc.get("metadata", {}).get("namespace"):
            doc["metadata"]["namespace"] = NAMESPACE
    _run("kubectl apply --dry-run=server -f -", docs_env, yaml.safe_dump_all(documents))


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_commands_shown_run(block: Block, docs_env: dict[str, str]) -> None:
    if block.kind == "python":
        _run(f"{sys.executable} -", docs_env, block.text)
        return
    try:
        for command in block.commands():
            _run(command, docs_env)
    finally:
        # A block that starts the developer cluster and fails before it stops it.
        state_dir = docs_env["DEV_CLUSTER_DIR"]
        subprocess.run(
            [sys.executable, "-m", "cbop_testing.envtest", "--state-dir", state_dir, "stop"],
            capture_output=True,
            timeout=120,
            check=False,
        )


def test_bundle_over_256_kib_needs_server_side_apply(
    docs_env: dict[str, str], tmp_path: Path
) -> None:
    # What the README says under "Bundles over 256 KiB".
    big = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": "big", "namespace": NAMESPACE},
        "spec": {"data": {"blob": "x" * 300_000}},
    }
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big), encoding="utf-8")
    plain = subprocess.run(
        ["kubectl", "apply", "-f", str(path)],
        env=docs_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert plain.returncode != 0
    assert "metadata.annotations: Too long" in plain.stderr, plain.stderr
    _run(f"kubectl apply --server-side -f {path}", docs_env)


def test_apf_example_classifies_cbop_requests(docs_env: dict[str, str]) -> None:
    """docs/apf.md's FlowSchemas, applied for real, take cbop's requests: its Lease
    requests to ``leader-election``, everything else to its own priority level."""
    (block,) = [
        b for b in BLOCKS if b.path.name == "apf.md" and b.kind == "yaml" and "FlowSchema" in b.text
    ]
    _run("kubectl apply -f -", docs_env, block.text)
    try:
        as_cbop = "--as=system:serviceaccount:cbop-system:cbop"
        expected = {
            ("cbop", "cbop"): f"kubectl get configmaps -n {NAMESPACE} {as_cbop}",
            ("cbop-leader-election", "leader-election"): (
                f"kubectl get leases -n cbop-system cbop-leader {as_cbop}"
            ),
        }
        for (flow_schema, level), command in expected.items():
            # The ServiceAccount has no RBAC here: the request is classified (and
            # dispatched) first, then refused. Classification is what is checked.
            for _ in range(3):
                subprocess.run(
                    ["bash", "-c", command],
                    env=docs_env,
                    capture_output=True,
                    timeout=60,
                    check=False,
                )
            metrics = _run("kubectl get --raw /metrics", docs_env)
            dispatched = re.compile(
                r"^apiserver_flowcontrol_dispatched_requests_total\{"
                rf'(?=[^}}]*flow_schema="{flow_schema}")(?=[^}}]*priority_level="{level}")'
                r"[^}]*\} (\S+)$",
                re.MULTILINE,
            )
            counts = [float(v) for v in dispatched.findall(metrics)]
            assert sum(counts) >= 3, f"{flow_schema} -> {level}: {counts}"
    finally:
        _run("kubectl delete --ignore-not-found -f -", docs_env, block.text)
