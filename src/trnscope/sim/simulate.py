"""simulate(Program, spec) -> DeviceTimeline, deterministic and cached per (NEFF hash, spec)."""

from __future__ import annotations

from collections import OrderedDict

from .. import caches
from ..hw import HardwareSpec, get_spec
from ..isa import DeadlockError, Program, validate
from ..isa.columns import gc_paused, program_columns
from .core import run_core
from .encode import ENGINE_STREAMS, encode
from .timeline import DeviceTimeline, summarize

_CACHE: "OrderedDict[tuple[bytes, HardwareSpec], DeviceTimeline]" = OrderedDict()
CACHE_SIZE = 4096


def simulate(program: Program, spec: HardwareSpec | None = None, *, check: bool = True,
             cache: bool = True) -> DeviceTimeline:
    """Run the performance model. ``check`` validates the program first (clear errors, no hangs)."""
    spec = spec or get_spec()
    key = (program.content_hash, spec) if cache else None
    if key is not None and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    with gc_paused():
        cols = program_columns(program)  # one pass over the instructions, shared by validation and encoding
        if check:
            validate(program, spec, columns=cols)
        enc = encode(program, spec, columns=cols)
    start, end, data_start, wait_ns, heads, done = run_core(
        enc.n, enc.kind, enc.base_ns, enc.dep_ns, enc.wait_ptr, enc.wait_sem, enc.wait_val, enc.sig_ptr,
        enc.sig_sem, enc.sig_val, enc.sig_set, enc.dma_desc, enc.dma_desc_ns, enc.dma_fixed_ns, enc.stream_ptr,
        enc.stream_instr, enc.n_streams, max(1, enc.n_sems), spec.dma_engines, spec.tensor_throttling,
        spec.throttle_idle_ns, spec.throttle_ramp_ns, spec.throttle_start_fraction, enc.pcore, enc.n_cores, enc.psum_lock, enc.n_psum_locks,
    )
    if done < enc.n:
        raise DeadlockError(_deadlock_message(program, enc, heads))
    tl = DeviceTimeline(program, spec, enc, start, end, data_start, wait_ns)
    tl.summary = summarize(program, spec, enc, start, end, data_start, wait_ns)
    if key is not None:
        _CACHE[key] = tl
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return tl


def _deadlock_message(program: Program, enc, heads) -> str:
    lines = []
    for s in range(enc.n_streams):
        if heads[s] < enc.stream_ptr[s + 1]:
            i = int(enc.stream_instr[heads[s]])
            lines.append(f"  {program.label(i)} never started (waits {program.instructions[i].waits})")
    return "the program deadlocks in the simulator:\n" + "\n".join(lines)


def clear_cache() -> None:
    _CACHE.clear()


caches.register("sim: timelines", clear_cache)


__all__ = ["simulate", "clear_cache", "ENGINE_STREAMS"]
