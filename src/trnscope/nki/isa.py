"""``nki.isa``: one function per NeuronCore instruction, destination first (NKI 0.3+).

Each call checks its operands against the hardware rules of the target (the checks Neuron's compiler
and simulator make: buffers, shapes, dtypes, tile limits) and records an :class:`~.trace.Op`; the
error names the kernel source line. Calls return an :class:`NkiInstruction` whose ``depends_on``
adds a scheduling edge. Instructions trnscope has no model for raise
:class:`~.errors.NkiUnsupportedError` saying so, instead of computing something else.
"""

from __future__ import annotations

import enum
import functools
from math import prod

from ..isa import BITVEC_ALU, Act, Alu
from . import trace as _trace
from .errors import NkiLegacyError, NkiUnsupportedError, NkiValidationError
from .ops import NkiOperator
from .tensor import PSUM, SBUF, NkiTensor

__all__ = [
    "engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine", "NkiInstruction",
    "NkiValidationError", "get_nc_version", "get_nc_sub_version", "dma_copy", "dma_transpose", "tensor_copy",
    "memset", "tensor_copy_predicated", "nc_matmul", "nc_transpose", "activation", "activation_reduce",
    "tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_partition_reduce", "tensor_tensor_scan", "iota",
    "affine_select", "bn_stats", "bn_aggr", "reciprocal", "exponential",
]


class engine(enum.Enum):
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)


class reduce_cmd(enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):
    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(enum.Enum):
    dma = 1
    gpsimd_dma = 2


class NkiInstruction:
    """Handle of a traced instruction; ``c.depends_on(a, b)`` makes ``c`` wait for ``a`` and ``b``."""

    __slots__ = ("op",)

    def __init__(self, op) -> None:
        self.op = op

    def depends_on(self, *producers: "NkiInstruction") -> "NkiInstruction":
        after = self.op.args.setdefault("after", [])
        for p in producers:
            if not isinstance(p, NkiInstruction):
                raise TypeError(f"depends_on takes instructions returned by nki.isa calls, not {type(p).__name__}")
            if p.op.index >= self.op.index:
                raise NkiValidationError("depends_on: the producer must come before the consumer in program order")
            after.append(p.op.index)
        return self


# --- helpers --------------------------------------------------------------------------------------------

def _api(fn):
    """Turn a failed argument binding that looks like NKI 0.1 usage into an error naming the fix."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "mask" in kwargs:
            raise _legacy_mask(f"nisa.{name}")
        try:
            return fn(*args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:  # binding failed
                if "dst" not in kwargs and (not args or not isinstance(args[0], NkiTensor) or _looks_01(fn, args,
                                                                                                        kwargs)):
                    raise NkiLegacyError(f"nisa.{name}(...) without a destination returns a tile in NKI 0.1 "
                                         f"(neuronxcc.nki); in nki.isa the destination comes first and nothing is "
                                         f"returned: dst = nl.ndarray(shape, dtype, buffer=nl.sbuf); "
                                         f"nisa.{name}(dst, ...)") from None
            raise
    return call


def _looks_01(fn, args, kwargs) -> bool:
    import inspect

    try:
        inspect.signature(fn).bind(None, *args, **kwargs)
    except TypeError:
        return False
    return True


def _legacy_mask(what: str) -> NkiLegacyError:
    tr = _trace.active()
    return NkiLegacyError(f"{what}(..., mask=...) is NKI 0.1 (neuronxcc.nki); in nki.* slice the operands to the "
                          f"valid region instead (e.g. t[0:rows, :] with rows = min(P, n - start))",
                          tr.where(tr.location()) if tr is not None else None)


def _tensor(x, what: str) -> NkiTensor:
    if not isinstance(x, NkiTensor):
        raise _trace.current().error(TypeError, f"{what} must be an NkiTensor, got {type(x).__name__}")
    return x


def _on_chip(t: NkiTensor, what: str, buffers=(SBUF, PSUM)) -> NkiTensor:
    _tensor(t, what)
    if t.storage.buffer not in buffers:
        names = " or ".join(b.upper() for b in buffers)
        raise _trace.current().error(NkiValidationError, f"{what} must be in {names}, not {t.buffer}")
    return t


def _pf(t: NkiTensor) -> tuple[int, int]:
    return t.shape[0], prod(t.shape[1:]) if len(t.shape) > 1 else 1


def _same_layout(a: NkiTensor, b: NkiTensor, an: str, bn: str) -> None:
    if _pf(a) != _pf(b):
        raise _trace.current().error(
            NkiValidationError, f"{an} {a.shape} and {bn} {b.shape} must have the same partitions and elements per "
                                f"partition ({_pf(a)} vs {_pf(b)})")


def _pmax(t: NkiTensor, what: str) -> None:
    spec = _trace.current().spec
    if t.on_chip and t.shape[0] > spec.partitions:
        raise _trace.current().error(NkiValidationError, f"{what} spans {t.shape[0]} partitions; the partition dim "
                                     f"is at most {spec.partitions} (nl.tile_size.pmax): tile it by 128")


def _alu(op, what: str) -> Alu:
    if isinstance(op, NkiOperator) and op.alu is not None:
        return op.alu
    if isinstance(op, Alu):
        return op
    raise _trace.current().error(NkiValidationError, f"{what}={op!r} is not an ALU operator (nl.add, nl.subtract, "
                                 f"nl.multiply, nl.maximum, nl.minimum, comparisons, bitwise ops)")


def _act(op, what: str = "op") -> Act:
    if isinstance(op, NkiOperator) and op.act is not None:
        return op.act
    if isinstance(op, Act):
        return op
    if isinstance(op, NkiOperator):
        raise _trace.current().error(NkiUnsupportedError, f"{what}=nl.{op.name} is not an activation function "
                                     f"trnscope models on ScalarE (see docs/nki.md)")
    raise _trace.current().error(NkiValidationError, f"{what}={op!r} is not an activation function (nl.exp, nl.tanh, "
                                 f"nl.copy, ...)")


def _scalar_operand(x, data: NkiTensor, what: str):
    """An immediate, or a [P, 1] on-chip vector broadcast along the free dims."""
    if isinstance(x, NkiTensor):
        _on_chip(x, what)
        if x.shape[0] != data.shape[0] or prod(x.shape[1:]) != 1:
            raise _trace.current().error(NkiValidationError, f"{what} must be a scalar or a ({data.shape[0]}, 1) "
                                         f"vector, got shape {x.shape}")
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        if hasattr(x, "item"):
            return float(x.item())
        raise _trace.current().error(TypeError, f"{what} must be a number or an NkiTensor, got {type(x).__name__}")
    return float(x)


def _record(kind: str, reads, writes, **args) -> NkiInstruction:
    tr = _trace.current()
    loc = tr.location()
    op = tr.record(kind, loc, tuple(reads), tuple(writes), args)
    if tr.no_reorder_depth and tr.ops and len(tr.ops) > 1:
        args.setdefault("after", []).append(op.index - 1)
    return NkiInstruction(op)


def _engine(e, allowed: tuple, default, what: str):
    if e is None or e is engine.unknown:
        return default
    if not isinstance(e, engine):
        raise _trace.current().error(TypeError, f"engine must be an nki.isa.engine, got {e!r} (raw ints were "
                                     f"rejected in NKI 0.3)")
    if e not in allowed:
        raise _trace.current().error(NkiValidationError, f"{what} cannot run on engine.{e.name} (allowed: "
                                     f"{', '.join('engine.' + a.name for a in allowed)})")
    return e


def _target_gen() -> int:
    return 2 if _trace.current().spec.name == "trn1" else 3


# --- target queries -------------------------------------------------------------------------------------

def get_nc_version() -> nc_version:
    from ..hw import get_spec

    tr = _trace.active()
    spec = tr.spec if tr is not None else get_spec()
    return nc_version.gen2 if spec.name == "trn1" else nc_version.gen3


def get_nc_sub_version() -> int:
    return 0


# --- data movement --------------------------------------------------------------------------------------

@_api
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=engine.unknown,
             name=None):
    tr = _trace.current()
    dst, src = _tensor(dst, "dst"), _tensor(src, "src")
    if src.buffer == PSUM:
        raise tr.error(NkiValidationError, "dma_copy cannot read PSUM (since NKI 0.3): copy the PSUM tile to SBUF "
                       "with nisa.tensor_copy first")
    if dst.buffer == PSUM:
        raise tr.error(NkiValidationError, "dma_copy cannot write PSUM: DMA moves data between HBM and SBUF")
    if src.indirect_index is None and dst.indirect_index is None and src.size != dst.size:
        raise tr.error(NkiValidationError, f"dma_copy moves {src.size} elements (src {src.shape}) into {dst.size} "
                       f"(dst {dst.shape}): the element counts must be equal")
    if src.dtype != dst.dtype:
        if src.dtype.is_float != dst.dtype.is_float:
            raise tr.error(NkiValidationError, f"dma_copy casts between float types or between integer types only "
                           f"({src.dtype} -> {dst.dtype}); cast on an engine (nisa.tensor_copy) instead")
        if dge_mode is globals()["dge_mode"].hwdge:
            raise tr.error(NkiValidationError, "dma_copy with dge_mode=hwdge cannot cast dtypes")
    if priority is not None and _target_gen() < 4:
        raise tr.error(NkiValidationError, "dma_copy priority= is a NeuronCore-v4 feature")
    for t, what in ((dst, "dst"), (src, "src")):
        _pmax(t, what)
    reads = [src]
    if src.indirect_index is not None:
        reads.append(src.indirect_index)
        if dst.indirect_index is not None:
            raise tr.error(NkiValidationError, "dma_copy: only one side can be indirect")
        if not dst.on_chip:
            raise tr.error(NkiUnsupportedError, "an indirect (gather) dma_copy must write SBUF")
    if dst.indirect_index is not None:
        reads.append(dst.indirect_index)
        if not src.on_chip:
            raise tr.error(NkiUnsupportedError, "an indirect (scatter) dma_copy must read SBUF")
    return _record("dma", reads, [dst], dst=dst, src=src, oob=oob_mode)


@_api
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error, name=None):
    tr = _trace.current()
    dst, src = _tensor(dst, "dst"), _tensor(src, "src")
    if axes not in (None, (1, 0), [1, 0]):
        raise tr.error(NkiUnsupportedError, f"dma_transpose axes={axes}: trnscope emulates the 2-D transpose only")
    if src.ndim != 2 or dst.ndim != 2 or dst.shape != (src.shape[1], src.shape[0]):
        raise tr.error(NkiValidationError, f"dma_transpose takes a 2-D src and writes its transpose: src {src.shape}, "
                       f"dst {dst.shape}")
    if not dst.on_chip or dst.buffer != SBUF:
        raise tr.error(NkiValidationError, "dma_transpose writes SBUF")
    if src.buffer == PSUM:
        raise tr.error(NkiValidationError, "dma_transpose cannot read PSUM")
    if src.dtype != dst.dtype:
        raise tr.error(NkiValidationError, "dma_transpose cannot cast dtypes")
    _pmax(dst, "dst")
    return _record("dma_transpose", [src], [dst], dst=dst, src=src)


@_api
def tensor_copy(dst, src, engine=engine.unknown, name=None):
    tr = _trace.current()
    dst, src = _on_chip(dst, "dst"), _on_chip(src, "src")
    _same_layout(dst, src, "dst", "src")
    _pmax(dst, "dst")
    eng = _engine(engine, (globals()["engine"].vector, globals()["engine"].scalar, globals()["engine"].gpsimd),
                  globals()["engine"].vector, "tensor_copy")
    if eng is globals()["engine"].gpsimd and PSUM in (dst.buffer, src.buffer):
        raise tr.error(NkiValidationError, "tensor_copy on GpSimd cannot access PSUM: use engine.vector or "
                       "engine.scalar")
    if eng is globals()["engine"].scalar and _target_gen() == 2:
        raise tr.error(NkiValidationError, "on NeuronCore-v2 (trn1) tensor_copy does not run on the Scalar engine: "
                       "use nisa.activation(op=nl.copy, ...)")
    return _record("copy", [src], [dst], dst=dst, src=src, engine=eng.name)


@_api
def memset(dst, value, engine=engine.unknown, name=None):
    tr = _trace.current()
    dst = _on_chip(dst, "dst")
    _pmax(dst, "dst")
    eng = _engine(engine, (globals()["engine"].vector, globals()["engine"].gpsimd), globals()["engine"].vector,
                  "memset")
    if eng is globals()["engine"].gpsimd and dst.buffer == PSUM:
        raise tr.error(NkiValidationError, "memset on GpSimd cannot write PSUM")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise tr.error(TypeError, f"memset value must be a compile-time number, got {type(value).__name__}")
    if not dst.dtype.is_float and not float(value).is_integer():
        raise tr.error(NkiValidationError, f"memset value {value} does not match the integer dtype {dst.dtype} "
                       f"(since NKI 0.3 the value must match dst's dtype)")
    return _record("memset", [], [dst], dst=dst, value=float(value), engine=eng.name)


@_api
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    tr = _trace.current()
    dst, pred = _on_chip(dst, "dst"), _on_chip(predicate, "predicate")
    if not isinstance(src, NkiTensor):
        raise tr.error(NkiUnsupportedError, "tensor_copy_predicated with a scalar src is not emulated: memset a tile "
                       "with the value and pass it as src")
    _on_chip(src, "src")
    _same_layout(dst, src, "dst", "src")
    _same_layout(dst, pred, "dst", "predicate")
    if src.buffer == PSUM and pred.buffer == PSUM:
        raise tr.error(NkiValidationError, "tensor_copy_predicated: src and predicate cannot both be in PSUM")
    if src.dtype != dst.dtype:
        raise tr.error(NkiValidationError, f"tensor_copy_predicated: src ({src.dtype}) and dst ({dst.dtype}) must "
                       f"share a dtype")
    if str(pred.dtype) not in ("uint8", "uint16", "uint32"):
        raise tr.error(NkiValidationError, f"the predicate must be uint8, uint16 or uint32, got {pred.dtype}")
    return _record("select", [pred, src, dst], [dst], dst=dst, src=src, pred=pred, reverse=bool(reverse_pred))


# --- TensorE ----------------------------------------------------------------------------------------------

@_api
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None):
    tr = _trace.current()
    spec = tr.spec
    dst = _on_chip(dst, "dst", (PSUM,))
    st = _on_chip(stationary, "stationary", (SBUF,))
    mv = _on_chip(moving, "moving", (SBUF,))
    if tile_position not in ((), None, (0, 0)) or tile_size not in ((), None, (128, 128)):
        raise tr.error(NkiUnsupportedError, "Tensor Engine row/column tiling (tile_position/tile_size) is not "
                       "modelled: trnscope's TensorE runs one matmul at a time on the full array")
    if perf_mode not in (matmul_perf_mode.none, None, "none"):
        raise tr.error(NkiUnsupportedError if _target_gen() > 2 else NkiValidationError,
                       "double_row FP8 performance mode is not available on NeuronCore-v2 and not modelled on v3")
    k, m = _pf(st)
    k2, n = _pf(mv)
    if k != k2:
        raise tr.error(NkiValidationError, f"nc_matmul contracts the partition dim of both operands: stationary has "
                       f"{k} partitions, moving {k2}")
    if k > spec.partitions:
        raise tr.error(NkiValidationError, f"nc_matmul contraction (partition) dim {k} > {spec.partitions}")
    if m > spec.gemm_stationary_fmax:
        raise tr.error(NkiValidationError, f"stationary free size {m} > {spec.gemm_stationary_fmax} "
                       f"(nl.tile_size.gemm_stationary_fmax)")
    if n > spec.gemm_moving_fmax:
        raise tr.error(NkiValidationError, f"moving free size {n} > {spec.gemm_moving_fmax} "
                       f"(nl.tile_size.gemm_moving_fmax: one PSUM bank holds 512 fp32 per partition)")
    if _pf(dst) != (m, n):
        raise tr.error(NkiValidationError, f"nc_matmul writes stationary.T @ moving = [{m}, {n}] but dst is "
                       f"{dst.shape}")
    if str(dst.dtype) != "float32":
        raise tr.error(NkiValidationError, f"nc_matmul writes fp32 PSUM on NeuronCore-v2/v3, dst is {dst.dtype}")
    fp32 = {str(st.dtype), str(mv.dtype)} & {"float32", "tfloat32"}
    if fp32 and not {str(st.dtype), str(mv.dtype)} <= {"float32", "tfloat32"}:
        raise tr.error(NkiValidationError, f"nc_matmul: fp32/tf32 inputs pair only with fp32/tf32 "
                       f"(stationary {st.dtype}, moving {mv.dtype})")
    if not st.dtype.is_float or not mv.dtype.is_float:
        raise tr.error(NkiValidationError, "nc_matmul takes float inputs (fp8, bf16, fp16, tf32, fp32)")
    _psum_bank(tr, dst)
    acc = _accumulate_flag(tr, dst, accumulate)
    return _record("matmul", [st, mv] + ([dst] if acc else []), [dst], dst=dst, stationary=st, moving=mv,
                   accumulate=acc)


def _accumulate_flag(tr, dst: NkiTensor, accumulate) -> bool:
    """accumulate=None: overwrite where nothing has been written, accumulate onto a previous matmul's output
    (NKI's inference); anything in between is ambiguous and an error."""
    st = dst.storage
    box = _trace.exact_box(dst)
    if box is None:
        raise tr.error(NkiValidationError, "nc_matmul's dst must be a rectangular region of its PSUM tile")
    started = any(_trace._inside(box, b) for b in (st.mm_mask or ()))
    touched = _written_before(st, box, dst)
    if accumulate is None:
        if started:
            accumulate = True
        elif not touched:
            accumulate = False
        else:
            raise tr.error(NkiValidationError,
                           "nc_matmul(accumulate=None) cannot tell whether to start or continue the accumulation: "
                           "part of this PSUM region was written before, but not as one matmul's output; pass "
                           "accumulate=True or accumulate=False")
    accumulate = bool(accumulate)
    if accumulate and not started:
        if touched:
            raise tr.error(NkiValidationError,
                           "nc_matmul accumulates onto PSUM that no matmul started (it was value-initialised by "
                           "another instruction): undefined on NeuronCore-v2/v3; start with accumulate=False")
        raise tr.error(_trace.NkiUninitializedError,
                       "nc_matmul(accumulate=True) into uninitialised PSUM: the first matmul of an accumulation "
                       "group must overwrite (accumulate=False, or accumulate=(k > 0) in the loop)")
    if not accumulate:
        st.mm_mask = [b for b in (st.mm_mask or ()) if not _trace._inside(b, box)] + [box]
    return accumulate


def _written_before(st, box, view: NkiTensor) -> bool:
    if not st.any_write:
        return False
    if st.written_all:
        return True
    if st.mask is not None:
        return bool(_trace._mask_view(st, view).any())
    return any(b is None or _trace.boxes_overlap(box, b) for b, _ in st.pending)


def _psum_bank(tr, dst: NkiTensor) -> None:
    """A matmul or transpose output stays inside one 2 KiB PSUM bank (PSUM tiles start on a bank boundary)."""
    bank = tr.spec.psum_bank_bytes
    isz = dst.dtype.itemsize
    lo = (dst.offset % dst.pstride) * isz
    hi = lo + sum(s * (n - 1) for n, s in zip(dst.shape[1:], dst.strides[1:]) if s > 0) * isz + isz - 1
    base = dst.storage.address[1] if dst.storage.address is not None else 0
    if (base + lo) // bank != (base + hi) // bank:
        raise tr.error(NkiValidationError, f"the PSUM output spans bytes {lo}..{hi} of its tile's partition, which "
                       f"crosses a {bank}-byte PSUM bank boundary: a matmul/transpose writes within one bank (at "
                       f"most 512 fp32 per partition, starting on a bank boundary)")


@_api
def nc_transpose(dst, data, engine=engine.unknown, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    eng = _engine(engine, (globals()["engine"].tensor, globals()["engine"].vector),
                  globals()["engine"].tensor if data.buffer == SBUF else globals()["engine"].vector, "nc_transpose")
    p, f = _pf(data)
    if eng is globals()["engine"].vector:
        raise tr.error(NkiUnsupportedError, "Vector-engine nc_transpose (32x32 blocks) is not modelled; transpose an "
                       "SBUF tile on TensorE (engine=nisa.tensor_engine) instead")
    if data.buffer != SBUF or dst.buffer != PSUM:
        raise tr.error(NkiValidationError, "TensorE nc_transpose reads SBUF and writes PSUM")
    if p > 128 or f > 128:
        raise tr.error(NkiValidationError, f"TensorE nc_transpose takes at most [128, 128], got [{p}, {f}]")
    if _pf(dst) != (f, p):
        raise tr.error(NkiValidationError, f"nc_transpose of [{p}, {f}] writes [{f}, {p}], dst is {dst.shape}")
    if dst.dtype != data.dtype:
        raise tr.error(NkiValidationError, f"nc_transpose keeps the dtype: data {data.dtype}, dst {dst.dtype}")
    _psum_bank(tr, dst)
    return _record("transpose", [data], [dst], dst=dst, data=data)


# --- ScalarE ----------------------------------------------------------------------------------------------

@_api
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    _same_layout(dst, data, "dst", "data")
    _pmax(data, "data")
    func = _act(op)
    sc = _scalar_operand(scale, data, "scale")
    bi = 0.0 if bias is None else _scalar_operand(bias, data, "bias")
    cmd = reduce_cmd
    rc = globals()["reduce_cmd"]
    if reduce_res is not None and cmd is rc.idle:
        cmd = rc.reset_reduce
    if cmd not in (rc.idle, rc.reset_reduce):
        raise tr.error(NkiUnsupportedError, f"reduce_cmd={cmd.name}: accumulating ScalarE's reduce registers across "
                       f"instructions is not emulated; reduce each call into its own reduce_res (reset_reduce) and "
                       f"add the partial sums with nisa.tensor_tensor")
    if cmd is rc.reset_reduce:
        if reduce_op is not None and _alu(reduce_op, "reduce_op") is not Alu.ADD:
            raise tr.error(NkiValidationError, "activation's reduce_op must be nl.add")
        if reduce_res is None:
            raise tr.error(NkiUnsupportedError, "a reduction kept only in ScalarE's registers (reduce_res=None) is "
                           "not emulated: pass a (P, 1) reduce_res tile")
        _on_chip(reduce_res, "reduce_res")
        if reduce_res.shape[0] != data.shape[0] or prod(reduce_res.shape[1:]) != 1:
            raise tr.error(NkiValidationError, f"reduce_res must be ({data.shape[0]}, 1), got {reduce_res.shape}")
    reads = [data] + [x for x in (sc, bi) if isinstance(x, NkiTensor)]
    writes = [dst] + ([reduce_res] if cmd is rc.reset_reduce else [])
    return _record("activation", reads, writes, dst=dst, data=data, func=func, scale=sc, bias=bi,
                   accum=reduce_res if cmd is rc.reset_reduce else None)


@_api
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd=reduce_cmd.reset_reduce)


# --- VectorE / GpSimdE ------------------------------------------------------------------------------------

@_api
def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    tr = _trace.current()
    dst, a, b = _on_chip(dst, "dst"), _on_chip(data1, "data1"), _on_chip(data2, "data2")
    _same_layout(dst, a, "dst", "data1")
    _same_layout(dst, b, "dst", "data2")
    _pmax(dst, "dst")
    if a.buffer == PSUM and b.buffer == PSUM:
        raise tr.error(NkiValidationError, "tensor_tensor: data1 and data2 cannot both be in PSUM")
    alu = _alu(op, "op")
    e = globals()["engine"]
    eng = _engine(engine, (e.vector, e.gpsimd), e.gpsimd if alu is Alu.POW else e.vector, "tensor_tensor")
    if eng is e.gpsimd and PSUM in (dst.buffer, a.buffer, b.buffer):
        raise tr.error(NkiValidationError, "tensor_tensor on GpSimd (nl.power, or engine=gpsimd) cannot access PSUM")
    return _record("tensor_tensor", [a, b], [dst], dst=dst, a=a, b=b, alu=alu)


@_api
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    _same_layout(dst, data, "dst", "data")
    _pmax(dst, "dst")
    if isinstance(op0, NkiOperator) and op0.alu is None and op0.act is not None:
        raise tr.error(NkiUnsupportedError, f"tensor_scalar with the unary op0=nl.{op0.name} is not modelled on "
                       f"VectorE; use nisa.activation(op=nl.{op0.name}, ...) on ScalarE")
    a0 = _alu(op0, "op0")
    s0 = _scalar_operand(operand0, data, "operand0")
    a1 = s1 = None
    if op1 is not None:
        a1 = _alu(op1, "op1")
        if operand1 is None:
            raise tr.error(NkiValidationError, "tensor_scalar: op1 needs operand1")
        s1 = _scalar_operand(operand1, data, "operand1")
    elif operand1 is not None:
        raise tr.error(NkiValidationError, "tensor_scalar: operand1 without op1")
    e = globals()["engine"]
    eng = _engine(engine, (e.vector, e.scalar, e.gpsimd), e.vector, "tensor_scalar")
    if eng is not e.vector:
        raise tr.error(NkiUnsupportedError, f"tensor_scalar on engine.{eng.name} is not modelled: trnscope runs "
                       f"tensor_scalar on VectorE")
    reads = [data] + [x for x in (s0, s1) if isinstance(x, NkiTensor)]
    return _record("tensor_scalar", reads, [dst], dst=dst, data=data, alu0=a0, s0=s0, rev0=bool(reverse0), alu1=a1,
                   s1=s1, rev1=bool(reverse1))


@_api
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """(data <op0> operand0) <op1> operand1 in one VectorE instruction: operand0 a scalar or a
    (P, 1) vector, operand1 a tile of data's shape (SCALAR_TENSOR_TENSOR)."""
    tr = _trace.current()
    dst, data, other = _on_chip(dst, "dst"), _on_chip(data, "data"), _on_chip(operand1, "operand1")
    _same_layout(dst, data, "dst", "data")
    _same_layout(dst, other, "dst", "operand1")
    _pmax(dst, "dst")
    if data.buffer == PSUM and other.buffer == PSUM:
        raise tr.error(NkiValidationError, "scalar_tensor_tensor: data and operand1 cannot both be in PSUM")
    a0, a1 = _alu(op0, "op0"), _alu(op1, "op1")
    if a0 in BITVEC_ALU or a1 in BITVEC_ALU:
        raise tr.error(NkiValidationError, "scalar_tensor_tensor takes arithmetic operators only (no bitvec ops)")
    s0 = _scalar_operand(operand0, data, "operand0")
    reads = [data, other] + ([s0] if isinstance(s0, NkiTensor) else [])
    return _record("scalar_tensor_tensor", reads, [dst], dst=dst, data=data, other=other, alu0=a0, s0=s0,
                   rev0=bool(reverse0), alu1=a1, rev1=bool(reverse1))


@_api
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    _pmax(data, "data")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = data.ndim
    axes = tuple(a + nd if a < 0 else a for a in axes)
    if 0 in axes:
        raise tr.error(NkiValidationError, "tensor_reduce cannot reduce the partition dim (axis 0): transpose the "
                       "tile (nc_transpose) or use a ones-matmul / tensor_partition_reduce")
    if sorted(axes) != list(range(nd - len(axes), nd)):
        raise tr.error(NkiValidationError, f"tensor_reduce axis={axis}: the reduced axes must be the last contiguous "
                       f"free dims of the {nd}-D tile ({tuple(range(nd - len(axes), nd))} for {len(axes)} axes)")
    kept = prod(data.shape[1:nd - len(axes)]) if nd - len(axes) > 1 else 1
    if dst.shape[0] != data.shape[0] or prod(dst.shape[1:]) != kept:
        raise tr.error(NkiValidationError, f"tensor_reduce of {data.shape} over axes {axes} writes "
                       f"{data.shape[0]} x {kept} elements; dst is {dst.shape}")
    alu = _alu(op, "op")
    return _record("tensor_reduce", [data], [dst], dst=dst, data=data, alu=alu, axes=len(axes), negate=bool(negate))


@_api
def tensor_partition_reduce(dst, op, data, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst", (SBUF,)), _on_chip(data, "data", (SBUF,))
    alu = _alu(op, "op")
    if dst.shape[0] != 1 or _pf(dst)[1] != _pf(data)[1]:
        raise tr.error(NkiValidationError, f"tensor_partition_reduce writes (1, {_pf(data)[1]}), dst is {dst.shape}")
    return _record("partition_reduce", [data], [dst], dst=dst, data=data, alu=alu)


@_api
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    tr = _trace.current()
    dst, a, b = _on_chip(dst, "dst"), _on_chip(data0, "data0"), _on_chip(data1, "data1")
    _same_layout(dst, a, "dst", "data0")
    _same_layout(dst, b, "dst", "data1")
    if a.buffer == PSUM and b.buffer == PSUM:
        raise tr.error(NkiValidationError, "tensor_tensor_scan: data0 and data1 cannot both be in PSUM")
    init = _scalar_operand(initial, a, "initial")
    reads = [a, b] + ([init] if isinstance(init, NkiTensor) else [])
    return _record("scan", reads, [dst], dst=dst, a=a, b=b, initial=init, alu0=_alu(op0, "op0"),
                   alu1=_alu(op1, "op1"), rev0=bool(reverse0), rev1=bool(reverse1))


@_api
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    tr = _trace.current()
    dst = _on_chip(dst, "dst", (SBUF,))
    pat = _pattern(pattern, "iota")
    if prod(n for _, n in pat) != _pf(dst)[1]:
        raise tr.error(NkiValidationError, f"iota pattern {pattern} makes {prod(n for _, n in pat)} values per "
                       f"partition; dst has {_pf(dst)[1]}")
    return _record("iota", [], [dst], dst=dst, pattern=pat, offset=int(offset), cm=int(channel_multiplier))


def _pattern(pattern, what: str):
    try:
        pat = [(int(s), int(n)) for s, n in pattern]
    except (TypeError, ValueError):
        raise _trace.current().error(NkiValidationError, f"{what} pattern must be [[step, num], ...]") from None
    if not 1 <= len(pat) <= 4:
        raise _trace.current().error(NkiValidationError, f"{what} pattern has {len(pat)} dims; it takes 1 to 4")
    return pat


@_api
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
    tr = _trace.current()
    dst = _on_chip(dst, "dst", (SBUF,))
    src = _on_chip(on_true_tile, "on_true_tile", (SBUF,))
    _same_layout(dst, src, "dst", "on_true_tile")
    pat = _pattern(pattern, "affine_select")
    if prod(n for _, n in pat) != _pf(dst)[1]:
        raise tr.error(NkiValidationError, f"affine_select pattern {pattern} has {prod(n for _, n in pat)} elements "
                       f"per partition; dst has {_pf(dst)[1]}")
    if cmp_op is None:
        from . import language as nl

        cmp_op = nl.equal
    cmp = _alu(cmp_op, "cmp_op")
    if not isinstance(on_false_value, (int, float)) or isinstance(on_false_value, bool):
        raise tr.error(TypeError, "on_false_value must be a float constant")
    return _record("affine_select", [src], [dst], dst=dst, src=src, pattern=pat, offset=int(offset),
                   cm=int(channel_multiplier), cmp=cmp, fill=float(on_false_value))


@_api
def bn_stats(dst, data, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    if _pf(data)[1] > tr.spec.bn_stats_fmax:
        raise tr.error(NkiValidationError, f"bn_stats takes at most {tr.spec.bn_stats_fmax} elements per partition "
                       f"(nl.tile_size.bn_stats_fmax), got {_pf(data)[1]}: call it per 512-element chunk")
    if dst.shape[0] != data.shape[0] or _pf(dst)[1] != 6:
        raise tr.error(NkiValidationError, f"bn_stats writes 6 values per partition, dst is {dst.shape}")
    return _record("bn_stats", [data], [dst], dst=dst, data=data)


@_api
def bn_aggr(dst, data, name=None):
    tr = _trace.current()
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    if _pf(data)[1] % 3:
        raise tr.error(NkiValidationError, f"bn_aggr reads (count, mean, var*count) triples: {_pf(data)[1]} elements "
                       f"per partition is not a multiple of 3")
    if dst.shape[0] != data.shape[0] or _pf(dst)[1] != 2:
        raise tr.error(NkiValidationError, f"bn_aggr writes (mean, variance) per partition, dst is {dst.shape}")
    return _record("bn_aggr", [data], [dst], dst=dst, data=data)


@_api
def reciprocal(dst, data, name=None):
    dst, data = _on_chip(dst, "dst"), _on_chip(data, "data")
    _same_layout(dst, data, "dst", "data")
    return _record("tensor_scalar", [data], [dst], dst=dst, data=data, alu0=Alu.DIVIDE, s0=1.0, rev0=True,
                   alu1=None, s1=None, rev1=False, what="reciprocal")


@_api
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0, name=None):
    raise _trace.current().error(
        NkiValidationError, "nisa.exponential is available on NeuronCore-v4 (trn3) only; on trn1/trn2 use "
                            "nisa.activation(dst, op=nl.exp, data=src, bias=negated_max, reduce_res=row_sum)")


def _unsupported(name: str, why: str):
    def fn(*args, **kwargs):
        raise NkiUnsupportedError(f"nisa.{name} is not emulated by trnscope: {why}")
    fn.__name__ = name
    fn.__doc__ = f"Not emulated: {why}"
    return fn


_NO_MODEL = "trnscope has no published cost formula or semantics model for it yet (docs/nki.md lists what is)"
for _name, _why in {
    "nc_matmul_mx": "MX matmul is a NeuronCore-v4 (trn3) instruction",
    "activate2": "activate2 is a NeuronCore-v4 (trn3) instruction",
    "quantize_mx": "quantize_mx is a NeuronCore-v4 (trn3) instruction",
    "tensor_scalar_reduce": "use tensor_scalar followed by tensor_reduce",
    "tensor_scalar_cumulative": "use tensor_tensor_scan",
    "range_select": _NO_MODEL, "select_reduce": _NO_MODEL, "sequence_bounds": _NO_MODEL,
    "local_gather": _NO_MODEL, "nc_n_gather": _NO_MODEL, "dma_compute": _NO_MODEL, "max8": _NO_MODEL,
    "nc_find_index8": _NO_MODEL, "nc_match_replace8": _NO_MODEL, "nc_stream_shuffle": _NO_MODEL,
    "nonzero_with_count": _NO_MODEL, "topk": _NO_MODEL, "dropout": _NO_MODEL, "rng": _NO_MODEL, "rand2": _NO_MODEL,
    "rand_set_state": _NO_MODEL, "rand_get_state": _NO_MODEL, "set_rng_seed": _NO_MODEL,
    "register_alloc": "registers and runtime loops are not emulated: trnscope unrolls every loop at trace time",
    "register_move": "registers are not emulated", "register_load": "registers are not emulated",
    "register_store": "registers are not emulated", "scalar_load": "registers are not emulated",
    "scalar_store": "registers are not emulated",
    "core_barrier": "LNC=2 (two physical cores per logical core) is not modelled",
    "sendrecv": "LNC=2 (two physical cores per logical core) is not modelled",
    "sendrecv_compute": "LNC=2 (two physical cores per logical core) is not modelled",
}.items():
    globals()[_name] = _unsupported(_name, _why)
