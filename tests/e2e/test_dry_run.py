"""``cbop --once --dry-run`` on the real control plane: honest verdicts, bounded diffs.

Issue 11, items 1 and 2: a dry run never calls a bundle with a pending change Ready or
in sync, its exit code tells "changes pending" (3) from "in sync" (0) and "broken" (1),
and its diff is bounded whatever the values.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, KubeClient

from .harness import Operator, bundle, ready, run_cli, set_spec, wait_for

CONF_V1 = "server {\n  listen 80;\n}\n"
CONF_V2 = "server {\n  listen 8080;\n}\n"


def _rows(stdout: str) -> dict[str, str]:
    """Table rows of ``--once`` output by bundle name (the whole row, spaces squeezed)."""
    lines = stdout.split("\n\n", 1)[0].splitlines()[1:]
    return {line.split()[1]: " ".join(line.split()) for line in lines}


def test_dry_run_of_a_pending_replace_is_pending_not_ready(
    kube: KubeClient, namespace: str, kubeconfig: str, cbop: Callable[..., Operator]
) -> None:
    """Issue 11 item 1: ``imm`` Ready, cbop stopped, ``a`` patched: the dry run read
    ``imm imm replace (dry run) Ready``, logged ``reconciled``, and exited 0."""
    op = cbop()
    spec = {"immutable": True, "data": {"a": "1", "nginx.conf": CONF_V1}}
    kube.create(CONFIGBUNDLES, namespace, bundle("imm", spec))
    wait_for(lambda: ready(kube, namespace, "imm"), 30, message="imm Ready")
    op.stop()
    before = kube.get(CONFIGMAPS, namespace, "imm")["metadata"]["resourceVersion"]
    set_spec(kube, namespace, "imm", {"immutable": True, "data": {"a": "2", "nginx.conf": CONF_V2}})

    dry = run_cli(kubeconfig, "--once", "--dry-run", "--log-level=info", f"--namespace={namespace}")
    assert dry.returncode == 3, dry.stdout + dry.stderr
    assert _rows(dry.stdout)["imm"] == f"{namespace} imm imm replace (dry run) Pending (then Ready)"
    assert "matches" not in dry.stdout + dry.stderr
    assert "reconciled" not in dry.stderr
    events = [json.loads(line)["event"] for line in dry.stderr.splitlines()]
    assert "dry run: change pending" in events
    # The multi-line value is a literal block, one diff line per line of the value.
    assert "   nginx.conf: |\n" in dry.stdout
    assert "-      listen 80;\n" in dry.stdout
    assert "+      listen 8080;\n" in dry.stdout
    assert "\\n" not in dry.stdout
    assert kube.get(CONFIGMAPS, namespace, "imm")["metadata"]["resourceVersion"] == before

    as_json = run_cli(
        kubeconfig, "--once", "--dry-run", "--output=json", f"--namespace={namespace}"
    )
    assert as_json.returncode == 3, as_json.stderr
    (row,) = json.loads(as_json.stdout)
    assert row["pending"] is True
    assert row["result"] == "Pending (then Ready)"
    assert row["message"].startswith("would replace ConfigMap imm")

    # Made for real, the same bundle is in sync: the dry run says so and exits 0.
    assert run_cli(kubeconfig, "--once", f"--namespace={namespace}").returncode == 0
    clean = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _rows(clean.stdout)["imm"] == f"{namespace} imm imm none Ready"

    # A broken bundle (its name taken by a ConfigMap cbop does not own) is 1, even when
    # another bundle has a change pending.
    kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "taken"}, "data": {"x": "y"}})
    kube.create(CONFIGBUNDLES, namespace, bundle("taken", {"data": {"a": "1"}}))
    set_spec(kube, namespace, "imm", {"immutable": True, "data": {"a": "3"}})
    broken = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    rows = _rows(broken.stdout)
    assert rows["taken"].endswith("ConfigMapConflict")
    assert rows["imm"].endswith("Pending (then Ready)")


def test_dry_run_diff_of_a_huge_one_line_value_is_bounded(
    kube: KubeClient, namespace: str, kubeconfig: str
) -> None:
    """Issue 11 item 2: one changed character in a 921,600-character line printed two
    diff lines of 921,606 characters (1.85 MB)."""
    value = "0123456789" * 92_160
    kube.create(CONFIGBUNDLES, namespace, bundle("big", {"data": {"big": value}}))
    first = run_cli(kubeconfig, "--once", f"--namespace={namespace}")
    assert first.returncode == 0, first.stdout + first.stderr
    changed = value[:600_000] + "X" + value[600_001:]
    set_spec(kube, namespace, "big", {"data": {"big": changed}})

    for output in ("table", "json"):
        dry = run_cli(
            kubeconfig,
            "--once",
            "--dry-run",
            f"--output={output}",
            "--log-level=debug",
            f"--namespace={namespace}",
        )
        assert dry.returncode == 3, dry.stdout[:2000] + dry.stderr[:2000]
        diff = json.loads(dry.stdout)[0]["diff"] if output == "json" else dry.stdout
        assert len(diff) < 4_000, len(diff)
        assert max(len(line) for line in diff.splitlines()) < 500
        plus = next(line for line in diff.splitlines() if line.startswith("+  big: "))
        minus = next(line for line in diff.splitlines() if line.startswith("-  big: "))
        assert "X" in plus
        assert "X" not in minus
        assert "bytes ...]" in plus
        # No log line carries the value either (debug level, every logger).
        assert all(len(line) < 8_000 for line in dry.stderr.splitlines()), max(
            map(len, dry.stderr.splitlines())
        )
