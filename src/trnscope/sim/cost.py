"""Per-instruction costs from the published formulas (hardware.md 3.3, 3.4 and 7).

Compute instructions cost ``max(MIN_II, formula(N))`` cycles of their engine's clock, N being the
free size (elements per partition) of the main input; the simulator adds the static overhead for
dependent instructions at run time, when it knows whether the instruction waited. DMA transfers are
described by their descriptors (contiguous rows): the simulator spreads them over the 16 DMA engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hw import HardwareSpec
from ..isa import (
    AP, Activation, AffineSelect, Alu, BnAggr, BnStats, Dma, DmaGather, DmaScatter, Gather, Instruction, Iota,
    LoadStationary, Memset, MultiplyMoving, PartitionReduce, Random, Select, SemaphoreSet, SemaphoreWait, Space,
    TensorCopy, TensorReduce, TensorScalar, TensorScan, TensorTensor, TensorTranspose,
)

# Fraction of copy throughput a DMA transpose reaches on Trn2 (S2): 90% HBM->SBUF, 50% SBUF->SBUF.
DMA_TRANSPOSE_EFFICIENCY = {True: 0.9, False: 0.5}
# Hardware descriptor generation (indirect DMA) adds ~600 ns per DMA instruction (S2, S7).
DGE_LATENCY_NS = 600.0
# A GpSimd core serves 16 partitions with a 512-bit SIMD unit (S1): a cross-partition reduction
# walks N elements on each core and then combines the 8 cores' partials, ~1.5 N cycles (derived).
PARTITION_REDUCE_CYCLES_PER_ELEMENT = 1.5
# GpSimdE's gather within a partition (nc_n_gather) runs as ceil(elements per partition of the data /
# 512) groups of ISA instructions (its NKI docstring). Assumption: each group walks every index once
# and costs what GpSimdE's other per-element instructions cost, GPSIMD_START + N (iota, affine_select, S9).
GATHER_GROUP_ELEMENTS = 512


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


def _strided(aps: tuple[AP, ...]) -> bool:
    return any(ap.minor_stride_bytes > 16 for ap in aps)


def compute_cycles(ins: Instruction, spec: HardwareSpec) -> float:
    """Engine cycles of a compute instruction, before any dependency overhead."""
    min_ii = spec.min_ii_cycles
    if isinstance(ins, LoadStationary):
        cycles = ins.src.free_size / spec.ls_speedup
        return cycles * (spec.fp32_matmul_factor if ins.src.dtype.itemsize == 4 else 1)
    if isinstance(ins, MultiplyMoving):
        # max(min(64, N_stationary), N_moving): the stationary free size is the output partitions.
        cycles = max(min(spec.mm_init_latency_cycles, ins.dst.partitions), ins.moving.free_size)
        return cycles * (spec.fp32_matmul_factor if ins.moving.dtype.itemsize == 4 else 1)
    if isinstance(ins, TensorTranspose):
        return max(ins.src.partitions, min(spec.mm_init_latency_cycles, ins.src.free_size))
    if isinstance(ins, (SemaphoreWait, SemaphoreSet)):
        return min_ii
    if isinstance(ins, Gather):
        groups = -(-ins.data.free_size // GATHER_GROUP_ELEMENTS)
        return groups * (spec.gpsimd_start_cycles + ins.index.free_size)

    inp = ins.main_input()
    n = inp.free_size if inp is not None else ins.writes()[0].free_size
    # per-partition scalar operands ([P, 1] scale/bias/scalar vectors) are read once per partition:
    # the streamed tiles decide the engine's mode
    aps = tuple(ap for ap in (*ins.reads(), *ins.writes()) if ap is inp or ap.free_size > 1 or ap in ins.writes())
    all_sbuf = all(ap.space is Space.SBUF for ap in aps)
    half = all(ap.dtype.is_half for ap in aps)
    contiguous = all(ap.contiguous_run() == ap.free_size for ap in aps)
    perf = 1.0
    if isinstance(ins, TensorTensor):
        spaces = {ins.in0.space, ins.in1.space}
        fast = spaces == {Space.SBUF, Space.PSUM} or (
            all_sbuf and half and ins.alu in (Alu.ADD, Alu.MULTIPLY, Alu.SUBTRACT) and contiguous)
        cycles = max(min_ii, n if fast else 2 * n)
        if spec.vector_perf_mode and all_sbuf and half:
            perf = 2.0
    elif isinstance(ins, TensorScalar):
        cycles = max(min_ii, n)
        if spec.vector_perf_mode and half:
            perf = 4.0 if all_sbuf and contiguous else 2.0
    elif isinstance(ins, TensorCopy):
        cycles = max(min_ii, n)
        if spec.vector_perf_mode and half and ins.engine.value == "vector":
            perf = 4.0 if all_sbuf and contiguous else 2.0
    elif isinstance(ins, TensorReduce):
        fast = ins.inp.dtype.value == "bfloat16" and ins.out.dtype.value == "bfloat16" and ins.alu in (Alu.ADD, Alu.MAX)
        cycles = max(min_ii, n / 2 if fast else n)
    elif isinstance(ins, TensorScan):
        cycles = max(min_ii, 2 * n)
    elif isinstance(ins, BnStats):
        cycles = max(min_ii, n)
    elif isinstance(ins, BnAggr):
        cycles = max(min_ii, 13 * n / 3)
    elif isinstance(ins, Select):
        mixed = len({ap.space for ap in aps}) > 1
        cycles = max(min_ii, n if mixed else 2 * n)
    elif isinstance(ins, Memset):
        zero_half = ins.value == 0 and ins.out.dtype.value in ("bfloat16", "float16")
        cycles = max(min_ii, n / 2 if zero_half else n)
    elif isinstance(ins, Activation):
        cycles = max(min_ii, n) + (min_ii if ins.accum_out is not None else 0)
    elif isinstance(ins, (Iota, AffineSelect)):
        cycles = spec.gpsimd_start_cycles + n
    elif isinstance(ins, Random):
        # no published cost: a generator like iota, GPSIMD_START + N (derived)
        cycles = spec.gpsimd_start_cycles + n
    elif isinstance(ins, PartitionReduce):
        cycles = spec.gpsimd_start_cycles + PARTITION_REDUCE_CYCLES_PER_ELEMENT * n
    else:  # pragma: no cover - every compute instruction is listed above
        raise TypeError(f"no cost formula for {type(ins).__name__}")
    if _strided(aps):
        cycles *= spec.stride_penalty
    return cycles / perf


def is_short(ins: Instruction) -> bool:
    """N << 128: the static instruction overhead is not hidden (S1)."""
    inp = ins.main_input()
    return inp is not None and inp.free_size < 128 and not isinstance(ins, (LoadStationary, MultiplyMoving))


def dma_shape(ins: Dma | DmaGather | DmaScatter, spec: HardwareSpec) -> DmaShape:
    if isinstance(ins, Dma):
        src, dst = ins.src, ins.dst
        run = min(src.contiguous_run(), dst.contiguous_run()) if not ins.transpose else 1
        if ins.transpose:
            # descriptors move one destination row of elements at a time
            run = dst.contiguous_run()
        elements = src.num_elements
        run = max(1, min(run, elements))
        descriptors = -(-elements // run)
        desc_bytes = run * max(src.dtype.itemsize, dst.dtype.itemsize)
        fixed = spec.dma_fixed_latency_ns
        read_bytes, write_bytes = src.nbytes, dst.nbytes
        hbm_r = read_bytes if src.space is Space.HBM else 0
        hbm_w = write_bytes if dst.space is Space.HBM else 0
        if ins.accumulate and dst.space is Space.HBM:
            hbm_r += write_bytes
        rate = hbm_rate(spec, max(read_bytes, write_bytes), hbm_r + hbm_w)
        if ins.transpose:
            rate *= DMA_TRANSPOSE_EFFICIENCY[src.space is Space.HBM]
        sb_r = read_bytes if src.space is Space.SBUF else 0
        sb_w = write_bytes if dst.space is Space.SBUF else 0
        return DmaShape(descriptors, desc_bytes, rate, fixed, hbm_r, hbm_w, sb_r, sb_w)
    tile = ins.dst if isinstance(ins, DmaGather) else ins.src
    # one descriptor per contiguous run of a table row (a whole row when the row is dense)
    run = max(1, min(ins.table.contiguous_run(), ins.table.free_size))
    per_row = -(-ins.table.free_size // run)
    row_bytes = ins.table.free_size * ins.table.dtype.itemsize
    rows = tile.partitions * ins.index.free_size   # one table row per index element
    idx_bytes = ins.index.nbytes
    moved = rows * row_bytes
    desc, desc_bytes = rows * per_row, run * ins.table.dtype.itemsize
    if isinstance(ins, DmaGather):
        return DmaShape(desc, desc_bytes, hbm_rate(spec, moved, moved),
                        spec.dma_fixed_latency_ns + DGE_LATENCY_NS, moved, 0, idx_bytes, moved)
    hbm_r = moved if ins.accumulate else 0
    return DmaShape(desc, desc_bytes, hbm_rate(spec, moved, hbm_r + moved), spec.dma_fixed_latency_ns + DGE_LATENCY_NS,
                    hbm_r, moved, idx_bytes + moved, 0)


def hbm_rate(spec: HardwareSpec, moved: int, hbm_bytes: int) -> float:
    """Bytes per ns one DMA engine moves in a transfer of ``moved`` bytes that reads and writes
    ``hbm_bytes`` of HBM: its own rate, capped by its share of HBM bandwidth for that traffic. An
    HBM-to-HBM copy (or an accumulating write, a read-modify-write) uses HBM twice per byte moved,
    so each engine gets half the bytes per ns of its share: HBM utilisation cannot pass 100%."""
    if not hbm_bytes:
        return spec.dma_bytes_per_ns_per_engine
    return min(spec.dma_bytes_per_ns_per_engine, spec.hbm_bytes_per_ns_per_dma_engine * moved / hbm_bytes)


def flops(ins: Instruction) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) on TensorE, which MFU/HFU measure (S25): matmuls count 2*K*M*N,
    transposes (matmuls against the identity) only as hardware FLOPs."""
    if isinstance(ins, MultiplyMoving):
        f = 2.0 * ins.moving.partitions * ins.dst.partitions * ins.moving.free_size
        return f, f
    if isinstance(ins, TensorTranspose):
        return 0.0, 2.0 * ins.src.partitions * ins.src.partitions * ins.src.free_size
    return 0.0, 0.0


def onchip_bytes(ins: Instruction) -> tuple[int, int, int, int]:
    """(SBUF read, SBUF write, PSUM read, PSUM write) bytes of a compute instruction."""
    sr = sw = pr = pw = 0
    for ap in ins.reads():
        if ap.space is Space.SBUF:
            sr += ap.nbytes
        elif ap.space is Space.PSUM:
            pr += ap.nbytes
    for ap in ins.writes():
        if ap.space is Space.SBUF:
            sw += ap.nbytes
        elif ap.space is Space.PSUM:
            pw += ap.nbytes
    if isinstance(ins, MultiplyMoving) and ins.accumulate:
        pr += ins.dst.nbytes
    return sr, sw, pr, pw
