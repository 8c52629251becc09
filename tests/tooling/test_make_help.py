"""`make help` lists every target of the Makefile, each once, with its one-line text."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A rule line: `name:` or `name: prerequisites`, not a variable assignment (`:=`).
RULE = re.compile(r"^([a-zA-Z0-9][a-zA-Z0-9_-]*):(?!=)", re.MULTILINE)


def test_help_lists_every_target_once() -> None:
    targets = RULE.findall((REPO / "Makefile").read_text(encoding="utf-8"))
    result = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = {}
    for line in result.stdout.splitlines():
        name, _, text = line.strip().partition(" ")
        assert name not in listed, f"{name} listed twice"
        listed[name] = text.strip()
    assert sorted(listed) == sorted(targets)
    assert all(listed.values()), f"targets without a description: {listed}"
