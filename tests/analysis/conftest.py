from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmsnorm_profiles import rmsnorm_large_profiles, rmsnorm_profiles, torch_available
from stack_profile import (matmul_peaks_profile, source_lines_profile, training_step_profile,
                           with_stack_compiled_profile)

KINETO = Path(__file__).resolve().parents[2].parent / "shared/data/kineto-traces"


def shared_tmp(tmp_path_factory) -> Path:
    """A folder all pytest-xdist workers of this run share (the run's base temp otherwise)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def rmsnorm(tmp_path_factory) -> dict[str, Path]:
    """Profile directories of the RMSNorm variants: naive, fused (and compiled when it records)."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return rmsnorm_profiles(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def rmsnorm_large(tmp_path_factory) -> dict[str, Path]:
    """The naive RMSNorm profiled at a shape whose kernels are HBM-bound (device-bound overall)."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return rmsnorm_large_profiles(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def with_stack_profile(tmp_path_factory) -> Path:
    """A torch.compile(backend="neuron") profile recorded with with_stack=True (3 steps)."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return with_stack_compiled_profile(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def train_profile(tmp_path_factory) -> Path:
    """nn.Linear(1024, 1024) forward, backward and an SGD step, twice, on the emulated device."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return training_step_profile(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def peaks_profile(tmp_path_factory) -> Path:
    """An FP32 mm with auto-cast off, a BF16 mm and an FP32 mm auto-cast to BF16 (stack_profile.PEAKS_SCRIPT)."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return matmul_peaks_profile(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def kineto_fixture():
    def path(prefix: str) -> Path:
        if not KINETO.is_dir():
            pytest.skip(f"shared Kineto fixtures not found at {KINETO}")
        matches = sorted(KINETO.glob(f"{prefix}*"))
        if not matches:
            pytest.skip(f"no fixture {prefix}* in {KINETO}")
        return matches[0]

    return path


@pytest.fixture(scope="session")
def lines_profile(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """Eager ops, a compiled graph and an NKI kernel recorded with with_stack=True from a script
    file, and the line of each marker in it (stack_profile.LINES_SCRIPT)."""
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return source_lines_profile(shared_tmp(tmp_path_factory))
