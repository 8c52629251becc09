"""Earlier releases of this repository, checked out for the upgrade tests.

:func:`release_tree` extracts a tagged release (``v0.1.0``, ``v0.2.0``) from the
repository's own history with ``git archive`` into a directory: its CRD, manifests and
chart are what a user of that release installed, and its ``src`` runs that release's
operator (with ``PYTHONPATH`` pointing there, on this checkout's virtualenv: neither
release needs a dependency this one lacks). The tag is made at the release; its commit
is named too, so a clone whose tags were not fetched still has it.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Final

REPO = Path(__file__).resolve().parents[2]
#: Release tag -> the commit it names.
RELEASES: Final = {"v0.1.0": "fa12118", "v0.2.0": "3987185"}


def release_tree(tag: str, dest: Path) -> Path:
    """Extract release ``tag`` into ``dest`` (created) and return it.

    Raises:
        AssertionError: neither the tag nor its commit is in this clone's history
            (a shallow clone): the upgrade tests need the earlier release.
    """
    for ref in (tag, RELEASES[tag]):
        result = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", ref],
            capture_output=True,
            check=False,
            timeout=120,
        )
        if result.returncode == 0:
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(result.stdout)) as archive:
                archive.extractall(dest, filter="data")
            return dest
    raise AssertionError(
        f"release {tag} ({RELEASES[tag]}) is not in this clone's history: "
        f"{result.stderr.decode(errors='replace').strip()} (fetch the tags or unshallow)"
    )
