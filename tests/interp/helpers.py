"""Shared helpers for the interpreter tests: random data and comparison against torch in a dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "bfloat16": dict(rtol=1e-2, atol=1e-3)}


def rand(shape, dtype="float32", seed=0, lo=-1.0, hi=1.0) -> np.ndarray:
    """Uniform data already representable in ``dtype`` (so references see exactly what the device sees)."""
    x = np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)
    return x.astype(np_dtype(dtype))


def np_dtype(dtype: str) -> np.dtype:
    return BF16 if dtype == "bfloat16" else np.dtype(dtype)


def t32(x: np.ndarray) -> torch.Tensor:
    """A float32 torch tensor of the values (bf16 values widen exactly)."""
    return torch.from_numpy(np.asarray(x).astype(np.float32))


def as_dtype(t: torch.Tensor, dtype: str) -> np.ndarray:
    """The torch result rounded to ``dtype`` the way the device rounds its output (RNE)."""
    if dtype == "bfloat16":
        return t.to(torch.bfloat16).float().numpy()
    return t.numpy().astype(np_dtype(dtype))


def close(actual: np.ndarray, expected, dtype: str = "float32", **kw) -> None:
    tol = dict(TOL.get(dtype, dict(rtol=0, atol=0)))
    tol.update(kw)
    if isinstance(expected, torch.Tensor):
        expected = expected.numpy()
    np.testing.assert_allclose(np.asarray(actual).astype(np.float64), np.asarray(expected).astype(np.float64),
                               equal_nan=True, **tol)
