"""Flag precedence: command line over ``CBOP_*`` environment over defaults, for every flag.

The table is built from the parser's own actions, so a flag added later is covered
without touching this file (issue 11, item 5).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cbop.cli import _Repeatable, build_parser, env_name, parse_bool


@dataclass(frozen=True)
class Case:
    """One flag and three distinct settings of it."""

    option: str
    dest: str
    env_text: str
    env_value: Any
    cli_args: tuple[str, ...]
    cli_value: Any


def _actions() -> list[argparse.Action]:
    return [
        a
        for a in build_parser()._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction | argparse._VersionAction)
    ]


def _case(action: argparse.Action) -> Case:
    """Pick an environment value unlike the default and a command-line value unlike it."""
    option = action.option_strings[0]
    default = action.default
    if isinstance(action, argparse.BooleanOptionalAction):
        env = not default
        return Case(option, action.dest, str(env).lower(), env, (_flip(option, env),), default)
    if isinstance(action, _Repeatable):
        return Case(option, action.dest, "e1,e2", ["e1", "e2"], (f"{option}=c1",), ["c1"])
    convert = action.type if callable(action.type) else str
    candidates = [str(c) for c in action.choices] if action.choices else ["7", "9", "11"]
    env_text = next(c for c in candidates if convert(c) != default)
    cli_text = next(c for c in candidates if c != env_text)  # may be the default
    return Case(
        option, action.dest, env_text, convert(env_text), (option, cli_text), convert(cli_text)
    )


def _flip(option: str, env: bool) -> str:
    """The command-line form that undoes an environment setting ``env``."""
    return f"--no-{option[2:]}" if env else option


CASES = [_case(a) for a in _actions()]


@pytest.mark.parametrize("case", CASES, ids=[c.option for c in CASES])
def test_flag_beats_environment_beats_default(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in __import__("os").environ if v.startswith("CBOP_")]:
        monkeypatch.delenv(var)
    default = getattr(build_parser().parse_args([]), case.dest)
    assert default != case.env_value != case.cli_value

    monkeypatch.setenv(env_name(case.option), case.env_text)
    assert getattr(build_parser().parse_args([]), case.dest) == case.env_value
    assert getattr(build_parser().parse_args(list(case.cli_args)), case.dest) == case.cli_value

    monkeypatch.delenv(env_name(case.option))
    assert getattr(build_parser().parse_args(list(case.cli_args)), case.dest) == case.cli_value


def test_every_flag_has_a_case_and_every_boolean_a_no_form() -> None:
    options = {c.option for c in CASES}
    assert {"--namespace", "--leader-elect", "--once", "--dry-run", "--kube-api-qps"} <= options
    for action in _actions():
        if action.nargs == 0:
            assert isinstance(action, argparse.BooleanOptionalAction), action.option_strings
            assert f"--no-{action.option_strings[0][2:]}" in action.option_strings


def test_issue_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """CBOP_NAMESPACE=a with --namespace b watched ['a', 'b']; CBOP_LEADER_ELECT=true
    could not be switched off."""
    monkeypatch.setenv("CBOP_NAMESPACE", "a")
    monkeypatch.setenv("CBOP_LEADER_ELECT", "true")
    args = build_parser().parse_args(["--namespace", "b", "--namespace=c", "--no-leader-elect"])
    assert args.namespaces == ["b", "c"]
    assert args.leader_elect is False
    assert build_parser().parse_args([]).namespaces == ["a"]


@pytest.mark.parametrize(("text", "value"), [("TRUE", True), ("1", True), ("off", False)])
def test_parse_bool(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_invalid_environment_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var, text in [
        ("CBOP_LEADER_ELECT", "maybe"),
        ("CBOP_WORKERS", "0"),
        ("CBOP_LOG_FORMAT", "xml"),
    ]:
        monkeypatch.setenv(var, text)
        with pytest.raises(SystemExit) as exit_:
            build_parser()
        assert exit_.value.code == 2
        assert var in capsys.readouterr().err
        monkeypatch.delenv(var)


def test_effective_configuration_is_logged_at_debug(tmp_path: Path) -> None:
    """Started with debug logs, cbop's first line is its configuration, and the
    environment's values are not repeated (only the names of CBOP_* variables)."""
    kubeconfig = tmp_path / "none"
    proc = subprocess.run(
        [sys.executable, "-m", "cbop", "--once", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "CBOP_LOG_LEVEL": "debug",
            "CBOP_LOG_FORMAT": "json",
            "CBOP_NAMESPACE": "from-env",
            "PATH": "/usr/bin:/bin",
        },
    )
    first = json.loads(proc.stderr.splitlines()[0])
    assert first["event"] == "effective configuration"
    assert first["namespaces"] == ["from-env"]
    assert first["workers"] == 4
    assert first["kubeconfig"] == str(kubeconfig)
    assert first["environment"] == ["CBOP_LOG_FORMAT", "CBOP_LOG_LEVEL", "CBOP_NAMESPACE"]
    assert proc.returncode == 2
