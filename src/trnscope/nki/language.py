"""``nki.language``: memory regions, dtypes, tensor creation, ``tile_size`` and the high-level wrappers.

The wrappers (``nl.load``, ``nl.add``, ``nl.exp``, ``nl.sum``, ``nl.matmul``, ...) allocate their result
tile and issue the ``nki.isa`` instructions NKI lowers them to, so the profile shows what they cost.
As in NKI 0.3+, binary ops do not broadcast (use ``nisa.tensor_scalar`` with a ``(P, 1)`` operand) and
loops are Python loops: ``nl.affine_range``/``sequential_range``/``static_range`` are ``range``.
Names of NKI 0.1 (``nl.arange``, ``nl.mgrid``, ``nl.par_dim``) raise an error naming the replacement.
"""

from __future__ import annotations

import builtins as _b
import contextlib
import warnings
from math import prod as _prod

import numpy as _np

from ..isa import Act, Alu
from . import isa as _isa
from . import trace as _trace
from .dtypes import DTYPES, as_nki_dtype
from .errors import NkiLegacyError, NkiUnsupportedError, NkiValidationError
from .ops import NkiOperator, operator
from .tensor import (ON_CHIP, PRIVATE_HBM, PSUM, REGIONS, SBUF, SHARED_HBM, DynamicSlice, NkiTensor,
                     Storage, region)

# --- dtypes and memory regions ------------------------------------------------------------------------------
bool_ = DTYPES["bool_"]
int8, int16, int32 = DTYPES["int8"], DTYPES["int16"], DTYPES["int32"]
uint8, uint16, uint32 = DTYPES["uint8"], DTYPES["uint16"], DTYPES["uint32"]
float16, float32, bfloat16, tfloat32 = DTYPES["float16"], DTYPES["float32"], DTYPES["bfloat16"], DTYPES["tfloat32"]
float8_e4m3, float8_e4m3fn, float8_e5m2 = DTYPES["float8_e4m3"], DTYPES["float8_e4m3fn"], DTYPES["float8_e5m2"]
float8_e8m0fnu = DTYPES["float8_e8m0fnu"]
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = (DTYPES["float8_e5m2_x4"], DTYPES["float8_e4m3fn_x4"],
                                                     DTYPES["float4_e2m1fn_x4"])

sbuf, psum = REGIONS[SBUF], REGIONS[PSUM]
private_hbm, shared_hbm = REGIONS[PRIVATE_HBM], REGIONS[SHARED_HBM]
hbm = private_hbm


def is_hbm(buffer) -> bool:
    return region(buffer) in (private_hbm, shared_hbm)


def is_on_chip(buffer) -> bool:
    return region(buffer) in ON_CHIP


def is_psum(buffer) -> bool:
    return region(buffer) == PSUM


def is_sbuf(buffer) -> bool:
    return region(buffer) == SBUF


def _spec():
    from ..hw import get_spec

    tr = _trace.active()
    return tr.spec if tr is not None else get_spec()


class _TileSize:
    """Hardware tile constants of the target being traced (``NEURON_PLATFORM_TARGET_OVERRIDE``)."""

    pmax = property(lambda self: _spec().partitions)
    gemm_stationary_fmax = property(lambda self: _spec().gemm_stationary_fmax)
    gemm_moving_fmax = property(lambda self: _spec().gemm_moving_fmax)
    bn_stats_fmax = property(lambda self: _spec().bn_stats_fmax)
    psum_bank_fmax = property(lambda self: _spec().psum_bank_bytes // 4)
    psum_bank_fmax_bytes = property(lambda self: _spec().psum_bank_bytes)
    psum_fmax = psum_bank_fmax  # deprecated in 0.4: the per-bank size
    psum_num_banks = property(lambda self: _spec().psum_banks)
    sbuf_size_bytes = property(lambda self: _spec().sbuf_bytes)
    sbuf_fmax_bytes = property(lambda self: _spec().sbuf_bytes_per_partition)
    sbuf_fmax = property(lambda self: _spec().sbuf_bytes_per_partition // 4)
    total_available_sbuf_size = property(lambda self: _spec().sbuf_bytes_per_partition)
    psum_min_align = property(lambda self: SBUF_ALIGN)
    sbuf_min_align = property(lambda self: SBUF_ALIGN)

    def __repr__(self) -> str:
        return f"nl.tile_size({_spec().name})"


# No alignment is published (S11 names sbuf_min_align/psum_min_align without values): trnscope places
# SBUF tiles on 64-byte boundaries, KernelBuilder's granule, and PSUM tiles on bank boundaries.
SBUF_ALIGN = 64
tile_size = _TileSize()


# --- tensor creation --------------------------------------------------------------------------------------------
def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}") from None
    if any(type(s).__name__ == "par_dim" for s in shape):
        raise NkiLegacyError("nl.par_dim is NKI 0.1; in nki.* the partition dim is dim 0 of an on-chip tensor")
    if not out or any(s < 1 for s in out):
        raise NkiValidationError(f"shape {shape!r} must have positive sizes")
    return out


def ndarray(shape, dtype, buffer=sbuf, name: str = "", address=None) -> NkiTensor:
    tr = _trace.current()
    loc = tr.location()
    if any(type(s).__name__ == "par_dim" for s in (shape if isinstance(shape, (tuple, list)) else ())):
        raise tr.error(NkiLegacyError, "nl.par_dim is NKI 0.1 (neuronxcc.nki); in nki.* the partition dim is dim 0 "
                       "of an on-chip tensor: nl.ndarray((P, F), dtype, buffer=nl.sbuf)", loc)
    shape = _shape(shape)
    dt = as_nki_dtype(dtype)
    buf = region(buffer)
    spec = tr.spec
    if buf in ON_CHIP:
        if len(shape) < 2:
            raise tr.error(NkiValidationError, f"on-chip tensors are at least 2-D (partition, free...): shape "
                           f"{shape}; use ({shape[0]}, 1) or (1, {shape[0]})", loc)
        if shape[0] > spec.partitions:
            raise tr.error(NkiValidationError, f"partition dim {shape[0]} > {spec.partitions} "
                           f"(nl.tile_size.pmax): tile the partition dim by 128", loc)
        per = _prod(shape[1:]) * dt.itemsize
        cap = spec.sbuf_bytes_per_partition if buf == SBUF else spec.psum_bytes_per_partition
        if per > cap:
            raise tr.error(NkiValidationError, f"{name or 'tensor'} {list(shape)} {dt} needs {per} bytes per "
                           f"partition; {buf.upper()} has {cap} per partition on {spec.name}", loc)
        if address is not None:
            address = _address(tr, address, shape, buf, per, loc)
    elif address is not None:
        raise tr.error(NkiValidationError, "address= places on-chip (SBUF/PSUM) tensors only", loc)
    if buf == SHARED_HBM:  # every program of an SPMD grid sees the same shared tensor
        k = tr.shared_seen
        tr.shared_seen += 1
        if k < len(tr.shared_allocs):
            st = tr.shared_allocs[k]
            if st.shape != shape or st.dtype != dt:
                raise tr.error(NkiValidationError, f"SPMD program {tr.program_id} allocates shared_hbm tensor #{k} "
                               f"as {shape} {dt}, program 0 as {st.shape} {st.dtype}", loc)
            return NkiTensor._view(st, shape, _trace.natural_strides(shape), 0, dt)
    st = tr.new_storage(Storage(buf, shape, dt, name, address, loc, None if buf in ON_CHIP else "scratch"))
    if buf == SHARED_HBM:
        tr.shared_allocs.append(st)
    return NkiTensor._view(st, shape, _trace.natural_strides(shape), 0, dt)


def _address(tr, address, shape, buf, per, loc):
    try:
        part, off = (int(a) for a in address)
    except (TypeError, ValueError):
        raise tr.error(TypeError, f"address must be (partition, free_offset_bytes), got {address!r}", loc) from None
    spec = tr.spec
    if part < 0 or part + shape[0] > spec.partitions:
        raise tr.error(NkiValidationError, f"address partition {part} + {shape[0]} partitions runs past partition "
                       f"{spec.partitions - 1}", loc)
    cap = spec.sbuf_bytes_per_partition if buf == SBUF else spec.psum_bytes_per_partition
    if off < 0 or off + per > cap:
        raise tr.error(NkiValidationError, f"address free offset {off} + {per} bytes exceeds the {cap} bytes of a "
                       f"{buf.upper()} partition", loc)
    if buf == PSUM and off % spec.psum_bank_bytes:
        raise tr.error(NkiValidationError, f"PSUM tensors start on a {spec.psum_bank_bytes}-byte bank boundary; "
                       f"free offset {off} is not", loc)
    if buf == SBUF and off % SBUF_ALIGN:
        raise tr.error(NkiValidationError, f"SBUF free offset {off} is not a multiple of {SBUF_ALIGN} bytes", loc)
    return (part, off)


def _filled(shape, value, dtype, buffer, name):
    buf = region(buffer)
    if buf not in ON_CHIP:
        raise _trace.current().error(NkiUnsupportedError, "filled HBM tensors (nl.zeros/ones/full in HBM) are not "
                                     "emulated: fill an SBUF tile and nisa.dma_copy it out")
    t = ndarray(shape, dtype, buf, name)
    _isa.memset(t, value if as_nki_dtype(dtype).is_float else int(value))
    return t


def zeros(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    return _filled(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    return _filled(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    return _filled(shape, fill_value, dtype, buffer, name)


def zeros_like(x: NkiTensor, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def ones_like(x: NkiTensor, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return ones(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def empty_like(x: NkiTensor, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def shared_constant(constant) -> NkiTensor:
    tr = _trace.current()
    loc = tr.location()
    value = _np.load(constant) if isinstance(constant, str) else _np.asarray(constant)
    dt = as_nki_dtype(value.dtype)
    shape = tuple(value.shape) or (1,)
    st = tr.new_storage(Storage(shared_hbm, shape, dt, "const", None, loc, "const", value.reshape(shape)))
    return NkiTensor._view(st, shape, _trace.natural_strides(shape), 0, dt)


def shared_identity_matrix(n, dtype=uint8, dst: NkiTensor | None = None) -> NkiTensor:
    """The n x n identity in SBUF (loaded from a constant in HBM)."""
    eye = _np.eye(int(n), dtype=as_nki_dtype(dtype).np)
    src = shared_constant(eye)
    if dst is None:
        dst = ndarray((int(n), int(n)), dtype, sbuf, "identity")
    _isa.dma_copy(dst, src)
    return dst


def rand(shape, dtype, buffer=sbuf, name: str = ""):
    raise NkiUnsupportedError("nl.rand is not emulated (no model of the device's generator yet)")


def random_seed(seed):
    raise NkiUnsupportedError("nl.random_seed is not emulated (no model of the device's generator yet)")


# --- data movement -----------------------------------------------------------------------------------------------
def _tile_shape(shape) -> tuple[int, ...]:
    return tuple(shape) if len(shape) >= 2 else (1, *shape)


def load(src: NkiTensor, dtype=None, **kwargs) -> NkiTensor:
    _no_mask("nl.load", kwargs)
    if not isinstance(src, NkiTensor) or src.on_chip:
        raise _trace.current().error(NkiValidationError, "nl.load reads an HBM tensor into a new SBUF tile")
    t = ndarray(_tile_shape(src.shape), dtype or src.dtype, sbuf)
    _isa.dma_copy(t, src if src.ndim >= 2 else src.reshape(t.shape))
    return t


def store(dst: NkiTensor, value: NkiTensor, **kwargs) -> None:
    _no_mask("nl.store", kwargs)
    if isinstance(value, NkiTensor) and value.buffer == PSUM:
        raise _trace.current().error(NkiValidationError, "nl.store cannot take a PSUM tile: copy it to SBUF first "
                                     "(nisa.tensor_copy or nl.copy)")
    _isa.dma_copy(dst, value)


def load_transpose2d(src: NkiTensor, dtype=None) -> NkiTensor:
    if dtype is not None and as_nki_dtype(dtype) != src.dtype:
        raise _trace.current().error(NkiValidationError, "nl.load_transpose2d cannot cast (DMA transpose keeps the "
                                     "dtype)")
    t = ndarray((src.shape[1], src.shape[0]), src.dtype, sbuf)
    _isa.dma_transpose(t, src)
    return t


def copy(x, dtype=None) -> NkiTensor:
    t = ndarray(x.shape, dtype or x.dtype, sbuf)
    _isa.tensor_copy(t, x)
    return t


def expand_dims(x: NkiTensor, axis: int) -> NkiTensor:
    return x.expand_dim(axis)


def broadcast_to(x: NkiTensor, shape, dtype=None) -> NkiTensor:
    tr = _trace.current()
    shape = _shape(shape)
    if len(shape) != x.ndim:
        raise tr.error(NkiValidationError, f"broadcast_to{shape}: the target must have the same rank as {x.shape}")
    if shape == x.shape and (dtype is None or as_nki_dtype(dtype) == x.dtype):
        return x
    view = x
    for d in _b.range(1, x.ndim):
        if x.shape[d] != shape[d]:
            if x.shape[d] != 1:
                raise tr.error(NkiValidationError, f"broadcast_to{shape}: dim {d} of {x.shape} is neither 1 nor "
                               f"{shape[d]}")
            view = view.broadcast(d, shape[d])
    out = ndarray(shape, dtype or x.dtype, sbuf)
    if x.shape[0] == shape[0]:
        _isa.tensor_copy(out, view)
        return out
    if x.shape[0] != 1:
        raise tr.error(NkiValidationError, f"broadcast_to{shape}: the partition dim {x.shape[0]} is neither 1 nor "
                       f"{shape[0]}")
    # across partitions: ones[1, P].T @ x[1, N] on TensorE (the documented partition broadcast)
    fp32 = str(x.dtype) in ("float32", "tfloat32")
    ones_t = ndarray((1, shape[0]), float32 if fp32 else bfloat16, sbuf)
    _isa.memset(ones_t, 1.0)
    flat = view.reshape((1, _prod(shape[1:])))
    out_flat = out.reshape((shape[0], _prod(shape[1:])))
    step = tr.spec.gemm_moving_fmax
    src = flat
    if not x.dtype.is_float or (not fp32 and str(x.dtype) not in ("bfloat16", "float16", "float8_e4m3")):
        raise tr.error(NkiValidationError, "broadcast_to across partitions needs a float tile (it is a matmul)")
    for c in _b.range(0, flat.shape[1], step):
        w = _b.min(step, flat.shape[1] - c)
        acc = ndarray((shape[0], w), float32, psum)
        _isa.nc_matmul(acc, ones_t, src[:, c:c + w], accumulate=False)
        _isa.tensor_copy(out_flat[:, c:c + w], acc)
    return out


def transpose(x: NkiTensor, dtype=None) -> NkiTensor:
    p, f = x.shape[0], _prod(x.shape[1:])
    t = ndarray((f, p), x.dtype, psum)
    _isa.nc_transpose(t, x.reshape((p, f)) if x.ndim > 2 else x)
    if dtype is not None and as_nki_dtype(dtype) != x.dtype:
        return copy(t, dtype)
    return t


def matmul(x: NkiTensor, y: NkiTensor, transpose_x: bool = False) -> NkiTensor:
    if not transpose_x:
        xt = copy(transpose(x))
    else:
        xt = x
    out = ndarray((xt.shape[1], y.shape[1]), float32, psum)
    _isa.nc_matmul(out, xt, y)
    return out


def gather_flattened(data, indices, axis=0, dtype=None):
    raise NkiUnsupportedError("nl.gather_flattened is not emulated (no model of GpSimd gathers yet)")


# --- math -------------------------------------------------------------------------------------------------------
def _no_mask(what: str, kwargs) -> None:
    if "mask" in kwargs:
        raise _isa._legacy_mask(what)
    if kwargs:
        raise TypeError(f"{what} got unexpected keyword arguments {sorted(kwargs)}")


def _is_scalar(v) -> bool:
    return not isinstance(v, NkiTensor)


def _binary_fn(name: str, alu: Alu):
    def fn(x, y, dtype=None, **kwargs):
        _no_mask(f"nl.{name}", kwargs)
        if _is_scalar(x) and _is_scalar(y):
            raise _trace.current().error(TypeError, f"nl.{name} needs at least one tensor operand")
        if _is_scalar(y) or _is_scalar(x):
            t, s, rev = (x, y, False) if _is_scalar(y) else (y, x, True)
            out = ndarray(t.shape, dtype or t.dtype, sbuf)
            _isa.tensor_scalar(out, t, OPS[name], float(s), reverse0=rev)
            return out
        if x.shape[0] != y.shape[0] or _prod(x.shape[1:]) != _prod(y.shape[1:]):
            raise _trace.current().error(
                NkiValidationError, f"nl.{name}: {x.shape} and {y.shape} differ, and nl binary ops do not broadcast "
                                    f"(NKI 0.3 known issue): for a (P, 1) operand use nisa.tensor_scalar")
        out = ndarray(x.shape, dtype or x.dtype, sbuf)
        _isa.tensor_tensor(out, x, y, OPS[name])
        return out
    fn.__name__ = name
    return fn


def _unary_fn(name: str, act: Act):
    def fn(x, dtype=None, **kwargs):
        _no_mask(f"nl.{name}", kwargs)
        out = ndarray(x.shape, dtype or x.dtype, sbuf)
        _isa.activation(out, OPS[name], x)
        return out
    fn.__name__ = name
    return fn


_BINARY = {
    "add": Alu.ADD, "subtract": Alu.SUBTRACT, "multiply": Alu.MULTIPLY, "divide": Alu.DIVIDE, "maximum": Alu.MAX,
    "minimum": Alu.MIN, "abs_max": Alu.ABS_MAX, "power": Alu.POW, "mod": Alu.MOD, "fmod": Alu.MOD,
    "equal": Alu.IS_EQUAL, "not_equal": Alu.NOT_EQUAL, "less": Alu.IS_LT, "less_equal": Alu.IS_LE,
    "greater": Alu.IS_GT, "greater_equal": Alu.IS_GE, "logical_and": Alu.LOGICAL_AND, "logical_or": Alu.LOGICAL_OR,
    "logical_xor": Alu.LOGICAL_XOR, "bitwise_and": Alu.BITWISE_AND, "bitwise_or": Alu.BITWISE_OR,
    "bitwise_xor": Alu.BITWISE_XOR, "left_shift": Alu.LEFT_SHIFT, "right_shift": Alu.RIGHT_SHIFT,
}
_UNARY = {
    "exp": Act.EXP, "log": Act.LOG, "sqrt": Act.SQRT, "rsqrt": Act.RSQRT, "tanh": Act.TANH, "sigmoid": Act.SIGMOID,
    "relu": Act.RELU, "gelu": Act.GELU, "gelu_apprx_tanh": Act.GELU_TANH, "silu": Act.SILU, "softplus": Act.SOFTPLUS,
    "erf": Act.ERF, "sin": Act.SIN, "cos": Act.COS, "tan": Act.TAN, "arctan": Act.ATAN, "abs": Act.ABS,
    "sign": Act.SIGN, "square": Act.SQUARE, "negative": Act.NEG, "reciprocal": Act.RECIPROCAL, "ceil": Act.CEIL,
    "floor": Act.FLOOR, "trunc": Act.TRUNC, "copy": Act.COPY, "logical_not": Act.LOGICAL_NOT, "invert": Act.BITWISE_NOT,
}
OPS: dict[str, NkiOperator] = {}
for _n, _alu in _BINARY.items():
    OPS[_n] = operator(_n, alu=_alu)
    OPS[_n].fn = _binary_fn(_n, _alu)
for _n, _act in _UNARY.items():
    OPS[_n] = operator(_n, act=_act)
    if _n != "copy":
        OPS[_n].fn = _unary_fn(_n, _act)
OPS["copy"].fn = copy
OPS["bypass"] = operator("bypass", alu=Alu.BYPASS, act=Act.COPY)
for _n in ("gelu_dx", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "silu_dx", "mish", "erf_dx", "prelu",
           "abs_min", "average"):
    OPS[_n] = operator(_n)
globals().update(OPS)
# activation-only: the ScalarE identity, and the ALU max used by reductions
identity = OPS["copy"]


# --- reductions ---------------------------------------------------------------------------------------------------
def _reduced_shape(x: NkiTensor, axis, keepdims: bool):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a + x.ndim if a < 0 else a for a in axes)
    if keepdims:
        shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    else:
        shape = tuple(s for d, s in enumerate(x.shape) if d not in axes)
        if len(shape) < 2:
            shape = (x.shape[0], 1)
    return axes, shape


def _reduce(name: str, alu: Alu):
    def fn(x, axis, dtype=None, keepdims=False, **kwargs):
        _no_mask(f"nl.{name}", kwargs)
        axes, shape = _reduced_shape(x, axis, keepdims)
        out = ndarray(shape, dtype or x.dtype, sbuf)
        _isa.tensor_reduce(out, OPS.get(name) or alu, x, axes, keepdims=keepdims)
        return out
    fn.__name__ = name
    return fn


sum = _reduce("add", Alu.ADD)          # noqa: A001 - NKI's names
max = _reduce("maximum", Alu.MAX)      # noqa: A001
min = _reduce("minimum", Alu.MIN)      # noqa: A001
prod = _reduce("multiply", Alu.MULTIPLY)


def mean(x, axis, dtype=None, keepdims=False, **kwargs):
    _no_mask("nl.mean", kwargs)
    axes, shape = _reduced_shape(x, axis, keepdims)
    n = _prod(x.shape[a] for a in axes)
    acc = ndarray(shape, float32, sbuf)
    _isa.tensor_reduce(acc, OPS["add"], x, axes, keepdims=keepdims)
    out = ndarray(shape, dtype or x.dtype, sbuf)
    _isa.tensor_scalar(out, acc, OPS["multiply"], 1.0 / n)
    return out


def var(x, axis, dtype=None, keepdims=False, **kwargs):
    """Population variance along the free dims, with bn_stats (per 512 elements) and bn_aggr, as NKI does."""
    _no_mask("nl.var", kwargs)
    axes, _ = _reduced_shape(x, axis, True)
    if tuple(sorted(axes)) != tuple(_b.range(1, x.ndim)):
        raise _trace.current().error(NkiUnsupportedError, "nl.var is emulated over all free dims of a tile")
    p, f = x.shape[0], _prod(x.shape[1:])
    flat = x.reshape((p, f)) if x.ndim > 2 else x
    fmax = tile_size.bn_stats_fmax
    chunks = -(-f // fmax)
    stats = ndarray((p, 6 * chunks), float32, sbuf)
    for c in _b.range(chunks):
        _isa.bn_stats(stats[:, 6 * c:6 * c + 6], flat[:, c * fmax:_b.min(f, (c + 1) * fmax)])
    mv = ndarray((p, 2), float32, sbuf)
    _isa.bn_aggr(mv, stats)
    out = ndarray((p, 1), dtype or x.dtype, sbuf)
    _isa.tensor_copy(out, mv[:, 1:2])
    return out


def all(x, axis, dtype=None, **kwargs):  # noqa: A001
    return _reduce("logical_and", Alu.LOGICAL_AND)(x, axis, dtype, **kwargs)


def softmax(x, axis=-1, dtype=None, **kwargs):
    """max (negated), exp(x - max) with its row sum on ScalarE, reciprocal and scale on VectorE."""
    _no_mask("nl.softmax", kwargs)
    if x.ndim != 2 or axis not in (-1, 1, [1], (1,)):
        raise _trace.current().error(NkiUnsupportedError, "nl.softmax is emulated on 2-D tiles along dim 1")
    p = x.shape[0]
    neg_max = ndarray((p, 1), float32, sbuf)
    _isa.tensor_reduce(neg_max, OPS["maximum"], x, 1, negate=True)
    e = ndarray(x.shape, float32, sbuf)
    total = ndarray((p, 1), float32, sbuf)
    _isa.activation(e, OPS["exp"], x, bias=neg_max, reduce_res=total)
    inv = ndarray((p, 1), float32, sbuf)
    _isa.reciprocal(inv, total)
    out = ndarray(x.shape, dtype or x.dtype, sbuf)
    _isa.tensor_scalar(out, e, OPS["multiply"], inv)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-6, dtype=None, compute_dtype=None, **kwargs):
    """x / sqrt(mean(x^2) + eps) * w: square with a row sum (ScalarE), rsqrt, two multiplies."""
    _no_mask("nl.rms_norm", kwargs)
    p = x.shape[0]
    sq = ndarray(x.shape, float32, sbuf)
    ss = ndarray((p, 1), float32, sbuf)
    _isa.activation(sq, OPS["square"], x, reduce_res=ss)
    ms = ndarray((p, 1), float32, sbuf)
    _isa.tensor_scalar(ms, ss, OPS["multiply"], 1.0 / n, op1=OPS["add"], operand1=float(epsilon))
    rstd = ndarray((p, 1), float32, sbuf)
    _isa.activation(rstd, OPS["rsqrt"], ms)
    y = ndarray(x.shape, compute_dtype or float32, sbuf)
    _isa.tensor_scalar(y, x, OPS["multiply"], rstd)
    out = ndarray(x.shape, dtype or x.dtype, sbuf)
    _isa.tensor_tensor(out, y, w, OPS["multiply"])
    return out


def where(condition, x, y, dtype=None, **kwargs):
    _no_mask("nl.where", kwargs)
    out = ndarray(y.shape, dtype or y.dtype, sbuf)
    _isa.tensor_copy(out, y)
    _isa.tensor_copy_predicated(out, x, condition)
    return out


def dropout(x, rate, dtype=None):
    raise NkiUnsupportedError("nl.dropout is not emulated (no model of the device's generator yet)")


# --- SPMD -------------------------------------------------------------------------------------------------------
def program_id(axis=0) -> int:
    tr = _trace.current()
    if not 0 <= axis < len(tr.program_id):
        raise tr.error(NkiValidationError, f"program_id({axis}): the launch grid has {len(tr.program_id)} dim(s)")
    return tr.program_id[axis]


def num_programs(axes=None) -> int:
    tr = _trace.current()
    if axes is None:
        return _prod(tr.grid)
    if isinstance(axes, int):
        return tr.grid[axes] if axes < len(tr.grid) else 1
    return _prod(tr.grid[a] for a in axes)


def program_ndim() -> int:
    tr = _trace.current()
    return 0 if tr.grid == (1,) else len(tr.grid)


# --- loops and scheduling ---------------------------------------------------------------------------------------
def affine_range(start, stop=None, step=1):
    return _b.range(start, stop, step) if stop is not None else _b.range(start)


sequential_range = static_range = affine_range


def dynamic_range(start, stop=None, step=1):
    raise _trace.current().error(NkiUnsupportedError, "nl.dynamic_range (a runtime loop) was removed in NKI 0.7 and "
                                 "is not emulated: use range() (unrolled at trace time)")


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """Runs ``body_fun(i)`` for each i at trace time: trnscope unrolls the runtime loop (see docs/nki.md)."""
    if not all_ints(lower, upper, step):
        raise _trace.current().error(NkiUnsupportedError, "nl.fori_loop with register bounds is not emulated: "
                                     "trnscope needs integer bounds to unroll the loop")
    for i in _b.range(lower, upper, step):
        body_fun(i)


def all_ints(*vals) -> bool:
    return _b.all(isinstance(v, int) and not isinstance(v, bool) for v in vals)


def while_loop(init, body_fun):
    raise _trace.current().error(NkiUnsupportedError, "nl.while_loop (a data-dependent runtime loop) is not emulated")


def ds(start, size) -> DynamicSlice:
    return DynamicSlice(start, size)


@contextlib.contextmanager
def no_reorder():
    tr = _trace.current()
    tr.no_reorder_depth += 1
    try:
        yield
    finally:
        tr.no_reorder_depth -= 1


def device_print(print_prefix, tensor) -> None:
    tr = _trace.current()
    key = "device_print"
    if key not in tr.warned:
        tr.warned.add(key)
        warnings.warn(f"{tr.where(tr.location())}: nl.device_print is not emulated (values are unknown while the "
                      f"kernel is traced); inspect the kernel's outputs instead", stacklevel=2)


# --- NKI 0.1 names: errors that name the replacement --------------------------------------------------------------
def arange(*args, **kwargs):
    tr = _trace.active()
    raise NkiLegacyError("nl.arange index grids are NKI 0.1 (neuronxcc.nki); in nki.* index with slices "
                         "(t[i*128:(i+1)*128, 0:n]) or nl.ds(start, size); run 0.1 kernels through "
                         "`import neuronxcc.nki` (trnscope's compatibility layer)",
                         tr.where(tr.location()) if tr is not None else None)


class _NoMGrid:
    """``nl.mgrid[...]``: NKI 0.1 only."""

    def _refuse(self, *args, **kwargs):
        tr = _trace.active()
        raise NkiLegacyError("nl.mgrid index grids are NKI 0.1 (neuronxcc.nki); in nki.* index with slices or "
                             "nl.ds(start, size)", tr.where(tr.location()) if tr is not None else None)

    __getitem__ = __call__ = _refuse


mgrid = _NoMGrid()


class par_dim:  # noqa: N801 - NKI 0.1's name
    def __init__(self, *args, **kwargs) -> None:
        raise NkiLegacyError("nl.par_dim is NKI 0.1 (neuronxcc.nki); in nki.* the partition dim is dim 0 of an "
                             "on-chip tensor: nl.ndarray((P, F), dtype, buffer=nl.sbuf)")


def tiles(*args, **kwargs):
    raise NkiUnsupportedError("nl.tiles / NkiTileGrid (NKI 0.7) are not emulated yet: slice the tensor in a loop")


blocks = tiles
