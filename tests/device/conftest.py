"""Shared fixtures for the ``neuron`` device tests.

The ``test_device_*`` modules pin the device layer's contract: every op is computed on the host,
exactly as PyTorch's CPU kernels compute it. ``import trnscope`` connects the device to the
emulated runtime (an executor of its own); those modules use the ``host_executor`` fixture to run
with the plain host executor instead, so that a runtime or compiler change cannot hide or cause a
device-layer failure. Set ``TRNSCOPE_DEVICE_TESTS_EXECUTOR=installed`` to run them through
whatever executor ``import trnscope`` installed (the runtime's).
"""

import os

import pytest
import torch

import trnscope.device  # noqa: F401  (registers the neuron device)
from trnscope.device import dispatch, memory


@pytest.fixture
def host_executor():
    if os.environ.get("TRNSCOPE_DEVICE_TESTS_EXECUTOR") == "installed":
        yield
        return
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
