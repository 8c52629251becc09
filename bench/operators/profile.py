"""Summarise py-spy collapsed stacks: where an operator's samples go.

``python -m bench.operators.profile FILE.collapsed [--top 30]`` prints the share of
samples per thread, per package (inclusive: a sample counts once for every package on its
stack), and the hottest functions, inclusive and self.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def package(path: str) -> str:
    """A coarse owner of a source file (py-spy prints paths relative to sys.path).

    ``cbop/configbundle/reconcile.py`` -> ``cbop.configbundle``; ``urllib3/...`` -> ``urllib3``;
    a bare ``threading.py`` -> ``stdlib:threading``.
    """
    parts = path.split("/")
    if parts[0] == "cbop":
        return "cbop." + parts[1].removesuffix(".py") if len(parts) > 1 else "cbop"
    if len(parts) > 1:
        return parts[0]
    return "stdlib:" + Path(path).stem


def summarise(path: Path, top: int) -> str:
    total = 0
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread ")), "thread ?")
        total += count
        threads[re.sub(r"^thread \(\d+\): ", "", thread)] += count
        parsed = [m for f in frames if (m := _FRAME.match(f)) is not None]
        if parsed:
            leaves[f"{package(parsed[-1]['file'])}:{parsed[-1]['func']}"] += count
        for pkg in {package(m["file"]) for m in parsed}:
            packages[pkg] += count
        for fn in {f"{package(m['file'])}:{m['func']}" for m in parsed}:
            functions[fn] += count
    if not total:
        return "no samples"

    def block(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"  {100 * c / total:5.1f} %  {k}" for k, c in counter.most_common(top)]
        return ["", title, *rows]

    return "\n".join(
        [
            f"{total} samples",
            *block("by thread:", threads),
            *block("by package (inclusive):", packages),
            *block("by function (inclusive):", functions),
            *block("by function (self):", leaves),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(summarise(args.file, args.top))


if __name__ == "__main__":
    main()
