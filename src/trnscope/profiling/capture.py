"""Capture: turn the runtime's recording on and off with torch.profiler's recording window.

How a session is detected (pinned to torch 2.13; ``check_torch_internals()`` and the tests fail
loudly if these move). ``torch.profiler.profile`` (and ``torch.autograd.profiler.profile`` used
directly) funnel every window through one ``torch.autograd.profiler.profile`` object per cycle:

* ``profile._start_trace()``: Kineto starts recording (the RECORD phase of a schedule; warm-up
  only calls ``_prepare_trace``). After it, if ``self.experimental_config`` is a
  :class:`~.config.NeuronConfig`, trnscope opens a :class:`Window`: the selected NeuronCores'
  runtimes record executions, the device executor is wrapped so every device call leaves a
  numbered ``trnscope::dispatch#<n>`` span, the runtime's ``on_record`` hook notes the span of
  each execution (or, for one made outside any span, leaves a ``trnscope::exec#<seq>`` marker),
  and host samplers start for CPU_UTIL / HOST_MEMORY.
* ``profile.__exit__()``: the window closes *before* torch's own processing (which synchronises
  the device): executions whose device end lies after the close are in flight and are dropped,
  as the real runtime profiler only sees completed work (warned once per NeuronConfig).
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
from ..device._core import CORE as _cpp
from ..device.runtime_bridge import HostFallback as _HostFallback
from .config import NeuronConfig, ProfileMode
from .correlate import MARKER_PREFIX, SPAN_PREFIX, ClockMap, epoch_offset_ns
from .hostsamples import HostSampler

BACKEND = "neuron"

_RF = torch._C._profiler._RecordFunctionFast


class NeuronProfilerWarning(UserWarning):
    """Something in a Neuron profile is not what the user probably expects."""


_window_ids = itertools.count(1)
# dispatch span numbers, unique across threads (next() is atomic under the GIL); on the C++ path the
# C++ eager path opens spans too, from the same sequence
_next_span = _cpp.next_span if _cpp is not None else itertools.count(1).__next__
_active: "Window | None" = None
_active_lock = threading.Lock()


_INTERNAL_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                  os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside trnscope and torch (where a warning helps)."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(_INTERNAL_DIRS):
        f, level = f.f_back, level + 1
    return level


def warn_once(cfg: NeuronConfig | None, key: str, message: str) -> None:
    """Warn (once per NeuronConfig and key), pointing at the user's code."""
    if cfg is not None:
        if key in cfg._warned:
            return
        cfg._warned.add(key)
    warnings.warn(f"trnscope: {message}", NeuronProfilerWarning, stacklevel=_user_stacklevel())


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


class _SpanExecutor:
    """Wraps the device executor while a window is open: each device call becomes a span.

    Inside the span, PyTorch's RecordFunction is switched off for the thread
    (``torch.autograd._enable_record_function``, thread-local): the ATen ops the emulator runs on
    host views would only be recorded to be dropped again, and recording them is most of the
    profiler's overhead on small ops. Each outermost span is numbered
    (``trnscope::dispatch#<n>``) and the runtime hook notes the span of every execution made
    inside it (``Window.span_of``): the span is the link from execution to op, so no separate
    marker event is needed for them (a marker cost as much as the span itself). Calls nested in a
    span (RecordFunction already off) open none.

    The wrapper's own work (opening and closing the span) runs in emulation cuts: it is the
    profiler recording the emulator, which Neuron's runtime does natively, and left on the clock
    it would add its cost (several µs per call, more right after the emulator's numerics have
    cooled the caches) to every op's CPU time in the profile. With the runtime bridge the span
    opens and closes inside the cut the bridge serves the call in; a CPU fallback leaves that cut,
    since it is real host time. Any other inner executor is called between two cuts of the span's
    own and cuts what it must itself.
    """

    def __init__(self, inner, clock=None) -> None:
        self.inner = inner
        clock = clock or runtime.CLOCK
        self._cut = clock.emulation()  # bound once: this runs per device call
        # The runtime bridge serves a call inside runtime.CLOCK's cut (``serve``): opening and
        # closing the span inside that same cut saves two of the four cut crossings per call
        # (each takes the clock's lock and may append to its history). Any other executor, or
        # another clock, takes the general path.
        serve = getattr(inner, "serve", None)
        self._serve = serve if callable(serve) and clock is runtime.CLOCK else None

    def execute(self, call):
        tls = _tls
        depth = getattr(tls, "depth", 0)
        if depth:  # nested: RecordFunction is off, the outer span covers it
            tls.depth = depth + 1
            try:
                return self.inner.execute(call)
            finally:
                tls.depth = depth
        serve = self._serve
        if serve is None:
            return self._execute_apart(call)
        cut = self._cut
        cut.__enter__()
        try:
            n = _next_span()
            span = _RF(f"{SPAN_PREFIX}{n}")
            span.__enter__()
            tls.span = n
            tls.depth = 1
            _enable_record_function(False)
            try:
                result = serve(call)
                if type(result) is _HostFallback:  # the op runs on the host CPU: real host time
                    cut.__exit__()
                    try:
                        result = result.run()
                    finally:
                        cut.__enter__()
                return result
            finally:
                tls.depth = 0
                _enable_record_function(True)
                span.__exit__(None, None, None)
        finally:
            cut.__exit__()

    def _execute_apart(self, call):
        """The span around an executor that cuts its own work: the span's edges in cuts of their
        own, the inner call between them."""
        tls = _tls
        cut = self._cut
        cut.__enter__()
        n = _next_span()
        span = _RF(f"{SPAN_PREFIX}{n}")
        span.__enter__()
        tls.span = n
        tls.depth = 1
        _enable_record_function(False)
        cut.__exit__()
        try:
            return self.inner.execute(call)
        finally:
            cut.__enter__()
            tls.depth = 0
            _enable_record_function(True)
            span.__exit__(None, None, None)
            cut.__exit__()

    def synchronize(self, device: int) -> None:
        return self.inner.synchronize(device)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Window:
    """One recording window of a profiling session: what the runtime did while Kineto recorded."""

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
        self._hbm: list[tuple[int, tuple[int, int, int]]] = []  # (execution seq, sample)
        self.sample_hbm = cfg.has(ProfileMode.RUNTIME)
        self.native_tid: dict[int, int] = {}        # threading.get_ident() -> OS thread id
        self.span_of: dict[int, int] = {}           # execution seq -> number of its dispatch span
        self.hook_errors: list[str] = []
        self.ended_on_exception: str | None = None  # "KeyError: 'x'" when the user's block raised
        self.sampler: HostSampler | None = None
        self.exported: list = []
        self._saved: list[tuple] = []
        self._executor = None

    # --- runtime hook (runs on the dispatching thread, inside the op) -----------------------
    def on_record(self, ex) -> None:
        # recording is the profiler's work, not the user's: cut from the clock like the span's.
        # The runtime usually calls this from inside its own cut (numerics, simulation), where a
        # nested cut changes nothing and costs two lock round trips per execution; only calls
        # made outside one (CPU fallbacks, direct runtime use) need their own.
        if self.clock.cutting:
            self._on_record(ex)
        else:
            with self.clock.emulation():
                self._on_record(ex)

    def on_native(self, ex, span: int, hbm: int, native_tid: int) -> None:
        """An execution of the C++ eager path, delivered when the window closes (or the records are
        read) with what :meth:`_on_record` finds out on the dispatching thread: its dispatch span,
        the allocated bytes and the thread's native id at the time."""
        self.captured.append(ex)
        self.native_tid.setdefault(ex.thread, native_tid)
        if span:
            self.span_of[ex.seq] = span
        if self.sample_hbm:
            self._hbm.append((ex.seq, (ex.host_end_ns, ex.device, hbm)))

    def _on_record(self, ex) -> None:
        try:
            self.captured.append(ex)  # list.append is atomic: no lock for the common single-thread case
            if ex.thread not in self.native_tid:
                self.native_tid[ex.thread] = threading.get_native_id()
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

    def lane_cores(self) -> list[int]:
        """The NeuronCores the exported traces give lanes: those with work completed in the window,
        and those ``capture_enabled_for_nc`` names explicitly (an idle core the user asked about is
        an answer). Capture turns recording on for every core of the chip, so listing
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
        cfg = self.config
        if cfg.records_device and self.use_device != BACKEND:
            warn_once(cfg, "activity", "NeuronConfig asks for device/runtime capture, but the profiler's activities "
                      "do not include ProfilerActivity.PrivateUse1, so no Neuron device activity is captured. "
                      "Pass activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1].")
        if self.capture_device:
            from ..device import dispatch

            known = {rt.index for rt in runtime.cores()} | set(range(torch.neuron.device_count()))
            selected = sorted(i for i in known if cfg.captures_nc(i))
            if not selected:
                warn_once(cfg, "nc", f"capture_enabled_for_nc={cfg.capture_enabled_for_nc!r} selects none of this "
                          f"process's NeuronCores ({sorted(known)}); no device activity is captured.")
            # host samplers tick at each execution as it happens: the C++ eager path then leaves
            # the cores' calls to Python; otherwise its executions arrive at the close
            sampled = cfg.has(ProfileMode.CPU_UTIL) or cfg.has(ProfileMode.HOST_MEMORY)
            for i in selected:
                rt = runtime.core(i)
                self._saved.append((rt, rt.recording, rt.on_record, rt.on_native_record))
                rt.observe(self.on_record, self.on_native, immediate=sampled, sample_hbm=self.sample_hbm)
                rt.recording = True
            self.cores = selected
            current = dispatch.get_executor()
            if not isinstance(current, _SpanExecutor):
                self._executor = _SpanExecutor(current, self.clock)
                dispatch.set_executor(self._executor)
                if _cpp is not None:
                    _cpp.set_spans(True)
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
        for rt, _, _, _ in self._saved:
            rt.records  # the C++ eager path's executions reach on_native now  # noqa: B018
        self.captured.sort(key=lambda r: r.seq)
        self._hbm.sort(key=lambda e: e[0])
        self.hbm = [sample for _, sample in self._hbm]
        for rt, recording, hook, native_hook in self._saved:
            rt.recording = recording
            rt.observe(hook, native_hook)
            if not recording:  # the records were ours only: do not let the runtime keep them
                mine = {id(r) for r in self.captured}
                rt.records[:] = [r for r in rt.records if id(r) not in mine]
        self._saved = []
        if self._executor is not None:
            from ..device import dispatch

            if dispatch.get_executor() is self._executor:
                dispatch.set_executor(self._executor.inner)
                if _cpp is not None:
                    _cpp.set_spans(False)
            self._executor = None
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
    ORIGINALS["_start_trace"](self)
    cfg = getattr(self, "experimental_config", None)
    if isinstance(cfg, NeuronConfig):
        global _active
        with _active_lock:
            if _active is not None and _active.open:
                _active.end()
            w = Window(self, cfg)
            _active = w
        self._trnscope_window = w
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
    result = ORIGINALS["__exit__"](self, exc_type, exc_val, exc_tb)
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
                      + "; ".join(problems), NeuronProfilerWarning)


def installed() -> bool:
    return bool(ORIGINALS) and getattr(Profile, "_start_trace") is _start_trace


def active_window() -> "Window | None":
    return _active
