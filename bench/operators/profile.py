"""Summarise py-spy collapsed stacks: where an operator's samples go.

``python -m bench.operators.profile FILE.collapsed [--top 30]`` prints, for every thread
name and in total, the share of samples per package (inclusive: a sample counts for every
package on its stack) and the hottest functions by inclusive share.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def package(path: str) -> str:
    """A coarse owner of a source file: ``cbop.<subpackage>``, a library, or the stdlib."""
    if "/cbop/" in path:
        rest = path.split("/cbop/", 1)[1].split("/")
        return "cbop." + rest[0].removesuffix(".py") if len(rest) > 1 else "cbop"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", maxsplit=1)[0].removesuffix(".py")
    return "stdlib:" + Path(path).stem


def summarise(path: Path, top: int) -> str:
    total = 0
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread ")), "thread ?")
        name = re.sub(r"thread \(0x[0-9a-fA-F]+\)", "", thread).strip() or thread
        total += count
        threads[name] += count
        seen_pkg: set[str] = set()
        seen_fn: set[str] = set()
        for frame in frames:
            m = _FRAME.match(frame)
            if m is None:
                continue
            pkg = package(m["file"])
            fn = f"{pkg}:{m['func']}"
            if pkg not in seen_pkg:
                seen_pkg.add(pkg)
                packages[pkg] += count
            if fn not in seen_fn:
                seen_fn.add(fn)
                functions[fn] += count
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "by thread:"]
    lines += [f"  {100 * c / total:5.1f} %  {t}" for t, c in threads.most_common(top)]
    lines += ["", "by package (inclusive):"]
    lines += [f"  {100 * c / total:5.1f} %  {p}" for p, c in packages.most_common(top)]
    lines += ["", "by function (inclusive):"]
    lines += [f"  {100 * c / total:5.1f} %  {f}" for f, c in functions.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(summarise(args.file, args.top))


if __name__ == "__main__":
    main()
