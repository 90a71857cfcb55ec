import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def kineto_dir() -> Path:
    d = SHARED / "data" / "kineto-traces"
    if not d.is_dir():
        pytest.skip(f"shared trace fixtures not found at {d}")
    return d


@pytest.fixture(autouse=True)
def _default_instance(monkeypatch):
    """Every test starts on the default target unless it sets one."""
    from trnscope import hw

    monkeypatch.delenv("TRNSCOPE_INSTANCE", raising=False)
    saved = hw.instance._current
    hw.instance._current = None
    yield
    hw.instance._current = saved
