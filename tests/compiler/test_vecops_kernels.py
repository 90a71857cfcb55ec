"""VectorE-bound element-wise kernels and max pooling with indices brought toward their roofline
(issue 12): each is held to its measured ratio on trn1 and trn2 (the roofline report's call, a
modest margin; the kernels before this change were 2.0-4.5x), and to PyTorch on the special values
its formula has to get right, in FP32 and BF16.

The ratios come from ``python -m trnscope.device.roofline_sweep --ops <op> --out /tmp/x.json``
(docs/cost-model.md, "VectorE intermediates in PSUM")."""

from __future__ import annotations

import pytest
import torch

from trnscope.device.roofline_sweep import measure

from .helpers import DTYPES, aten, check, randint, randn

# op -> (trn1 ratio, trn2 ratio) as measured after the change; before: floor_divide 3.84 / 3.81,
# floor_divide.Scalar 3.52 / 3.45, logaddexp 3.05 / 2.99, logaddexp2 3.22 / 3.17, lerp.Tensor
# 2.78 / 2.68, lerp.Scalar 2.36 / 2.23, silu_backward 2.17 / 2.08, gelu_backward 2.05 / 1.95,
# special_entr 2.11 / 2.06, fmin/fmax 2.08 / 1.98, signbit 2.03 / 1.99, log_sigmoid_forward
# 2.03 / 1.53, max_pool2d_with_indices 3.71 / 3.72, max_pool3d_with_indices 4.40 / 4.50
MEASURED = {
    "aten::floor_divide": (2.07, 2.06),
    "aten::div.Tensor_mode": (2.07, 2.06),
    "aten::floor_divide.Scalar": (2.01, 1.97),
    "aten::div.Scalar_mode": (2.01, 1.97),
    "aten::logaddexp": (1.80, 1.77),
    "aten::logaddexp2": (1.97, 1.96),
    "aten::lerp.Tensor": (1.61, 1.46),
    "aten::lerp.Scalar": (1.74, 1.54),
    "aten::silu_backward": (1.51, 1.05),
    "aten::gelu_backward": (1.51, 1.05),
    "aten::special_entr": (1.66, 1.48),
    "aten::fmin": (1.60, 1.30),
    "aten::fmax": (1.60, 1.30),
    "aten::signbit": (1.65, 1.32),
    "aten::copysign.Tensor": (1.51, 1.14),
    "aten::log_sigmoid_forward": (1.66, 1.33),
    "aten::max_pool2d_with_indices": (1.76, 1.69),
    "aten::max_pool3d_with_indices": (2.06, 2.08),
}
MARGIN = 1.03


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("op", sorted(MEASURED))
def test_ratio_holds_to_its_measured_value(op, target):
    row = measure(op, target)
    assert row is not None and not row.error, row and row.error
    limit = MEASURED[op][0 if target == "trn1" else 1] * MARGIN
    assert row.ratio <= limit, f"{op} on {target}: {row.ratio:.2f}x of its bound, held to {limit:.2f}x"


inf, nan = float("inf"), float("nan")
SPECIAL = [nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 0.5, -7.0, 2.5, 0.25, -0.5, 1.0]


def _pairs(dtype):
    """Every special value against every other (a, b), inside random tiles of more than 128 rows."""
    a = torch.tensor([x for x in SPECIAL for _ in SPECIAL], dtype=dtype)
    b = torch.tensor([y for _ in SPECIAL for y in SPECIAL], dtype=dtype)
    ra, rb = randn(130, 70, seed=5, dtype=dtype) * 10, randn(130, 70, seed=6, dtype=dtype)
    ra.view(-1)[:a.numel()] = a
    rb.view(-1)[:b.numel()] = b
    return ra, rb


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_floor_division_special_values_and_infinite_divisors(dtype):
    """inf, NaN, +-0 and tiny divisors as ATen's div_floor gives them (a +-inf divisor: 0 or -1)."""
    a, b = _pairs(dtype)
    check(aten.floor_divide.default, a, b)
    check(aten.div.Tensor_mode, a, b, rounding_mode="floor")
    for s in (inf, -inf, nan, 0.7, -0.7, 1e-30):
        check(aten.div.Scalar_mode, a, s, rounding_mode="floor")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["fmax", "fmin", "logaddexp", "logaddexp2", "copysign.Tensor"])
def test_binary_special_values(op, dtype):
    a, b = _pairs(dtype)
    base, _, overload = op.partition(".")
    check(getattr(getattr(aten, base), overload or "default"), a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unary_special_values(dtype):
    a, _ = _pairs(dtype)
    check(aten.signbit.default, a)
    check(aten.special_entr.default, a)
    check(aten.log_sigmoid_forward.default, a)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activation_backward_special_inputs(dtype):
    """silu_dx / gelu_dx at +-inf are NaN, as ATen's formulas make them (the gradients are finite:
    ATen's own vectorised and scalar paths disagree on an infinite gradient times a tiny derivative)."""
    x, _ = _pairs(dtype)
    g = randn(130, 70, seed=9, dtype=dtype)
    check(aten.silu_backward.default, g, x)
    check(aten.gelu_backward.default, g, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weight", [0.3, -0.75, 0.5, nan])
def test_lerp_special_values(weight, dtype):
    a, b = _pairs(dtype)
    w = randn(130, 70, seed=7, dtype=dtype)
    w.view(-1)[:len(SPECIAL)] = torch.tensor(SPECIAL, dtype=dtype)
    check(aten.lerp.Scalar, a, b, weight)
    check(aten.lerp.Tensor, a, b, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fmod_by_a_scalar_uses_the_scalar_in_selfs_type(dtype):
    """ATen wraps the Scalar in self's type: a BF16 fmod divides by 0.7 rounded to BF16."""
    a, _ = _pairs(dtype)
    check(aten.fmod.Scalar, a, 0.7)
    check(aten.fmod.Scalar, a, -2.5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_max_pool_without_padding_ties_nan_and_infinities(dtype):
    """No padding: the running max starts as each window's first cell. Ties keep the first, a NaN
    wins and the last NaN of a window is reported, -inf windows report their first cell."""
    x = randint(-2, 3, (3, 50, 12, 10), seed=3).to(dtype)
    flat = x.view(-1)
    flat[::7] = nan
    flat[3::11] = -inf
    flat[5::13] = inf
    flat[1::17] = -0.0
    check(aten.max_pool2d_with_indices.default, x, [2, 2])
    check(aten.max_pool2d_with_indices.default, x, [3, 2], [2, 1])
    v = randint(-2, 3, (2, 70, 6, 8, 6), seed=4).to(dtype)
    f = v.view(-1)
    f[::5] = nan
    f[2::9] = -inf
    f[4::19] = inf
    check(aten.max_pool3d_with_indices.default, v, [2, 2, 2])
    check(aten.max_pool3d_with_indices.default, v, [2, 3, 2], [2, 2, 2], [0, 1, 0])
    check(aten.max_pool2d_with_indices.default, torch.full((1, 130, 4, 4), -inf, dtype=dtype), [2, 2])
