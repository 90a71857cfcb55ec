"""Post-processing of torch's FunctionEvents for ``key_averages()`` with device time.

Called by the ``_parse_kineto_results`` hook (:mod:`.capture`) on the flat event list torch just
built, before torch builds the event tree. It returns a new list in which

* emulator machinery is gone (:func:`.correlate.classify`), structured ops are folded;
* every host time is on the emulated clock (emulator work cut out, host waits in), in µs from
  the trace start, as torch's own times are;
* with ``NeuronConfig(correlate_device_time=True)`` (default) and ``ProfilerActivity.PrivateUse1``:
  each completed device execution of the window (NEFF kernel, host<->device copy) is
  ``append_kernel``-ed to the op that dispatched it and added as a device row
  (``device_type=DeviceType.PrivateUse1``), which is how CUDA results look after Kineto, so
  ``table(sort_by="self_privateuse1_time_total")`` shows ``Self NEURON`` / ``NEURON total``.
"""

from __future__ import annotations

from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent, Interval

from .correlate import classify, emulator_functions

COPY_NAMES = {"h2d": "Memcpy HtoD (Host -> Neuron)", "d2h": "Memcpy DtoH (Neuron -> Host)"}


def device_row_name(rec) -> str:
    """The name of a device execution's row: the NEFF (program) name, or the memcpy kind."""
    if rec.kind == "kernel":
        return rec.neff_name or f"neff_{rec.neff_id}"
    return COPY_NAMES.get(rec.kind, rec.kind)


def postprocess(window, events: list, trace_start_ns: int) -> list:
    cm = window.clockmap
    host = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    other = [e for e in events if not (e.device_type == DeviceType.CPU and not e.is_async)]
    starts = [trace_start_ns + int(round(e.time_range.start * 1000)) for e in host]
    ends = [trace_start_ns + int(round(e.time_range.end * 1000)) for e in host]
    cls = classify([e.thread for e in host], starts, ends, [e.name for e in host],
                   [bool(getattr(e, "is_python_function", False)) for e in host], in_cut=cm.in_cut,
                   machinery=emulator_functions(), span_seqs=window.span_of)
    origin = cm.emulated(trace_start_ns)

    def rel_us(em: int) -> float:
        return (em - origin) / 1000.0

    out = []
    for i, e in enumerate(host):
        if not cls.keep[i]:
            continue
        s = cm.emulated(starts[i])
        t = cm.emulated(ends[i])
        e.time_range = Interval(rel_us(s), rel_us(max(s, t)))
        out.append(e)
    for e in other:
        s = cm.emulated(trace_start_ns + int(round(e.time_range.start * 1000)))
        t = cm.emulated(trace_start_ns + int(round(e.time_range.end * 1000)))
        e.time_range = Interval(rel_us(s), rel_us(max(s, t)))
        out.append(e)

    cfg = window.config
    if cfg.correlate_device_time and window.capture_device and window.use_device:
        next_id = max((e.id for e in events), default=0) + 1
        kept_host = [e for i, e in enumerate(host) if cls.keep[i]]
        for rec in window.records:
            if rec.kind not in ("kernel", "h2d", "d2h"):
                continue
            name = device_row_name(rec)
            start, end = rel_us(rec.device_start_ns), rel_us(rec.device_end_ns)
            idx = cls.dispatcher.get(rec.seq, -1)
            op = host[idx] if idx >= 0 else _containing(kept_host, rel_us(rec.host_start_ns), rel_us(rec.host_end_ns))
            if op is not None:
                op.append_kernel(name, rec.device, end - start)
            out.append(FunctionEvent(
                id=next_id, name=name, thread=0, start_us=start, end_us=end, overload_name="",
                input_shapes=[], stack=[], scope=0, use_device=window.use_device, sequence_nr=-1,
                device_type=DeviceType.PrivateUse1, device_index=rec.device, device_resource_id=0,
                trace_name=name, concrete_inputs=[], kwinputs={}, is_async=False,
                linked_correlation_id=op.id if op is not None else 0))
            next_id += 1
    out.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
    return out


def _containing(events: list, start_us: float, end_us: float):
    """Fallback for an execution without a marker: the shortest kept host event containing it."""
    best = None
    for e in events:
        if e.time_range.start <= start_us and end_us <= e.time_range.end:
            if best is None or e.time_range.elapsed_us() < best.time_range.elapsed_us():
                best = e
    return best
