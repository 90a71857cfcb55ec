"""Host execution of ATen ops on ``neuron`` tensors: exact PyTorch numerics, zero copy.

:func:`run` is what :meth:`trnscope.device.dispatch.DispatchedOp.run_on_host` calls. A few ops are
implemented here directly (allocation, views, resize/set, cross-device copies, scalar reads);
every other op is run by ATen's CPU kernel on CPU views of the same device bytes
(:func:`trnscope.device.memory.host_view`), and its results are mapped back:

* a result that is one of the argument views (in-place and ``out=`` ops) becomes that argument's
  ``neuron`` tensor again (with its geometry updated if the kernel resized or re-strided it);
* a result that aliases an argument's memory (view ops) becomes a ``neuron`` view of that
  argument's storage with the same sizes, strides and offset;
* a fresh result gives its host buffer to a new ``neuron`` storage (no copy) and is accounted as
  an allocation.

Nothing here dispatches an op on a ``neuron`` tensor, so one op reaching the device is exactly
one call of the entry point.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import caches
from . import _devices, memory, rng

BACKEND = _devices.BACKEND
_CPU = torch.device("cpu")
_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_aten = torch.ops.aten

# ops whose CPU kernels accept CPU index tensors next to device tensors, as CUDA's do
_MIXED_DEVICE_OK = {
    "aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
    "aten::_unsafe_index", "aten::_unsafe_index_put", "aten::copy_", "aten::set_",
}


_NUMBERS = (bool, int, float, complex)


def _is_tensor_type(t) -> bool:
    return isinstance(t, torch._C.TensorType) or (
        isinstance(t, torch._C.OptionalType) and isinstance(t.getElementType(), torch._C.TensorType)
    )


# functional ops whose output geometry can depend on the values of their inputs (a boolean mask
# index selects as many elements as it has True values): always computed fresh
_DATA_DEPENDENT_SHAPE = {"aten::index.Tensor"}
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


def _out_variant(op) -> tuple:
    """(the ``out=`` overload of structured functional ``op``, its out argument names), or
    (None, ()): the overload with the same arguments plus one out tensor per result, whose CPU
    kernel is the same structured implementation as ``op``'s."""
    schema = op._schema
    name = op.name()
    if (schema.is_mutable or not schema.returns or name in _DATA_DEPENDENT_SHAPE
            or any(a.is_out for a in schema.arguments) or any(r.alias_info is not None for r in schema.returns)
            or not _has_kernel(name, "CompositeExplicitAutogradNonFunctional")):
        return None, ()
    want = [(a.name, str(a.type)) for a in schema.arguments]
    packet = op.overloadpacket
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        arguments = cand._schema.arguments
        outs = tuple(a.name for a in arguments if a.is_out)
        if (len(outs) == len(schema.returns) and _has_kernel(cand.name(), "CPU")
                and [(a.name, str(a.type)) for a in arguments if not a.is_out] == want):
            return cand, outs
    return None, ()


class _OpInfo:
    __slots__ = ("op", "seeded", "out_names", "schema_outs", "check_devices", "tensor_args", "siblings",
                 "out_variant", "out_args", "written", "outputs_follow", "_runtime")

    def __init__(self, op) -> None:
        schema = op._schema
        self.op = op
        self.seeded = torch.Tag.nondeterministic_seeded in op.tags
        self.out_names = tuple(
            a.name for a in schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
        )
        self.check_devices = schema.name not in _MIXED_DEVICE_OK
        self.schema_outs = tuple(a.name for a in schema.arguments if a.is_out)
        # positions where ATen may hand us a wrapped number as a Python scalar, unless the op is
        # one whose Python binding accepts numbers for tensors anyway (add, mul, div, sub...)
        packet = schema.name.split("::", 1)[-1]
        self.tensor_args = () if torch._C._should_allow_numbers_as_tensors(packet) else tuple(
            (i, a.name) for i, a in enumerate(schema.arguments) if _is_tensor_type(a.type)
        )
        self.siblings: dict[frozenset, Any] = {}
        self.out_variant, self.out_args = _out_variant(op)
        # arguments the kernel may write, resize or re-stride: they get views of their own
        self.written = frozenset(
            key for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
            for key in (i, a.name))
        # the result is determined by the call's signature: a planned out= call, or results that
        # are the (written) arguments themselves
        self.outputs_follow = self.out_variant is not None or all(r.alias_info is not None for r in schema.returns)
        self._runtime: tuple | None = None

    @property
    def runtime_scalars(self) -> tuple:
        """(position -> specials, name -> specials) of the arguments the op's device kernel takes as
        runtime scalars (compiler.scalars): their values stay out of its signature. Empty maps for
        an op without a kernel or without such arguments."""
        if self._runtime is None:
            from ..compiler.lowering import runtime_scalars
            from ..compiler.opcall import functional_name

            decl = runtime_scalars(functional_name(self.op))
            args = [a for a in self.op._schema.arguments if not a.is_out]
            self._runtime = ({i: decl[a.name] for i, a in enumerate(args) if a.name in decl},
                             {a.name: decl[a.name] for a in args if a.name in decl})
        return self._runtime


# by id, checked against the op: an OpOverload hashes in Python, and every op looks here
_infos: dict[int, _OpInfo] = {}
caches.register("device.host: op facts", _infos.clear)


def _info(op) -> _OpInfo:
    info = _infos.get(id(op))
    if info is None or info.op is not op:
        info = _infos[id(op)] = _OpInfo(op)
    return info


def _is_neuron(t: torch.Tensor) -> bool:
    return t.device.type == BACKEND


class _Mapping:
    """Arguments mapped to the host for one op, and the way back."""

    __slots__ = ("views", "bases", "cpu", "device", "adopted", "other")

    def __init__(self) -> None:
        self.other: int | None = None  # a second NeuronCore among the arguments
        self.views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(host view) -> (view, neuron)
        self.bases: dict[int, torch.Tensor] = {}  # storage address -> a neuron tensor on it
        self.cpu: list[torch.Tensor] = []  # CPU tensors among the arguments
        self.device: int | None = None
        self.adopted: dict[int, torch.UntypedStorage] = {}

    def to_host(self, x, read: bool = False):
        """``x`` with its neuron tensors as host views (``read``: the kernel only reads them)."""
        if isinstance(x, torch.Tensor):
            if not x.is_cpu and _is_neuron(x):
                index = x.get_device()
                if self.device is None:
                    self.device = index
                elif index != self.device:
                    self.other = index
                v = memory.read_view(x) if read else memory.host_view(x)
                self.views[id(v)] = (v, x)
                ptr = x.untyped_storage().data_ptr()
                if ptr:
                    self.bases[ptr] = x
                return v
            self.cpu.append(x)
            return x
        t = type(x)
        if t is list or t is tuple:
            return t(self.to_host(i, read) for i in x)
        if t is torch.device and x.type == BACKEND:
            if self.device is None:
                self.device = _devices.index_of(x)
            return _CPU
        return x

    def check_devices(self, op) -> None:
        if self.other is not None:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{BACKEND}:{self.device} and {BACKEND}:{self.other}! (when running {op.name()}). Move "
                f"them to one NeuronCore first, e.g. with .to(\"{BACKEND}:{self.device}\")."
            )
        if self.views and self.cpu:
            for c in self.cpu:
                if c.dim() > 0 and c.device.type == "cpu":
                    raise RuntimeError(
                        "Expected all tensors to be on the same device, but found at least two "
                        f"devices, {BACKEND}:{self.device or 0} and cpu! (when running {op.name()})"
                    )

    def from_host(self, o):
        if isinstance(o, torch.Tensor):
            hit = self.views.get(id(o))
            if hit is not None and hit[0] is o:
                return _sync_geometry(hit[1], o, self)
            st = o.untyped_storage()
            ptr = st.data_ptr()
            base = self.bases.get(ptr) if ptr else None
            if base is not None:  # a view of an argument's memory
                return memory.wrap(base.untyped_storage(), o.dtype, o.size(), o.stride(), o.storage_offset())
            nst = self.adopted.get(ptr) if ptr else None
            if nst is None:
                if ptr and any(ptr == c.untyped_storage().data_ptr() for c in self.cpu):
                    o = o.clone()  # never hand a CPU argument's memory to the device
                    st = o.untyped_storage()
                    ptr = st.data_ptr()
                nst = memory.adopt(st, self.device if self.device is not None else _devices.current())
                if ptr:
                    self.adopted[ptr] = nst
            return memory.wrap(nst, o.dtype, o.size(), o.stride(), o.storage_offset())
        t = type(o)
        if t is list or t is tuple:
            return t(self.from_host(i) for i in o)
        return o


def _sync_geometry(n: torch.Tensor, v: torch.Tensor, mapping: _Mapping | None = None) -> torch.Tensor:
    """Carry a kernel's metadata change of host view ``v`` (resize, restride, set_) over to ``n``."""
    vptr = v.untyped_storage().data_ptr()
    nst = n.untyped_storage()
    if vptr != nst.data_ptr():
        base = mapping.bases.get(vptr) if (mapping is not None and vptr) else None
        if base is None:
            raise RuntimeError(
                "trnscope: a kernel moved a neuron tensor onto memory that is not device memory"
            )
        nst = base.untyped_storage()
    elif v.size() == n.size() and v.stride() == n.stride() and v.storage_offset() == n.storage_offset():
        return n
    memory.set_metadata(n, nst, v.storage_offset(), v.size(), v.stride())
    return n


# --------------------------------------------------------------------------------------------
# generic: ATen's CPU kernel on host views


def _numbers_at_tensor_args(info: _OpInfo, args: tuple, kwargs: dict) -> frozenset:
    hits = []
    for i, name in info.tensor_args:
        v = args[i] if i < len(args) else kwargs.get(name)
        if type(v) in _NUMBERS:
            hits.append(name)
    return frozenset(hits)


def _scalar_sibling(op, info: _OpInfo, names: frozenset):
    """The overload of ``op``'s packet that takes ``names`` as Scalars and is otherwise the same."""
    if names in info.siblings:
        return info.siblings[names]
    found = None
    mine = op._schema
    packet = op.overloadpacket
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        sch = cand._schema
        if len(sch.arguments) != len(mine.arguments) or len(sch.returns) != len(mine.returns):
            continue
        ok = True
        for a, b in zip(mine.arguments, sch.arguments):
            # we pass keyword-only arguments by name, so the sibling may take them either way
            if a.name != b.name or (b.kwarg_only and not a.kwarg_only):
                ok = False
            elif a.name in names:
                ok = str(b.type) == "Scalar"
            else:
                ok = str(a.type) == str(b.type)
            if not ok:
                break
        if ok:
            found = cand
            break
    info.siblings[names] = found
    return found


def _as_tensors(info: _OpInfo, names: frozenset, args: tuple, kwargs: dict):
    """Last resort for a number where a Tensor is expected: a 0-dim CPU tensor that promotes like
    the wrapped number it was (float: float64 next to floating tensors, else the default dtype)."""
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    has_float = any(t.is_floating_point() for t in tensors)
    has_complex = any(t.is_complex() for t in tensors)

    def conv(v):
        if type(v) is float:
            return torch.tensor(v, dtype=torch.float64 if (has_float or has_complex) else torch.get_default_dtype())
        if type(v) is complex:
            return torch.tensor(v, dtype=torch.complex128 if has_complex else None)
        return torch.tensor(v)

    listed = list(args)
    kwargs = dict(kwargs)
    for i, name in info.tensor_args:
        if name in names:
            if i < len(listed):
                listed[i] = conv(listed[i])
            else:
                kwargs[name] = conv(kwargs[name])
    return tuple(listed), kwargs


def _run_on_host(op, info: _OpInfo, call, hargs: tuple, hkwargs: dict, kwargs: dict, device: int | None):
    if call is op and info.tensor_args:
        # a scalar that C++ wrapped as a tensor ("wrapped number") reaches Python as a number, and
        # most overloads do not take numbers for tensors: use the overload that takes a Scalar
        # (whose CPU kernel wraps it again, exactly), else an equivalent 0-dim tensor
        names = _numbers_at_tensor_args(info, hargs, hkwargs)
        if names:
            sibling = _scalar_sibling(op, info, names)
            if sibling is not None:
                call = sibling
            else:
                hargs, hkwargs = _as_tensors(info, names, hargs, hkwargs)
    if info.seeded and kwargs.get("generator") is None:
        with rng.active(device if device is not None else _devices.current()):
            return call(*hargs, **hkwargs)
    return call(*hargs, **hkwargs)


# --------------------------------------------------------------------------------------------
# structured functional ops: output from device memory, then the out= kernel
#
# A structured op's output geometry (sizes, strides, dtype) is a function of its arguments'
# geometry and its other arguments' values, which is what its meta function computes before the
# kernel runs. The first call of a signature computes the result the plain way (ATen's CPU
# functional kernel, whose fresh buffer becomes device memory); its geometry is remembered, and
# repeat calls allocate their outputs from the device allocator (accounted, cached buffers reused,
# an out-of-memory error before any compute) and run the out= kernel into them, exactly what the
# CompositeExplicitAutogradNonFunctional wrapper this replaces does, without its second trip
# through Python.

GEOMETRY_CACHE_SIZE = 8192
_geometry: dict = {}
caches.register("device.host: output geometries", _geometry.clear)
_UNPLANNABLE = object()


def arg_signature(v):
    """The part of a :func:`signature` one argument (or result) contributes."""
    if isinstance(v, torch.Tensor):
        if v.is_cpu:  # a 0-dim CPU tensor is a value next to device tensors: part of the signature
            return ("cpu", v.dtype, v.shape, v.stride(), v.item() if v.dim() == 0 else None)
        return (v.dtype, v.shape, v.stride())
    t = type(v)
    if t is list or t is tuple:
        return tuple(arg_signature(x) for x in v)
    # the type too: 1, 1.0 and True are equal keys but promote (and lower) differently
    return (t, v)


_RUNTIME = "runtime"  # a runtime scalar's place in a signature: its type counts, its value does not
_VALUE_DTYPES = (torch.bool, torch.complex64, torch.complex128)  # 0-dim tensors whose value is no operand


def runtime_signature(v, specials: tuple):
    """:func:`arg_signature` of an argument the op's kernel takes as a runtime scalar: a number (or
    a 0-dim CPU tensor) by its type, and by its value only when the kernel specialises on it."""
    from ..compiler.scalars import special_of

    t = type(v)
    if t is int or t is float:
        special = special_of(v, specials) if specials else None
        return (t, _RUNTIME if special is None else special)
    if isinstance(v, torch.Tensor) and v.is_cpu and v.dim() == 0 and v.dtype not in _VALUE_DTYPES:
        special = special_of(v.item(), specials) if specials else None
        return ("cpu", v.dtype, v.shape, v.stride(), _RUNTIME if special is None else special)
    return arg_signature(v)


def signature(op, args: tuple, kwargs: dict):
    """A hashable key of everything about a call that decides its results' geometry and its device
    kernel: the op, the dtypes, sizes and strides of its tensors, the values of its other
    arguments and of 0-dim CPU tensors, and the default dtype (which decides e.g. the result
    dtype of an integer tensor plus a float). The values of the arguments its kernel takes as
    runtime scalars are left out (only their type counts, which type promotion depends on), and
    so are storage offsets: they change neither. None when an argument cannot be part of a key."""
    info = _info(op)
    try:  # the op's _OpInfo stands for it: it is one per op and hashes in C
        by_pos, by_name = info.runtime_scalars
        if by_pos or by_name:
            sig_args = tuple(arg_signature(a) if i not in by_pos else runtime_signature(a, by_pos[i])
                             for i, a in enumerate(args))
            sig_kwargs = tuple((k, arg_signature(v) if k not in by_name else runtime_signature(v, by_name[k]))
                               for k, v in kwargs.items()) if kwargs else ()
        else:
            sig_args = tuple(arg_signature(a) for a in args)
            sig_kwargs = tuple((k, arg_signature(v)) for k, v in kwargs.items()) if kwargs else ()
        key = (info, torch.get_default_dtype(), sig_args, sig_kwargs)
        hash(key)
    except (TypeError, RuntimeError):
        return None
    return key


def out_names(op) -> tuple:
    """The names of ``op``'s out= arguments, in schema order."""
    return _info(op).schema_outs


def outputs_follow(op) -> bool:
    """Whether a call's :func:`signature` also decides the geometry of what it returns."""
    return _info(op).outputs_follow


def eager_plan(op, args: tuple, kwargs: dict, key, outs: tuple):
    """How the C++ eager path computes a planned call of ``op`` (its :func:`signature` ``key``, taken
    before the call) whose outputs were ``outs``: (out= overload name, its overload name, the out
    arguments' positions, its argument count, [(sizes, strides, dtype)] of the outputs) for a
    functional op (outputs from the device allocator, numbers from the out= kernel, as
    :func:`_compute_functional` does); empty for an op whose results are its arguments (in-place,
    out=) when the kernel left their geometry as it was; None otherwise (fresh tensors of the
    kernel's own making, outputs the kernel had to resize: the Python host serves those)."""
    info = _info(op)
    if op is _aten._copy_from.default:  # between two tensors of one core: a copy of host views
        return ("aten::_copy_from", "", [], 0, [])
    out = info.out_variant
    if out is not None:
        if not outs or not all(isinstance(o, torch.Tensor) and _is_neuron(o) for o in outs):
            return None
        name, _, overload = out.name().partition(".")
        args = out._schema.arguments
        positions = [i for i, a in enumerate(args) if a.is_out]
        if len(positions) != len(outs):  # an out= list (Tensor(a!)[]): one argument, many tensors
            return None
        return (name, overload, positions, len(args), [(list(o.shape), list(o.stride()), o.dtype) for o in outs])
    if not info.outputs_follow or key is None:
        return None
    _, _, sig_args, sig_kwargs = key
    before = dict(sig_kwargs)
    for k in info.written:
        v = (args[k] if k < len(args) else None) if type(k) is int else kwargs.get(k)
        if isinstance(v, torch.Tensor) and (before.get(k) if type(k) is str else sig_args[k]) != arg_signature(v):
            return None
    return ("", "", [], 0, [])


def runtime_scalar_slots(op) -> list[tuple[int, list[float]]]:
    """[(argument position, the values its kernel specialises on)] of the arguments ``op``'s device
    kernel takes as runtime scalars (what :func:`signature` keys by type only), for the C++ eager
    path's key."""
    by_pos, _ = _info(op).runtime_scalars
    return sorted((i, [float(s) for s in specials if type(s) in (int, float)]) for i, specials in by_pos.items())


def _remember_geometry(key, result) -> None:
    if type(result) is tuple:
        outs = result
    else:
        outs = (result,)
    geo = _UNPLANNABLE
    if all(isinstance(o, torch.Tensor) and _is_neuron(o) for o in outs):
        geo = (type(result) is tuple, tuple((tuple(o.shape), o.stride(), o.dtype) for o in outs))
    if len(_geometry) >= GEOMETRY_CACHE_SIZE:  # the oldest goes (pop: another thread may be evicting too)
        _geometry.pop(next(iter(_geometry)), None)
    _geometry[key] = geo


def _device_of(args: tuple, kwargs: dict) -> int:
    for v in args if not kwargs else list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor):
            if not v.is_cpu and _is_neuron(v):
                return v.get_device()
        elif type(v) is list or type(v) is tuple:
            for x in v:
                if isinstance(x, torch.Tensor) and not x.is_cpu and _is_neuron(x):
                    return x.get_device()
    return _devices.current()


def _compute_functional(op, info: _OpInfo, args: tuple, kwargs: dict, key):
    if key is None:
        key = signature(op, args, kwargs)
    geo = _geometry.get(key) if key is not None else None
    if geo is None:
        result = _compute_plain(op, info, args, kwargs, None)
        if key is not None:
            _remember_geometry(key, result)
        return result
    if geo is _UNPLANNABLE:
        return _compute_plain(op, info, args, kwargs, None)
    is_tuple, shapes = geo
    device = _device_of(args, kwargs)
    outs = [memory.empty_strided(size, stride, dtype, device) for size, stride, dtype in shapes]
    out_kwargs = dict(kwargs)
    for name, o in zip(info.out_args, outs):
        out_kwargs[name] = o
    result = _compute(info.out_variant, args, out_kwargs)
    return tuple(result) if is_tuple else result


def _compute(op, args: tuple, kwargs: dict, host_op=None, key=None):
    """Run ``host_op`` (default: ``op`` itself) on host views of ``op``'s arguments. ``key``: the
    call's :func:`signature` if the caller has it."""
    info = _info(op)
    if info.out_variant is not None and host_op is None:
        return _compute_functional(op, info, args, kwargs, key)
    return _compute_plain(op, info, args, kwargs, host_op)


def _compute_plain(op, info: _OpInfo, args: tuple, kwargs: dict, host_op):
    m = _Mapping()
    written = info.written
    if written:
        hargs = tuple(m.to_host(a, i not in written) for i, a in enumerate(args))
        hkwargs = {k: m.to_host(v, k not in written) for k, v in kwargs.items()} if kwargs else {}
    else:
        hargs = m.to_host(args, True)
        hkwargs = {k: m.to_host(v, True) for k, v in kwargs.items()} if kwargs else {}
    if info.check_devices:
        m.check_devices(op)
    try:
        out = _run_on_host(op, info, host_op if host_op is not None else op, hargs, hkwargs, kwargs, m.device)
    except RuntimeError as e:
        if info.out_names and "not resizable" in str(e):
            return _compute_growing_outs(op, args, kwargs, info)
        raise
    return m.from_host(out)


def _compute_growing_outs(op, args: tuple, kwargs: dict, info: _OpInfo):
    """An ``out=`` op whose outputs need more memory than they have: compute into fresh host
    tensors, then move the ``neuron`` outputs onto those buffers (as ``resize_`` would)."""
    m = _Mapping()
    hargs = m.to_host(args)
    hkwargs: dict = {}
    fresh: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for k, v in kwargs.items():
        if k in info.out_names and isinstance(v, torch.Tensor) and _is_neuron(v):
            h = torch.empty(0, dtype=v.dtype)
            fresh[id(h)] = (h, v)
            hkwargs[k] = h
        else:
            hkwargs[k] = m.to_host(v)
    out = _run_on_host(op, info, op, hargs, hkwargs, kwargs, m.device)
    for h, n in fresh.values():
        nst = memory.adopt(h.untyped_storage(), n.device.index or 0)
        memory.set_metadata(n, nst, h.storage_offset(), h.size(), h.stride())

    def back(o):
        if isinstance(o, torch.Tensor) and id(o) in fresh:
            return fresh[id(o)][1]
        if type(o) in (list, tuple):
            return type(o)(back(i) for i in o)
        return m.from_host(o)

    return back(out)


# --------------------------------------------------------------------------------------------
# the ops that must be special


def _check_layout(layout) -> None:
    if layout is not None and layout != torch.strided:
        raise RuntimeError(f"{BACKEND} tensors support only the strided layout, not {layout}")


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_layout(layout)
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    size = [int(s) for s in size]
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        stride = memory.contiguous_strides(size)
    else:
        stride = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format).stride()
    return memory.empty_strided(size, stride, dtype, _devices.index_of(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _check_layout(layout)
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    return memory.empty_strided(size, stride, dtype, _devices.index_of(device))


def _view(self, size):
    return _aten.view.default.redispatch(_CPU_KEYSET, self, size)


def _as_strided(self, size, stride, storage_offset=None):
    return _aten.as_strided.default.redispatch(_CPU_KEYSET, self, size, stride, storage_offset)


def _reshape_alias(self, size, stride):
    return _aten._reshape_alias.default.redispatch(_CPU_KEYSET, self, size, stride)


def _host(t: torch.Tensor) -> torch.Tensor:
    return memory.host_view(t) if _is_neuron(t) else t


def _copy_from(self, dst, non_blocking=False):
    _host(dst).copy_(_host(self))
    return dst


def _copy_from_and_resize(self, dst):
    if _is_neuron(dst):
        _resize_(dst, self.size())
    else:
        dst.resize_(self.size())
    _host(dst).copy_(_host(self))
    return dst


def _local_scalar_dense(self):
    return memory.host_view(self).item()


def _resize_(self, size, memory_format=None):
    size = [int(s) for s in size]
    if memory_format is None or memory_format == torch.preserve_format:
        if list(self.size()) == size:
            return self
        stride = memory.contiguous_strides(size)
    elif memory_format == torch.contiguous_format:
        stride = memory.contiguous_strides(size)
    else:
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    offset = self.storage_offset()
    itemsize = self.element_size()
    needed = memory.storage_nbytes(size, stride, itemsize, offset)
    st = self.untyped_storage()
    if needed > st.nbytes():
        # a new, larger storage keeping the old bytes. Unlike ATen's resize_ (which grows the
        # StorageImpl in place), other tensors on the old storage keep the old storage.
        new = memory.allocate(needed, self.device.index or 0)
        if st.nbytes():
            memory.host_bytes(new)[: st.nbytes()].copy_(memory.host_bytes(st))
        st = new
    return memory.set_metadata(self, st, offset, size, stride)


def _set_storage_offset(self, source, storage_offset, size, stride=()):
    if not stride:
        stride = memory.contiguous_strides(size)
    return memory.set_metadata(self, source, storage_offset, size, stride)


def _set_storage(self, source):
    return memory.set_metadata(self, source, 0, [source.nbytes() // self.element_size()], [1])


def _set_tensor(self, source):
    if source.device.type != BACKEND:
        raise RuntimeError(
            f'Attempted to set the storage of a tensor on device "{self.device}" to a storage on '
            f'different device "{source.device}".  This is no longer allowed; the devices must match.'
        )
    return memory.set_metadata(
        self, source.untyped_storage(), source.storage_offset(), source.size(), source.stride()
    )


def _set_empty(self):
    return memory.set_metadata(self, memory.allocate(0, self.device.index or 0), 0, [0], [1])


def _convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    # ATen hands convolutions on backends it has no convolution for to this op; the host computes
    # them with the same ATen convolution (and algorithm choice) as on CPU
    return _compute(
        _aten.convolution_overrideable.default,
        (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups), {},
        host_op=_aten.convolution.default,
    )


def _convolution_backward_overrideable(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    bias_sizes = [weight.size(1) * groups] if transposed else [weight.size(0)]
    return _compute(
        _aten.convolution_backward_overrideable.default,
        (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
         output_padding, groups, output_mask), {},
        host_op=_aten.convolution_backward.default,
    )


def _record_stream(self, s):
    return None  # execution is in order on one queue: nothing to record


SPECIAL: dict[Any, Any] = {
    _aten.empty.memory_format: _empty_memory_format,
    _aten.empty_strided.default: _empty_strided,
    _aten.view.default: _view,
    _aten.as_strided.default: _as_strided,
    _aten._reshape_alias.default: _reshape_alias,
    _aten._copy_from.default: _copy_from,
    _aten._copy_from_and_resize.default: _copy_from_and_resize,
    _aten._local_scalar_dense.default: _local_scalar_dense,
    _aten.resize_.default: _resize_,
    _aten.set_.source_Storage_storage_offset: _set_storage_offset,
    _aten.set_.source_Storage: _set_storage,
    _aten.set_.source_Tensor: _set_tensor,
    _aten.set_.default: _set_empty,
    _aten.record_stream.default: _record_stream,
    _aten.convolution_overrideable.default: _convolution_overrideable,
    _aten.convolution_backward_overrideable.default: _convolution_backward_overrideable,
}


def run(op, args: tuple, kwargs: dict, key=None):
    """Execute ``op`` on the host; results are ``neuron`` tensors (see the module docstring).
    ``key``: the call's :func:`signature`, if the caller computed it already."""
    fn = SPECIAL.get(op)
    if fn is not None:
        return fn(*args, **kwargs)
    return _compute(op, args, kwargs, key=key)
