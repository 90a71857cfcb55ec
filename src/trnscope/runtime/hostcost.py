"""The host-cost model: what the Neuron backend costs the host, as a stated choice.

On Trainium the host runs PyTorch's dispatcher, TorchNeuron's C++ backend (op key, NEFF cache
lookup, output allocation, the NRT tensor set) and the Neuron runtime's submit (``nrt_execute``),
then returns while the device works. trnscope runs its own, much slower, Python in their place;
timing that would make every host figure a measurement of the emulator. So each backend step
costs the host what this model says, and trnscope's own work is cut from the clock
(:mod:`.clock`).

No per-op host figure of TorchNeuron's is published (the Neuron SDK docs and TorchNeuron's source
say only that "compilation and execution latency may be significant"; see docs/cost-model.md,
"Host costs"). Each number below is therefore an assumption with its reasoning in the field's
``note``; the references bound it:

* PyTorch's own operator micro-benchmarks time a tiny eager op (``split`` of an 8x8 tensor) at
  2.3-3.4 us on CPU and CUDA alike (pytorch/pytorch#32194), which is framework overhead: the
  Python binding, the dispatcher, autograd's bookkeeping.
* A CUDA kernel launch costs the host a few microseconds; the third-party measurements collected
  in hardware.md put the whole synchronous framework path of a Neuron dispatch at 437 us (vLLM,
  trn2, including Python and tensor allocation, S33) and 0.67 ms (torch-xla on trn1, S36). An
  asynchronous native backend sits far below those: trnscope assumes about 10 us per kernel.

:func:`host_costs` is the model in force; :func:`set_host_costs` replaces it (e.g. to see how a
workload responds to a faster backend), ``HostCosts.scaled(k)`` scales every figure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _cost(ns: float, note: str, applies: str = "both") -> Any:
    """A field with its default and why (a dataclass field, typed as its value)."""
    return field(default=ns, metadata={"note": note, "applies": applies})


@dataclass(frozen=True)
class HostCosts:
    """Host nanoseconds per backend step. ``applies``: ``both`` modes, or ``modelled`` only (in
    ``real`` mode that step is PyTorch's or the user's own code and is measured)."""

    framework_op_ns: int = _cost(
        3_000,
        "PyTorch's side of one ATen op that reaches the neuron backend: Python binding, dispatcher, "
        "autograd bookkeeping. PyTorch's micro-benchmarks time a tiny eager op at 2.3-3.4 us "
        "(pytorch/pytorch#32194). In real mode it is measured instead.", "modelled")
    backend_op_ns: int = _cost(
        5_000,
        "TorchNeuron's C++ work for one device kernel before the submit: the op's NEFF cache key and "
        "lookup, output allocation, the NRT tensor set of inputs and outputs. Assumption (no figure is "
        "published): the order of a CUDA backend's launch preparation.")
    submit_ns: int = _cost(
        5_000,
        "nrt_execute of a loaded NEFF in asynchronous mode: enqueue on the NeuronCore's execution queue. "
        "Assumption, the order of a CUDA kernel launch's host cost (a few us); S33/S36's 0.4-0.7 ms are "
        "synchronous framework paths that include Python and waits.")
    collective_submit_ns: int = _cost(
        5_000,
        "queueing one collective on the collective engines (TorchNeuron's ProcessGroupNeuron: its work "
        "object, the stream wait, the runtime's enqueue). Assumption, as submit_ns.")
    alloc_ns: int = _cost(
        1_000, "a caching-allocator hit for a new device tensor (empty/empty_strided). Assumption.")
    view_ns: int = _cost(
        1_000, "a view or metadata op (view, as_strided, resize_, set_): C++ metadata work. Assumption.")
    copy_submit_ns: int = _cost(
        5_000,
        "nrt_tensor_write / nrt_tensor_read: the host call that queues a host<->device copy (the transfer "
        "itself is timed on the device side, hw spec host_transfer_*). Assumption, as submit_ns.")
    compile_fixed_ns: int = _cost(
        1_000_000_000,
        "a NEFF-cache miss: TorchNeuron compiles the op (or graph) with neuronx-cc, a separate compiler "
        "process whose start-up and pass pipeline take seconds even for small graphs. No per-op figure "
        "is published; 1 s is an assumption. Set it to 0 to hide compile time.")
    compile_per_instruction_ns: int = _cost(
        1_000, "neuronx-cc time per emitted instruction on top of compile_fixed_ns. Assumption.")
    neff_load_ns: int = _cost(
        5_000_000,
        "loading a NEFF found in the persistent cache onto the NeuronCore (nrt_load) instead of "
        "compiling it. Assumption.")
    graph_call_ns: int = _cost(
        10_000,
        "calling a torch.compile'd region: Dynamo's guard check and AOTAutograd's runtime wrappers "
        "around the one NEFF. In real mode they are measured instead. Assumption.", "modelled")
    fallback_fixed_ns: int = _cost(
        10_000,
        "a CPU fallback op's own host work besides its data (argument conversion, kernel call). In real "
        "mode the fallback is measured instead. Assumption.", "modelled")
    fallback_bytes_per_s: float = _cost(
        5e9,
        "a CPU fallback op streams its inputs and outputs at one host thread's memory bandwidth. In real "
        "mode the fallback is measured instead. Assumption.", "modelled")

    def compile_ns(self, instructions: int) -> int:
        return int(self.compile_fixed_ns + self.compile_per_instruction_ns * max(0, instructions))

    def fallback_ns(self, nbytes: int) -> int:
        return int(self.fallback_fixed_ns + (nbytes / self.fallback_bytes_per_s * 1e9 if nbytes else 0))

    def scaled(self, factor: float) -> "HostCosts":
        """Every cost multiplied by ``factor`` (bandwidths divided by it)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v / factor if f.name.endswith("_per_s") else int(round(v * factor))
        return HostCosts(**out)


def describe(costs: "HostCosts | None" = None) -> list[tuple[str, object, str, str]]:
    """(field, value, applies, note) for every cost: what docs/cost-model.md tabulates."""
    costs = costs or _COSTS
    return [(f.name, getattr(costs, f.name), f.metadata["applies"], f.metadata["note"])
            for f in dataclasses.fields(costs)]


_COSTS = HostCosts()
_listeners: list = []


def host_costs() -> HostCosts:
    return _COSTS


def set_host_costs(costs: HostCosts | None) -> HostCosts:
    """Install ``costs`` (``None``: the default model); returns the previous model."""
    global _COSTS
    old = _COSTS
    _COSTS = costs if costs is not None else HostCosts()
    for listener in _listeners:
        listener(_COSTS)
    return old


def on_change(listener) -> None:
    """Call ``listener(costs)`` whenever another model is installed (the C++ eager path keeps a copy)."""
    if listener not in _listeners:
        _listeners.append(listener)
