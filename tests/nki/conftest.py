"""Fixtures for the NKI tests: the examples imported as modules (``import nki`` resolving to trnscope)."""

import numpy as np
import pytest


@pytest.fixture(scope="session")
def examples():
    from trnscope.nki.casestudy import load_example

    class Examples:
        def __getattr__(self, name):
            mod = load_example(name)
            if mod is None:
                pytest.skip("examples/nki is not next to the package")
            return mod
    return Examples()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def trn1(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
