"""One clock for host and device: the emulated host clock, in one of two modes.

The emulator's own work (numerics on the host, lowering, simulation, NEFF hashing, cache I/O,
profile recording) is an artefact of emulation and must never show as host or device time. What
the Neuron backend costs the host (dispatch, NEFF cache lookup, submit, compile) comes from the
host-cost model (:mod:`.hostcost`), which the runtime adds with :meth:`EmulatedClock.advance`.
What remains is the user's program, and the clock's *mode* says how that is timed:

* ``real``: wall-clock time runs on the emulated clock, except inside *cuts*
  (:meth:`EmulatedClock.emulation`), stretches of emulator work during which emulated time stands
  still. So the user's Python and PyTorch's dispatcher count as measured.
* ``modelled``: real time never reaches the emulated clock; it moves only by modelled amounts
  (host costs, waits for the device). The same script gives the same timings on any machine and
  under any load.

Each host wait for the device (synchronize, ``.cpu()``, ``.item()``) is :meth:`wait_until`, which
advances emulated time to when the device is done. ``now()`` is emulated time;
:meth:`to_emulated` maps any real ``time.perf_counter_ns()`` timestamp (one the PyTorch profiler
recorded) onto it, which is how profiles line up CPU events with device executions.

The map is piecewise linear: entry ``i`` says that at real time ``_real[i]`` emulated time was
``_emu[i]`` and from there ran at ``_rate[i]`` (1: real time counts; 0: it stands still, inside a
cut or in modelled mode). Mapping a past timestamp needs the entries since it, which grow by an
entry or two per op, so they are kept only while someone holds the clock (:meth:`hold`; the device
layer holds it while a ``torch.profiler`` session records, the only time real timestamps that must
be mapped later are taken). Outside holds the clock keeps just its last entry: ``now()`` and waits
stay exact, a long unprofiled loop keeps constant memory.

The clock is one for the whole process: emulator work on any thread stops emulated time for all
of them (the GIL serialises Python anyway), and every thread's modelled costs add up on it.

With the device's C++ core, the clock is :class:`NativeClock`: the same clock (same state, same
arithmetic, device/csrc/runtime.cpp) kept in C++, so that the C++ eager path advances the very
clock Python reads. :class:`EmulatedClock` is the specification and the Python path's clock.
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Literal
import time

from ..hosttime import ENV as HOST_TIME_ENV
from ..hosttime import MODELLED as MODELLED  # re-exported by trnscope.runtime
from ..hosttime import MODES, REAL


def mode_from_env(default: str = REAL) -> str:
    """The host-time mode ``$TRNSCOPE_HOST_TIME`` asks for (``default`` when unset; an unknown value
    warns, naming the ones that exist, and gives ``default``)."""
    raw = os.environ.get(HOST_TIME_ENV, "").strip().lower()
    if not raw:
        return default
    if raw not in MODES:
        import warnings

        warnings.warn(f"trnscope: {HOST_TIME_ENV}={raw!r} is not a host-time mode; using {default!r}. Set it to "
                      f"'real' (your Python and PyTorch's dispatcher as measured) or 'modelled' (every host "
                      f"interval from the model, the same on any machine)", stacklevel=2)
        return default
    return raw


class EmulatedClock:
    def __init__(self, mode: str = REAL) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown host-time mode {mode!r}: use one of {MODES}")
        self._lock = threading.RLock()
        self._mode = mode
        self.modelled = mode == MODELLED  # read on every op: a plain attribute
        self._real: list[int] = [time.perf_counter_ns()]
        self._emu: list[int] = [0]
        self._rate: list[int] = [1 if mode == REAL else 0]
        self._cut_depth = 0
        self._cut_start = 0
        self._cut_kept = False  # the cut in progress began inside a hold
        self.cuts: list[tuple[int, int]] = []  # real [start, end) stretches of emulator work, held ones
        self._cut = _Cut(self)
        self._holds = 0
        # the last entry of the map must stay: it was made inside a hold, or a hold began after it
        # (the hold's first timestamps map through it). Otherwise the next entry replaces it.
        self._tail_kept = True
        self.waited_ns = 0  # emulated ns the host spent waiting for the device, in total
        self.waits: list[tuple[int, int]] = []  # emulated [start, end) of each host wait, held ones

    # --- mode ---------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> str:
        """Switch the host-time mode from now on; returns the previous one. Emulated time is
        continuous across the switch."""
        if mode not in MODES:
            raise ValueError(f"unknown host-time mode {mode!r}: use 'real' or 'modelled'")
        with self._lock:
            old = self._mode
            if mode != old:
                real = time.perf_counter_ns()
                emu = self._at(real)
                self._mode = mode
                self.modelled = mode == MODELLED
                self._append(real, emu, self._running(), self._holds > 0)
            return old

    def _running(self) -> int:
        """The rate of emulated time now: 1 while real time counts."""
        return 1 if (self._mode == REAL and self._cut_depth == 0) else 0

    # --- history ------------------------------------------------------------------------------
    def hold(self) -> None:
        """Keep the history (cuts, waits) from now on until the matching :meth:`release`, so that
        real timestamps taken in between can be mapped later, however much runs after them."""
        with self._lock:
            self._holds += 1
            self._tail_kept = True

    def release(self) -> None:
        with self._lock:
            if self._holds:
                self._holds -= 1

    @property
    def held(self) -> bool:
        return self._holds > 0

    # --- reading ------------------------------------------------------------------------------
    def now(self) -> int:
        with self._lock:
            if not self._rate[-1]:  # inside a cut, or modelled: time stands at the last entry
                return self._emu[-1]
            real = time.perf_counter_ns()
            if real >= self._real[-1]:
                return self._emu[-1] + real - self._real[-1]
            return self._at(real)

    def _at(self, real_ns: int) -> int:
        if real_ns >= self._real[-1]:
            return self._emu[-1] + (real_ns - self._real[-1]) * self._rate[-1]
        i = bisect.bisect_right(self._real, real_ns) - 1
        if i < 0:  # before the history kept: as if the first entry had always held
            return self._emu[0] - (self._real[0] - real_ns) * self._rate[0]
        return self._emu[i] + (real_ns - self._real[i]) * self._rate[i]

    def to_emulated(self, real_ns: int) -> int:
        with self._lock:
            return self._at(real_ns)

    def in_cut(self, real_ns: int) -> bool:
        """True if ``real_ns`` fell inside emulator work (events recorded then are not the user's)."""
        with self._lock:
            if self._cut_depth and real_ns >= self._cut_start:
                return True
            c = bisect.bisect_right(self.cuts, (real_ns, 1 << 62)) - 1
            return c >= 0 and self.cuts[c][0] <= real_ns < self.cuts[c][1]

    # --- moving -------------------------------------------------------------------------------
    def emulation(self) -> "_Cut":
        """Real time spent inside is emulator work: emulated time does not advance.

        A plain object with ``__enter__``/``__exit__`` rather than a generator context manager:
        every device op enters one, so its own cost is part of the per-op overhead."""
        return self._cut

    def advance(self, ns: int) -> int:
        """The host spends ``ns`` of modelled time now (a backend cost of the host-cost model);
        returns the emulated time after it."""
        with self._lock:
            real = time.perf_counter_ns()
            emu = self._at(real) + max(0, int(ns))
            self._append(real, emu, self._rate[-1], self._holds > 0 or (self._cut_depth > 0 and self._cut_kept))
            return emu

    def wait_until(self, emulated_ns: int) -> int:
        """The host blocks until ``emulated_ns`` (the device finishing); returns the time waited."""
        with self._lock:
            real = time.perf_counter_ns()
            now = self._at(real)
            if emulated_ns <= now:
                return 0
            self._append(real, emulated_ns, self._rate[-1],
                         self._holds > 0 or (self._cut_depth > 0 and self._cut_kept))
            self.waited_ns += emulated_ns - now
            if self._holds:
                self.waits.append((now, emulated_ns))
            return emulated_ns - now

    def _append(self, real: int, emu: int, rate: int, keep: bool) -> None:
        if real <= self._real[-1]:  # the same instant (or the OS clock did not move): restate it
            self._emu[-1] = emu
            self._rate[-1] = rate
            self._tail_kept = self._tail_kept or keep
        elif keep or self._tail_kept:
            self._real.append(real)
            self._emu.append(emu)
            self._rate.append(rate)
            self._tail_kept = keep
        else:  # nobody will map a timestamp from between the two: the new entry replaces the old
            self._real[-1] = real
            self._emu[-1] = emu
            self._rate[-1] = rate

    @property
    def segments(self) -> int:
        return len(self._real)

    @property
    def cutting(self) -> bool:
        """True inside emulator work (a cut in progress on any thread)."""
        return self._cut_depth > 0


class NativeClock:
    """:class:`EmulatedClock`'s interface over the C++ core's clock (``native``: the core's module),
    created by :func:`trnscope.runtime.use_native`. Its methods are the C++ ones, bound once."""

    def __init__(self, native, mode: str = REAL, start_ns: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown host-time mode {mode!r}: use one of {MODES}")
        self.native = clock = native.Clock(MODES.index(mode), int(start_ns))
        self.modelled = mode == MODELLED
        self._cut = clock.cut()
        self.now = clock.now
        self.advance = clock.advance
        self.wait_until = clock.wait_until
        self.to_emulated = clock.to_emulated
        self.in_cut = clock.in_cut
        self.hold = clock.hold
        self.release = clock.release

    @property
    def mode(self) -> str:
        return MODES[self.native.mode]

    def set_mode(self, mode: str) -> str:
        if mode not in MODES:
            raise ValueError(f"unknown host-time mode {mode!r}: use 'real' or 'modelled'")
        old = MODES[self.native.set_mode(MODES.index(mode))]
        self.modelled = mode == MODELLED
        return old

    def emulation(self):
        return self._cut

    @property
    def held(self) -> bool:
        return self.native.held

    @property
    def cutting(self) -> bool:
        return self.native.cut_depth > 0

    @property
    def waited_ns(self) -> int:
        return self.native.waited_ns

    @property
    def segments(self) -> int:
        return self.native.segments

    @property
    def cuts(self) -> list[tuple[int, int]]:
        return self.native.cuts()

    @property
    def waits(self) -> list[tuple[int, int]]:
        return self.native.waits()


class _Cut:
    """The context manager :meth:`EmulatedClock.emulation` returns (reusable, re-entrant: the
    clock keeps the depth)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: EmulatedClock) -> None:
        self._clock = clock

    # The bodies are here rather than in methods of the clock that these would call: every device
    # call crosses at least one cut and nests more inside it, so each edge saves a Python call.
    def __enter__(self) -> None:
        c = self._clock
        with c._lock:
            c._cut_depth += 1
            if c._cut_depth == 1:
                c._cut_kept = keep = c._holds > 0
                c._cut_start = real = time.perf_counter_ns()
                if c._rate[-1]:  # real time was counting: it stops here
                    c._append(real, c._emu[-1] + real - c._real[-1], 0, keep)

    def __exit__(self, *exc) -> Literal[False]:
        c = self._clock
        with c._lock:
            c._cut_depth -= 1
            if c._cut_depth == 0:
                end = time.perf_counter_ns()
                keep = c._cut_kept or c._holds > 0
                if keep:
                    c.cuts.append((c._cut_start, end))
                if c._mode == REAL:  # real time counts again from here
                    c._append(end, c._emu[-1], 1, keep)
        return False
