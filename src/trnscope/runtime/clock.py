"""One clock for host and device: wall-clock time with the emulator's own work cut out.

Computing numerics on the CPU or simulating a Program is an artefact of emulation and must never
show as host or device time. The clock records each such stretch of real time as a *cut*, and each
host wait for the device (synchronize, .cpu(), .item()) as a *wait* that advances emulated time
to when the device is done. ``now()`` is emulated time; :meth:`to_emulated` maps any real
``time.perf_counter_ns()`` timestamp (e.g. one the PyTorch profiler recorded) onto it, which is how
profiles line up CPU events with device executions.
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
        self.cuts: list[tuple[int, int]] = []  # real [start, end) stretches of emulator work
        self._cut = _Cut(self)

    def now(self) -> int:
        return self.to_emulated(time.perf_counter_ns())

    def to_emulated(self, real_ns: int) -> int:
        with self._lock:
            if self._cut_depth and real_ns >= self._cut_start:
                return self._cut_start + self._offset[-1]
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

    def _enter_cut(self) -> None:
        with self._lock:
            self._cut_depth += 1
            if self._cut_depth == 1:
                self._cut_start = time.perf_counter_ns()

    def _exit_cut(self) -> None:
        with self._lock:
            self._cut_depth -= 1
            if self._cut_depth == 0:
                end = time.perf_counter_ns()
                self.cuts.append((self._cut_start, end))
                self._append(end, self._offset[-1] - (end - self._cut_start))

    def wait_until(self, emulated_ns: int) -> int:
        """The host blocks until ``emulated_ns`` (the device finishing); returns the time waited."""
        with self._lock:
            real = time.perf_counter_ns()
            # inside emulator work the emulated clock stands at the start of that work
            now = (self._cut_start if self._cut_depth else real) + self._offset[-1]
            if emulated_ns <= now:
                return 0
            self._append(real, self._offset[-1] + (emulated_ns - now))
            return emulated_ns - now

    def _append(self, real: int, offset: int) -> None:
        if real <= self._real[-1]:
            self._offset[-1] = offset
        else:
            self._real.append(real)
            self._offset.append(offset)

    @property
    def segments(self) -> int:
        return len(self._real)


class _Cut:
    """The context manager :meth:`EmulatedClock.emulation` returns (reusable, re-entrant: the
    clock keeps the depth)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: EmulatedClock) -> None:
        self._clock = clock

    def __enter__(self) -> None:
        self._clock._enter_cut()

    def __exit__(self, *exc) -> bool:
        self._clock._exit_cut()
        return False
