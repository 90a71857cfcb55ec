"""One clock for host and device: wall-clock time with the emulator's own work cut out.

Computing numerics on the CPU or simulating a Program is an artefact of emulation and must never
show as host or device time. The clock records each such stretch of real time as a *cut*, and each
host wait for the device (synchronize, .cpu(), .item()) as a *wait* that advances emulated time
to when the device is done. ``now()`` is emulated time; :meth:`to_emulated` maps any real
``time.perf_counter_ns()`` timestamp (e.g. one the PyTorch profiler recorded) onto it, which is how
profiles line up CPU events with device executions.

That map needs the clock's history (every cut and wait), which grows by an entry or two per op,
so it is kept only while someone holds the clock (:meth:`EmulatedClock.hold`; the device layer
holds it while a ``torch.profiler`` session records, the only time real timestamps that must be
mapped later are taken). Outside holds, the clock keeps only its current offset: ``now()`` and
waits stay exact, a long unprofiled loop keeps constant memory, and real timestamps from those
stretches are no longer mapped exactly (nothing recorded them).
"""

from __future__ import annotations

import bisect
import threading
import time


class EmulatedClock:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        # piecewise map real -> emulated: at real time _real[i] the offset (emulated - real) is _offset[i];
        # inside a cut the emulated time stands still.
        self._real: list[int] = [time.perf_counter_ns()]
        self._offset: list[int] = [0]
        self._cut_depth = 0
        self._cut_start = 0
        self._cut_kept = False  # the cut in progress began inside a hold
        self.cuts: list[tuple[int, int]] = []  # real [start, end) stretches of emulator work, held ones
        self._cut = _Cut(self)
        self._holds = 0
        # the last entry of the map must stay: it was made inside a hold, or a hold began after it
        # (the hold's first timestamps map through it). Otherwise the next entry replaces it.
        self._tail_kept = True

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

    def now(self) -> int:
        # the runtime asks several times per execution, mostly inside a cut or after the last
        # entry: answered here without to_emulated's call and search
        with self._lock:
            if self._cut_depth:
                return self._cut_start + self._offset[-1]
            real = time.perf_counter_ns()
            if real >= self._real[-1]:
                return real + self._offset[-1]
        return self.to_emulated(real)

    def to_emulated(self, real_ns: int) -> int:
        with self._lock:
            if self._cut_depth and real_ns >= self._cut_start:
                return self._cut_start + self._offset[-1]
            if real_ns >= self._real[-1]:  # now or later: past every cut (each cut's end is an entry)
                return real_ns + self._offset[-1]
            c = bisect.bisect_right(self.cuts, (real_ns, 1 << 62)) - 1
            if c >= 0 and self.cuts[c][0] <= real_ns < self.cuts[c][1]:
                real_ns = self.cuts[c][0]  # inside past emulator work: time stood still there
            i = bisect.bisect_right(self._real, real_ns) - 1
            return real_ns + self._offset[max(i, 0)]

    def in_cut(self, real_ns: int) -> bool:
        """True if ``real_ns`` fell inside emulator work (events recorded then are not the user's)."""
        with self._lock:
            c = bisect.bisect_right(self.cuts, (real_ns, 1 << 62)) - 1
            return c >= 0 and self.cuts[c][0] <= real_ns < self.cuts[c][1]

    def emulation(self) -> "_Cut":
        """Real time spent inside is emulator work: emulated time does not advance.

        A plain object with ``__enter__``/``__exit__`` rather than a generator context manager:
        every device op enters one, so its own cost is part of the per-op overhead."""
        return self._cut

    def wait_until(self, emulated_ns: int) -> int:
        """The host blocks until ``emulated_ns`` (the device finishing); returns the time waited."""
        with self._lock:
            real = time.perf_counter_ns()
            # inside emulator work the emulated clock stands at the start of that work
            now = (self._cut_start if self._cut_depth else real) + self._offset[-1]
            if emulated_ns <= now:
                return 0
            keep = self._holds > 0 or (self._cut_depth > 0 and self._cut_kept)
            self._append(real, self._offset[-1] + (emulated_ns - now), keep)
            return emulated_ns - now

    def _append(self, real: int, offset: int, keep: bool) -> None:
        if real <= self._real[-1]:
            self._offset[-1] = offset
            self._tail_kept = self._tail_kept or keep
        elif keep or self._tail_kept:
            self._real.append(real)
            self._offset.append(offset)
            self._tail_kept = keep
        else:  # nobody will map a timestamp from between the two: the new entry replaces the old
            self._real[-1] = real
            self._offset[-1] = offset

    @property
    def segments(self) -> int:
        return len(self._real)


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
                c._cut_kept = c._holds > 0
                c._cut_start = time.perf_counter_ns()

    def __exit__(self, *exc) -> bool:
        c = self._clock
        with c._lock:
            c._cut_depth -= 1
            if c._cut_depth == 0:
                end = time.perf_counter_ns()
                keep = c._cut_kept or c._holds > 0
                if keep:
                    c.cuts.append((c._cut_start, end))
                c._append(end, c._offset[-1] - (end - c._cut_start), keep)
        return False
