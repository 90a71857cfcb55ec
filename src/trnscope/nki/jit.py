"""``nki.jit``: trace a kernel once per (target, grid, shapes, dtypes, constants), lower it to a Program,
and run it where its arguments live.

* NumPy arrays: the interpreter computes the results (returned as NumPy; arguments the kernel writes
  are updated in place, as ``nki.simulate`` does); the run is a device execution of NeuronCore 0 when
  the target is the process's (so ``trnscope run --profile`` records it).
* ``neuron`` tensors: a device execution on the tensors' NeuronCore like any other NEFF - its own
  Program, simulated time, a ``key_averages()`` row named after the kernel, its NTFF in the profile;
  the numbers come from the interpreter running that Program on the tensors' bytes.
* CPU tensors: the interpreter, results as CPU tensors. Fake/meta tensors (``torch.compile`` tracing):
  outputs of the traced shapes, nothing runs.

``NKI_SIMULATOR=1`` or ``nki.simulate(kernel)`` runs the interpreter only (no device execution), like
Neuron's CPU simulator - but the timing is still there in ``kernel.last_run``.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..hw import HardwareSpec, get_spec, resolve
from ..isa import Program
from .errors import NkiUnsupportedError, NkiValidationError
from .dtypes import as_nki_dtype
from .lower import NkiEmitter, check, lower_into
from .tensor import REGIONS, SHARED_HBM, NkiTensor, Storage
from .trace import Tracer, natural_strides

if TYPE_CHECKING:
    from .report import RunReport

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
SIMULATOR_ENV = "NKI_SIMULATOR"
UNINIT_ENV = "TRNSCOPE_NKI_UNINITIALIZED"
_TARGETS = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2"}


def target_spec():
    """The target kernels compile for: ``NEURON_PLATFORM_TARGET_OVERRIDE``, else trnscope's instance."""
    v = os.environ.get(TARGET_ENV, "").strip().lower()
    if not v:
        return get_spec()
    if v in ("trn3", "gen4"):
        raise NkiUnsupportedError(f"{TARGET_ENV}={v}: NeuronCore-v4 (trn3) is not emulated; use trn1 or trn2")
    if v not in _TARGETS:
        raise NkiValidationError(f"{TARGET_ENV}={v!r} is not a target (trn1|inf2|gen2, trn2|gen3, trn3|gen4)")
    name = _TARGETS[v]
    spec = get_spec()
    return spec if spec.name == name else resolve(name)


@dataclass(frozen=True)
class ArgSpec:
    """A tensor argument by shape and dtype only: trace or time a kernel without data
    (``kernel.timeline(ArgSpec((4096, 8192), "bfloat16"), ...)``)."""
    shape: tuple
    dtype: object

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "dim") and hasattr(x, "device")


def _is_tensor_arg(x) -> bool:
    return isinstance(x, (np.ndarray, ArgSpec)) or _is_torch(x)


def _arg_key(x):
    if isinstance(x, np.ndarray):
        return ("t", tuple(x.shape), str(as_nki_dtype(x.dtype)))
    if isinstance(x, ArgSpec):
        return ("t", x.shape, str(as_nki_dtype(x.dtype)))
    if _is_torch(x):
        return ("t", tuple(x.shape), str(as_nki_dtype(x.dtype)))
    try:
        hash(x)
        return ("c", x)
    except TypeError:
        return ("c", repr(x))


@dataclass
class Traced:
    """A kernel specialised for one argument signature: its Program and how arguments map onto it."""
    name: str
    spec: HardwareSpec
    program: Program
    tracer: Tracer
    inputs: list            # (argument key (position or name), Storage, Program tensor index)
    outputs: list           # (Storage, Program tensor index)
    structure: int | tuple[int, ...] | None  # how outputs nest in the return value: None, int (single), tuple of ints
    mutated: list           # (argument key, Storage, tensor index) written by the kernel
    source: list            # source-location index per instruction
    trace_ns: int = 0
    lower_ns: int = 0
    fresh: bool = True      # this call traced it (its compile time is the host's)

    @property
    def compile_ns(self) -> int:
        return self.trace_ns + self.lower_ns


_SIGNATURES: dict = {}


def _tensor_args(fn, args, kwargs):
    """(bound arguments, [(key, name, value)] of tensor arguments) in the kernel's parameter order."""
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"kernel {fn.__name__}{sig}: {exc}") from None
    tensors = []
    for i, (name, value) in enumerate(bound.arguments.items()):
        p = sig.parameters[name]
        if p.kind is p.VAR_POSITIONAL:
            for j, v in enumerate(value):
                if _is_tensor_arg(v):
                    tensors.append(((name, j), f"{name}{j}", v))
        elif p.kind is p.VAR_KEYWORD:
            for k, v in value.items():
                if _is_tensor_arg(v):
                    tensors.append(((name, k), k, v))
        elif _is_tensor_arg(value):
            tensors.append(((name, None), name, value))
    return bound, tensors


def _substitute(bound, views: dict):
    args: list = []
    kwargs: dict = {}
    sig = bound.signature
    for name, value in bound.arguments.items():
        p = sig.parameters[name]
        if p.kind is p.VAR_POSITIONAL:
            args.extend(views.get((name, j), v) for j, v in enumerate(value))
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update({k: views.get((name, k), v) for k, v in value.items()})
        elif p.kind is p.KEYWORD_ONLY:
            kwargs[name] = views.get((name, None), value)
        else:
            args.append(views.get((name, None), value))
    return args, kwargs


def trace(fn, args, kwargs, spec, grid=(1,), name: str | None = None, arg_views=None,
          uninitialized: str | None = None, legacy: bool = False) -> tuple[Tracer, dict, list, int | tuple[int, ...] | None]:
    """Run ``fn`` once per program of the launch grid under a Tracer. Returns (tracer, input views by
    argument key, output storages, return structure)."""
    name = name or fn.__name__
    # 0.1 kernels compute unmasked on tiles whose masked rows were never written (by design, the rows are
    # never stored), so uninitialised reads are not errors there; the interpreter's NaN poison remains
    mode = uninitialized or os.environ.get(UNINIT_ENV, "ignore" if legacy else "error")
    if mode not in ("error", "warn", "ignore"):
        raise NkiValidationError(f"{UNINIT_ENV}={mode!r}: use error, warn or ignore")
    tr = Tracer(spec, name, uninitialized=mode, grid=tuple(grid), legacy=legacy)
    bound, tensors = _tensor_args(fn, args, kwargs)
    views: dict = {}
    with tr:
        loc = tr.def_location(fn)
        for key, pname, value in tensors:
            if arg_views is not None and key in arg_views:
                views[key] = arg_views[key](tr)
                continue
            shape = tuple(int(s) for s in value.shape) or (1,)
            dt = as_nki_dtype(value.dtype)
            st = tr.new_storage(Storage(REGIONS[SHARED_HBM], shape, dt, pname, None, loc, "input"))
            views[key] = NkiTensor._view(st, shape, natural_strides(shape), 0, dt)
        call_args, call_kwargs = _substitute(bound, views)
        results = []
        for pid in itertools.product(*(range(g) for g in tr.grid)):
            tr.program_id = pid
            tr.shared_seen = 0
            results.append(fn(*call_args, **call_kwargs))
    result = results[0]
    outs, structure = _outputs(tr, result)
    return tr, views, outs, structure


def _outputs(tr: Tracer, result) -> tuple[list, int | tuple[int, ...] | None]:
    structure: int | tuple[int, ...]
    if result is None:
        return [], None
    if isinstance(result, NkiTensor):
        items, structure = [result], 0
    elif isinstance(result, (tuple, list)) and all(isinstance(r, NkiTensor) for r in result):
        items, structure = list(result), tuple(range(len(result)))
    else:
        raise NkiValidationError(f"kernel {tr.kernel_name} returned {type(result).__name__}: return an NkiTensor in "
                                 f"shared HBM (nl.ndarray(..., buffer=nl.shared_hbm)), a tuple of them, or nothing")
    outs = []
    for r in items:
        st = r.storage
        if st.buffer != SHARED_HBM:
            raise NkiValidationError(f"kernel {tr.kernel_name} returns {st.label()}: outputs must be allocated in "
                                     f"nl.shared_hbm (since NKI 0.3)", tr.where(st.loc))
        if r.offset != 0 or r.shape != st.shape:
            raise NkiValidationError(f"kernel {tr.kernel_name} returns a view of {st.label()}: return the whole "
                                     f"tensor", tr.where(st.loc))
        outs.append(st)
    return outs, structure


def build(fn, args, kwargs, spec, grid=(1,), name: str | None = None, uninitialized: str | None = None,
          legacy: bool = False) -> Traced:
    """Trace and lower ``fn`` for these arguments: a standalone Program."""
    t0 = time.perf_counter_ns()
    tr, views, outs, structure = trace(fn, args, kwargs, spec, grid, name, uninitialized=uninitialized, legacy=legacy)
    t1 = time.perf_counter_ns()
    prog = Program(tr.kernel_name, target=spec.name)
    index: dict[int, int] = {}
    inputs, mutated = [], []
    written = {t.storage.id for op in tr.ops for t in op.writes}
    out_ids = {st.id for st in outs}
    for key, view in views.items():
        st = view.storage
        if st.id in out_ids:
            raise NkiValidationError(f"kernel {tr.kernel_name} returns its argument {st.name!r}: return a new "
                                     f"nl.shared_hbm tensor, or write the argument in place and return nothing")
        index[st.id] = prog.tensor(st.name, st.shape, st.dtype.device, "input")
        inputs.append((key, st, index[st.id]))
        if st.id in written:
            st.mutated = True
            mutated.append((key, st, index[st.id]))
    outputs = []
    for j, st in enumerate(outs):
        st.kind = "output"
        index[st.id] = prog.tensor(st.name or f"out{j}", st.shape, st.dtype.device, "output")
        outputs.append((st, index[st.id]))
    for st in tr.storages:
        if st.on_chip or st.id in index or st.first < 0:
            continue
        if st.kind == "const":
            index[st.id] = prog.tensor(st.name or f"const{st.id}", st.shape, st.dtype.device, "const",
                                       value=st.value)
        else:
            index[st.id] = prog.tensor(st.name or f"hbm{st.id}", st.shape, st.dtype.device, "scratch")
    em = NkiEmitter(prog, spec)
    with prog.origin(tr.kernel_name):
        source = lower_into(tr, prog, em, index)
    prog.meta["nki"] = source_meta(tr, source)
    check(prog, spec, tr, 0, source)
    _ = prog.neff_id  # hashing the NEFF is part of compiling it
    t2 = time.perf_counter_ns()
    return Traced(tr.kernel_name, spec, prog, tr, inputs, outputs, structure, mutated, source, t1 - t0, t2 - t1)


def source_meta(tr: Tracer, source: list[int]) -> dict:
    """The source map a NEFF carries: every kernel location, and each instruction's index into them."""
    # file names without their directory: the same kernel gives the same NEFF (hash) wherever it is checked out
    return {"kernel": tr.kernel_name, "locations": [f"{os.path.basename(f)}:{line} ({fn})" for f, line, fn in tr.locs],
            "instruction_location": list(source)}


# --- the decorator -----------------------------------------------------------------------------------------------

_SIM_MODE = object()


class Kernel:
    """What ``@nki.jit`` returns. Call it with NumPy arrays or torch tensors; ``kernel[grid](...)``
    launches an SPMD grid (``[lnc]`` in NKI 0.6: the LNC degree, which must be 1 here)."""

    def __init__(self, fn, grid=None, options: dict | None = None, legacy: bool = False) -> None:
        self.fn: Callable = fn.fn if isinstance(fn, Kernel) else fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.grid = grid
        self.options = dict(options or {})
        self.legacy = legacy
        self._cache: dict = {}
        self.last_run: RunReport | None = None

    def __repr__(self) -> str:
        return f"<nki kernel {self.__name__}>"

    def __getitem__(self, grid) -> "Kernel":
        g = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not all(isinstance(x, int) and x >= 1 for x in g):
            raise NkiValidationError(f"kernel[{grid}]: the launch grid takes positive integers")
        k = Kernel(self.fn, g, self.options, self.legacy)
        k._cache = self._cache
        return k

    def _grid(self) -> tuple:
        if self.grid is None:
            return (1,)
        if self.legacy or len(self.grid) > 1:
            return self.grid
        lnc = self.grid[0]
        env = os.environ.get(LNC_ENV, "1")
        if str(lnc) != env.strip():
            raise NkiValidationError(f"kernel[{lnc}] launches with LNC={lnc} but {LNC_ENV}={env}: the two must match "
                                     f"(Neuron error NCC_EVRF066)")
        if lnc != 1:
            raise NkiUnsupportedError(f"LNC={lnc}: trnscope emulates one physical NeuronCore per logical core "
                                      f"(LNC=1); LNC=2 kernels are not modelled")
        return (1,)

    def specialize(self, *args, **kwargs) -> Traced:
        """The Traced kernel for these arguments (traced and lowered on first use, then cached)."""
        spec = target_spec()
        grid = self._grid()
        key = (spec, grid, tuple(_arg_key(v) for v in args),
               tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = build(self.fn, args, kwargs, spec, grid, self.__name__,
                                           self.options.get("uninitialized"), self.legacy)
            hit.fresh = True
        else:
            hit.fresh = False
        return hit

    def timeline(self, *args, **kwargs) -> "RunReport":
        """Simulated timing of the kernel for these arguments (arrays, tensors or :class:`ArgSpec`),
        without computing any numbers."""
        from .report import RunReport

        traced = self.specialize(*args, **kwargs)
        from ..sim import simulate

        report = RunReport(traced, simulate(traced.program, traced.spec))
        self.last_run = report
        return report

    def __call__(self, *args, **kwargs):
        simulate_only = kwargs.pop("_trnscope_simulate", False) or os.environ.get(SIMULATOR_ENV, "0") == "1"
        return _entry()(self, args, kwargs, simulate_only)


_ENTRY = None


def _entry():
    """run_kernel, hidden from Dynamo when torch is loaded: a kernel called inside a compiled function
    (without nki_op/wrap_nki) is a graph break, as a Python-level call it cannot trace."""
    global _ENTRY
    if _ENTRY is None:
        from .run import run_kernel

        if "torch" not in sys.modules:
            return run_kernel
        import torch

        _ENTRY = torch._dynamo.disable(run_kernel, recursive=True)
    return _ENTRY


def jit(fn=None, **kwargs):
    """``@nki.jit`` / ``@nki.jit(...)``: a :class:`Kernel` (options: ``uninitialized='error'|'warn'|'ignore'``;
    Neuron's ``compile_config``/``specialization_config``/``debug`` keywords are accepted and ignored)."""
    if fn is None:
        return lambda f: Kernel(f, options=kwargs)
    return Kernel(fn, options=kwargs)


def simulate(kernel):
    """``nki.simulate(kernel)(*args)``: run the kernel on the interpreter only (no device execution)."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def run(*args, **kwargs):
        return k(*args, _trnscope_simulate=True, **kwargs)
    run.kernel = k
    return run
