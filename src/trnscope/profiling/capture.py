"""Capture: turn the runtime's recording on and off with torch.profiler's recording window.

How a session is detected (pinned to torch 2.13; ``check_torch_internals()`` and the tests fail
loudly if these move). ``torch.profiler.profile`` (and ``torch.autograd.profiler.profile`` used
directly) funnel every window through one ``torch.autograd.profiler.profile`` object per cycle:

* ``profile._start_trace()``: Kineto starts recording (the RECORD phase of a schedule; warm-up
  only calls ``_prepare_trace``). If ``self.experimental_config`` is a
  :class:`~.config.NeuronConfig`, trnscope makes a :class:`Window` first, which holds the emulated
  clock's history (so every timestamp Kineto takes from here on maps exactly), and opens it once
  Kineto records: the window subscribes to the runtime's events (:mod:`trnscope.runtime.observe`):
  every device op becomes a numbered ``trnscope::dispatch#<n>`` span, each execution of the
  selected NeuronCores is captured with the span it was made in (or, made outside any span,
  leaves a ``trnscope::exec#<seq>`` marker), and host samplers start for CPU_UTIL / HOST_MEMORY.
  The window is a deferred observer unless it needs each execution as it happens (with_stack's
  source lines, the host samplers' ticks): the device's C++ eager path then goes on serving warm
  ops, opens their spans itself and hands their executions over later (at the close at the latest).
* ``profile.__exit__()``: the window closes *before* torch's own processing (which synchronises
  the device): executions whose device end lies after the close are in flight and are dropped,
  as the real runtime profiler only sees completed work (warned once per NeuronConfig). The
  clock's history is released after torch's processing.
* ``profile._parse_kineto_results()``: the FunctionEvents torch built are post-processed
  (:func:`.events.postprocess`): emulator machinery dropped, times moved onto the emulated clock,
  device kernels attached to the ops that dispatched them, device rows added.
* ``profile.export_chrome_trace()``: writes trnscope's framework trace (CPU ops from Kineto's own
  JSON plus device lanes) instead of Kineto's raw file.

Nothing else in torch is touched; a session without a NeuronConfig is not affected.
"""

from __future__ import annotations

import inspect
import itertools
import os
import socket
import sys
import threading
import time
import warnings

import torch
import torch.autograd.profiler as _autograd_profiler

from .. import runtime
from ..frames import user_stacklevel
from ..runtime import observe
from ..sourceline import user_line
from .config import NeuronConfig, ProfileMode
from .correlate import MARKER_PREFIX, SPAN_PREFIX, ClockMap, epoch_offset_ns
from .hostsamples import HostSampler

BACKEND = "neuron"

_RF = torch._C._profiler._RecordFunctionFast


class NeuronProfilerWarning(UserWarning):
    """Something in a Neuron profile is not what the user probably expects."""


_window_ids = itertools.count(1)
_active: "Window | None" = None
_active_lock = threading.Lock()


def warn_once(cfg: NeuronConfig | None, key: str, message: str) -> None:
    """Warn (once per NeuronConfig and key), pointing at the user's code."""
    if cfg is not None:
        if key in cfg._warned:
            return
        cfg._warned.add(key)
    warnings.warn(f"trnscope: {message}", NeuronProfilerWarning, stacklevel=user_stacklevel())


_enable_record_function = torch.autograd._enable_record_function
_tls = threading.local()


_memory = None


def _memory_allocated(nc: int) -> int:
    """Bytes allocated on NeuronCore ``nc`` (the HBM usage sample taken at each execution): one
    live counter (``memory.stats()`` copies every counter, which cost more than the rest of the
    per-execution hook together)."""
    global _memory
    if _memory is None:
        from ..device import memory

        _memory = memory
    return _memory.allocated_bytes(nc)


def _device_bytes() -> int:
    """What the emulator holds in host memory for the device: every NeuronCore's reserved HBM."""
    from ..device import memory

    return sum(memory.stats(rt.index).allocated + memory.cached_bytes(rt.index) for rt in runtime.cores())


def _backward_caller():
    """The user's line of a thread inside ``backward()`` (autograd's engine runs the backward
    on its own threads while the calling thread waits in ``_engine_run_backward``), or None."""
    for frame in sys._current_frames().values():
        f = frame
        while f is not None:
            if f.f_code.co_name == "_engine_run_backward":
                return user_line(f)
            f = f.f_back
    return None


class Window(observe.Observer):
    """One recording window of a profiling session: what the runtime did while Kineto recorded.

    Made before Kineto starts, it holds the emulated clock's history (:meth:`release_clock` lets
    it go once torch has processed the session); :meth:`begin` subscribes it to the runtime's
    events, :meth:`end` unsubscribes it.

    Each device op is a span (``trnscope::dispatch#<n>``): the link from the executions made
    inside it to the op, so no separate marker event is needed for them (a marker cost as much
    as the span itself). Inside the span, PyTorch's RecordFunction is switched off for the thread
    (``torch.autograd._enable_record_function``, thread-local): the ATen ops the emulator runs on
    host views would only be recorded to be dropped again, and recording them is most of the
    profiler's overhead on small ops. Ops nested in a span (RecordFunction already off) open none.
    The runtime delivers its events inside its emulation cut, so the span's edges and the
    recording are emulator work, never the op's CPU time in the profile.

    The window is a deferred observer (:attr:`deferred`) unless it records source lines or samples
    the host: the device's C++ eager path then opens the same numbered span itself for each warm op
    it serves and hands its executions over through :meth:`deferred_execution`, at the close at the
    latest; the close orders every execution (and HBM sample) by its sequence number.
    """

    def __init__(self, prof, cfg: NeuronConfig) -> None:
        self.id = next(_window_ids)
        self.config = cfg
        self.use_device = getattr(prof, "use_device", None)
        self.capture_device = cfg.records_device and self.use_device == BACKEND
        self.clock = runtime.CLOCK
        self.clockmap = ClockMap(self.clock, epoch_offset_ns())
        self.wall_start = time.time()
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.start_em = self.clock.now()
        self.close_em: int | None = None
        self.host_time = self.clock.mode  # "mixed" when the mode changed inside the window
        self.open = True
        self.cores: list[int] = []
        self.captured: list = []        # Execution records, in order of recording
        self.records: list = []         # completed by the close (what the profile shows)
        self.missing: list = []         # still in flight at the close (dropped)
        self.hbm: list[tuple[int, int, int]] = []   # (emulated ns, nc, allocated bytes), made at the close
        self._hbm: list[tuple[int, tuple[int, int, int]]] = []  # (execution seq, sample), in order of arrival
        self.sample_hbm = cfg.has(ProfileMode.RUNTIME)
        self.native_tid: dict[int, int] = {}        # threading.get_ident() -> OS thread id
        self.span_of: dict[int, int] = {}           # execution seq -> number of its dispatch span
        # with_stack=True: execution seq -> the line of the user's code that dispatched it (Kineto's
        # python_function frames name only each function's first line)
        self.with_stack = bool(getattr(prof, "with_stack", False))
        self.source_of: dict[int, str] = {}
        self.backward_of: dict[int, str] = {}  # seq -> the line that called backward() (autograd's thread)
        sampled = cfg.has(ProfileMode.CPU_UTIL) or cfg.has(ProfileMode.HOST_MEMORY)
        # what the C++ eager path hands over late lacks the user's Python frame (with_stack) and
        # the moment of the execution (the samplers tick on it): those windows take every op on the
        # Python path
        self.deferred = not self.with_stack and not sampled
        self.sample_memory = self.sample_hbm
        self.hook_errors: list[str] = []
        self.ended_on_exception: str | None = None  # "KeyError: 'x'" when the user's block raised
        self.sampler: HostSampler | None = None
        self.exported: list = []
        self._selected: frozenset[int] = frozenset()
        self._subscribed = False
        self.clock.hold()
        self._holding = True

    def release_clock(self) -> None:
        """Let the clock drop its history again (once torch has mapped the session's timestamps)."""
        if self._holding:
            self._holding = False
            self.clock.release()

    def source_args(self, seq: int) -> dict:
        """The execution's source-line args for the exported traces (``source`` and/or
        ``backward_source``; none without with_stack)."""
        out = {}
        if seq in self.source_of:
            out["source"] = self.source_of[seq]
        if seq in self.backward_of:
            out["backward_source"] = self.backward_of[seq]
        return out

    # --- runtime events (on the dispatching thread, inside the runtime's cut) ---------------
    def dispatch_begin(self) -> None:
        tls = _tls
        depth = getattr(tls, "depth", 0)
        if depth:  # nested: RecordFunction is off, the outer span covers it
            tls.depth = depth + 1
            return
        n = observe.next_span()
        span = _RF(f"{SPAN_PREFIX}{n}")
        span.__enter__()
        tls.span, tls.rf, tls.depth = n, span, 1
        _enable_record_function(False)

    def dispatch_end(self) -> None:
        tls = _tls
        depth = getattr(tls, "depth", 0)
        if depth > 1:
            tls.depth = depth - 1
            return
        if depth == 1:
            tls.depth = 0
            _enable_record_function(True)
            span, tls.rf = tls.rf, None
            span.__exit__(None, None, None)

    def execution(self, ex) -> None:
        if ex.device not in self._selected:
            return
        try:
            self.captured.append(ex)  # list.append is atomic: no lock for the common single-thread case
            if ex.thread not in self.native_tid:
                self.native_tid[ex.thread] = threading.get_native_id()
            if self.with_stack:
                line = user_line(sys._getframe(1))
                if line is not None:
                    self.source_of[ex.seq] = str(line)
                else:  # autograd's thread runs no user code: the line that called backward()
                    caller = _backward_caller()
                    if caller is not None:
                        self.backward_of[ex.seq] = str(caller)
            if getattr(_tls, "depth", 0) > 0:  # inside a dispatch span: the span is the link
                self.span_of[ex.seq] = _tls.span
            else:  # outside any span (a direct runtime call): a marker inside the op is the link
                with _RF(f"{MARKER_PREFIX}{ex.seq}"):
                    pass
            if self.sample_hbm:
                self._hbm.append((ex.seq, (ex.host_end_ns, ex.device, _memory_allocated(ex.device))))
            if self.sampler is not None:
                self.sampler.tick(ex.host_end_ns)
        except Exception as exc:  # never break the user's op
            if len(self.hook_errors) < 5:
                self.hook_errors.append(repr(exc))

    def deferred_execution(self, ex, span: int, allocated: int, native_tid: int) -> None:
        """An execution of the C++ eager path, handed over late with what :meth:`execution` finds out
        on the dispatching thread: its dispatch span, the allocated bytes and the thread's OS id."""
        if ex.device not in self._selected:
            return
        try:
            self.captured.append(ex)
            self.native_tid.setdefault(ex.thread, native_tid)
            if span:
                self.span_of[ex.seq] = span
            if self.sample_hbm:
                self._hbm.append((ex.seq, (ex.host_end_ns, ex.device, allocated)))
        except Exception as exc:  # never break the user's op (nor the delivery to other observers)
            if len(self.hook_errors) < 5:
                self.hook_errors.append(repr(exc))

    def lane_cores(self) -> list[int]:
        """The NeuronCores the exported traces give lanes: those with work completed in the window,
        and those ``capture_enabled_for_nc`` names explicitly (an idle core the user asked about is
        an answer). Capture selects every core of the chip by default, so listing
        :attr:`cores` would draw empty lanes for all eight NeuronCores of a trn2 chip."""
        used = {r.device for r in self.records}
        if self.config.nc_set is not None:
            used.update(self.cores)
        return sorted(used)

    def host_time_metadata(self) -> dict:
        """How the profile's host times were made: the mode and the host-cost model in force."""
        import dataclasses

        return {"mode": self.host_time, "costs": dataclasses.asdict(runtime.host_costs())}

    def target_metadata(self) -> dict:
        from ..hw import get_spec

        spec = runtime.core(self.cores[0]).spec if self.cores else get_spec()
        return {"target": spec.name, "instance": spec.instance, "neuroncore": spec.neuroncore}

    # --- open / close -----------------------------------------------------------------------
    def begin(self) -> None:
        """Open the window (Kineto records from now on)."""
        cfg = self.config
        if cfg.records_device and self.use_device != BACKEND:
            warn_once(cfg, "activity", "NeuronConfig asks for device/runtime capture, but the profiler's activities "
                      "do not include ProfilerActivity.PrivateUse1, so no Neuron device activity is captured. "
                      "Pass activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1].")
        if self.capture_device:
            known = {rt.index for rt in runtime.cores()} | set(range(torch.neuron.device_count()))
            selected = sorted(i for i in known if cfg.captures_nc(i))
            if not selected:
                warn_once(cfg, "nc", f"capture_enabled_for_nc={cfg.capture_enabled_for_nc!r} selects none of this "
                          f"process's NeuronCores ({sorted(known)}); no device activity is captured.")
            for i in selected:
                runtime.core(i)  # made now: an idle core the user selected still gets a lane
            self.cores = selected
            self._selected = frozenset(selected)
            observe.subscribe(self)
            self._subscribed = True
        if cfg.has(ProfileMode.CPU_UTIL) or cfg.has(ProfileMode.HOST_MEMORY):
            self.sampler = HostSampler(cfg.has(ProfileMode.CPU_UTIL), cfg.has(ProfileMode.HOST_MEMORY), self.clock,
                                       _device_bytes)
            self.sampler.start()
        self.start_em = self.clock.now()
        self.host_time = self.clock.mode

    def end(self) -> None:
        if not self.open:
            return
        self.open = False
        self.close_em = self.clock.now()
        if self.clock.mode != self.host_time:
            self.host_time = "mixed"
        if self._subscribed:
            observe.unsubscribe(self)  # hands over what the C++ eager path kept for the window first
            self._subscribed = False
        # the C++ eager path's executions arrive after the Python path's later ones: in sequence order
        self.captured.sort(key=lambda r: r.seq)
        self._hbm.sort(key=lambda e: e[0])
        self.hbm = [sample for _, sample in self._hbm]
        if self.sampler is not None:
            self.sampler.stop()
        close = self.close_em
        self.records = [r for r in self.captured if r.device_end_ns <= close]
        self.missing = [r for r in self.captured if r.device_end_ns > close]

    def warn_about_close(self) -> None:
        """The close's warnings (emitted once torch has finished closing the session)."""
        if self.missing:
            kinds = sum(1 for r in self.missing if r.kind == "kernel")
            warn_once(self.config, "in_flight",
                      f"{len(self.missing)} device execution(s) ({kinds} kernel(s)) were still running on the "
                      f"NeuronCore when the profiling window closed and are missing from the profile, as with "
                      f"Neuron's runtime profiler. Call torch.neuron.synchronize() before prof.step() (or before "
                      f"leaving the profile context) so that the window holds all of its device work.")
        if self.hook_errors:
            warn_once(self.config, "hook", f"recording hook failed: {self.hook_errors[0]}")


# --- torch hooks (applied by trnscope.device.torch_adaptations, "profiler_capture") ----------

Profile = _autograd_profiler.profile
ORIGINALS: dict[str, object] = {}  # torch's methods, which the replacements call
EXPECTED = {
    "_start_trace": ["self"],
    "__exit__": ["self", "exc_type", "exc_val", "exc_tb"],
    "_parse_kineto_results": ["self", "result", "timeout_s"],
    "export_chrome_trace": ["self", "path", "metadata", "use_python_export"],
}


def check_other_internals() -> list[str]:
    """The profiler internals the capture reads without replacing them."""
    problems = []
    if not hasattr(torch._C._profiler, "_RecordFunctionFast"):
        problems.append("torch._C._profiler._RecordFunctionFast is gone")
    sig = inspect.signature(torch.autograd.profiler_util.FunctionEvent.__init__)
    for p in ("device_type", "device_index", "use_device", "trace_name", "is_user_annotation"):
        if p not in sig.parameters:
            problems.append(f"FunctionEvent() no longer takes {p}=")
    return problems


def check_torch_internals() -> list[str]:
    """What of the torch internals trnscope relies on is missing or changed ([] when all is well)."""
    from ..device import torch_adaptations

    return torch_adaptations.check()


def _window_of(prof) -> "Window | None":
    return getattr(prof, "_trnscope_window", None)


def _start_trace(self):
    cfg = getattr(self, "experimental_config", None)
    if not isinstance(cfg, NeuronConfig):
        return ORIGINALS["_start_trace"](self)
    global _active
    with _active_lock:
        if _active is not None and _active.open:
            _active.end()
        w = Window(self, cfg)  # holds the clock's history before Kineto takes its first timestamp
        _active = w
    self._trnscope_window = w
    try:
        ORIGINALS["_start_trace"](self)
    except BaseException:
        w.end()
        w.release_clock()
        raise
    w.begin()


def _exit(self, exc_type, exc_val, exc_tb):
    w = _window_of(self)
    closing = w is not None and w.open
    if closing:
        global _active
        # torch.profiler.profile closes this inner profile with (None, None, None) even when the
        # user's block raised; the exception being handled is still visible here.
        error = exc_val if exc_val is not None else sys.exc_info()[1]
        if error is not None:
            w.ended_on_exception = f"{type(error).__name__}: {error}"[:500]
        w.end()
        with _active_lock:
            if _active is w:
                _active = None
    try:
        result = ORIGINALS["__exit__"](self, exc_type, exc_val, exc_tb)
    finally:
        if w is not None:
            w.release_clock()
    if closing:
        w.warn_about_close()
    return result


def _parse_kineto_results(self, result, timeout_s=None):
    events = ORIGINALS["_parse_kineto_results"](self, result, timeout_s=timeout_s)
    w = _window_of(self)
    if w is None or w.open:
        return events
    from .events import postprocess

    return postprocess(w, events, result.trace_start_ns())


def _export_chrome_trace(self, path, metadata=None, use_python_export=False):
    w = _window_of(self)
    if w is None or w.open or use_python_export or self.kineto_results is None:
        return ORIGINALS["export_chrome_trace"](self, path, metadata, use_python_export)
    from .framework_trace import write_framework_trace

    write_framework_trace(self, w, path)


REPLACEMENTS = {"_start_trace": _start_trace, "__exit__": _exit, "_parse_kineto_results": _parse_kineto_results,
                "export_chrome_trace": _export_chrome_trace}


def install() -> None:
    """Install the hooks (idempotent). Raises RuntimeError if torch's internals moved."""
    from ..device import torch_adaptations

    torch_adaptations.apply("profiler_capture")
    problems = check_other_internals()
    if problems:
        warnings.warn("trnscope.profiling: torch internals differ from what it was written for: "
                      + "; ".join(problems), NeuronProfilerWarning, stacklevel=2)


def installed() -> bool:
    return bool(ORIGINALS) and Profile._start_trace is _start_trace


def active_window() -> "Window | None":
    return _active
