"""The interpreter's vectorised erf/erfc/erfinv against the C library (math.erf/math.erfc) and torch."""

from __future__ import annotations

import math

import numpy as np
import torch

from trnscope.interp import erf, erfc, erfinv


def _rel(a, b):
    return np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))


def test_erf_erfc_match_math_to_1e12():
    x = np.concatenate([np.linspace(-27, 27, 54001), np.geomspace(1e-300, 1, 300), [0.0, -0.0, 1.999999, 2.0]])
    assert _rel(erf(x), np.array([math.erf(v) for v in x])) < 1e-12
    assert _rel(erfc(x), np.array([math.erfc(v) for v in x])) < 1e-12


def test_erf_special_values():
    out = erf(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0]))
    assert np.isnan(out[0]) and list(out[1:3]) == [1.0, -1.0] and out[3] == 0 and np.signbit(out[4])
    out = erfc(np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(out[0]) and list(out[1:]) == [0.0, 2.0]


def test_erfinv_inverts_erf():
    y = np.concatenate([np.linspace(-1, 1, 20001)[1:-1], [1 - 1e-12, -1 + 1e-15, 1e-300, 0.0]])
    x = erfinv(y)
    assert _rel(x, torch.erfinv(torch.from_numpy(y)).numpy()) < 1e-12
    assert _rel(erf(x), y) < 1e-14
    ends = erfinv(np.array([1.0, -1.0, 1.5, -2.0, np.nan]))
    assert list(ends[:2]) == [np.inf, -np.inf] and np.isnan(ends[2:]).all()
