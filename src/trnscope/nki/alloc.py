"""SBUF and PSUM placement of a traced kernel's tiles, from their live ranges.

NKI kernels name tiles, not addresses: the compiler places them. A tile is live from the first to the
last instruction that touches it (the trace knows both). Each space is a next-fit ring: a new tile goes
into the first free range at or after where the previous one ended, wrapping around at the end. So a
tile declared inside a loop lands on fresh bytes in every iteration while there is room, and the
engines can work on iteration i+1 while iteration i drains - the multi-buffering the NKI guide says
the compiler gives tiles declared in the loop body. When the ring comes back to bytes that an older
tile used, the builder's semaphores make the new tile's first writer wait for the old tile's last
users (write-after-read), so capacity limits how far ahead the engines run. ``address=`` tiles keep
their bytes for the whole kernel. PSUM tiles start on a 2 KiB bank and take whole banks (one
accumulation group per bank, S1). Nothing spills: live tiles that do not fit are an error naming them.
"""

from __future__ import annotations

import bisect

from .errors import NkiAllocationError
from .tensor import PSUM, SBUF, Storage


class _Ring:
    def __init__(self, capacity: int, align: int, name: str) -> None:
        self.capacity, self.align, self.name = capacity, align, name
        self.starts: list[int] = []           # sorted starts of occupied ranges
        self.ranges: dict[int, tuple[int, Storage]] = {}  # start -> (end, storage)
        self.cursor = 0
        self.peak = 0

    def _gaps_from(self, at: int):
        """Free ranges (lo, hi) starting at or after ``at``, then from 0 (the ring wraps)."""
        i = bisect.bisect_right(self.starts, at)
        if i > 0:
            s = self.starts[i - 1]
            end = self.ranges[s][0]
            lo = max(at, end)
        else:
            lo = at
        for s in self.starts[i:]:
            if s > lo:
                yield lo, s
            lo = max(lo, self.ranges[s][0])
        if lo < self.capacity:
            yield lo, self.capacity
        lo = 0
        for s in self.starts:
            if s >= at:
                break
            if s > lo:
                yield lo, min(s, at)
            lo = max(lo, self.ranges[s][0])
        if lo < at:
            yield lo, at

    def place(self, size: int, storage: Storage) -> int | None:
        size = -(-size // self.align) * self.align
        for lo, hi in self._gaps_from(self.cursor):
            start = -(-lo // self.align) * self.align
            if start + size <= hi:
                self._take(start, start + size, storage)
                self.cursor = start + size if start + size < self.capacity else 0
                return start
        return None

    def _take(self, lo: int, hi: int, storage: Storage) -> None:
        bisect.insort(self.starts, lo)
        self.ranges[lo] = (hi, storage)
        self.peak = max(self.peak, hi)

    def free(self, lo: int) -> None:
        if lo in self.ranges:
            del self.ranges[lo]
            self.starts.remove(lo)

    def live(self) -> list[Storage]:
        return [self.ranges[s][1] for s in self.starts]

    def used(self) -> int:
        return sum(hi - lo for lo, (hi, _) in self.ranges.items())


class Placement:
    """Where every on-chip storage lives: ``offset[id]`` in bytes inside each partition."""

    def __init__(self) -> None:
        self.offset: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.peak = {SBUF: 0, PSUM: 0}


def place(storages: list[Storage], n_ops: int, spec, sbuf_align: int, where) -> tuple[Placement, list]:
    """Place every on-chip storage that an op touches. Returns the placement and, per op index, the
    storages allocated just before it and freed just after it: ``events[i] = (allocated, freed)``.
    ``where(loc)`` formats a source location for errors."""
    rings = {SBUF: _Ring(spec.sbuf_bytes_per_partition, sbuf_align, "SBUF"),
             PSUM: _Ring(spec.psum_bytes_per_partition, spec.psum_bank_bytes, "PSUM")}
    out = Placement()
    alloc_at: dict[int, list[Storage]] = {}
    free_at: dict[int, list[Storage]] = {}
    manual: list[Storage] = []
    for st in storages:
        if not st.on_chip or st.first < 0:
            continue
        alloc_at.setdefault(st.first, []).append(st)
        free_at.setdefault(st.last, []).append(st)
        if st.address is not None:
            manual.append(st)
    for st in manual:  # address= tiles keep their bytes for the whole kernel
        ring = rings[st.buffer]
        lo = st.address[1]
        hi = lo + -(-st.bytes_per_partition // ring.align) * ring.align
        for other in manual:
            if other is st or other.buffer != st.buffer or other.id > st.id:
                continue
            olo = other.address[1]
            ohi = olo + other.bytes_per_partition
            parts = (st.address[0] < other.address[0] + other.shape[0] and
                     other.address[0] < st.address[0] + st.shape[0])
            life = st.first <= other.last and other.first <= st.last
            if lo < ohi and olo < hi and parts and life:
                raise NkiAllocationError(
                    f"overlapping address= placements: {st.label()} at {st.address} (created at {where(st.loc)}) "
                    f"overlaps {other.label()} at {other.address} (created at {where(other.loc)}) while both are "
                    f"live; move one, or let trnscope place them (drop address=)", where(st.loc))
        ring._take(lo, hi, st)
        out.offset[st.id] = lo
        out.size[st.id] = hi - lo
    events: list[tuple | None] = [None] * n_ops
    for i in range(n_ops):
        allocated = alloc_at.get(i, ())
        for st in allocated:
            if st.address is not None:
                continue
            ring = rings[st.buffer]
            off = ring.place(st.bytes_per_partition, st)
            if off is None:
                raise _overflow(ring, st, where)
            out.offset[st.id] = off
            out.size[st.id] = -(-st.bytes_per_partition // ring.align) * ring.align
        freed = free_at.get(i, ())
        for st in freed:
            if st.address is None and st.id in out.offset:
                rings[st.buffer].free(out.offset[st.id])
        if allocated or freed:
            events[i] = (allocated, freed)
    out.peak = {SBUF: rings[SBUF].peak, PSUM: rings[PSUM].peak}
    return out, events


def _overflow(ring: _Ring, st: Storage, where) -> NkiAllocationError:
    live = sorted(ring.live(), key=lambda s: -s.bytes_per_partition)
    need = -(-st.bytes_per_partition // ring.align) * ring.align
    free = ring.capacity - ring.used()
    lines = "; ".join(f"{s.label()} ({s.bytes_per_partition} B/partition, created at {where(s.loc)})"
                      for s in live[:6])
    more = f" and {len(live) - 6} more" if len(live) > 6 else ""
    frag = " (the free bytes are fragmented)" if free >= need else ""
    return NkiAllocationError(
        f"{ring.name} capacity exceeded: {st.label()} needs {need} bytes per partition but only {free} of "
        f"{ring.capacity} are free{frag}. Live now: {lines}{more}. Use smaller tiles, or let tiles die sooner "
        f"(declare them inside the loop that uses them)", where(st.loc))
