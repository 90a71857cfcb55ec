"""Kernels written to serve PyTorch's OpInfo samples on the device (activations, math functions,
norms and other reductions, scans, flips, losses, batch/group norm, pooling).

Every lowering is checked through the interpreter against PyTorch on CPU in float32 and bfloat16
(``verify.assert_lowering_matches``), on shapes that cover more than one 128-row tile, broadcasting
and the special values each formula has to get right. ``COVERAGE`` holds one sample per registered
name for tests/compiler/test_lowering_coverage.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from .helpers import DTYPES, aten, check, rand, randint, randn

X = randn(130, 70, seed=101)
Y = randn(130, 70, seed=102)
ROW = randn(70, seed=103)
POS = rand(130, 70, seed=104, lo=0.2, hi=3.0)
PROB = rand(130, 70, seed=105, lo=0.05, hi=0.95)
SPECIAL = X.clone()
SPECIAL[0, :6] = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-30])
# the sign bit of a NaN is invisible to comparisons: copysign's samples carry signed zeros and infinities
SIGNS = SPECIAL.nan_to_num(nan=2.0, posinf=float("inf"), neginf=float("-inf"))
ZEROS = X.clone()
ZEROS[::3, ::2] = 0.0

# name -> (op, args, kwargs): one call per registered name, exercised by the coverage table too
COVERAGE: dict[str, tuple] = {}


def sample(name: str, op, *args, **kwargs) -> None:
    assert name not in COVERAGE, name
    COVERAGE[name] = (op, args, kwargs)


def _both(name: str, *args, inplace: bool = True, **kwargs) -> None:
    """The functional op and (when it exists) its in-place variant on the same arguments."""
    sample(f"aten::{name}", getattr(aten, name).default, *args, **kwargs)
    if inplace:
        sample(f"aten::{name}_", getattr(aten, name + "_").default, args[0].clone(), *args[1:], **kwargs)


# --- pointwise ----------------------------------------------------------------------------------------
_both("elu", X, 1.3, 1.05, 0.8)
_both("leaky_relu", X, 0.2)
_both("hardsigmoid", X * 4)
_both("hardswish", X * 4)
_both("softplus", X * 10, 2.0, 15.0, inplace=False)
_both("mish", X)
sample("aten::log_sigmoid_forward", aten.log_sigmoid_forward.default, X * 5)
sample("aten::glu", aten.glu.default, randn(130, 2, 35, seed=106), 1)
_both("threshold", X, 0.1, -2.0)
_both("softshrink", X, 0.4, inplace=False)
_both("hardshrink", X, 0.4, inplace=False)
_both("logit", PROB, 0.1)
_both("sinc", ZEROS)
_both("erfc", X * 2)
_both("log10", POS)
_both("frac", X * 5)
_both("sgn", ZEROS)
sample("aten::signbit", aten.signbit.default, SIGNS)
_both("nan_to_num", SPECIAL, None, 100.0, None)
sample("aten::copysign.Tensor", aten.copysign.Tensor, X, SIGNS)
sample("aten::copysign.Scalar", aten.copysign.Scalar, X, -0.0)
sample("aten::copysign_.Tensor", aten.copysign_.Tensor, X.clone(), ROW)
sample("aten::copysign_.Scalar", aten.copysign_.Scalar, X.clone(), 2.0)
_both("heaviside", ZEROS, ROW)
_both("hypot", X, ROW)
sample("aten::fmax", aten.fmax.default, SPECIAL, Y)
sample("aten::fmin", aten.fmin.default, Y, SPECIAL)
sample("aten::logaddexp", aten.logaddexp.default, X * 30, Y * 30)
sample("aten::logaddexp2", aten.logaddexp2.default, X * 30, ROW)
sample("aten::xlogy.Tensor", aten.xlogy.Tensor, ZEROS, POS)
sample("aten::xlogy.Scalar_Other", aten.xlogy.Scalar_Other, ZEROS, 2.5)
sample("aten::xlogy.Scalar_Self", aten.xlogy.Scalar_Self, 3.0, POS)
sample("aten::xlogy_.Tensor", aten.xlogy_.Tensor, ZEROS.clone(), POS)
sample("aten::xlogy_.Scalar_Other", aten.xlogy_.Scalar_Other, ZEROS.clone(), 0.5)
sample("aten::special_xlog1py", aten.special_xlog1py.default, ZEROS, POS)
sample("aten::special_xlog1py.other_scalar", aten.special_xlog1py.other_scalar, ZEROS, 1.5)
sample("aten::special_xlog1py.self_scalar", aten.special_xlog1py.self_scalar, 2.0, POS)
sample("aten::special_entr", aten.special_entr.default, ZEROS)
sample("aten::rsub.Tensor", aten.rsub.Tensor, X, ROW, alpha=2.0)
sample("aten::rsub.Scalar", aten.rsub.Scalar, X, 1.5)
sample("aten::pow.Scalar", aten.pow.Scalar, 2.0, X)
_DIVISOR = rand(70, seed=107, lo=0.3, hi=2.0) * torch.where(randn(70, seed=108) > 0, 1.0, -1.0)
sample("aten::floor_divide", aten.floor_divide.default, X * 10, _DIVISOR)
sample("aten::floor_divide.Scalar", aten.floor_divide.Scalar, X * 10, -0.7)
sample("aten::floor_divide_.Tensor", aten.floor_divide_.Tensor, X.clone() * 10, _DIVISOR)
sample("aten::floor_divide_.Scalar", aten.floor_divide_.Scalar, X.clone() * 10, 0.7)
sample("aten::div.Tensor_mode", aten.div.Tensor_mode, X * 10, _DIVISOR, rounding_mode="trunc")
sample("aten::div.Scalar_mode", aten.div.Scalar_mode, X * 10, -0.7, rounding_mode="floor")
sample("aten::div_.Tensor_mode", aten.div_.Tensor_mode, X.clone() * 10, _DIVISOR, rounding_mode="floor")
sample("aten::div_.Scalar_mode", aten.div_.Scalar_mode, X.clone() * 10, 0.7, rounding_mode=None)
sample("aten::round.decimals", aten.round.decimals, X * 100, decimals=2)
sample("aten::round_.decimals", aten.round_.decimals, X.clone() * 1000, decimals=-2)


def _cast(v, dtype):
    if isinstance(v, torch.Tensor) and v.dtype == torch.float32:
        return v.to(dtype)
    if isinstance(v, (list, tuple)):
        return type(v)(_cast(x, dtype) for x in v)
    return v


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_lowering_matches_pytorch(name, dtype):
    op, args, kwargs = COVERAGE[name]
    args = tuple(_cast(a, dtype) for a in args)
    kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
    check(op, *args, **kwargs)


# --- reductions and losses ------------------------------------------------------------------------------
LONG = randn(3000, seed=110)
SLAB = randn(4, 130, 9, seed=111)
sample("aten::linalg_vector_norm", aten.linalg_vector_norm.default, X, 2, [1])
sample("aten::norm.Scalar", aten.norm.Scalar, LONG, 3)
sample("aten::norm.ScalarOpt_dim", aten.norm.ScalarOpt_dim, SLAB, 1, [0, 2], True)
sample("aten::norm.ScalarOpt_dtype", aten.norm.ScalarOpt_dtype, X, float("inf"), dtype=torch.float32)
sample("aten::norm.ScalarOpt_dim_dtype", aten.norm.ScalarOpt_dim_dtype, X, 0, [0], False, dtype=torch.float32)
sample("aten::nansum", aten.nansum.default, SPECIAL.nan_to_num(posinf=1.0, neginf=-1.0).masked_fill(SPECIAL.isnan(), math.nan), [1])
sample("aten::count_nonzero", aten.count_nonzero.default, ZEROS, 0)
sample("aten::count_nonzero.dim_IntList", aten.count_nonzero.dim_IntList, ZEROS, [0, 1])
sample("aten::aminmax", aten.aminmax.default, SLAB, dim=1)
sample("aten::mse_loss", aten.mse_loss.default, X, Y, 1)
sample("aten::smooth_l1_loss", aten.smooth_l1_loss.default, X, Y, 0, 0.5)
sample("aten::huber_loss", aten.huber_loss.default, X, Y, 2, 0.7)
sample("aten::binary_cross_entropy", aten.binary_cross_entropy.default, PROB, rand(130, 70, seed=112, lo=0, hi=1),
       rand(130, 70, seed=113, lo=0.5, hi=1.5), 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", [2, 1, 0, 3.5, float("inf"), float("-inf")])
@pytest.mark.parametrize("dims", [None, [0], [1], [0, 2]], ids=str)
def test_vector_norm_orders_and_dims(p, dims, dtype):
    check(aten.linalg_vector_norm.default, SLAB.to(dtype), p, dims, False)


@pytest.mark.parametrize("x", [LONG, LONG[::3], randn(5, seed=114), torch.tensor(1.5)],
                         ids=["long", "strided", "short", "0-dim"])
def test_vector_norm_of_everything(x):
    check(aten.linalg_vector_norm.default, x, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("op", [aten.any.default, aten.all.default])
def test_any_all_of_non_bool(op, dtype):
    x = (ZEROS * 3).to(dtype)
    check(op, x)
    check(aten.any.dim if op is aten.any.default else aten.all.dim, x, 1)
    check(op, torch.ones(300).to(dtype))


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("op,extra", [(aten.mse_loss.default, ()), (aten.smooth_l1_loss.default, (0.0,)),
                                      (aten.smooth_l1_loss.default, (1.0,)), (aten.huber_loss.default, (2.0,))])
def test_regression_losses(op, extra, reduction):
    check(op, X, Y[:, :1], reduction, *extra)


def test_binary_cross_entropy_unweighted_and_saturated():
    x = PROB.clone()
    x[0, :2] = torch.tensor([0.0, 1.0])     # log(0) clamps at -100
    check(aten.binary_cross_entropy.default, x, rand(130, 70, seed=115, lo=0, hi=1), None, 0)


def _run_empty(op, *args, **kwargs) -> list[torch.Tensor]:
    """Interpret a call whose input has no elements (its HBM tensor is bound with one element)."""
    import numpy as np

    from trnscope import interp
    from trnscope.compiler import lower
    from trnscope.compiler.opcall import from_aten

    out = op(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    prog = lower(from_aten(op, args, kwargs, outs))
    feeds = {t.name: np.zeros(1, np.float32) for t in prog.tensors if t.name.startswith("in")}
    got = interp.run(prog, feeds)
    return [torch.from_numpy(np.asarray(got[f"out{i}"])).reshape(o.shape) for i, o in enumerate(outs)], outs


@pytest.mark.parametrize("op,args,kwargs", [
    (aten.var.correction, (None,), dict(correction=1)), (aten.var_mean.correction, (None,), dict(correction=1)),
    (aten.linalg_vector_norm.default, (2,), {}), (aten.nansum.default, (), {}),
    (aten.mse_loss.default, None, {})], ids=["var", "var_mean", "norm", "nansum", "mse_loss"])
def test_reductions_of_nothing(op, args, kwargs):
    x = torch.empty(0)
    got, expected = _run_empty(op, x, *(args if args is not None else (x,)), **kwargs)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, equal_nan=True)


# --- flip, roll, scans ----------------------------------------------------------------------------------
CUBE = randn(3, 130, 20, seed=120)
sample("aten::flip", aten.flip.default, CUBE, [0, 2])
sample("aten::roll", aten.roll.default, CUBE, [5, -3], [1, 2])
sample("aten::cumsum", aten.cumsum.default, CUBE, 1)
sample("aten::cumsum_", aten.cumsum_.default, CUBE.clone(), 2)
sample("aten::cumprod", aten.cumprod.default, rand(130, 40, seed=121, lo=0.8, hi=1.2), 1)
sample("aten::cumprod_", aten.cumprod_.default, rand(40, 130, seed=122, lo=0.8, hi=1.2), 0)
sample("aten::_logcumsumexp", aten._logcumsumexp.default, CUBE * 5, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dims", [[0], [1], [2], [1, 2], [0, 1, 2]], ids=str)
def test_flip(dims, dtype):
    check(aten.flip.default, CUBE.to(dtype), dims)
    check(aten.flip.default, CUBE.transpose(1, 2).to(dtype), dims)


@pytest.mark.parametrize("shifts,dims", [([7], [1]), ([-2, 130 + 3], [0, 1]), ([25], []), ([0], [2])], ids=str)
def test_roll(shifts, dims):
    check(aten.roll.default, CUBE, shifts, dims)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cumsum_any_dim(dim, dtype):
    check(aten.cumsum.default, CUBE.to(dtype), dim)


def test_scans_over_long_rows_carry_between_chunks():
    check(aten.cumsum.default, randn(3, 5000, seed=123), 1, rtol=1e-4, atol=1e-3)
    check(aten.cumprod.default, rand(2, 4500, seed=124, lo=0.999, hi=1.001), 1)


def test_integer_cumsum_is_exact():
    check(aten.cumsum.default, randint(-1000, 1000, (130, 50), seed=125), 1)
    check(aten.cumsum.default, randint(0, 2, (40, 30), seed=126).bool(), 0)


def test_logcumsumexp_handles_minus_infinity():
    x = CUBE * 5
    x[0, :3, :] = float("-inf")
    check(aten._logcumsumexp.default, x, 1)


# --- batch norm, group norm -----------------------------------------------------------------------------
BN_X = randn(4, 6, 5, 7, seed=130)
BN_W, BN_B = randn(6, seed=131), randn(6, seed=132)
BN_RM, BN_RV = randn(6, seed=133), rand(6, seed=134, lo=0.5, hi=2.0)
sample("aten::native_batch_norm", aten.native_batch_norm.default, BN_X, BN_W, BN_B, BN_RM.clone(), BN_RV.clone(),
       True, 0.1, 1e-5)
sample("aten::_native_batch_norm_legit", aten._native_batch_norm_legit.default, BN_X, BN_W, BN_B, BN_RM.clone(),
       BN_RV.clone(), False, 0.1, 1e-5)
sample("aten::_native_batch_norm_legit.no_stats", aten._native_batch_norm_legit.no_stats, BN_X, None, BN_B, True,
       0.1, 1e-5)
sample("aten::_batch_norm_with_update", aten._batch_norm_with_update.default, BN_X, BN_W, None, BN_RM.clone(),
       BN_RV.clone(), 0.2, 1e-3)
sample("aten::native_group_norm", aten.native_group_norm.default, randn(3, 6, 4, 5, seed=135), BN_W, BN_B, 3, 6, 20,
       3, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_many_channels(training, dtype):
    x = randn(3, 200, 33, seed=136, dtype=dtype)   # 200 channels: two partition tiles
    w, b = randn(200, seed=137, dtype=dtype), randn(200, seed=138, dtype=dtype)
    rm, rv = randn(200, seed=139, dtype=dtype), rand(200, seed=140, lo=0.5, hi=2.0, dtype=dtype)
    check(aten.native_batch_norm.default, x, w, b, rm, rv, training, 0.1, 1e-5)


def test_batch_norm_updates_running_statistics_in_place():
    from trnscope.compiler import lower
    from trnscope.compiler.opcall import from_aten
    from trnscope.compiler.verify import span_array
    from trnscope.interp.interpreter import Interpreter

    rm, rv = BN_RM.clone(), BN_RV.clone()
    args = (BN_X, BN_W, BN_B, rm.clone(), rv.clone(), True, 0.3, 1e-5)
    outs = aten.native_batch_norm.default(*args[:3], rm, rv, *args[5:])
    prog = lower(from_aten(aten.native_batch_norm.default, args, {}, outs))
    run = Interpreter(prog)
    run.run({f"in{i}": span_array(a) for i, a in enumerate(args[:5])})
    names = {t.name: i for i, t in enumerate(prog.tensors)}
    torch.testing.assert_close(torch.from_numpy(run.memory.tensor(names["in3"])), rm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.from_numpy(run.memory.tensor(names["in4"])), rv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_rows_across_groups(affine, dtype):
    x = randn(50, 8, 3, 3, seed=141, dtype=dtype)   # 200 (sample, group) rows: two tiles
    w, b = (randn(8, seed=142, dtype=dtype), randn(8, seed=143, dtype=dtype)) if affine else (None, None)
    check(aten.native_group_norm.default, x, w, b, 50, 8, 9, 4, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_rows_longer_than_sbuf_holds_twice(affine, dtype):
    """8 groups of 8 channels of 80x80 (51200 elements per row: read twice, in pieces within a channel)
    and groups of whole small channels in pieces: no SBUF overflow, PyTorch's numbers."""
    x = randn(2, 64, 80, 80, seed=144, dtype=dtype)
    w, b = (randn(64, seed=145, dtype=dtype), randn(64, seed=146, dtype=dtype)) if affine else (None, None)
    check(aten.native_group_norm.default, x, w, b, 2, 64, 6400, 8, 1e-5)
    y = randn(3, 256, 10, 10, seed=147, dtype=dtype)
    w2, b2 = (randn(256, seed=148, dtype=dtype), randn(256, seed=149, dtype=dtype)) if affine else (None, None)
    check(aten.native_group_norm.default, y, w2, b2, 3, 256, 100, 2, 1e-5)   # 128 channels of 100 per row


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_rows_laid_several_to_a_partition(weighted, reduction):
    """300 rows: 256 of them two consecutive rows to a partition (one indirect DMA picks them all),
    the 44 left one to a partition; ignored targets and class weights picked by the same index."""
    logp = torch.log_softmax(randn(300, 50, seed=153), -1)
    tgt = randint(0, 50, (300,), seed=154)
    tgt[[3, 130, 299]] = -100
    w = rand(50, seed=155, lo=0.5, hi=2.0) if weighted else None
    check(aten.nll_loss_forward.default, logp, tgt, w, reduction, -100)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("divisor", [0.5, -0.5, 1.0, -0.25, 2.0, -3.0, 0.7, 0.0, -0.0])
def test_div_floor_by_a_scalar(divisor, dtype):
    """Floor division by a Scalar: a nonzero one as the instructions' scalar operand, a zero (its own
    Program) by the tensor path; the special values (infinities give NaN, signed zeros, NaN) as
    ATen's div_floor gives them."""
    x = randn(40, 33, seed=156, dtype=dtype) * 10
    x.view(-1)[:6] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 3.0], dtype=dtype)
    check(aten.div.Scalar_mode, x, divisor, rounding_mode="floor")


def test_nll_loss_backward_over_32000_classes_in_chunks():
    logp = torch.log_softmax(randn(300, 32000, seed=150), -1)
    tgt = randint(0, 32000, (300,), seed=151)
    tgt[7] = -100
    tw = torch.tensor(299.0)
    check(aten.nll_loss_backward.default, torch.tensor(1.5), logp, tgt, None, 1, -100, tw)
    check(aten.nll_loss_backward.default, randn(300, seed=152), logp, tgt, None, 0, -100, tw)
