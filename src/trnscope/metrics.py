"""Compile and NEFF-cache metrics, as ``torch_neuronx.metrics`` reports them.

    import trnscope.metrics as met          # under `trnscope run`: import torch_neuronx.metrics as met
    print(met.report())
    met.get_counter_value("CompilationCache.InMemoryHits")
    met.clear_all()

*Counters* count events; *metrics* accumulate a quantity over samples (time in ns). What is
recorded, and where:

- ``CompilationCache.InMemoryHits`` / ``InMemoryMisses``: an op call's NEFF looked up among the
  NEFFs this process holds (a call whose device signature was seen before does not look: it reuses
  its dispatch plan);
- ``CompilationCache.DiskHits`` / ``DiskMisses`` / ``DiskWrites``: the persistent NEFF cache
  (:mod:`trnscope.runtime.neff_cache`), ``CompilationCache.CorruptEntries`` entries it found
  damaged (reported once, rebuilt), ``CompilationCache.DiskErrors`` writes that failed;
- ``Compilation.NeffsCompiled``: NEFFs built (lowered) in this process; metric ``CompilationTime``;
- metrics ``NeffCache.LoadTime`` / ``NeffCache.StoreTime``: reading and writing entries;
- ``Execution.Kernels``: kernels executed, summed over NeuronCores when read (no cost per dispatch).

Collection is on by default (a dictionary update per compile or cache lookup, nothing per
dispatch); ``TORCH_NEURONX_METRICS_ENABLED=0`` or :func:`set_enabled` turns it off.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_lock = threading.Lock()
_counters: dict[str, int] = {}
_metrics: dict[str, list] = {}  # name -> [accumulator, samples, unit]
_enabled = os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "1").strip().lower() not in ("0", "false", "no", "off")


def is_enabled() -> bool:
    return _enabled


def set_enabled(enabled: bool) -> None:
    global _enabled
    _enabled = bool(enabled)


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name``."""
    if _enabled:
        with _lock:
            _counters[name] = _counters.get(name, 0) + n


def sample(name: str, value: float, unit: str = "ns") -> None:
    """One sample of metric ``name``."""
    if _enabled:
        with _lock:
            m = _metrics.get(name)
            if m is None:
                _metrics[name] = [value, 1, unit]
            else:
                m[0] += value
                m[1] += 1


def _runtime_counters() -> dict[str, int]:
    """Counters kept by the NeuronCore runtimes, summed when asked for (they cost nothing per dispatch
    here); nothing when the runtime has not been imported."""
    rt = sys.modules.get("trnscope.runtime")
    if rt is None:
        return {}
    kernels = sum(int(core.stats().get("dispatches", 0)) for core in rt.cores())
    return {"Execution.Kernels": kernels} if kernels else {}


def get_counter_names() -> list[str]:
    """Names of the counters that have data."""
    with _lock:
        names = set(_counters)
    return sorted(names | set(_runtime_counters()))


def get_counter_value(name: str) -> int | None:
    with _lock:
        if name in _counters:
            return _counters[name]
    return _runtime_counters().get(name)


def get_metric_names() -> list[str]:
    with _lock:
        return sorted(_metrics)


def _format(value: float, unit: str) -> str:
    if unit != "ns":
        return f"{value:g}{unit}"
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(value) >= scale:
            return f"{value / scale:.3f}{suffix}"
    return f"{value:.0f}ns"


def get_metric_data(name: str) -> dict[str, Any] | None:
    """{"accumulator", "total_samples", "unit", "repr"} of metric ``name`` (None when it has none)."""
    with _lock:
        m = _metrics.get(name)
        if m is None:
            return None
        acc, n, unit = m
    return {"accumulator": acc, "total_samples": n, "unit": unit,
            "repr": f"{_format(acc, unit)} total, {n} samples, {_format(acc / n, unit)} mean"}


def report_filtered(counter_names: list[str] | None = None, metric_names: list[str] | None = None) -> str:
    """The report, limited to the counters and metrics named (None or empty: all of them)."""
    counters = [n for n in get_counter_names() if not counter_names or n in counter_names]
    metrics = [n for n in get_metric_names() if not metric_names or n in metric_names]
    lines = []
    for n in metrics:
        d = get_metric_data(n)
        if d is not None:
            lines += [f"Metric: {n}", f"  TotalSamples: {d['total_samples']}",
                      f"  Accumulator: {_format(d['accumulator'], d['unit'])}",
                      f"  Mean: {_format(d['accumulator'] / d['total_samples'], d['unit'])}"]
    for n in counters:
        v = get_counter_value(n)
        if v is not None:
            lines += [f"Counter: {n}", f"  Value: {v}"]
    return "\n".join(lines) + ("\n" if lines else "")


def report() -> str:
    """Every metric and counter, as ``torch_neuronx.metrics.report()`` lays them out."""
    return report_filtered()


def clear_counters() -> None:
    """Clear the counters (the runtime's per-core ones included)."""
    with _lock:
        _counters.clear()
    rt = sys.modules.get("trnscope.runtime")
    if rt is not None:
        for core in rt.cores():
            core.clear_stats()


def clear_metrics() -> None:
    with _lock:
        _metrics.clear()


def clear_all() -> None:
    clear_counters()
    clear_metrics()


def get_compilation_metrics() -> dict[str, Any]:
    """The compilation and cache counters and metrics, by name."""
    out: dict[str, Any] = {n: get_counter_value(n) for n in get_counter_names() if "Compil" in n}
    for n in get_metric_names():
        if "Compil" in n or "NeffCache" in n:
            d = get_metric_data(n)
            if d is not None:
                out[n] = {"accumulator": d["accumulator"], "total_samples": d["total_samples"], "formatted": d["repr"]}
    return out
