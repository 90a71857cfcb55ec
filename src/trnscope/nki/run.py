"""Running a specialised kernel where its arguments live (see :mod:`.jit` for the rules)."""

from __future__ import annotations

import numpy as np

from .errors import NkiError, NkiValidationError
from .jit import ArgSpec, Kernel, Traced, _is_torch, _tensor_args


def interpret(traced: Traced, inputs: list) -> tuple[list, list]:
    """Execute the kernel's Program on the interpreter: (outputs, final values of mutated arguments)."""
    from ..interp.interpreter import Interpreter

    it = Interpreter(traced.program, traced.spec)
    it.run(inputs, check=False)
    outs = [it.memory.tensor(idx) for _, idx in traced.outputs]
    muts = [it.memory.tensor(idx) for _, _, idx in traced.mutated]
    return outs, muts


def _structured(traced: Traced, values: list):
    s = traced.structure
    if s is None:
        return None
    if isinstance(s, int):  # a single output
        return values[s]
    return tuple(values[i] for i in s)


def _report(kernel: Kernel, traced: Traced, timeline):
    from .report import RunReport

    kernel.last_run = RunReport(traced, timeline)
    return kernel.last_run


def run_kernel(kernel: Kernel, args: tuple, kwargs: dict, simulate_only: bool):
    from .. import runtime

    clock = runtime.CLOCK
    # looking the kernel up (and tracing it on a miss) is emulator work; a miss then costs the host
    # the compile time, as Neuron's compiler does
    with clock.emulation():
        bound, tensors = _tensor_args(kernel.fn, args, kwargs)
        is_torch = any(_is_torch(v) for _, _, v in tensors)
        if not is_torch:
            for _, name, v in tensors:
                if isinstance(v, ArgSpec):
                    raise NkiError(f"argument {name!r} is an ArgSpec (shape and dtype only): call kernel.timeline(...) "
                                   f"to time the kernel without data, or pass an array")
        traced = kernel.specialize(*args, **kwargs) if not is_torch or not _fake_call(tensors) else None
    if is_torch:
        return _run_torch(kernel, args, kwargs, tensors, simulate_only, traced)
    assert traced is not None  # specialised above: no torch arguments
    values = {key: v for key, _, v in tensors}
    inputs = [np.asarray(values[key]) for key, _, _ in traced.inputs]
    box: dict = {}

    def compute():
        box["r"] = interpret(traced, inputs)

    timeline = _execute(traced, compute, simulate_only, device=0)
    outs, muts = box["r"]
    with clock.emulation():
        for (key, _, _), value in zip(traced.mutated, muts):
            np.copyto(values[key], value.astype(values[key].dtype, copy=False), casting="unsafe")
        _report(kernel, traced, timeline)
        return _structured(traced, [o.copy() for o in outs])


def _fake_call(tensors) -> bool:
    return any(_is_torch(v) and _is_fake(v) for _, _, v in tensors)


def _execute(traced: Traced, compute, simulate_only: bool, device: int):
    """Numbers from ``compute``; time from the simulator. A device execution (recorded, profiled) when the
    kernel's target is the process's; otherwise (another target, or simulate-only) just both computed."""
    from .. import runtime
    from ..hw import get_spec
    from ..sim import simulate

    spec = traced.spec
    timeline = simulate(traced.program, spec)
    if simulate_only or spec != get_spec():  # by value: a replaced spec equal to the target is the target
        compute()
        return timeline
    core = runtime.core(device)
    # a freshly traced kernel costs the host what the host-cost model says a neuronx-cc compile costs
    # (never trnscope's own tracing and lowering time, traced.compile_ns)
    compile_ns = runtime.host_costs().compile_ns(len(traced.program.instructions)) if traced.fresh else 0
    core.execute_program(traced.program, traced.name, compute, compile_ns, timeline=timeline)
    return timeline


# --- torch ---------------------------------------------------------------------------------------------------------

def torch_dtype(nki_dtype):
    import torch

    name = str(nki_dtype)
    name = {"bool_": "bool", "float8_e4m3": "float8_e4m3fn", "tfloat32": "float32"}.get(name, name)
    return getattr(torch, name)


def to_torch(arr: np.ndarray, nki_dtype):
    import torch

    dt = torch_dtype(nki_dtype)
    if dt is torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    if dt is torch.float8_e4m3fn:
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.uint8)).view(torch.float8_e4m3fn)
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dt)


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or t.device.type == "meta"


def _run_torch(kernel: Kernel, args, kwargs, tensors, simulate_only: bool, traced=None):
    import torch

    torch_ts = [v for _, _, v in tensors if _is_torch(v)]
    if any(not _is_torch(v) for _, _, v in tensors):
        raise NkiValidationError(f"kernel {kernel.__name__}: mix of torch tensors and NumPy arrays; pass one kind")
    if any(_is_fake(t) for t in torch_ts):
        traced = kernel.specialize(*args, **kwargs)
        dev = torch_ts[0].device
        outs = [torch.empty(st.shape, dtype=torch_dtype(st.dtype), device=dev) for st, _ in traced.outputs]
        ret = _structured(traced, outs)
        from .torch_ops import capturing

        calls = capturing()
        if calls is not None:  # a graph compiler is linking the op that calls this kernel
            calls.append((kernel, args, kwargs, ret))
        return ret
    devices = {t.device for t in torch_ts}
    neuron = [d for d in devices if d.type == "neuron"]
    if neuron and len(devices) > 1:
        raise NkiValidationError(f"kernel {kernel.__name__}: tensors on {sorted(map(str, devices))}; an NKI kernel "
                                 f"runs on one NeuronCore, move them to one device first")
    if not neuron and any(d.type != "cpu" for d in devices):
        raise NkiValidationError(f"kernel {kernel.__name__}: tensors on {sorted(map(str, devices))}; NKI kernels take "
                                 f"neuron or CPU tensors (or NumPy arrays)")
    values = {key: v for key, _, v in tensors}
    if neuron:
        return _run_neuron(kernel, traced, values, neuron[0], simulate_only)
    inputs = [values[key].detach() for key, _, _ in traced.inputs]
    box: dict = {}

    def compute():
        box["r"] = interpret(traced, inputs)

    timeline = _execute(traced, compute, True, 0)
    outs, muts = box["r"]
    with torch.no_grad():
        for (key, st, _), value in zip(traced.mutated, muts):
            values[key].copy_(to_torch(value, st.dtype))
    _report(kernel, traced, timeline)
    return _structured(traced, [to_torch(o, st.dtype) for o, (st, _) in zip(outs, traced.outputs)])


def _run_neuron(kernel: Kernel, traced: Traced, values: dict, device, simulate_only: bool):
    import torch

    from ..device.memory import host_view

    index = device.index or 0
    from .. import runtime

    clock = runtime.CLOCK
    core = runtime.core(index)
    if core.spec.name != traced.spec.name:
        raise NkiValidationError(f"kernel {kernel.__name__} was compiled for {traced.spec.name} "
                                 f"(NEURON_PLATFORM_TARGET_OVERRIDE) but neuron:{index} is a {core.spec.name} "
                                 f"NeuronCore: set TRNSCOPE_INSTANCE={traced.spec.name} to emulate that target")
    # trnscope's Python in place of TorchNeuron's C++ kernel call: emulator work; the device ops it issues
    # (output allocation, copies) and the execution cost the host what the host-cost model says
    with clock.emulation(), torch.no_grad():
        if clock.mode == runtime.MODELLED:  # PyTorch's dispatch of the custom op (measured in real mode)
            clock.advance(runtime.host_costs().framework_op_ns)
        args = {key: (values[key] if values[key].is_contiguous() else values[key].contiguous())
                for key, _, _ in traced.inputs}
        outs = [torch.empty(st.shape, dtype=torch_dtype(st.dtype), device=device) for st, _ in traced.outputs]
    def compute():
        inputs = [host_view(args[key]) for key, _, _ in traced.inputs]
        o, m = interpret(traced, inputs)
        for out, value, (st, _) in zip(outs, o, traced.outputs):
            host_view(out).copy_(to_torch(value, st.dtype))
        for (key, st, _), value in zip(traced.mutated, m):
            host_view(args[key]).copy_(to_torch(value, st.dtype))

    with torch.profiler.record_function(f"nki::{traced.name}"):  # outside the cut: the profile keeps it
        timeline = _execute(traced, compute, simulate_only, index)
    with clock.emulation(), torch.no_grad():
        for key, _, _ in traced.mutated:
            if args[key] is not values[key]:
                values[key].copy_(args[key])
        _report(kernel, traced, timeline)
        return _structured(traced, outs)
