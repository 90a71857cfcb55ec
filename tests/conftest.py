import os
from pathlib import Path

import pytest

# The suite times the host by the model (docs/profiling.md, "Host time"): no verdict may depend on
# how fast this machine is, or how busy. Tests of real-mode behaviour switch explicitly
# (trnscope.runtime.host_time_mode("real")). Set before trnscope is imported (here and in every
# subprocess a test starts: the CLI tests' too).
os.environ.setdefault("TRNSCOPE_HOST_TIME", "modelled")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def kineto_dir() -> Path:
    d = SHARED / "data" / "kineto-traces"
    if not d.is_dir():
        pytest.skip(f"shared trace fixtures not found at {d}")
    return d


@pytest.fixture(autouse=True)
def _host_time_restored():
    """A test that switches the host-time mode leaves the suite's mode behind it."""
    yield
    import sys

    runtime = sys.modules.get("trnscope.runtime")
    if runtime is not None:
        runtime.set_host_time(os.environ["TRNSCOPE_HOST_TIME"])


@pytest.fixture(autouse=True)
def _default_instance(monkeypatch):
    """Every test starts on the default target unless it sets one."""
    from trnscope import hw

    monkeypatch.delenv("TRNSCOPE_INSTANCE", raising=False)
    saved = hw.instance._current
    hw.instance._current = None
    yield
    hw.instance._current = saved
