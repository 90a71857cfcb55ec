"""Correlation: which host events are the user's, which op dispatched each device execution, and
the mapping of host timestamps onto the emulated clock.

The same classification runs on the ``FunctionEvent`` list (for ``key_averages()``) and on the
events of Kineto's Chrome JSON (for ``trace.json`` and the system trace), so both agree.

While a Neuron profiling window is open, trnscope leaves two kinds of zero-cost-to-numerics marks in
the PyTorch profiler (see :mod:`.capture`):

* ``trnscope::dispatch#<n>`` spans around every call into the device (the runtime's dispatch
  events): what happens inside is emulator machinery (Python frames, host views, NumPy numerics,
  simulation) that a real NeuronCore backend does in C++ or on the device. It is dropped, together
  with trnscope's own Python frames (``with_stack=True``) and anything recorded wholly inside an
  emulation cut of the clock; whatever of the span's time the clock did not cut (a CPU fallback)
  stays with the op.
  The window notes which span each execution was made in (``span_seqs``: seq -> n), so
  the nearest kept ancestor of span ``n`` is the op that dispatched those executions.
* ``trnscope::exec#<seq>`` markers, for executions made outside any span (a direct runtime call),
  emitted on the runtime's ``execution`` event on the dispatching thread, inside the op: the
  nearest kept ancestor of the marker is the op that dispatched it.

Neither link involves clock arithmetic, so both are exact.

Structured-op folding: a functional ATen op on ``neuron`` reaches the device as an allocation
(``aten::empty``) plus its ``out=`` variant of the same name (a Python PrivateUse1 backend cannot
register structured kernels). TorchNeuron, like CUDA, runs such an op as one kernel under one
event, so ``P -> [aten::empty, P]`` with the inner ``P`` dispatched to the device is folded into
the outer ``P`` (the inner op's kernels and children move up; the allocation's time stays in the
outer op's self time).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

SPAN_NAME = "trnscope::dispatch"
SPAN_PREFIX = SPAN_NAME + "#"     # numbered spans: trnscope::dispatch#<n>
MARKER_PREFIX = "trnscope::exec#"
ALLOC_OPS = frozenset({"aten::empty", "aten::empty_strided"})

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# packages whose Python frames are device/runtime machinery (a C++ backend has no such frames);
# trnscope.cli is not: `trnscope run script.py` runs the user's code under its frames
_MACHINERY = ("device", "runtime", "compiler", "sim", "interp", "isa", "hw", "profiling", "__init__")
# Kineto names a frame "<path relative to its sys.path entry>(<line>): <function>"
_MACHINERY_FRAME = re.compile(r"^(?:.*[/\\])?trnscope[/\\](?:" + "|".join(_MACHINERY) + r")\b[^()]*\(\d+\): ")
# the device module API (torch.neuron.*) a user calls: its frame stays, what it calls does not
_PUBLIC_FRAME = re.compile(r"^(?:.*[/\\])?trnscope[/\\]device[/\\](?:neuron|streams)\.py\(\d+\): ")


def is_trnscope_frame(name: str) -> bool:
    """A ``python_function`` event of trnscope's machinery (``trnscope/device/dispatch.py(88): execute``)."""
    if name.startswith(_PKG_DIR):
        name = "trnscope" + name[len(_PKG_DIR):]
    return bool(_MACHINERY_FRAME.match(name))


def is_public_frame(name: str) -> bool:
    if name.startswith(_PKG_DIR):
        name = "trnscope" + name[len(_PKG_DIR):]
    return bool(_PUBLIC_FRAME.match(name))


# set by a multi-rank run (trnscope.distributed): rank 0's offset, so that every rank's files put
# the emulated clock on one epoch axis
SHARED_EPOCH_OFFSET_NS: int | None = None


def epoch_offset_ns(samples: int = 15) -> int:
    """``time.time_ns() - time.perf_counter_ns()``, from the tightest of ``samples`` readings.

    Kineto stamps events in Unix-epoch ns (CLOCK_REALTIME); the runtime's clock is built on
    ``perf_counter_ns`` (CLOCK_MONOTONIC). Their difference is constant between clock steps.
    """
    if SHARED_EPOCH_OFFSET_NS is not None:
        return SHARED_EPOCH_OFFSET_NS
    if samples < 1:
        raise ValueError(f"epoch_offset_ns needs at least one reading, got samples={samples}")
    best: tuple[int, int] | None = None
    for _ in range(samples):
        a = time.perf_counter_ns()
        e = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, e - (a + b) // 2)
    assert best is not None  # samples >= 1
    return best[1]


@dataclass
class Classified:
    """Result of :func:`classify` over n events (indices into the caller's lists)."""
    keep: list[bool]
    parent: list[int]                 # nearest kept ancestor of a kept event (-1: top level)
    dispatcher: dict[int, int]        # execution seq -> index of the kept op that dispatched it (-1: none)
    internal: int = 0                 # events dropped as emulator machinery
    folded: int = 0                   # events folded into their structured parent
    marker_index: dict[int, int] = field(default_factory=dict)  # seq -> index of its marker event


def emulator_functions() -> frozenset[str]:
    """Names of trnscope's own ``torch.autograd.Function``s: their ``apply`` shows in the profiler as
    an event of the class name (e.g. ``_RMSNorm`` inside ``aten::rms_norm``), which a native backend
    would not have. They count as emulator machinery."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return frozenset()
    out, todo = set(), list(torch.autograd.Function.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "__module__", "").startswith("trnscope."):
            out.add(cls.__name__)
    return frozenset(out)


def _span_number(name: str) -> int | None:
    """``n`` of a ``trnscope::dispatch#<n>`` span; None for an unnumbered span or anything else."""
    if name.startswith(SPAN_PREFIX):
        try:
            return int(name[len(SPAN_PREFIX):])
        except ValueError:
            return None
    return None


def is_span(name: str) -> bool:
    return name == SPAN_NAME or name.startswith(SPAN_PREFIX)


@dataclass(frozen=True)
class _HostEvents:
    """The columns of the host events :func:`classify` reads (one entry per event)."""

    threads: Sequence
    starts: Sequence[int]
    ends: Sequence[int]
    names: Sequence[str]
    python: Sequence[bool]


def _nest(ev: _HostEvents) -> tuple[list[int], list[int]]:
    """(every event in (thread, start, longest first) order, each event's parent or -1) by torch's
    nesting rule (EventList._populate_cpu_children)."""
    threads, starts, ends = ev.threads, ev.starts, ev.ends
    n = len(starts)
    parent = [-1] * n
    order = sorted(range(n), key=lambda i: (threads[i], starts[i], -ends[i]))
    stack: list[int] = []
    cur_thread = object()
    for i in order:
        if threads[i] != cur_thread:
            cur_thread = threads[i]
            stack = []
        s, e = starts[i], ends[i]
        while stack:
            p = stack[-1]
            if s >= ends[p] or e > ends[p]:  # torch's rule (EventList._populate_cpu_children)
                stack.pop()
            else:
                parent[i] = p
                break
        stack.append(i)
    return order, parent


@dataclass
class _Machinery:
    """Which events are emulator machinery (internal), and what they say about the kept ops."""

    internal: list[bool]
    owner: list[int]             # nearest non-internal ancestor-or-self (-1: none)
    dispatched: list[bool]       # a kept op that called into the device (holds a span)
    markers: dict[int, int]      # execution seq -> index of its marker event
    spans: dict[int, int]        # span number -> event index
    n_internal: int


def _find_machinery(ev: _HostEvents, order: list[int], parent: list[int],
                    in_cut: Callable[[int, int], bool] | None, machinery: frozenset[str]) -> _Machinery:
    """Mark the dispatch spans, execution markers, machinery functions and trnscope frames (with
    everything under them) internal, and the cut intervals' events."""
    starts, ends, names, python = ev.starts, ev.ends, ev.names, ev.python
    n = len(names)
    internal = [False] * n
    owner = list(range(n))
    dispatched = [False] * n
    markers: dict[int, int] = {}
    spans: dict[int, int] = {}
    n_internal = 0
    opaque = [False] * n             # a kept frame whose callees are machinery (torch.neuron.synchronize)
    for i in order:                  # parents come before their children in this order
        name = names[i]
        p = parent[i]
        is_marker = name.startswith(MARKER_PREFIX)
        span = is_span(name)
        root = span or name in machinery or (p >= 0 and opaque[p])
        if python[i] and not root and is_trnscope_frame(name):
            entry = not (p >= 0 and (internal[p] or (python[p] and is_trnscope_frame(names[p]))))
            if entry and is_public_frame(name):
                opaque[i] = True
            else:
                root = True
        cut = in_cut is not None and not is_marker and in_cut(starts[i], ends[i])
        if (p >= 0 and internal[p]) or root or is_marker or cut:
            internal[i] = True
            owner[i] = owner[p] if p >= 0 else -1
            if span:
                if owner[i] >= 0:  # the op called into the device
                    dispatched[owner[i]] = True
                k = _span_number(name)
                if k is not None:
                    spans[k] = i
            if is_marker:
                try:
                    markers[int(name[len(MARKER_PREFIX):])] = i
                except ValueError:
                    pass
            else:
                n_internal += 1
    return _Machinery(internal, owner, dispatched, markers, spans, n_internal)


def _out_variant_folds(order: list[int], parent: list[int], names: Sequence[str], m: _Machinery) -> dict[int, int]:
    """child -> parent for the ops folded into their structured parent: an op whose one
    same-named kept child (its out= variant) did the dispatching, with that child's output
    allocation."""
    internal, dispatched = m.internal, m.dispatched
    # kept children of kept events
    children: dict[int, list[int]] = {}
    for i in order:
        if not internal[i] and parent[i] >= 0:
            children.setdefault(parent[i], []).append(i)
    redirect: dict[int, int] = {}
    for p, kids in children.items():
        if dispatched[p] or p in redirect:
            continue
        same = [c for c in kids if names[c] == names[p]]
        if len(same) != 1 or not dispatched[same[0]]:
            continue
        others = [c for c in kids if c != same[0]]
        # allowed beside the out= variant: its output allocation, and host-only helpers
        # (aten::result_type, aten::to of a scalar), which stay as children
        if all(names[o] in ALLOC_OPS or not dispatched[o] for o in others):
            redirect[same[0]] = p
            for o in others:
                if names[o] in ALLOC_OPS and dispatched[o]:
                    redirect[o] = p
    return redirect


def classify(threads: Sequence, starts: Sequence[int], ends: Sequence[int], names: Sequence[str],
             python: Sequence[bool], in_cut: Callable[[int, int], bool] | None = None,
             fold: bool = True, machinery: frozenset[str] = frozenset(),
             span_seqs: Mapping[int, int] | None = None) -> Classified:
    """Classify host events (same clock for all; ``threads`` any hashable lane key).

    ``machinery``: extra event names that are emulator machinery (see :func:`emulator_functions`).
    ``span_seqs``: execution seq -> number of the ``trnscope::dispatch#<n>`` span it was made in.
    """
    n = len(names)
    ev = _HostEvents(threads, starts, ends, names, python)
    order, parent = _nest(ev)
    m = _find_machinery(ev, order, parent, in_cut, machinery)
    internal, owner = m.internal, m.owner
    redirect = _out_variant_folds(order, parent, names, m) if fold else {}

    def resolve(i: int) -> int:
        while i in redirect:
            i = redirect[i]
        return i

    keep = [not internal[i] and i not in redirect for i in range(n)]
    final_parent = [-1] * n
    for i in range(n):
        if keep[i]:
            p = parent[i]
            while p >= 0 and not keep[p]:
                p = redirect[p] if p in redirect else parent[p]
            final_parent[i] = p
    dispatcher = {seq: (resolve(owner[mk]) if owner[mk] >= 0 else -1) for seq, mk in m.markers.items()}
    for seq, k in (span_seqs or {}).items():
        mk = m.spans.get(k)
        if mk is not None and seq not in dispatcher:
            dispatcher[seq] = resolve(owner[mk]) if owner[mk] >= 0 else -1
    return Classified(keep, final_parent, dispatcher, m.n_internal, len(redirect), m.markers)


class ClockMap:
    """Kineto timestamps (Unix-epoch ns) -> the emulated clock, and back to epoch for writing.

    ``emulated(epoch_ns)`` drops the emulator's cuts and inserts host waits exactly as the runtime
    clock does for its own records; ``to_epoch(emulated_ns)`` shifts emulated ns onto the epoch
    axis Kineto files use, so framework and device events share one axis in every file.
    """

    def __init__(self, clock, offset_ns: int) -> None:
        self.clock = clock
        self.offset = offset_ns            # epoch - perf_counter

    def real(self, epoch_ns: int) -> int:
        return epoch_ns - self.offset

    def emulated(self, epoch_ns: int) -> int:
        return self.clock.to_emulated(epoch_ns - self.offset)

    def to_epoch(self, emulated_ns: int) -> int:
        return emulated_ns + self.offset

    def in_cut(self, start_epoch: int, end_epoch: int) -> bool:
        """The real interval lies wholly inside one stretch of emulator work."""
        a, b = start_epoch - self.offset, end_epoch - self.offset
        if not self.clock.in_cut(a):
            return False
        if b <= a:
            return True
        return self.clock.in_cut(b - 1) and self.clock.to_emulated(a) == self.clock.to_emulated(b - 1)
