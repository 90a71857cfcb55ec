"""The session folder xdist workers share (as tests/explorer/conftest.py finds it)."""

from __future__ import annotations

import os
from pathlib import Path


def shared_tmp(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
