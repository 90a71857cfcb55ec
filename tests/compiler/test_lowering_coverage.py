"""Every registered lowering is exercised: the table below has one sample call per registered name.

``test_table_matches_the_registry`` fails when a lowering is registered without a sample (add one)
or a sample names no lowering (remove it). ``test_sample`` runs each sample through the lowering
and the interpreter and compares with PyTorch on CPU; the call must reach the registry under
exactly the table's name (``opcall.from_aten``, out= variants mapping to functional names). The
family test files (test_*_kernels.py) cover dtypes, layouts and edge cases in depth; this table is
the guarantee that nothing registered goes untested. Random fills cannot match PyTorch's generator:
their samples check the distribution instead.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from trnscope.compiler import OpCall, registered
from trnscope.compiler.kernels.elementwise import BINARY_ALU, UNARY_ACT, _DEFAULT_ONLY, _NO_INPLACE
from trnscope.compiler.opcall import from_aten, meta_of

from .helpers import aten, check, rand, randint, randn, run_call

# --- samples ---------------------------------------------------------------------------------------------
# name -> (op, args, kwargs, check kwargs) or a callable that runs its own check

X = randn(130, 70, seed=1)
POS = rand(130, 70, seed=2, lo=0.5, hi=2.0)
UNIT = rand(130, 70, seed=3, lo=-0.9, hi=0.9)

UNARY_INPUT = {
    "log": POS, "log2": POS, "sqrt": POS, "rsqrt": POS, "reciprocal": POS, "log1p": POS, "acosh": POS + 1.0,
    "asin": UNIT, "acos": UNIT, "atanh": UNIT, "erfinv": UNIT, "tan": UNIT,
    "bitwise_not": randint(-100, 100, (130, 70), seed=4, dtype=torch.int32),
    "logical_not": (X > 0.5).to(torch.float32),
}
NON_FINITE = X.clone()
NON_FINITE[0, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
for _n in ("isnan", "isinf", "isfinite"):
    UNARY_INPUT[_n] = NON_FINITE


def _binary_operands(name):
    if name.startswith("bitwise"):
        return randint(-1000, 1000, (130, 70), seed=5, dtype=torch.int32), \
            randint(-1000, 1000, (70,), seed=6, dtype=torch.int32), 3
    if name == "pow":
        return POS, randn(70, seed=7), 2.5
    if name in ("div", "remainder"):
        return X, rand(70, seed=8, lo=0.5, hi=2.0), 0.75
    if name.startswith("logical"):
        return (X > 0).float(), (randn(70, seed=9) > 0).float(), 0.0
    return X, randn(70, seed=10), 0.75


SAMPLES: dict[str, object] = {}


def sample(name: str, op, *args, tol: dict | None = None, **kwargs) -> None:
    assert name not in SAMPLES, name
    SAMPLES[name] = (op, args, kwargs, tol or {})


for _name in UNARY_ACT:
    _x = UNARY_INPUT.get(_name, X)
    sample(f"aten::{_name}", getattr(aten, _name).default, _x)
    if _name not in _NO_INPLACE:
        sample(f"aten::{_name}_", getattr(aten, _name + "_").default, _x.clone())

for _name in BINARY_ALU:
    _a, _b, _s = _binary_operands(_name)
    if _name == "pow":
        sample("aten::pow.Tensor_Tensor", aten.pow.Tensor_Tensor, _a, _b)
        sample("aten::pow_.Tensor", aten.pow_.Tensor, _a.clone(), _b)
    elif _name in _DEFAULT_ONLY:
        sample(f"aten::{_name}", getattr(aten, _name).default, _a, _b)
        if _DEFAULT_ONLY[_name]:
            sample(f"aten::{_name}_", getattr(aten, _name + "_").default, _a.clone(), _b)
    else:
        for _ip in ("", "_"):
            _packet = getattr(aten, _name + _ip)
            sample(f"aten::{_name}{_ip}.Tensor", _packet.Tensor, _a.clone(), _b)
            sample(f"aten::{_name}{_ip}.Scalar", _packet.Scalar, _a.clone(), _s)

for _ip in ("", "_"):
    sample(f"aten::fmod{_ip}.Tensor", getattr(aten, "fmod" + _ip).Tensor, X.clone() * 3, rand(70, seed=44, lo=-2, hi=2))
    sample(f"aten::fmod{_ip}.Scalar", getattr(aten, "fmod" + _ip).Scalar, X.clone() * 3, -0.75)
sample("aten::gelu", aten.gelu.default, X, approximate="tanh")
sample("aten::gelu_", aten.gelu_.default, X.clone())
sample("aten::pow.Tensor_Scalar", aten.pow.Tensor_Scalar, POS, 3.0)
sample("aten::pow_.Scalar", aten.pow_.Scalar, POS.clone(), -0.5)
sample("aten::where.self", aten.where.self, X > 0, X, POS)
sample("aten::where.ScalarOther", aten.where.ScalarOther, X > 0, X, 0.5)
sample("aten::where.ScalarSelf", aten.where.ScalarSelf, X > 0, 0.5, X)
sample("aten::where.Scalar", aten.where.Scalar, X > 0, 1.0, 0.0)

# reductions
sample("aten::sum", aten.sum.default, X)
sample("aten::sum.dim_IntList", aten.sum.dim_IntList, X, [1])
sample("aten::mean", aten.mean.default, X)
sample("aten::mean.dim", aten.mean.dim, X, [0], True)
sample("aten::amax", aten.amax.default, X, [1])
sample("aten::amin", aten.amin.default, X, [0])
sample("aten::max", aten.max.default, X)
sample("aten::min", aten.min.default, X)
sample("aten::max.dim", aten.max.dim, X, 1)
sample("aten::min.dim", aten.min.dim, X, 0)
sample("aten::max.other", aten.max.other, X, POS)
sample("aten::min.other", aten.min.other, X, POS)
sample("aten::argmax", aten.argmax.default, X, 1)
sample("aten::argmin", aten.argmin.default, X, 0)
sample("aten::prod", aten.prod.default, rand(60, seed=11, lo=0.8, hi=1.2))
sample("aten::prod.dim_int", aten.prod.dim_int, rand(30, 20, seed=12, lo=0.8, hi=1.2), 1)
for _m in ("var", "std"):
    sample(f"aten::{_m}", getattr(aten, _m).default, X)
    sample(f"aten::{_m}.dim", getattr(aten, _m).dim, X, [1], False, True)
    sample(f"aten::{_m}.correction", getattr(aten, _m).correction, X, [0], correction=0)
    sample(f"aten::{_m}_mean", getattr(aten, _m + "_mean").default, X)
    sample(f"aten::{_m}_mean.dim", getattr(aten, _m + "_mean").dim, X, [1])
    sample(f"aten::{_m}_mean.correction", getattr(aten, _m + "_mean").correction, X, [1], keepdim=True)

# normalisation, softmax
_W = randn(70, seed=13)
sample("aten::rms_norm", aten.rms_norm.default, X, [70], _W, 1e-6)
sample("aten::_fused_rms_norm", aten._fused_rms_norm.default, X, [70], _W, 1e-6)
sample("aten::native_layer_norm", aten.native_layer_norm.default, X, [70], _W, randn(70, seed=14), 1e-5)
_Y, _MEAN, _RSTD = aten.native_layer_norm.default(X, [70], _W, None, 1e-5)
sample("aten::native_layer_norm_backward", aten.native_layer_norm_backward.default, POS, X, [70], _MEAN, _RSTD, _W,
       None, [True, True, False])
sample("aten::_softmax", aten._softmax.default, X, 1, False)
sample("aten::_log_softmax", aten._log_softmax.default, X, 0, False)
sample("aten::softmax.int", aten.softmax.int, X, 1)
sample("aten::log_softmax.int", aten.log_softmax.int, X, 1)
sample("aten::_safe_softmax", aten._safe_softmax.default, X, 1)
sample("aten::_softmax_backward_data", aten._softmax_backward_data.default, POS, torch.softmax(X, 1), 1,
       torch.float32)
sample("aten::_log_softmax_backward_data", aten._log_softmax_backward_data.default, POS, torch.log_softmax(X, 1), 1,
       torch.float32)

# activation backward, clamps, fills, optimizer ops
sample("aten::gelu_backward", aten.gelu_backward.default, POS, X)
sample("aten::silu_backward", aten.silu_backward.default, POS, X)
sample("aten::threshold_backward", aten.threshold_backward.default, POS, X, 0.0)
sample("aten::sigmoid_backward", aten.sigmoid_backward.default, POS, torch.sigmoid(X))
sample("aten::tanh_backward", aten.tanh_backward.default, POS, torch.tanh(X))
for _c, _args in (("clamp", (-0.5, 0.5)), ("clamp_min", (0.1,)), ("clamp_max", (0.1,))):
    sample(f"aten::{_c}", getattr(aten, _c).default, X, *_args)
    sample(f"aten::{_c}_", getattr(aten, _c + "_").default, X.clone(), *_args)
    _targs = (randn(70, seed=15), randn(130, 1, seed=16) + 1)[:len(_args)]
    sample(f"aten::{_c}.Tensor", getattr(aten, _c).Tensor, X, *_targs)
    sample(f"aten::{_c}_.Tensor", getattr(aten, _c + "_").Tensor, X.clone(), *_targs)
sample("aten::hardtanh", aten.hardtanh.default, X, -0.5, 1.5)
sample("aten::hardtanh_", aten.hardtanh_.default, X.clone())
_MASK = X > 0.3
sample("aten::masked_fill.Scalar", aten.masked_fill.Scalar, X, _MASK, -3.0)
sample("aten::masked_fill_.Scalar", aten.masked_fill_.Scalar, X.clone(), _MASK, -3.0)
sample("aten::masked_fill.Tensor", aten.masked_fill.Tensor, X, _MASK, torch.tensor(2.0))
sample("aten::masked_fill_.Tensor", aten.masked_fill_.Tensor, X.clone(), _MASK, torch.tensor(2.0))
sample("aten::addcmul", aten.addcmul.default, X, POS, X, value=0.5)
sample("aten::addcmul_", aten.addcmul_.default, X.clone(), POS, X)
sample("aten::addcdiv", aten.addcdiv.default, X, X, POS, value=-0.1)
sample("aten::addcdiv_", aten.addcdiv_.default, X.clone(), X, POS)
sample("aten::lerp.Scalar", aten.lerp.Scalar, X, POS, 0.3)
sample("aten::lerp_.Scalar", aten.lerp_.Scalar, X.clone(), POS, 0.7)
sample("aten::lerp.Tensor", aten.lerp.Tensor, X, POS, rand(130, 70, seed=17, lo=0, hi=1))
sample("aten::lerp_.Tensor", aten.lerp_.Tensor, X.clone(), POS, rand(70, seed=18, lo=0, hi=1))

# matmul family
_A, _B = randn(130, 70, seed=19), randn(70, 50, seed=20)
_MM_TOL = dict(rtol=1e-4, atol=1e-4)
sample("aten::mm", aten.mm.default, _A, _B, tol=_MM_TOL)
sample("aten::addmm", aten.addmm.default, randn(50, seed=21), _A, _B, tol=_MM_TOL)
sample("aten::addmm_", aten.addmm_.default, randn(130, 50, seed=22), _A, _B, beta=0.5, tol=_MM_TOL)
sample("aten::bmm", aten.bmm.default, _A.reshape(2, 65, 70), _B.expand(2, 70, 50), tol=_MM_TOL)
sample("aten::baddbmm", aten.baddbmm.default, randn(50, seed=23), _A.reshape(2, 65, 70), _B.expand(2, 70, 50),
       tol=_MM_TOL)
sample("aten::baddbmm_", aten.baddbmm_.default, randn(2, 65, 50, seed=24), _A.reshape(2, 65, 70),
       _B.expand(2, 70, 50), alpha=2.0, tol=_MM_TOL)
sample("aten::mv", aten.mv.default, _A, randn(70, seed=25), tol=_MM_TOL)
sample("aten::addmv", aten.addmv.default, randn(130, seed=26), _A, randn(70, seed=27), tol=_MM_TOL)
sample("aten::addmv_", aten.addmv_.default, randn(130, seed=28), _A, randn(70, seed=29), tol=_MM_TOL)
sample("aten::dot", aten.dot.default, randn(70, seed=30), randn(70, seed=31), tol=_MM_TOL)

# attention
_Q = randn(1, 2, 130, 16, seed=32)
sample("aten::scaled_dot_product_attention", aten.scaled_dot_product_attention.default, _Q, _Q, _Q, is_causal=True)
sample("aten::_scaled_dot_product_flash_attention_for_cpu", aten._scaled_dot_product_flash_attention_for_cpu.default,
       _Q, _Q, _Q)

# data movement
sample("aten::copy_", aten.copy_.default, torch.empty(70, 130), X.t())
sample("aten::copy", aten.copy.default, torch.empty(130, 70, dtype=torch.bfloat16), X)
sample("aten::_to_copy", aten._to_copy.default, X, dtype=torch.bfloat16)
sample("aten::_to_copy.out", aten._to_copy.out, X, out=torch.empty(130, 70, dtype=torch.float16))
sample("aten::clone", aten.clone.default, X.t())
sample("aten::contiguous", aten.contiguous.default, X.t())
sample("aten::lift_fresh_copy", aten.lift_fresh_copy.default, X)
sample("aten::alias_copy", aten.alias_copy.default, X[:, 3:])
sample("aten::cat", aten.cat.default, [X, POS[:, :5]], 1)
sample("aten::stack", aten.stack.default, [X, POS], 2)
sample("aten::fill_.Scalar", aten.fill_.Scalar, torch.empty(130, 70), 1.5)
sample("aten::fill.Scalar", aten.fill.Scalar, X, -2.0)
sample("aten::fill_.Tensor", aten.fill_.Tensor, torch.empty(130, 70), torch.tensor(0.25))
sample("aten::fill.Tensor", aten.fill.Tensor, X, torch.tensor(3.0))
sample("aten::zero_", aten.zero_.default, torch.empty(130, 70))
sample("aten::zero", aten.zero.default, X)
sample("aten::arange", aten.arange.default, 200, dtype=torch.float32)
sample("aten::arange.start", aten.arange.start, 5, 300, dtype=torch.int64)
sample("aten::arange.start_step", aten.arange.start_step, 0.5, 40.0, 0.25, dtype=torch.float32)
sample("aten::arange.out", aten.arange.out, 150, out=torch.empty(150, dtype=torch.int32))
sample("aten::arange.start_out", aten.arange.start_out, 3, 300, 2, out=torch.empty(149, dtype=torch.int64))
sample("aten::triu", aten.triu.default, X, 1)
sample("aten::tril", aten.tril.default, X, -1)
sample("aten::triu_", aten.triu_.default, X.clone())
sample("aten::tril_", aten.tril_.default, X.clone())
_TABLE = randn(300, 24, seed=33)
sample("aten::embedding", aten.embedding.default, _TABLE, randint(0, 300, (3, 50), seed=34))
sample("aten::index_select", aten.index_select.default, _TABLE, 1, randint(0, 24, (7,), seed=35))
sample("aten::gather", aten.gather.default, X, 1, randint(0, 70, (130, 3), seed=36))
sample("aten::embedding_dense_backward", aten.embedding_dense_backward.default, randn(3, 50, 24, seed=37),
       randint(0, 300, (3, 50), seed=38), 300, 0, False)


# losses, boolean reductions, view backward (kernels/loss.py, kernels/view_backward.py)
_LOGP = torch.log_softmax(randn(130, 20, seed=40), 1)
_TGT = randint(0, 20, (130,), seed=41)
_TGT[5] = -100
_NLL, _TW = aten.nll_loss_forward.default(_LOGP, _TGT, None, 1, -100)
sample("aten::nll_loss_forward", aten.nll_loss_forward.default, _LOGP, _TGT, None, 1, -100)
sample("aten::nll_loss_backward", aten.nll_loss_backward.default, torch.tensor(1.5), _LOGP, _TGT, None, 1, -100, _TW)
_BOOL = X > -1.0
for _r in ("all", "any"):
    sample(f"aten::{_r}", getattr(aten, _r).default, _BOOL)
    sample(f"aten::{_r}.dim", getattr(aten, _r).dim, _BOOL, 1)
    sample(f"aten::{_r}.dims", getattr(aten, _r).dims, _BOOL, [0])
sample("aten::isneginf", aten.isneginf.default, NON_FINITE)
sample("aten::isposinf", aten.isposinf.default, NON_FINITE)
sample("aten::select_backward", aten.select_backward.default, randn(130, 70, seed=42), [130, 5, 70], 1, 3)
sample("aten::slice_backward", aten.slice_backward.default, randn(130, 20, seed=43), [130, 70], 1, 10, 50, 2)

# kernels written for the OpInfo sweep keep their samples beside their dtype and edge-case tests
from .test_opinfo_lowerings import COVERAGE as _OPINFO_KERNELS  # noqa: E402

for _n, (_op, _args, _kw) in _OPINFO_KERNELS.items():
    sample(_n, _op, *_args, **_kw)

from .test_scatter_pool_kernels import COVERAGE as _SCATTER_POOL_KERNELS  # noqa: E402

for _n, (_op, _args, _kw) in _SCATTER_POOL_KERNELS.items():
    sample(_n, _op, *_args, **_kw)


def _copy_from() -> None:
    src, dst = randn(40, 30, seed=39), torch.empty(40, 30, dtype=torch.bfloat16)
    call = OpCall.make("aten::_copy_from", [meta_of(src), meta_of(dst)], [meta_of(dst)], {"non_blocking": False})
    (got,) = run_call(call, [src, dst], [dst])
    torch.testing.assert_close(got, src.to(torch.bfloat16), rtol=0, atol=0)


def _random(op, name, *args, check_values: Callable[[torch.Tensor], None]) -> Callable[[], None]:
    def run() -> None:
        t = torch.empty(256, 64)
        call = from_aten(op, (t, *args), {}, (t,))
        assert call.name == name
        (got,) = run_call(call, [t], [t])
        check_values(got)
    return run


def _approx(value, expected, tol):
    assert abs(float(value) - expected) < tol, (float(value), expected)


SAMPLES["aten::_copy_from"] = _copy_from
SAMPLES["aten::_scaled_dot_product_fused_attention_overrideable"] = lambda: _attention_overrideable()


def _attention_overrideable() -> None:
    from .test_attention_kernels import test_overrideable_fused_attention_entry_point

    test_overrideable_fused_attention_entry_point()
SAMPLES["aten::uniform_"] = _random(
    aten.uniform_.default, "aten::uniform_", -2.0, 3.0,
    check_values=lambda v: (_approx(v.min() >= -2.0, 1, 0.5), _approx(v.max() < 3.0, 1, 0.5),
                            _approx(v.mean(), 0.5, 0.1)))
SAMPLES["aten::normal_"] = _random(
    aten.normal_.default, "aten::normal_", 1.0, 2.0,
    check_values=lambda v: (_approx(v.mean(), 1.0, 0.1), _approx(v.std(), 2.0, 0.1)))
SAMPLES["aten::bernoulli_.float"] = _random(
    aten.bernoulli_.float, "aten::bernoulli_.float", 0.25,
    check_values=lambda v: (_approx(((v == 0) | (v == 1)).all(), 1, 0.5), _approx(v.mean(), 0.25, 0.03)))
SAMPLES["aten::exponential_"] = _random(
    aten.exponential_.default, "aten::exponential_", 2.0,
    check_values=lambda v: (_approx((v >= 0).all(), 1, 0.5), _approx(v.mean(), 0.5, 0.05)))


# --- tests -------------------------------------------------------------------------------------------------

def test_table_matches_the_registry():
    names = set(registered())
    missing = sorted(names - set(SAMPLES))
    stale = sorted(set(SAMPLES) - names)
    assert not missing, f"registered lowerings without a sample in this table: {missing}"
    assert not stale, f"samples for names no lowering is registered under: {stale}"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample(name):
    entry = SAMPLES[name]
    if callable(entry):
        entry()
        return
    op, args, kwargs, tol = entry
    cloned = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    out = op(*cloned, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    call = from_aten(op, args, kwargs, tuple(o for o in outs if isinstance(o, torch.Tensor)))
    assert call.name == name, f"the sample reaches {call.name}, not {name}"
    check(op, *args, **tol, **kwargs)
