"""The runtime's observer API (trnscope.runtime.observe): what an observer gets, when, and that it
leaves nothing behind."""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from trnscope import runtime
from trnscope.compiler import OpCall
from trnscope.compiler.meta import TensorMeta
from trnscope.runtime import EmulatedClock, NeuronCoreRuntime, observe


class Log(observe.Observer):
    def __init__(self, clock=None) -> None:
        self.events: list[tuple] = []
        self.depth = 0
        self.clock = clock or runtime.CLOCK

    def dispatch_begin(self) -> None:
        self.depth += 1
        self.events.append(("begin", self.depth, self.clock.in_cut(time.perf_counter_ns())))

    def dispatch_end(self) -> None:
        self.events.append(("end", self.depth, self.clock.in_cut(time.perf_counter_ns())))
        self.depth -= 1

    def execution(self, ex) -> None:
        self.events.append((ex.kind, self.depth, self.clock.in_cut(time.perf_counter_ns()), ex))


@pytest.fixture
def log():
    obs = Log()
    observe.subscribe(obs)
    yield obs
    observe.unsubscribe(obs)
    assert observe.observers == ()


def test_a_runtime_delivers_each_execution_complete_and_inside_its_cut():
    clock = EmulatedClock("modelled")
    obs = Log(clock)
    rt = NeuronCoreRuntime(0, clock)
    meta = TensorMeta.contiguous((128, 64), "float32")
    observe.subscribe(obs)
    try:
        rt.execute(OpCall.make("aten::exp", (meta,), (meta,)))
        rt.copy("h2d", 1 << 20)
        rt.fallback("aten::cholesky", nbytes=4096, reason="no kernel")
    finally:
        observe.unsubscribe(obs)
    kinds = [e[0] for e in obs.events]
    assert kinds == ["kernel", "h2d", "fallback"]
    assert all(in_cut for _, _, in_cut, _ in obs.events)  # the observer's work is emulator work
    kernel = obs.events[0][3]
    # submitted, started, finished: known at submit, in that order on the emulated clock
    assert kernel.host_start_ns <= kernel.host_end_ns <= kernel.device_start_ns < kernel.device_end_ns
    assert rt.records == []  # the core keeps records only when ``recording`` is on


def test_nobody_observing_leaves_nothing_and_recording_still_keeps_records():
    rt = NeuronCoreRuntime(0, EmulatedClock("modelled"))
    meta = TensorMeta.contiguous((64, 64), "float32")
    assert observe.observers == () and not rt.observed
    rt.execute(OpCall.make("aten::exp", (meta,), (meta,)))
    assert rt.records == []
    rt.recording = True
    assert rt.observed
    rt.execute(OpCall.make("aten::exp", (meta,), (meta,)))
    assert [r.kind for r in rt.records] == ["kernel"]


def test_every_device_op_is_a_dispatch_pair_around_its_executions(log):
    x = torch.arange(16.0).to("neuron")
    y = (x * 2 + 1).cpu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = x.to(torch.float64)  # float64 has no NeuronCore dtype: a CPU fallback, inside its op's pair
    assert torch.equal(y, torch.arange(16.0) * 2 + 1) and z.dtype == torch.float64
    begins = [e for e in log.events if e[0] == "begin"]
    ends = [e for e in log.events if e[0] == "end"]
    assert begins and len(begins) == len(ends) and log.depth == 0
    assert all(e[2] for e in begins + ends)  # both edges inside the runtime's cut
    execs = [e for e in log.events if e[0] not in ("begin", "end")]
    assert {"kernel", "h2d", "d2h", "fallback"} <= {e[0] for e in execs}
    assert all(depth >= 1 for _, depth, *_ in execs)  # each made inside the op that dispatched it


def test_an_observer_added_twice_is_delivered_once_and_removal_is_idempotent():
    obs = Log()
    observe.subscribe(obs)
    observe.subscribe(obs)
    assert observe.observers == (obs,)
    observe.unsubscribe(obs)
    observe.unsubscribe(obs)
    assert observe.observers == ()


def test_the_observers_declare_what_the_cpp_eager_path_may_do():
    """A plain observer needs every event as it happens (``immediate``: the C++ eager path leaves
    every op to Python); while every observer is ``deferred`` that path may serve ops and hand their
    executions over late. What was kept is handed over before each change of the observers (so an
    observer gets exactly what was made while it watched), and the listeners hear of it after."""
    plain, late = Log(), Log()
    late.deferred = late.sample_memory = True
    seen = []

    def backlog():
        seen.append(("flush", observe.observers))

    def listener():
        seen.append(("changed", observe.immediate, observe.deferred, observe.sample_memory))

    saved = (list(observe._backlogs), list(observe._listeners))  # the runtime's and the device's stay
    observe.add_backlog(backlog)
    observe.on_change(listener)
    try:
        observe.subscribe(late)
        observe.subscribe(plain)
        observe.unsubscribe(plain)
        observe.unsubscribe(late)
    finally:
        observe._backlogs[:], observe._listeners[:] = saved
    assert seen == [("flush", ()), ("changed", False, True, True),
                    ("flush", (late,)), ("changed", True, False, False),
                    ("flush", (late, plain)), ("changed", False, True, True),
                    ("flush", (late,)), ("changed", False, False, False)]
    assert observe.observers == () and not observe.immediate and not observe.deferred


def test_spans_are_numbered_from_one_sequence():
    """Dispatch spans are numbered by ``observe.next_span`` on both paths: each number once."""
    numbers = [observe.next_span() for _ in range(5)]
    assert numbers == sorted(set(numbers)) and numbers[0] > 0
