from __future__ import annotations

import pytest

from trace_testdata import FIXTURE_FILES


@pytest.fixture(scope="session")
def fixture_traces():
    """Every real trace, read once per test session."""
    from trnscope.trace import read_kineto

    return {path.name: read_kineto(path) for path in FIXTURE_FILES}
