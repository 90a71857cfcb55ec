"""``torch.compile(model, backend="neuron")``: Dynamo + AOTAutograd graphs, each compiled to ONE NEFF.

As TorchNeuron's backend: no Inductor; only ``mode="default"`` (other modes warn and compile as
default); no dynamic shapes (each new shape compiles its own NEFF; ``dynamic=True`` is refused with
a clear message); graph breaks give one NEFF per subgraph. AOTAutograd supplies forward and
backward graphs, so training works. A compiled graph runs as a single device execution: its
numbers are computed on the host by the graph itself (on zero-copy host views), its time is the
simulated time of its Program.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .. import runtime
from ..compiler.graph import CompiledGraph, GraphCompileError, compile_graph, source_line
from ..compiler import precision
from ..compiler.lowering import NoLowering, spec_digest
from ..runtime import neff_cache
from . import memory

BACKEND_NAME = "neuron"


class NeuronCompileError(RuntimeError):
    pass


@dataclass
class CompileCounters:
    """What the backend did, for tests and profiles."""
    graphs: int = 0              # FX graphs handed to the backend (forward and backward count apart)
    neffs_compiled: int = 0      # graphs compiled to a NEFF
    neff_cache_hits: int = 0     # NEFFs loaded from the cache directory instead of compiled
    eager_graphs: int = 0        # graphs that could not become one NEFF and run op by op
    segmented_graphs: int = 0    # graphs with collectives: NEFF segments around them (collective_segments)
    executions: int = 0          # compiled-graph executions on the device
    compile_ns: int = 0          # modelled host time of those compiles and loads (runtime.hostcost)
    last_dispatches_per_call: int = 0
    reasons: list[str] = field(default_factory=list)

    def reset(self) -> None:
        fresh = CompileCounters()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))


COUNTERS = CompileCounters()


def _graph_key(gm: fx.GraphModule, example_inputs, spec_key: str) -> str:
    """The graph's code, its nodes' source lines (the NEFF's instructions are labelled with them), its
    inputs' shapes, strides and dtypes, and the target spec's content (a spec edited with
    ``replace()`` keeps its name but compiles anew)."""
    h = hashlib.sha256()
    h.update(gm.code.encode())
    h.update("\n".join(source_line(n) for n in gm.graph.nodes).encode())
    for t in example_inputs:
        if isinstance(t, torch.Tensor):
            h.update(f"{tuple(t.shape)}{t.stride()}{t.dtype}".encode())
        else:
            h.update(repr(t).encode())
    h.update(spec_key.encode())
    return h.hexdigest()


def _has_symbolic(example_inputs) -> bool:
    for t in example_inputs:
        if isinstance(t, torch.SymInt):
            return True
        if isinstance(t, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride())):
            return True
    return False


class CompiledNeff:
    """The callable Dynamo runs in place of a graph: one device execution per call."""

    def __init__(self, gm: fx.GraphModule, compiled: CompiledGraph, label: str, compile_ns: int, timeline=None):
        self.gm = _host_graph(gm)
        self.compiled = compiled
        self.label = label
        self.compile_ns = compile_ns
        self.timeline = timeline  # simulated at compile time, or read with the NEFF from the cache
        self._first = True
        self.graph_call = True  # False for a graph's later NEFF segments (collective_segments)

    def __call__(self, *args):
        core = runtime.core(_device_of(args))
        result: list = []

        def compute():
            result.append(_run_on_host(self.gm, args))

        compile_ns, self._first = (self.compile_ns if self._first else 0), False
        clock = runtime.CLOCK
        # Dynamo's guards and AOTAutograd's wrappers (measured in real mode)
        if self.graph_call and clock.mode == runtime.MODELLED:
            clock.advance(runtime.host_costs().graph_call_ns)
        core.execute_program(self.compiled.program, self.label, compute, compile_ns,
                             timeline=self.timeline if self.timeline is not None and self.timeline.spec == core.spec
                             else None)
        COUNTERS.executions += 1
        COUNTERS.last_dispatches_per_call = 1
        return result[0]


def _device_of(args) -> int:
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == BACKEND_NAME:
            return a.device.index or 0
    return 0


def _on_host(v):
    """``v`` with every reference to the neuron device made the host's (args of graph nodes)."""
    if isinstance(v, torch.device) and v.type == BACKEND_NAME:
        return torch.device("cpu")
    if isinstance(v, str) and v.split(":")[0] == BACKEND_NAME:
        return "cpu"
    if isinstance(v, (list, tuple)):
        return type(v)(_on_host(x) for x in v)
    if isinstance(v, dict):
        return {k: _on_host(x) for k, x in v.items()}
    return v


def _host_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """The graph as the host runs it: ops that name the neuron device (``_to_copy(x, dtype=float32,
    device=neuron)`` in a softmax upcast, factories) put their results on the host instead, beside
    the host views the other ops compute on. Dynamo's graph itself is left as it is (a copy is edited)."""
    if all(_on_host(n.args) == n.args and _on_host(n.kwargs) == n.kwargs for n in gm.graph.nodes):
        return gm
    host = copy.deepcopy(gm)
    for node in host.graph.nodes:
        node.args, node.kwargs = _on_host(node.args), _on_host(node.kwargs)
    host.recompile()
    return host


def _run_on_host(gm: fx.GraphModule, args):
    """Execute the graph's ATen ops on host views of the device tensors; results back on the device."""
    host_args = [memory.host_view(a) if isinstance(a, torch.Tensor) and a.device.type == BACKEND_NAME else a
                 for a in args]
    devices = [a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == BACKEND_NAME]
    device = devices[0] if devices else torch.device(BACKEND_NAME, 0)
    with torch.no_grad():
        outs = gm(*host_args)
    return _to_device(outs, host_args, args, device)


def _to_device(obj, host_args, args, device):
    if isinstance(obj, torch.Tensor):
        for h, a in zip(host_args, args):  # an input returned as is stays that very tensor
            if obj is h:
                return a
        out = memory.empty_strided(tuple(obj.shape), tuple(obj.stride()), obj.dtype, device.index or 0)
        memory.host_view(out).copy_(obj)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, host_args, args, device) for o in obj)
    return obj


def _compile(gm: fx.GraphModule, example_inputs, label: str):
    COUNTERS.graphs += 1
    if _has_symbolic(example_inputs):
        raise NeuronCompileError(
            "the neuron backend does not support dynamic shapes (neither does TorchNeuron): compile with "
            "torch.compile(..., dynamic=False); each new input shape then compiles its own NEFF")
    from functorch.compile import make_boxed_func

    from . import collective_segments

    with runtime.CLOCK.emulation():  # trnscope's compiler at work: the host pays the modelled compile
        if not collective_segments.has_collectives(gm):
            return make_boxed_func(_compile_cut(gm, example_inputs, label))
        parts, segments, collectives = collective_segments.split(gm, label, _compile_cut)
        COUNTERS.segmented_graphs += 1
        warnings.warn(f"trnscope: graph {label} calls {collectives} collective op(s): it runs as {segments} NEFF "
                      f"segment(s) around them, the collectives on the collective engines", stacklevel=2)
        entries = [m for m in parts.children() if isinstance(getattr(m, "run", None), CompiledNeff)]
        for m in entries[1:]:  # one compiled call: Dynamo's guards and wrappers run once
            m.run.graph_call = False
        return make_boxed_func(parts.forward)


def _compile_cut(gm: fx.GraphModule, example_inputs, label: str):
    spec = runtime.core(0).spec
    key = _graph_key(gm, example_inputs, spec_digest(spec))
    # the persistent NEFF cache (runtime.neff_cache): keyed on trnscope's build, the spec's content and
    # the compiler's matmul precision setting
    disk_key = (("graph", key, precision.key()), spec_digest(spec))
    timeline = None
    try:
        hit = neff_cache.get().load(disk_key, spec)
        if hit is not None:
            program, timeline = hit
            compiled = CompiledGraph(program, [], [], int(program.meta.get("kernels", 1)),
                                     int(program.meta.get("fused_ops", 0)))
            COUNTERS.neff_cache_hits += 1
        else:
            compiled = compile_graph(gm, spec, f"{label}_{key[:8]}")
            COUNTERS.neffs_compiled += 1
    except (NoLowering, GraphCompileError, NotImplementedError) as exc:
        COUNTERS.eager_graphs += 1
        reason = f"{label}: {type(exc).__name__}: {exc}"
        COUNTERS.reasons.append(reason)
        warnings.warn(f"trnscope: graph {label} cannot become one NEFF ({exc}); it runs op by op on neuron",
                      stacklevel=2)
        return gm.forward
    costs = runtime.host_costs()
    compile_ns = costs.neff_load_ns if hit is not None else costs.compile_ns(len(compiled.program.instructions))
    COUNTERS.compile_ns += compile_ns
    if hit is None:
        from ..sim import simulate

        timeline = simulate(compiled.program, spec)  # emulator work: inside _compile's cut
        neff_cache.get().store(disk_key, compiled.program, timeline, compile_ns)
    return CompiledNeff(gm, compiled, label, compile_ns, timeline)


def neuron_backend(gm: fx.GraphModule, example_inputs, mode: str | None = None, options=None, **kwargs):
    from torch._dynamo.backends.common import aot_autograd

    # TorchNeuron compiles one NEFF per shape: a recompile must not turn into a dynamic graph
    torch._dynamo.config.automatic_dynamic_shapes = False
    if mode not in (None, "default"):
        warnings.warn(f"torch.compile mode={mode!r} is not supported by the neuron backend; compiling with "
                      f"mode='default'", stacklevel=2)
    counter = {"n": 0}

    def fw(g, ex):
        counter["n"] += 1
        return _compile(g, ex, f"fwd{counter['n']}")

    def bw(g, ex):
        return _compile(g, ex, "bwd")

    return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)


