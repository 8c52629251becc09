"""The README's flag summary names exactly the flags ``cbop --help`` offers."""

from __future__ import annotations

import re
from pathlib import Path

from cbop.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _synopsis() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"```text\n(cbop \[.*?)```", text, re.DOTALL)
    assert match, "README has no ```text block starting with `cbop [`"
    return match.group(1)


def test_flag_summary_matches_the_parser() -> None:
    offered = {
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help" and not option.startswith("--no-")
    }
    shown = {"--" + name for name in re.findall(r"\[--(?:\[no-\])?([a-z][a-z-]*)", _synopsis())}
    assert shown == offered, (
        f"missing from the README: {sorted(offered - shown)}; "
        f"not offered by cbop: {sorted(shown - offered)}"
    )
