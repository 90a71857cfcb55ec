import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The suite times the host by the model (docs/profiling.md, "Host time"): no verdict may depend on
# how fast this machine is, or how busy. Tests of real-mode behaviour switch explicitly
# (trnscope.runtime.host_time_mode("real")). Set before trnscope is imported (here and in every
# subprocess a test starts: the CLI tests' too).
os.environ.setdefault("TRNSCOPE_HOST_TIME", "modelled")
# Kernel tests compare FP32 results with PyTorch's at FP32 tolerance, so the suite compiles FP32
# matmuls as FP32 (neuronx-cc --auto-cast=none); tests of the compiler's default (matmult: FP32
# matmuls cast to BF16) set it explicitly (trnscope.compiler.precision).
os.environ.setdefault("NEURON_CC_FLAGS", "--auto-cast=none")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# The persistent NEFF cache (trnscope.runtime.neff_cache) of this test session: a fresh directory, so
# the suite never reads a user's cache nor leaves entries in it. Set before trnscope is imported, and
# inherited by the processes the tests start (the CLI, torchrun workers).
NEFF_CACHE = tempfile.mkdtemp(prefix="trnscope-tests-neff-")
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.environ["TRNSCOPE_NEFF_CACHE_DIR"] = NEFF_CACHE
for _var in ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE", "TRNSCOPE_DISABLE_NEFF_CACHE"):
    os.environ.pop(_var, None)
atexit.register(shutil.rmtree, NEFF_CACHE, ignore_errors=True)


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
    hw.instance.reset()
    yield
    hw.instance.reset(saved)


@pytest.fixture
def one_physical_core():
    """Run on one physical NeuronCore of the target (LNC=1): tests of what a kernel emitter does on a
    core (its engines' busy share, its HBM reads, the tiling estimate) measure it unspread; LNC=2 has
    its own tests (tests/compiler/test_lnc.py)."""
    from trnscope import hw

    saved = hw.get_spec()
    hw.set_instance(hw.physical_spec(saved))
    yield
    hw.set_instance(saved)



@pytest.fixture
def fresh_caches():
    """Every in-memory cache of the process empty before the test and after it (as in a new process;
    the persistent NEFF cache on disk stays): ``trnscope.reset_caches()``."""
    import trnscope

    trnscope.reset_caches()
    yield
    trnscope.reset_caches()
