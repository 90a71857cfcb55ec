"""NKI kernels from PyTorch: ``nki_op`` (a ``torch.library`` custom op) and ``wrap_nki``, as TorchNeuron has them.

``@nki_op("mylib::my_add", mutates_args=())`` over a function that calls ``@nki.jit`` kernels makes a
custom op: eager calls run the function (each kernel a device execution on ``neuron`` tensors, the
interpreter on CPU ones); its fake is the same function, in which kernels return outputs of their
traced shapes; ``register_autograd`` works as for any custom op.

Inside ``torch.compile(backend="neuron")`` the op is one node of the FX graph, and the graph compiler
lowers it like any other op: the kernel's instructions join the graph's NEFF (the NKI language guide's
"graph-compiler linking" stage), reading and writing the graph's HBM tensors, ordered against the
kernels around it by the same semaphores. A function that does more than call kernels on its tensors
(other torch ops in between) cannot be linked; the graph then runs op by op, with a warning.

``wrap_nki(kernel)`` turns a kernel into such an op directly (one custom op per argument signature,
non-tensor arguments baked in), so ``torch.compile`` sees it as an opaque node too.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable

from .errors import NkiError
from .jit import Kernel, _tensor_args

_capture = threading.local()
_wrapped_ids = itertools.count()


class GraphLinkError(NkiError):
    """An nki_op's function cannot be linked into a graph's NEFF (the graph falls back to eager)."""


def capturing():
    return getattr(_capture, "calls", None)


def nki_op(name: str, fn: Callable | None = None, *, mutates_args=(), schema: str | None = None,
           device_types=None):
    """Register ``fn`` (which calls NKI kernels) as the custom op ``name`` (``"namespace::op"``)."""
    import torch

    def register(f: Callable):
        op = torch.library.custom_op(name, f, mutates_args=mutates_args, schema=schema, device_types=device_types)
        op.register_fake(f)
        _register_lowering(name, f, op)
        return op

    return register(fn) if fn is not None else register


def wrap_nki(kernel) -> "WrappedKernel":
    """A callable that runs ``kernel`` through a custom op (Dynamo-opaque). Non-tensor arguments are constants
    baked in per call signature; the kernel must return its outputs (an argument it writes needs nki_op with
    mutates_args)."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    return WrappedKernel(kernel)


# call signature id -> (kernel, positional template, keyword template): tensors are slots (None), the rest
# constants. One custom op per wrapped kernel takes (Tensor[] tensors, int call) and returns Tensor[].
_CALLS: dict[int, tuple] = {}
_CALL_IDS: dict[tuple, int] = {}
_STRUCTURES: dict[int, object] = {}


def _call_of(tensors, call: int):
    kernel, args, kwargs = _CALLS[call]
    it = iter(tensors)
    a = [next(it) if v is None else v[1] for v in args]
    k = {name: (next(it) if v is None else v[1]) for name, v in kwargs}
    out = kernel(*a, **k)
    if out is None:
        _STRUCTURES[call] = None
        return []
    if isinstance(out, (tuple, list)):
        _STRUCTURES[call] = len(out)
        return list(out)
    _STRUCTURES[call] = 0
    return [out]


_HELPERS: dict = {}


def _register_call():
    """(wrapper id, templates) -> call id, run for real while Dynamo traces (its result is a constant)."""
    fn = _HELPERS.get("register")
    if fn is None:
        import torch

        def register(ident, a_tpl, k_tpl):
            key = (ident, a_tpl, k_tpl)
            call = _CALL_IDS.get(key)
            if call is None:
                call = _CALL_IDS[key] = len(_CALL_IDS)
                kernel = _WRAPPERS[ident]
                _CALLS[call] = (kernel, a_tpl, k_tpl)
            return call
        fn = _HELPERS["register"] = torch._dynamo.assume_constant_result(register)
    return fn


def _structure_of():
    fn = _HELPERS.get("structure")
    if fn is None:
        import torch

        fn = _HELPERS["structure"] = torch._dynamo.assume_constant_result(lambda call: _STRUCTURES.get(call, 0))
    return fn


_WRAPPERS: dict[int, Kernel] = {}


class WrappedKernel:
    def __init__(self, kernel: Kernel, grid=None, op=None, ident=None) -> None:
        import torch

        self.kernel = kernel if grid is None else kernel[grid]
        self._base = kernel
        self.__name__ = kernel.__name__
        self._id = ident if ident is not None else next(_wrapped_ids)
        if grid is not None:
            self._id = (self._id if ident is None else ident, tuple(grid) if isinstance(grid, (tuple, list))
                        else (grid,))
        _WRAPPERS[self._id] = self.kernel
        _register_call(), _structure_of()  # made before Dynamo sees a call: it cannot trace their creation
        if op is None:
            op = torch.library.custom_op(f"nki_wrapped::{kernel.__name__}_{self._id}", _call_of, mutates_args=(),
                                         schema="(Tensor[] tensors, int call) -> Tensor[]")
            op.register_fake(_call_of)
            _register_lowering(f"nki_wrapped::{kernel.__name__}_{self._id}",
                               _call_of, op, wrapped=True)
        self._op = op

    def __getitem__(self, grid) -> "WrappedKernel":
        return WrappedKernel(self._base, grid, self._op, self._id)

    def __call__(self, *args, **kwargs):
        import torch

        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        tensors += [v for _, v in sorted(kwargs.items()) if isinstance(v, torch.Tensor)]
        a_tpl = tuple(None if isinstance(a, torch.Tensor) else ("c", a) for a in args)
        k_tpl = tuple((k, None if isinstance(v, torch.Tensor) else ("c", v)) for k, v in sorted(kwargs.items()))
        call = _HELPERS["register"](self._id, a_tpl, k_tpl)
        outs = self._op(tensors, call)
        structure = _HELPERS["structure"](call)
        if structure is None:
            return None
        return outs[0] if structure == 0 else tuple(outs)


# --- linking into a graph's NEFF ---------------------------------------------------------------------------

def _register_lowering(name: str, fn: Callable, op, wrapped: bool = False) -> None:
    from ..compiler.graph import LINKED

    def lower(ctx) -> None:
        link(ctx, fn, wrapped)

    lower.__name__ = f"lower_{name.replace('::', '_')}"
    LINKED[name] = lower


def link(ctx, fn: Callable, wrapped: bool = False) -> None:
    """Emit the kernels ``fn`` calls into the graph's Program (``ctx`` is the op's LoweringContext).
    ``wrapped``: ``fn`` is a wrap_nki op's (tensors, call) function."""
    import torch

    from ..compiler.lowering import NoLowering
    from ..nki.run import torch_dtype  # noqa: F401 - dtype table shared with the runtime path

    metas = [m for m in ctx.call.inputs]
    stand_ins: list = []
    known: dict[int, tuple] = {}  # id(meta tensor) -> (HBM tensor index, TensorMeta)
    for m, idx in zip(metas, ctx.inputs):
        if m is None:
            stand_ins.append(None)
            continue
        t = torch.empty_strided(m.shape, m.stride, dtype=_torch_dtype(m.dtype), device="meta")
        stand_ins.append(t)
        known[id(t)] = (idx, m)
    attrs = dict(ctx.call.attrs)
    if wrapped:
        args = [[t for t in stand_ins if t is not None], attrs["call"]]
    else:
        args = _rebuild_args(fn, stand_ins, attrs)
    calls: list = []
    _capture.calls = calls
    try:
        result = fn(*args)
    finally:
        _capture.calls = None
    outs = [result] if isinstance(result, torch.Tensor) else [r for r in (result or ()) if isinstance(r, torch.Tensor)]
    out_slots = {id(t): (ctx.outputs[i], ctx.call.outputs[i]) for i, t in enumerate(outs) if i < len(ctx.outputs)}
    if not calls:
        raise NoLowering(f"{ctx.call.name}: its function calls no NKI kernel")
    for kernel, kargs, kkwargs, ret in calls:
        _link_call(ctx, kernel, kargs, kkwargs, ret, known, out_slots)


def _link_call(ctx, kernel: Kernel, args, kwargs, ret, known: dict, out_slots: dict) -> None:
    import torch

    from ..compiler.meta import TensorMeta
    from .jit import source_meta, target_spec, trace
    from .lower import NkiEmitter, lower_into
    from .tensor import REGIONS, SHARED_HBM, NkiTensor, Storage

    spec = ctx.spec
    if target_spec().name != spec.name:
        raise GraphLinkError(f"kernel {kernel.__name__} targets {target_spec().name}; the graph is for {spec.name}")
    bound, tensors = _tensor_args(kernel.fn, args, kwargs)
    binding: dict = {}
    for key, pname, t in tensors:
        slot = known.get(id(t)) or out_slots.get(id(t))
        if slot is None:
            raise GraphLinkError(f"kernel {kernel.__name__}'s argument {pname!r} is neither an input of the op, its "
                                 f"output, nor a tensor an earlier kernel returned")
        idx, meta = slot
        binding[key] = (idx, meta, pname)

    def view_maker(key):
        idx, meta, pname = binding[key]

        def make(tr):
            span = max(1, meta.span())
            dt = _nki_dtype(meta.dtype)
            st = tr.new_storage(Storage(REGIONS[SHARED_HBM], (span,), dt, pname, None, -1, "input"))
            st.placed = idx
            return NkiTensor._view(st, tuple(meta.shape), tuple(meta.stride), 0, dt)
        return make

    tr, views, outs, structure = trace(kernel.fn, args, kwargs, spec, kernel._grid(), kernel.__name__,
                                       arg_views={key: view_maker(key) for key in binding},
                                       uninitialized=kernel.options.get("uninitialized"), legacy=kernel.legacy)
    prog = ctx.program
    index: dict[int, int] = {}
    for key, view in views.items():
        index[view.storage.id] = view.storage.placed
    rets = [ret] if isinstance(ret, torch.Tensor) else [r for r in (ret or ()) if isinstance(r, torch.Tensor)]
    for st, r in zip(outs, rets):
        slot = out_slots.get(id(r))
        if slot is not None:
            index[st.id] = slot[0]
        else:  # an intermediate between two kernels of the op: a scratch tensor of the graph
            meta = TensorMeta.contiguous(st.shape, st.dtype.device)
            index[st.id] = meta.bind(prog, f"nki_{kernel.__name__}_{st.id}", "scratch")
            known[id(r)] = (index[st.id], meta)
    for st in tr.storages:
        if st.on_chip or st.id in index or st.first < 0:
            continue
        if st.kind == "const":
            index[st.id] = prog.tensor(f"nki_const{st.id}", st.shape, st.dtype.device, "const", value=st.value)
        else:
            index[st.id] = prog.tensor(f"nki_hbm{st.id}", st.shape, st.dtype.device, "scratch")
    em = NkiEmitter.over(ctx.kb)
    first = len(prog.instructions)
    source = lower_into(tr, prog, em, index)
    links = prog.meta.setdefault("nki_linked", [])
    links.append({"first_instruction": first, **source_meta(tr, source)})


def _rebuild_args(fn, stand_ins, attrs):
    import inspect

    sig = inspect.signature(fn)
    args, it = [], iter(stand_ins)
    for name, p in sig.parameters.items():
        if name in attrs:
            args.append(attrs[name])
        else:
            args.append(next(it, None))
    return args


def _torch_dtype(dt):
    from .dtypes import as_nki_dtype
    from .run import torch_dtype

    return torch_dtype(as_nki_dtype(dt))


def _nki_dtype(dt):
    from .dtypes import as_nki_dtype

    return as_nki_dtype(dt)
