"""``neuronxcc.nki``: enough of NKI 0.1 ("Beta 1") for kernels still written in its style.

What 0.1 has that ``nki.*`` does not, and how it maps onto the 0.6 layer:

* index grids: ``ix = nl.arange(128)[:, None]`` / ``iy = nl.arange(n)[None, :]`` or ``nl.mgrid[0:128,
  0:n]``; tensors indexed with affine expressions of them (``a[i * 128 + ix, iy]``). Every index
  expression uses at most one grid variable per dim, so it is a strided slice; the grid axis of the
  variable (0: partitions, 1: free) orders the result dims.
* ``mask=``: comparisons of such expressions with integers (``i * 128 + ix < rows``), combined with
  ``&``. A mask shortens the grid variables it bounds, so the op touches only the valid partitions
  or columns (the rest of its full-size result tile is left unwritten).
* ISA calls and ``nl`` functions that return new tiles, ``nl.par_dim`` in shapes, ``(P, 1)`` operands
  broadcast in element-wise ops, ``nl.load``/``nl.store`` with masks, ``tile[...] = value``.

Anything else resolves to the 0.6 function of the same name. The 0.1 ``nki.benchmark``/``profile``/
``baremetal`` decorators run the kernel and print its simulated time (trnscope has no hardware to
benchmark on); ``nki.simulate_kernel(kernel, *arrays)`` runs it on the interpreter.
"""

from __future__ import annotations

import builtins as _b
import types
from typing import Any
from math import prod

from . import isa as _isa06
from . import language as _nl06
from . import trace as _trace
from .errors import NkiLegacyError, NkiUnsupportedError, NkiValidationError
from .ops import NkiOperator
from .tensor import NkiTensor

_var_ids = iter(range(1 << 62))


class _Var:
    __slots__ = ("id", "size", "axis")

    def __init__(self, size: int, axis: int) -> None:
        self.id = next(_var_ids)
        self.size, self.axis = size, axis


class IndexExpr:
    """An affine index ``const + sum(coef * var)`` over grid variables."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const: int = 0) -> None:
        self.terms = dict(terms or {})   # var -> coefficient
        self.const = const

    @staticmethod
    def _of(x) -> "IndexExpr":
        if isinstance(x, IndexExpr):
            return x
        if isinstance(x, int) and not isinstance(x, bool):
            return IndexExpr(const=x)
        raise TypeError(f"index arithmetic with {type(x).__name__}")

    def __add__(self, o):
        o = IndexExpr._of(o)
        terms = dict(self.terms)
        for v, c in o.terms.items():
            terms[v] = terms.get(v, 0) + c
        return IndexExpr(terms, self.const + o.const)

    __radd__ = __add__

    def __neg__(self):
        return IndexExpr({v: -c for v, c in self.terms.items()}, -self.const)

    def __sub__(self, o):
        return self + (-IndexExpr._of(o))

    def __rsub__(self, o):
        return IndexExpr._of(o) + (-self)

    def __mul__(self, k):
        if not isinstance(k, int):
            raise TypeError("index expressions scale by integers only")
        return IndexExpr({v: c * k for v, c in self.terms.items()}, self.const * k)

    __rmul__ = __mul__

    def _cmp(self, k, op):
        if not isinstance(k, int):
            raise TypeError("a mask compares an index expression with an integer")
        return Predicate([(self, op, k)])

    def __lt__(self, k):
        return self._cmp(k, "<")

    def __le__(self, k):
        return self._cmp(k, "<=")

    def __gt__(self, k):
        return self._cmp(k, ">")

    def __ge__(self, k):
        return self._cmp(k, ">=")

    def __getitem__(self, key):  # nl.arange(n)[:, None] / [None, :]
        if len(self.terms) != 1 or self.const != 0:
            raise TypeError("only nl.arange(n) itself can be given grid axes")
        (v, c), = self.terms.items()
        key = key if isinstance(key, tuple) else (key,)
        axes = [i for i, k in enumerate(key) if k is not None]
        if len(axes) != 1:
            raise TypeError("nl.arange(n)[...] takes one ':' and None elsewhere, e.g. [:, None]")
        return IndexExpr({_Var(v.size, axes[0]): c})


class Predicate:
    __slots__ = ("terms",)

    def __init__(self, terms) -> None:
        self.terms = list(terms)

    def __and__(self, o: "Predicate") -> "Predicate":
        return Predicate(self.terms + o.terms)

    def bounds(self) -> dict:
        """var -> (lo, hi) index range of that variable the predicate allows."""
        out: dict = {}
        for expr, op, k in self.terms:
            if len(expr.terms) != 1:
                raise NkiUnsupportedError("a mask term must bound one grid variable (e.g. i * 128 + ix < rows)")
            (v, c), = expr.terms.items()
            rhs = k - expr.const  # c * var <op> rhs
            lo, hi = out.get(v, (0, v.size))
            if c > 0 and op in ("<", "<="):
                hi = _b.min(hi, -(-rhs // c) if op == "<" else rhs // c + 1)
            elif c > 0 and op in (">", ">="):
                lo = _b.max(lo, rhs // c + 1 if op == ">" else -(-rhs // c))
            else:
                raise NkiUnsupportedError("masks with negative coefficients are not emulated")
            out[v] = (_b.max(0, lo), _b.max(_b.max(0, lo), hi))
        return out


def arange(*args) -> IndexExpr:
    if len(args) == 1:
        return IndexExpr({_Var(int(args[0]), 0): 1})
    start, stop = int(args[0]), int(args[1])
    return IndexExpr({_Var(stop - start, 0): 1}, start)


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for axis, s in enumerate(key):
            start, stop = s.start or 0, s.stop
            out.append(IndexExpr({_Var(stop - start, axis): 1}, start))
        return out


mgrid = _MGrid()


class par_dim(int):  # noqa: N801 - the 0.1 name
    """``nl.par_dim(128)``: marks the partition dim in a shape; a plain size here."""


class IndexedView:
    """``tensor[index expressions]``, resolved when the op that consumes it knows its mask."""

    __slots__ = ("tensor", "key")

    def __init__(self, tensor: NkiTensor, key: tuple) -> None:
        self.tensor, self.key = tensor, key

    @property
    def shape(self):
        return self.resolve(None).shape

    @property
    def dtype(self):
        return self.tensor.dtype

    def resolve(self, mask) -> NkiTensor:
        bounds = mask.bounds() if mask is not None else {}
        t = self.tensor
        placed = []  # (grid axis, dim start, size, step)
        base = t.offset
        dims_fixed = []
        for d, k in enumerate(self.key):
            stride = t.strides[d]
            if isinstance(k, IndexExpr):
                if len(k.terms) > 1:
                    raise NkiUnsupportedError("an index may use one grid variable per tensor dim")
                if not k.terms:
                    base += k.const * stride
                    continue
                (v, c), = k.terms.items()
                lo, hi = bounds.get(v, (0, v.size))
                base += (k.const + c * lo) * stride
                placed.append((v.axis, hi - lo, stride * c))
            elif isinstance(k, int):
                base += k * stride
            elif isinstance(k, slice):
                start, stop, step = k.indices(t.shape[d])
                base += start * stride
                placed.append((d, len(range(start, stop, step)), stride * step))
            else:
                raise TypeError(f"cannot index with {type(k).__name__}")
            dims_fixed.append(d)
        for d in range(len(self.key), t.ndim):
            placed.append((d, t.shape[d], t.strides[d]))
        placed.sort(key=lambda p: p[0])
        shape = tuple(p[1] for p in placed) or (1,)
        strides = tuple(p[2] for p in placed) or (1,)
        if _b.any(s == 0 for s in shape):
            raise NkiValidationError("the mask leaves nothing to access")
        return NkiTensor._view(t.storage, shape, strides, base, t.dtype)


def legacy_index(t: NkiTensor, key):
    """NkiTensor.__getitem__ for a legacy kernel's index expressions."""
    return IndexedView(t, key if isinstance(key, tuple) else (key,))


def _restrict(t: NkiTensor, mask) -> NkiTensor:
    """A tile restricted by a mask whose variables are matched to dims by grid axis."""
    if mask is None:
        return t
    key = [slice(None)] * t.ndim
    for v, (lo, hi) in mask.bounds().items():
        if v.axis < t.ndim:
            key[v.axis] = slice(lo, hi)
    return t[tuple(key)] if t.on_chip else t


def _operand(x, mask):
    if isinstance(x, IndexedView):
        return x.resolve(mask)
    if isinstance(x, NkiTensor):
        return _restrict(x, mask)
    return x


def _full_shape(x) -> tuple:
    if isinstance(x, IndexedView):
        return x.resolve(None).shape
    return x.shape


def _shape(shape) -> tuple:
    return tuple(int(s) for s in shape)


# --- nki.language (0.1) ----------------------------------------------------------------------------------------

def ndarray(shape, dtype, buffer=None, name: str = "", **kwargs):
    return _nl06.ndarray(_shape(shape), dtype, buffer if buffer is not None else _nl06.sbuf, name)


def zeros(shape, dtype, buffer=None, name: str = "", **kwargs):
    return _nl06.zeros(_shape(shape), dtype, buffer if buffer is not None else _nl06.sbuf, name)


def full(shape, fill_value, dtype, buffer=None, name: str = "", **kwargs):
    return _nl06.full(_shape(shape), fill_value, dtype, buffer if buffer is not None else _nl06.sbuf, name)


def load(src, mask=None, dtype=None, **kwargs):
    full_shape = _full_shape(src)
    view = _operand(src, mask)
    t = _nl06.ndarray(full_shape if len(full_shape) >= 2 else (1, *full_shape), dtype or view.dtype, _nl06.sbuf)
    dst = _restrict(t, mask) if mask is not None else t
    _isa06.dma_copy(dst, view if view.ndim >= 2 else view.reshape(dst.shape))
    return t


def store(dst, value, mask=None, **kwargs):
    d = _operand(dst, mask)
    v = _operand(value, mask)
    if isinstance(v, NkiTensor) and v.buffer == _nl06.psum:
        v = _copy_tile(v, None)
    _isa06.dma_copy(d, v)


def _copy_tile(x, mask, dtype=None):
    out = _nl06.ndarray(x.shape, dtype or x.dtype, _nl06.sbuf)
    _isa06.tensor_copy(_restrict(out, mask), _restrict(x, mask))
    return out


def copy(x, dtype=None, mask=None, **kwargs):
    return _copy_tile(_operand(x, None), mask, dtype)


def _is_vector(t) -> bool:
    return isinstance(t, NkiTensor) and prod(t.shape[1:]) == 1


def _binary(name: str):
    op06 = _nl06.OPS[name]

    def fn(x, y, dtype=None, mask=None, **kwargs):
        x, y = _operand(x, None), _operand(y, None)
        tx, ty = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
        if not tx and not ty:
            raise TypeError(f"nl.{name} needs a tile operand")
        big = x if tx and (not ty or prod(x.shape[1:]) >= prod(y.shape[1:])) else y
        out = _nl06.ndarray(big.shape, dtype or big.dtype, _nl06.sbuf)
        o = _restrict(out, mask)
        if tx and ty and not (_is_vector(x) ^ _is_vector(y)):
            _isa06.tensor_tensor(o, _restrict(x, mask), _restrict(y, mask), op06)
        else:
            scalar = y if big is x else x
            s = _restrict(scalar, mask) if isinstance(scalar, NkiTensor) else float(scalar)
            _isa06.tensor_scalar(o, _restrict(big, mask), op06, s, reverse0=big is y)
        return out
    fn.__name__ = name
    return fn


def _unary(name: str):
    op06 = _nl06.OPS[name]

    def fn(x, dtype=None, mask=None, **kwargs):
        x = _operand(x, None)
        out = _nl06.ndarray(x.shape, dtype or x.dtype, _nl06.sbuf)
        _isa06.activation(_restrict(out, mask), op06, _restrict(x, mask))
        return out
    fn.__name__ = name
    return fn


def _reduction(alu_name: str):
    op06 = _nl06.OPS[alu_name]

    def fn(x, axis, dtype=None, keepdims=False, mask=None, **kwargs):
        x = _operand(x, None)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        out = _nl06.ndarray(shape, dtype or x.dtype, _nl06.sbuf)
        _isa06.tensor_reduce(_restrict(out, mask), op06, _restrict(x, mask), axes, keepdims=True)
        return out
    fn.__name__ = alu_name
    return fn


def broadcast_to(x, shape, **kwargs):
    return _nl06.broadcast_to(_operand(x, None), _shape(shape))


def transpose(x, dtype=None, mask=None, **kwargs):
    return _nl06.transpose(_operand(x, mask), dtype)


def matmul(x, y, transpose_x=False, mask=None, **kwargs):
    return _nl06.matmul(_operand(x, mask), _operand(y, mask), transpose_x)


# --- nki.isa (0.1): calls return their result tiles --------------------------------------------------------------

def _isa_activation(op, data, bias=None, scale=1.0, dtype=None, mask=None, **kwargs):
    data = _operand(data, None)
    out = _nl06.ndarray(data.shape, dtype or data.dtype, _nl06.sbuf)
    _isa06.activation(_restrict(out, mask), op, _restrict(data, mask),
                      bias=_restrict(bias, mask) if isinstance(bias, NkiTensor) else bias,
                      scale=_restrict(scale, mask) if isinstance(scale, NkiTensor) else scale)
    return out


def _isa_tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, dtype=None,
                       mask=None, **kwargs):
    data = _operand(data, None)
    out = _nl06.ndarray(data.shape, dtype or data.dtype, _nl06.sbuf)
    def r(v):
        return _restrict(v, mask) if isinstance(v, NkiTensor) else v

    _isa06.tensor_scalar(_restrict(out, mask), _restrict(data, mask), op0, r(operand0), reverse0, op1, r(operand1),
                         reverse1)
    return out


def _isa_tensor_tensor(data1, data2, op, dtype=None, mask=None, **kwargs):
    a, b = _operand(data1, None), _operand(data2, None)
    out = _nl06.ndarray(a.shape, dtype or a.dtype, _nl06.sbuf)
    _isa06.tensor_tensor(_restrict(out, mask), _restrict(a, mask), _restrict(b, mask), op)
    return out


def _isa_tensor_reduce(op, data, axis, dtype=None, negate=False, keepdims=False, mask=None, **kwargs):
    x = _operand(data, None)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    out = _nl06.ndarray(shape, dtype or x.dtype, _nl06.sbuf)
    _isa06.tensor_reduce(_restrict(out, mask), op, _restrict(x, mask), axes, negate=negate, keepdims=True)
    return out


def _isa_tensor_copy(src, dtype=None, mask=None, engine=None, **kwargs):
    return _copy_tile(_operand(src, None), mask, dtype)


def _isa_nc_matmul(stationary, moving, mask=None, **kwargs):
    st, mv = _operand(stationary, mask), _operand(moving, mask)
    out = _nl06.ndarray((prod(st.shape[1:]), prod(mv.shape[1:])), _nl06.float32, _nl06.psum)
    _isa06.nc_matmul(out, st, mv)
    return out


def _isa_nc_transpose(data, mask=None, **kwargs):
    return _nl06.transpose(_operand(data, mask))


def _legacy_jit(fn=None, **kwargs):
    from .jit import Kernel

    if fn is None:
        return lambda f: Kernel(f, options=kwargs, legacy=True)
    return Kernel(fn, options=kwargs, legacy=True)


def _benchmark(kernel=None, **kwargs):
    """0.1's nki.benchmark: the kernel runs on trnscope and reports its simulated latency."""
    from .jit import Kernel

    def wrap(k):
        k = k if isinstance(k, Kernel) else Kernel(k, legacy=True)

        def run(*args, **kw):
            result = k(*args, **kw)
            print(f"{k.__name__}: simulated latency {k.last_run.total_ns / 1000:.2f} us on {k.last_run.target} "
                  f"(trnscope; no hardware measurement)")
            return result
        run.kernel = k
        return run
    return wrap(kernel) if kernel is not None else wrap


def _simulate_kernel(kernel, *args, **kwargs):
    from .jit import Kernel, simulate

    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel, legacy=True)
    return simulate(k)(*args, **kwargs)


# --- the modules ------------------------------------------------------------------------------------------------

def _build_language() -> Any:  # a module whose names are set here
    m: Any = types.ModuleType("neuronxcc.nki.language", "NKI 0.1 language (trnscope compatibility layer)")
    for name in ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
                 "tfloat32", "float8_e4m3", "float8_e5m2", "sbuf", "psum", "hbm", "private_hbm", "shared_hbm",
                 "tile_size", "affine_range", "sequential_range", "static_range", "program_id", "num_programs",
                 "program_ndim", "ds", "device_print", "expand_dims", "shared_constant", "shared_identity_matrix"):
        setattr(m, name, getattr(_nl06, name))
    m.arange, m.mgrid, m.par_dim = arange, mgrid, par_dim
    m.ndarray, m.zeros, m.full, m.load, m.store, m.copy = ndarray, zeros, full, load, store, copy
    m.broadcast_to, m.transpose, m.matmul = broadcast_to, transpose, matmul
    for name, op in _nl06.OPS.items():
        if op.alu is not None and op.fn is not None:
            wrapped = NkiOperator(name, op.alu, op.act, _binary(name))
        elif op.act is not None and op.fn is not None and name != "copy":
            wrapped = NkiOperator(name, op.alu, op.act, _unary(name))
        else:
            wrapped = op
        setattr(m, name, wrapped)
    m.copy = NkiOperator("copy", None, _nl06.OPS["copy"].act, copy)
    m.sum, m.max, m.min, m.prod = (_reduction("add"), _reduction("maximum"), _reduction("minimum"),
                                   _reduction("multiply"))

    def mean(x, axis, dtype=None, keepdims=False, mask=None, **kwargs):
        x = _operand(x, None)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        total = m.sum(x, axes, dtype=_nl06.float32, mask=mask)
        n = prod(x.shape[a] for a in axes)
        return _binary("multiply")(total, 1.0 / n, dtype=dtype or x.dtype, mask=mask)
    m.mean = mean
    return m


def _build_isa() -> Any:
    m: Any = types.ModuleType("neuronxcc.nki.isa", "NKI 0.1 ISA: calls return tiles (trnscope compatibility layer)")
    for name in ("engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "get_nc_version", "tensor_engine",
                 "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine"):
        setattr(m, name, getattr(_isa06, name))
    m.activation, m.tensor_scalar, m.tensor_tensor = _isa_activation, _isa_tensor_scalar, _isa_tensor_tensor
    m.tensor_reduce, m.tensor_copy = _isa_tensor_reduce, _isa_tensor_copy
    m.nc_matmul, m.nc_transpose = _isa_nc_matmul, _isa_nc_transpose
    return m


def _guard(module: types.ModuleType) -> None:
    """neuronxcc.nki calls inside an nki.jit (0.6) kernel are an error, as NKI 0.4+ makes them."""
    import functools

    for name, v in list(vars(module).items()):
        if name.startswith("_") or not callable(v) or isinstance(v, type):
            continue
        fn = v.fn if isinstance(v, NkiOperator) else v

        def guarded(*args, _fn=fn, _name=name, **kwargs):
            tr = _trace.active()
            if tr is not None and not tr.legacy:
                raise tr.error(NkiLegacyError, f"{module.__name__}.{_name} inside an nki.jit kernel: neuronxcc.nki is "
                               f"a compile error inside nki.* kernels since NKI 0.4; use nki.language / nki.isa, or "
                               f"decorate the kernel with neuronxcc.nki.jit")
            return _fn(*args, **kwargs)
        functools.update_wrapper(guarded, fn)
        if isinstance(v, NkiOperator):
            if v.fn is not None:
                setattr(module, name, NkiOperator(v.name, v.alu, v.act, guarded))
        else:
            setattr(module, name, guarded)


language = _build_language()
isa = _build_isa()
_guard(language)
_guard(isa)
nki_module: Any = types.ModuleType("neuronxcc.nki", "NKI 0.1 (trnscope compatibility layer)")
nki_module.__path__ = []
nki_module.language, nki_module.isa = language, isa
nki_module.jit = _legacy_jit
nki_module.benchmark = nki_module.profile = nki_module.baremetal = _benchmark
nki_module.simulate_kernel = _simulate_kernel
