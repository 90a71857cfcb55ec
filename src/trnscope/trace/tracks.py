"""Tracks: the lanes of a timeline. Each slice, instant and counter sample belongs to one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class TrackKind(str, Enum):
    CPU_THREAD = "cpu_thread"  # host thread: framework ops, runtime/driver API calls, annotations
    GPU_STREAM = "gpu_stream"  # CUDA/ROCm stream: kernels, memcpy, memset on a GPU
    DEVICE_QUEUE = "device_queue"  # another accelerator's lane: NeuronCore engine or DMA queue, ...
    COUNTER = "counter"  # one counter (its series are in Trace.counters)
    OTHER = "other"  # the profiler's own spans and markers ("Spans", "Traces", global instants)


PidLike = int | str | None


@dataclass(frozen=True)
class Track:
    """One lane. ``id`` is also the track's position in display order (see ``display_key``)."""

    id: int
    kind: TrackKind
    pid: PidLike
    tid: PidLike  # None for counter tracks
    name: str  # thread name, or counter name; "" when the trace names none
    process_name: str = ""
    process_labels: str = ""  # Kineto's process_labels, e.g. "CPU", "GPU 0"
    process_sort_index: int | None = None  # as written in the trace (None: not given)
    thread_sort_index: int | None = None

    @classmethod
    def unchecked(cls, *values) -> "Track":
        """A Track from all its fields in order, without the frozen dataclass's per-field
        ``object.__setattr__`` (a sixth of the cost; a trace may have a thread per event)."""
        track = object.__new__(cls)
        track.__dict__.update(zip(_FIELDS, values))
        return track

    @property
    def sort_index(self) -> int:
        """Position in display order: tracks are numbered in the order they are shown."""
        return self.id

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return f"thread {self.tid}" if self.tid is not None else f"process {self.pid}"

    @property
    def process_label(self) -> str:
        parts = [p for p in (self.process_name, self.process_labels) if p]
        return " ".join(parts) if parts else f"process {self.pid}"


_FIELDS = tuple(Track.__dataclass_fields__)


def _order_value(value: PidLike) -> tuple:
    # pids and tids are ints in real traces and strings in the profiler's own lanes; ints first.
    if isinstance(value, int):
        return (0, value, "")
    return (1, 0, "" if value is None else str(value))


def _sort_position(explicit: int | None, default: PidLike) -> tuple:
    # Kineto writes sort_index = pid (CPU) or 16777216 + device (GPU); a process or thread
    # without one sorts as if its sort index were its id.
    if explicit is not None:
        return (0, explicit)
    return (0, default) if isinstance(default, int) else (1, 0)


def display_key(track: Track) -> tuple:
    """How tracks are ordered on screen: processes by sort index (default: pid), threads inside a
    process by sort index (default: tid), counters after threads, like chrome://tracing."""
    return process_display_key(track.pid, track.process_sort_index) + thread_display_key(
        track.kind, track.tid, track.thread_sort_index, track.name)


def process_display_key(pid: PidLike, process_sort_index: int | None) -> tuple:
    """The process's half of :func:`display_key` (the same for all its threads)."""
    return (_sort_position(process_sort_index, pid), _order_value(pid))


def thread_display_key(kind: TrackKind, tid: PidLike, thread_sort_index: int | None, name: str) -> tuple:
    """The thread's half of :func:`display_key`."""
    return (1 if kind is TrackKind.COUNTER else 0, _sort_position(thread_sort_index, tid), _order_value(tid), name)
