"""DMA: transfers on the 16 DMA engines, queued on DMA queues (hardware.md 2.5 and 7).

A transfer is described by its descriptors (contiguous rows); the simulator spreads them over the
DMA engines. ``transfer(spec)`` is each instruction's cost form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..ap import AP, Space
from ..errors import ProgramError
from .base import Engine, Instruction, instruction

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["DGE_LATENCY_NS", "DMA_TRANSPOSE_EFFICIENCY", "Dma", "DmaGather", "DmaInstruction", "DmaScatter",
    "DmaShape", "hbm_rate"]

# Fraction of copy throughput a DMA transpose reaches on Trn2 (S2): 90% HBM->SBUF, 50% SBUF->SBUF.
DMA_TRANSPOSE_EFFICIENCY = {True: 0.9, False: 0.5}
# Hardware descriptor generation (indirect DMA) adds ~600 ns per DMA instruction (S2, S7).
DGE_LATENCY_NS = 600.0


@dataclass(frozen=True, slots=True)
class DmaShape:
    descriptors: int
    descriptor_bytes: int
    rate_bytes_per_ns: float
    fixed_ns: float
    hbm_read: int
    hbm_write: int
    sbuf_read: int
    sbuf_write: int


def hbm_rate(spec: HardwareSpec, moved: int, hbm_bytes: int) -> float:
    """Bytes per ns one DMA engine moves in a transfer of ``moved`` bytes that reads and writes
    ``hbm_bytes`` of HBM: its own rate, capped by its share of HBM bandwidth for that traffic. An
    HBM-to-HBM copy (or an accumulating write, a read-modify-write) uses HBM twice per byte moved,
    so each engine gets half the bytes per ns of its share: HBM utilisation cannot pass 100%."""
    if not hbm_bytes:
        return spec.dma_bytes_per_ns_per_engine
    return min(spec.dma_bytes_per_ns_per_engine, spec.hbm_bytes_per_ns_per_dma_engine * moved / hbm_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class DmaInstruction(Instruction):
    """An instruction of DMA queue ``queue``."""
    ENGINE: ClassVar[Engine] = Engine.DMA
    SIM_KIND: ClassVar[str] = "dma"
    queue: int

    def transfer(self, spec: HardwareSpec) -> DmaShape:
        raise TypeError(f"no transfer form for {type(self).__name__}")


@instruction
class Dma(DmaInstruction):
    """Copy src to dst on DMA ``queue`` (HBM<->SBUF, SBUF<->SBUF); casts through FP32 when dtypes differ.

    ``transpose`` moves src [P, F] to dst [F, P] (DMA transpose, S2). ``accumulate`` adds into dst
    (dma_compute) instead of overwriting.
    """
    OPCODE: ClassVar[str] = "DMA_DIRECT2D"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    src: AP
    dst: AP
    transpose: bool = False
    accumulate: bool = False

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        src, dst = self.src, self.dst
        if self.transpose:
            if dst.partitions != src.free_size or dst.free_size != src.partitions:
                raise ProgramError(f"DMA transpose of {src.shape} cannot produce {dst.shape}")
        elif src.num_elements != dst.num_elements:
            raise ProgramError(f"DMA moves {src.num_elements} elements into a pattern of {dst.num_elements}")
        if src.dtype != dst.dtype and src.dtype.is_float != dst.dtype.is_float:
            raise ProgramError(f"dtype mismatch: DMA casts between float types or between integer types only "
                               f"({src.dtype.value} -> {dst.dtype.value}); cast on VectorE instead")

    def transfer(self, spec: HardwareSpec) -> DmaShape:
        src, dst = self.src, self.dst
        # descriptors move one destination row of elements at a time when transposing
        run = dst.contiguous_run() if self.transpose else min(src.contiguous_run(), dst.contiguous_run())
        elements = src.num_elements
        run = max(1, min(run, elements))
        descriptors = -(-elements // run)
        desc_bytes = run * max(src.dtype.itemsize, dst.dtype.itemsize)
        read_bytes, write_bytes = src.nbytes, dst.nbytes
        hbm_r = read_bytes if src.space is Space.HBM else 0
        hbm_w = write_bytes if dst.space is Space.HBM else 0
        if self.accumulate and dst.space is Space.HBM:
            hbm_r += write_bytes
        rate = hbm_rate(spec, max(read_bytes, write_bytes), hbm_r + hbm_w)
        if self.transpose:
            rate *= DMA_TRANSPOSE_EFFICIENCY[src.space is Space.HBM]
        sb_r = read_bytes if src.space is Space.SBUF else 0
        sb_w = write_bytes if dst.space is Space.SBUF else 0
        return DmaShape(descriptors, desc_bytes, rate, spec.dma_fixed_latency_ns, hbm_r, hbm_w, sb_r, sb_w)


def _rows_moved(table: AP, index: AP, tile: AP) -> tuple[int, int, int]:
    """(descriptors, bytes per descriptor, bytes moved) of an indirect DMA: one descriptor per
    contiguous run of a table row (a whole row when the row is dense)."""
    run = max(1, min(table.contiguous_run(), table.free_size))
    per_row = -(-table.free_size // run)
    rows = tile.partitions * index.free_size   # one table row per index element
    moved = rows * table.free_size * table.dtype.itemsize
    return rows * per_row, run * table.dtype.itemsize, moved


def _check_indirect(table: AP, index: AP, tile: AP) -> None:
    if not index.dtype.name.startswith(("int", "uint")):
        raise ProgramError("the index tile must be an integer tile")
    if tile.partitions != index.partitions or tile.free_size != table.free_size * index.free_size:
        raise ProgramError(f"indirect DMA moves rows of {table.free_size} elements into a {tile.shape} tile "
                           f"indexed by {index.shape}")


@instruction
class DmaGather(DmaInstruction):
    """Indirect DMA: dst[p, f*R:(f+1)*R] = table row index[p, f] (descriptors built by the DMA generation
    engine), R = a row's elements; an index tile of one column gathers one row per partition.

    ``table`` is an HBM pattern whose partition dim walks rows (``pstride`` = row stride in
    elements, ``partitions`` = number of rows) and whose free dims describe one row.
    """
    OPCODE: ClassVar[str] = "DMA_GATHER"
    READS: ClassVar[tuple[str, ...]] = ("table", "index")
    WRITES: ClassVar[tuple[str, ...]] = ("dst",)
    table: AP
    index: AP
    dst: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        _check_indirect(self.table, self.index, self.dst)

    def transfer(self, spec: HardwareSpec) -> DmaShape:
        descriptors, desc_bytes, moved = _rows_moved(self.table, self.index, self.dst)
        return DmaShape(descriptors, desc_bytes, hbm_rate(spec, moved, moved), spec.dma_fixed_latency_ns + DGE_LATENCY_NS,
                        moved, 0, self.index.nbytes, moved)


@instruction
class DmaScatter(DmaInstruction):
    """Indirect DMA the other way: table row index[p, f] (+)= src[p, f*R:(f+1)*R] (added when
    ``accumulate``); rows are written in (partition, column) order, so of two writes to one row the
    later one stays."""
    OPCODE: ClassVar[str] = "DMA_SCATTER"
    READS: ClassVar[tuple[str, ...]] = ("src", "index")
    WRITES: ClassVar[tuple[str, ...]] = ("table",)
    src: AP
    index: AP
    table: AP
    accumulate: bool = False

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        _check_indirect(self.table, self.index, self.src)

    def transfer(self, spec: HardwareSpec) -> DmaShape:
        descriptors, desc_bytes, moved = _rows_moved(self.table, self.index, self.src)
        hbm_r = moved if self.accumulate else 0
        return DmaShape(descriptors, desc_bytes, hbm_rate(spec, moved, hbm_r + moved),
                        spec.dma_fixed_latency_ns + DGE_LATENCY_NS, hbm_r, moved, self.index.nbytes + moved, 0)
