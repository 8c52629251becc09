"""docs/writing-a-controller.md's example controller, run as written through cbop's process.

The test takes the page's Python block as it stands, registers its definition next to
cbop's own (as one line in ``cbop.controllers`` would), and runs cbop's
:class:`cbop.manager.Manager` against the session's control plane: ``--help`` offers the
new flag, a labelled ConfigMap gets its annotation, a change updates it, resyncs write
nothing, and the process stops with exit code 0.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

from cbop.cli import build_parser, controller_settings
from cbop.controllers import CONTROLLERS
from cbop.kube import CONFIGMAPS, KubeClient
from cbop.manager import Manager, Options

from .harness import apiserver_writes, wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-controller.md"


def _example() -> types.ModuleType:
    """Import the page's one ```python block as a module."""
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    module = types.ModuleType("key_counter_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


def _annotation(kube: KubeClient, namespace: str, name: str) -> str | None:
    meta: dict[str, Any] = kube.get(CONFIGMAPS, namespace, name)["metadata"]
    return (meta.get("annotations") or {}).get("example.cbop.dev/keys")


def _patches(kube: KubeClient) -> float:
    return sum(
        n for (verb, _), n in apiserver_writes(kube, ("configmaps",)).items() if verb == "PATCH"
    )


def test_the_example_controller_runs_through_cbops_own_process(
    kubeconfig: str, namespace: str
) -> None:
    example = _example()
    definitions = (*CONTROLLERS, example.DEFINITION)
    parser = build_parser(definitions)
    args = parser.parse_args(["--key-counter", "--no-rollout"])
    settings = controller_settings(args) | {"key_counter": args.key_counter}
    assert settings["key_counter"] is True
    assert parser.parse_args([]).key_counter is False

    with KubeClient.from_config(kubeconfig=kubeconfig, qps=0) as kube:
        kube.create(
            CONFIGMAPS,
            namespace,
            {
                "metadata": {"name": "counted", "labels": {"example.cbop.dev/count-keys": "true"}},
                "data": {"a": "1", "b": "2"},
            },
        )
        kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "ignored"}, "data": {"a": "1"}})
        manager = Manager(
            KubeClient.from_config(kubeconfig=kubeconfig, qps=0),
            Options(
                namespaces=(namespace,),
                resync_period=1.0,
                metrics_bind_address="0",
                health_probe_bind_address="0",
                settings={"key_counter": True, "rollout": False, "cluster_bundles": False},
            ),
            definitions=definitions,
        )
        assert {d.name for d in manager.definitions} == {"configbundle", "key-counter"}
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(manager.run()))
        thread.start()
        try:
            wait_for(lambda: _annotation(kube, namespace, "counted") == "2", 60, message="2")
            kube.patch(CONFIGMAPS, namespace, "counted", {"data": {"c": "3"}})
            wait_for(lambda: _annotation(kube, namespace, "counted") == "3", 60, message="3")
            writes = _patches(kube)
            time.sleep(3.5)  # three resyncs of 1 s
            assert _patches(kube) - writes <= 1  # the test's own patch landed before
            assert _annotation(kube, namespace, "ignored") is None
        finally:
            manager.stop_event.set()
            thread.join(30)
        assert codes == [0]
