import pytest
import torch

from .helpers import HIDDEN, ROWS, load_tutorial


@pytest.fixture(scope="session")
def tutorial():
    return load_tutorial()


@pytest.fixture(scope="session")
def xw():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(ROWS, HIDDEN, generator=g).to("neuron"), torch.randn(HIDDEN, generator=g).to("neuron"))
