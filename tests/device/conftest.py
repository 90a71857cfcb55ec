"""Shared fixtures for the ``neuron`` device tests.

These tests pin the device layer's contract: every op is computed on the host, exactly as
PyTorch's CPU kernels compute it. ``import trnscope`` connects the device to the emulated runtime
(an executor of its own); each test here runs with the plain host executor instead, so that a
runtime or compiler change cannot hide or cause a device-layer failure.
"""

import pytest
import torch

import trnscope.device  # noqa: F401  (registers the neuron device)
from trnscope.device import dispatch, memory


@pytest.fixture(autouse=True)
def host_executor():
    old = dispatch.set_executor(dispatch.HostExecutor())
    try:
        yield
    finally:
        dispatch.set_executor(old)


@pytest.fixture
def small_capacity():
    """Limit the device to 1 MiB above what is allocated now; restore afterwards."""
    base = torch.neuron.memory_allocated()
    old = memory.set_capacity(base + (1 << 20))
    try:
        yield base + (1 << 20)
    finally:
        memory.set_capacity(old)
