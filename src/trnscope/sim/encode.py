"""Flatten a Program into the arrays the event-driven core runs on.

Each instruction's cost form is its class's (``cycles`` for compute engines, ``transfer`` for DMA,
``flops``, ``onchip_bytes``, ``SIM_KIND``: isa.instructions); this module adds the dependency
overheads (hardware.md 3.3) and lays the results out as columns. Costs are functions of an instruction's form (its fields other than its waits, with each access
pattern's placement set aside: see ``isa.columns``), so they are computed once per form and broadcast
to the instructions with NumPy; no Python code runs per instruction. ``encode_reference`` computes every instruction's row on its own, the
straightforward way the tests hold the fast encoding to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw import HardwareSpec
from ..isa import DmaInstruction, Engine, Instruction, Program, SemaphoreSet, Space
from ..isa.columns import STREAM_ENGINES, Columns, program_columns

ENGINE_STREAMS = tuple(e.value for e in STREAM_ENGINES)
KIND_COMPUTE, KIND_LS, KIND_MM, KIND_DMA, KIND_PE = 0, 1, 2, 3, 4


@dataclass
class Encoded:
    n: int
    stream: np.ndarray        # int32 [n]: 0..4 engines (of the instruction's physical core), 5+q DMA queue q
    kind: np.ndarray          # int8 [n]
    base_ns: np.ndarray       # float64 [n]: cost without the dependency overhead
    dep_ns: np.ndarray        # float64 [n]: overhead added when the instruction waited on another engine
    wait_ptr: np.ndarray      # int64 [n+1] CSR into wait_sem / wait_val
    wait_sem: np.ndarray
    wait_val: np.ndarray
    sig_ptr: np.ndarray       # int64 [n+1] CSR into sig_sem / sig_val / sig_set
    sig_sem: np.ndarray
    sig_val: np.ndarray
    sig_set: np.ndarray       # bool: write the value instead of adding it
    dma_desc: np.ndarray      # int64 [n]: descriptors (0 for compute)
    dma_desc_ns: np.ndarray   # float64 [n]: DMA-engine occupancy of one descriptor
    dma_fixed_ns: np.ndarray  # float64 [n]
    stream_ptr: np.ndarray    # int64 [S+1] CSR of instruction indices per stream, in program order
    stream_instr: np.ndarray
    n_streams: int            # streams the simulator runs: engines and queues of every physical core
    n_sems: int
    pcore: np.ndarray         # int8 [n]: the physical core of each instruction (0 unless LNC > 1)
    n_cores: int
    # int64 [n]: bit b set when the instruction holds PSUM lock b while it runs (VectorE/ScalarE
    # instructions touching PSUM: one lock for all of PSUM on NC-v2, one per bank on NC-v3; 0 otherwise)
    psum_lock: np.ndarray
    n_psum_locks: int
    # reporting columns
    flops_model: np.ndarray
    flops_hw: np.ndarray
    hbm_read: np.ndarray
    hbm_write: np.ndarray
    sbuf_read: np.ndarray
    sbuf_write: np.ndarray
    psum_read: np.ndarray
    psum_write: np.ndarray

    @property
    def stream_names(self) -> list[str]:
        """The simulator's streams: each physical core's engines (``vector``, ``vector@nc1``...), then queues."""
        engines = [e + (f"@nc{c}" if c else "") for c in range(self.n_cores) for e in ENGINE_STREAMS]
        return engines + [f"q{q}" for q in range(self.n_streams - len(engines))]


def encode(program: Program, spec: HardwareSpec, *, columns: Columns | None = None) -> Encoded:
    """``columns``: the Program's :func:`~trnscope.isa.columns.program_columns`, when the caller has them."""
    cols = columns if columns is not None else program_columns(program)
    table = np.array([_row(rep, spec) for rep in cols.form_reps], dtype=np.float64).reshape(-1, len(_COLUMNS))
    # the PSUM banks an instruction touches depend on its placement: per shape, not per form
    locks = np.fromiter((psum_lock_mask(rep, spec) for rep in cols.reps), np.int64, len(cols.reps))
    return _assemble(program, table[cols.form], cols.wait_ptr, cols.wait_sem, cols.wait_val, cols.sig_ptr,
                     cols.sig_sem, cols.sig_val, cols.sig_set, locks[cols.shape] if cols.n else np.zeros(0, np.int64),
                     spec)


def encode_reference(program: Program, spec: HardwareSpec) -> Encoded:
    """Every instruction encoded on its own, in one plain loop (the specification of :func:`encode`)."""
    n = len(program.instructions)
    rows, wait_ptr, sig_ptr = [], [0], [0]
    wsem, wval, ssem, sval, sset = [], [], [], [], []
    locks = []
    for ins in program.instructions:
        rows.append(_row(ins, spec))
        locks.append(psum_lock_mask(ins, spec))
        for s, v in ins.waits:
            wsem.append(s)
            wval.append(v)
        wait_ptr.append(len(wsem))
        for s, v in ins.signals:
            ssem.append(s)
            sval.append(v)
            sset.append(False)
        if isinstance(ins, SemaphoreSet):
            ssem.append(ins.sem)
            sval.append(ins.value)
            sset.append(True)
        sig_ptr.append(len(ssem))
    table = np.array(rows, dtype=np.float64).reshape(n, len(_COLUMNS))
    return _assemble(program, table, np.asarray(wait_ptr, np.int64), np.asarray(wsem, np.int64),
                     np.asarray(wval, np.int64), np.asarray(sig_ptr, np.int64), np.asarray(ssem, np.int64),
                     np.asarray(sval, np.int64), np.asarray(sset, np.bool_), np.asarray(locks, np.int64), spec)


def _assemble(program: Program, table: np.ndarray, wait_ptr, wait_sem, wait_val, sig_ptr, sig_sem, sig_val,
              sig_set, psum_lock: np.ndarray, spec: HardwareSpec) -> Encoded:
    n = len(table)
    col = {name: np.ascontiguousarray(table[:, j]) for j, name in enumerate(_COLUMNS)}
    stream = col["stream"].astype(np.int32)
    # each physical core runs its own engine streams; DMA queues are already per core (compiler.lnc)
    n_cores, tags = program.physical_cores()
    pcore = tags if tags is not None else np.zeros(n, np.int8)
    n_eng = len(ENGINE_STREAMS)
    sim_stream = np.where(stream < n_eng, stream + n_eng * pcore, stream + n_eng * (n_cores - 1)) if n_cores > 1 \
        else stream
    n_streams = n_eng * n_cores + len(program.queues)
    order = np.argsort(sim_stream, kind="stable")
    counts = np.bincount(sim_stream, minlength=n_streams) if n else np.zeros(n_streams, np.int64)
    stream_ptr = np.zeros(n_streams + 1, np.int64)
    np.cumsum(counts, out=stream_ptr[1:])
    ints = {k: col[k].astype(np.int64) for k in
            ("hbm_read", "hbm_write", "sbuf_read", "sbuf_write", "psum_read", "psum_write")}
    return Encoded(
        n=n, stream=stream, kind=col["kind"].astype(np.int8), base_ns=col["base_ns"], dep_ns=col["dep_ns"],
        wait_ptr=wait_ptr, wait_sem=wait_sem, wait_val=wait_val, sig_ptr=sig_ptr, sig_sem=sig_sem, sig_val=sig_val,
        sig_set=sig_set, dma_desc=col["dma_desc"].astype(np.int64), dma_desc_ns=col["dma_desc_ns"],
        dma_fixed_ns=col["dma_fixed_ns"], stream_ptr=stream_ptr, stream_instr=order.astype(np.int64),
        n_streams=n_streams, n_sems=len(program.semaphores), pcore=np.ascontiguousarray(pcore, np.int8),
        n_cores=n_cores, psum_lock=np.ascontiguousarray(psum_lock, np.int64), n_psum_locks=psum_lock_count(spec),
        flops_model=col["flops_model"],
        flops_hw=col["flops_hw"], **ints,
    )


_COLUMNS = ("stream", "kind", "base_ns", "dep_ns", "dma_desc", "dma_desc_ns", "dma_fixed_ns", "flops_model",
            "flops_hw", "hbm_read", "hbm_write", "sbuf_read", "sbuf_write", "psum_read", "psum_write")
_STREAM_INDEX = {e: i for i, e in enumerate(ENGINE_STREAMS)}


_KIND_CODE = {"compute": KIND_COMPUTE, "load_weights": KIND_LS, "matmul": KIND_MM, "transpose": KIND_PE,
              "dma": KIND_DMA}


def _row(ins: Instruction, spec: HardwareSpec) -> tuple:
    """The encoded columns of one instruction (memoised per distinct instruction shape)."""
    if isinstance(ins, DmaInstruction):
        shape = ins.transfer(spec)
        desc_ns = max(shape.descriptor_bytes, spec.dma_descriptor_knee_bytes) / shape.rate_bytes_per_ns
        return (len(ENGINE_STREAMS) + ins.queue, KIND_DMA, 0.0, 0.0, shape.descriptors, desc_ns, shape.fixed_ns,
                0.0, 0.0, shape.hbm_read, shape.hbm_write, shape.sbuf_read, shape.sbuf_write, 0, 0)
    engine = ins.engine.value
    kind = _KIND_CODE[ins.SIM_KIND]
    cyc = ins.cycles(spec)
    ns_per_cycle = 1e9 / spec.clock_hz(engine)
    overhead = spec.dependent_overhead_cycles
    # N << 128: the static instruction overhead is not hidden (S1); TensorE's weight loads and
    # matmuls are pipelined (their cost is an initiation interval)
    inp = ins.main_input()
    short = inp is not None and inp.free_size < 128 and kind not in (KIND_LS, KIND_MM)
    base = (cyc + (overhead if short else 0)) * ns_per_cycle
    dep = 0.0 if short or ins.ENGINE is Engine.TENSOR else overhead * ns_per_cycle
    fm, fh = ins.flops()
    sr, sw, pr, pw = ins.onchip_bytes()
    return (_STREAM_INDEX[engine], kind, base, dep, 0, 0.0, 0.0, fm, fh, 0, 0, sr, sw, pr, pw)


_PSUM_SHARING = ("psum", "bank", "none")


def psum_lock_count(spec: HardwareSpec) -> int:
    """How many PSUM locks each physical core has: 1 (NC-v2: VectorE and ScalarE cannot access PSUM
    in parallel, S1), one per bank (NC-v3: unless they hit the same bank, S2), or 0."""
    mode = spec.psum_vector_scalar_exclusive
    if mode not in _PSUM_SHARING:
        raise ValueError(f"spec {spec.name!r}: psum_vector_scalar_exclusive={mode!r} is not one of "
                         f"{_PSUM_SHARING}; set it to 'psum' (NC-v2), 'bank' (NC-v3) or 'none'")
    if mode == "bank" and spec.psum_banks > 62:
        raise ValueError(f"spec {spec.name!r}: {spec.psum_banks} PSUM banks do not fit the simulator's 62 "
                         "bank locks; use psum_vector_scalar_exclusive='psum'")
    return {"psum": 1, "bank": spec.psum_banks, "none": 0}[mode]


def psum_lock_mask(ins: Instruction, spec: HardwareSpec) -> int:
    """The PSUM locks a VectorE or ScalarE instruction holds while it runs (bit per lock), 0 for other
    engines and for instructions that touch only SBUF. The compiler serialises the two engines'
    PSUM accesses (S1); TensorE writing PSUM and GpSimdE (no PSUM port) are not part of the rule."""
    if ins.ENGINE not in (Engine.VECTOR, Engine.SCALAR):
        return 0
    n_locks = psum_lock_count(spec)
    if n_locks == 0:
        return 0
    mask = 0
    for ap in (*ins.reads(), *ins.writes()):
        if ap.space is not Space.PSUM:
            continue
        if n_locks == 1:
            return 1
        bank_bytes = spec.psum_bank_bytes
        first = ap.offset // bank_bytes
        last = (ap.offset + ap.extent_bytes() - 1) // bank_bytes
        for b in range(max(first, 0), min(last, n_locks - 1) + 1):
            mask |= 1 << b
    return mask
