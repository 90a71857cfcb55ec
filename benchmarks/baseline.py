"""A baseline commit's source tree, for benchmarks that measure before and after in one run.

``baseline_tree(rev, into)`` unpacks ``src/`` of commit ``rev`` (``git archive``) under ``into``; a
benchmark then runs the same measurement in fresh processes with ``PYTHONPATH`` set to each tree.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the last commit before issue 16's changes (builder speed-up, lazy start-up, runtime scalars, the
# persistent NEFF cache)
BASELINE = "898a22b"


def baseline_tree(rev: str, into: Path) -> Path | None:
    """``src/`` of commit ``rev`` unpacked under ``into``; None when git or the commit is not there."""
    try:
        blob = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"], check=True,
                              capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"
