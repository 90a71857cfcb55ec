"""Hand-written sample Programs for the interpreter tests and benchmarks/bench_interp.py.

Each builder returns a Program whose inputs and outputs are HBM tensors; comments give the NKI
kernel each one mirrors. This module imports only trnscope.isa so the benchmark can import it
through ``sys.path``.
"""

from __future__ import annotations

from trnscope.isa import (
    AP, Act, Activation, Alu, BnAggr, BnStats, DType, Dma, DmaGather, DmaScatter, Instruction, LoadStationary,
    MultiplyMoving, Program, Space, TensorCopy, TensorReduce, TensorScalar, TensorTensor, TensorTranspose, hbm,
)
from trnscope.isa.ap import dense_dims

PMAX = 128
PSUM_BANK = 2048


def tiles(n: int, size: int = PMAX):
    """(start, length) of each tile of ``size`` along ``n``; the last one may be partial."""
    for start in range(0, n, size):
        yield start, min(size, n - start)


class Kernel:
    """A small Program builder: bump allocation of SBUF/PSUM and automatic semaphores.

    Every instruction added with :meth:`add` signals its own stream's semaphore and returns a token
    (semaphore, count) meaning "that instruction has completed"; pass tokens as ``deps`` to make a
    later instruction wait for them. Streams are in order, so a count per stream is enough.
    """

    def __init__(self, name: str, target: str = "trn2") -> None:
        self.prog = Program(name, target=target)
        self._sem: dict[str, int] = {}
        self._count: dict[str, int] = {}
        self._queues: dict[str, int] = {}
        self._sbuf = 0
        self._psum = 0

    def tensor(self, name: str, shape, dtype, kind: str = "input", value=None) -> int:
        return self.prog.tensor(name, shape, dtype, kind, value)

    def queue(self, name: str, kind: str = "data") -> int:
        if name not in self._queues:
            self._queues[name] = self.prog.queue(name, kind)
        return self._queues[name]

    def sbuf(self, partitions: int, free_shape, dtype) -> AP:
        dt = DType.parse(dtype)
        n = 1
        for s in free_shape:
            n *= int(s)
        offset = self._sbuf
        self._sbuf += -(-n * dt.itemsize // 64) * 64
        return AP(Space.SBUF, dt, partitions, dense_dims(tuple(free_shape)), 0, offset)

    def psum(self, partitions: int, free_shape, dtype=DType.float32) -> AP:
        """One PSUM bank per tile (a tile never crosses a bank); 8 banks round robin."""
        dt = DType.parse(dtype)
        offset = (self._psum % 8) * PSUM_BANK
        self._psum += 1
        return AP(Space.PSUM, dt, partitions, dense_dims(tuple(free_shape)), 0, offset)

    def add(self, ins: Instruction, *deps: tuple[int, int] | None) -> tuple[int, int]:
        stream = self.prog.stream_of(ins)
        if stream not in self._sem:
            self._sem[stream] = self.prog.semaphore(f"S[{stream}]")
            self._count[stream] = 0
        sem = self._sem[stream]
        waits: dict[int, int] = {}
        for d in deps:
            if d is not None and d[0] != sem:  # same-stream order is implicit
                waits[d[0]] = max(waits.get(d[0], 0), d[1])
        self.prog.add(ins, waits=tuple(waits.items()), signals=((sem, 1),))
        self._count[stream] += 1
        return sem, self._count[stream]

    def load(self, dst: AP, src: AP, *deps, queue: str = "in", transpose: bool = False):
        return self.add(Dma(queue=self.queue(queue, "input"), src=src, dst=dst, transpose=transpose), *deps)

    def store(self, dst: AP, src: AP, *deps, queue: str = "out"):
        return self.add(Dma(queue=self.queue(queue, "output"), src=src, dst=dst), *deps)


def rows_ap(tensor: int, r0: int, rows: int, cols: int, dtype, row_stride: int | None = None) -> AP:
    """Rows r0..r0+rows of a row-major [*, cols] HBM tensor, one row per partition."""
    stride = cols if row_stride is None else row_stride
    return hbm(tensor, rows, stride, ((1, cols),), dtype, offset=r0 * stride)


def sub(ap: AP, partitions: int | None = None, offset_elems: int = 0, dims=None) -> AP:
    """The same on-chip tile with fewer partitions, a shifted offset, or other dims."""
    return AP(ap.space, ap.dtype, ap.partitions if partitions is None else partitions,
              ap.dims if dims is None else tuple(dims), ap.start, ap.offset + offset_elems * ap.dtype.itemsize)


# --- TensorE ---------------------------------------------------------------------------------------------

def tiled_matmul(M: int, K: int, N: int, dtype="bfloat16", out_dtype=None, *, tile_n: int = 512,
                 name: str | None = None) -> Program:
    """out[M, N] = lhsT[K, M].T @ rhs[K, N] (nki tutorial matmul_tiled, with explicit semaphores).

    DMA queue ``lhsT`` loads the K-tiles of lhsT ([k, M] each) and signals ``lhsT_loaded``; queue
    ``rhs`` does the same for rhs. TensorE holds stationary lhsT[k-tile, m-tile] (LDWEIGHTS) and
    streams each rhs n-tile through it (MATMUL, accumulate for k > 0) into one PSUM bank per
    (m, n) block, waiting for the loads and for VectorE to have emptied a bank before reusing it.
    After the last k-tile of a block it signals ``psum_ready``; VectorE copies the block to SBUF
    (casting to the output dtype), signalling ``psum_free`` and ``out_ready``; queue ``out``
    stores each finished row band of out.
    """
    dt = DType.parse(dtype)
    odt = DType.parse(out_dtype or dtype)
    isz, osz = dt.itemsize, odt.itemsize
    prog = Program(name or f"matmul_{M}x{K}x{N}_{dt.value}")
    t_lhs = prog.tensor("lhsT", (K, M), dt)
    t_rhs = prog.tensor("rhs", (K, N), dt)
    t_out = prog.tensor("out", (M, N), odt, kind="output")
    q_lhs, q_rhs, q_out = prog.queue("lhsT", "input"), prog.queue("rhs", "input"), prog.queue("out", "output")
    s_lhs, s_rhs = prog.semaphore("lhsT_loaded"), prog.semaphore("rhs_loaded")
    s_ready, s_free, s_out = prog.semaphore("psum_ready"), prog.semaphore("psum_free"), prog.semaphore("out_ready")

    k_tiles, m_tiles, n_tiles = list(tiles(K)), list(tiles(M)), list(tiles(N, tile_n))
    if len(n_tiles) > 8:
        raise ValueError("one row band of out must fit the 8 PSUM banks (N <= 8 * tile_n)")
    # SBUF layout per partition: all of lhsT, all of rhs (one K-tile after the other), then out bands.
    lhs_off = [kt * M * isz for kt in range(len(k_tiles))]
    rhs_base = len(k_tiles) * M * isz
    rhs_off = [rhs_base + kt * N * isz for kt in range(len(k_tiles))]
    out_base = rhs_base + len(k_tiles) * N * isz
    out_off = [out_base + mt * N * osz for mt in range(len(m_tiles))]

    with prog.origin("aten::mm"):
        for kt, (k0, ks) in enumerate(k_tiles):
            prog.add(Dma(queue=q_lhs, src=hbm(t_lhs, ks, M, ((1, M),), dt, offset=k0 * M),
                         dst=AP(Space.SBUF, dt, ks, ((1, M),), 0, lhs_off[kt]), signals=((s_lhs, 1),)))
            prog.add(Dma(queue=q_rhs, src=hbm(t_rhs, ks, N, ((1, N),), dt, offset=k0 * N),
                         dst=AP(Space.SBUF, dt, ks, ((1, N),), 0, rhs_off[kt]), signals=((s_rhs, 1),)))
        block = 0
        for mt, (m0, ms) in enumerate(m_tiles):
            first_block = block
            for kt, (k0, ks) in enumerate(k_tiles):
                waits = ((s_lhs, kt + 1),) if mt == 0 else ()
                prog.add(LoadStationary(src=AP(Space.SBUF, dt, ks, ((1, ms),), 0, lhs_off[kt] + m0 * isz),
                                        waits=waits))
                for nt, (n0, ns) in enumerate(n_tiles):
                    blk = first_block + nt
                    waits = []
                    if mt == 0:
                        waits.append((s_rhs, kt + 1))
                    if kt == 0 and blk >= 8:
                        waits.append((s_free, blk - 7))  # VectorE has emptied this bank's last block
                    last = kt == len(k_tiles) - 1
                    prog.add(MultiplyMoving(
                        moving=AP(Space.SBUF, dt, ks, ((1, ns),), 0, rhs_off[kt] + n0 * isz),
                        dst=AP(Space.PSUM, DType.float32, ms, ((1, ns),), 0, (blk % 8) * PSUM_BANK),
                        accumulate=kt > 0, waits=tuple(waits), signals=((s_ready, 1),) if last else ()))
            for nt, (n0, ns) in enumerate(n_tiles):
                blk = first_block + nt
                prog.add(TensorCopy(inp=AP(Space.PSUM, DType.float32, ms, ((1, ns),), 0, (blk % 8) * PSUM_BANK),
                                    out=AP(Space.SBUF, odt, ms, ((1, ns),), 0, out_off[mt] + n0 * osz),
                                    waits=((s_ready, blk + 1),), signals=((s_free, 1), (s_out, 1))))
            block += len(n_tiles)
            prog.add(Dma(queue=q_out, src=AP(Space.SBUF, odt, ms, ((1, N),), 0, out_off[mt]),
                         dst=hbm(t_out, ms, N, ((1, N),), odt, offset=m0 * N), waits=((s_out, block),)))
    return prog


def tensor_transpose(P: int, F: int, dtype="float32") -> Program:
    """out[F, P] = x[P, F].T on TensorE (matmul with identity) through PSUM."""
    k = Kernel(f"transpose_{P}x{F}")
    x = k.tensor("x", (P, F), dtype)
    out = k.tensor("out", (F, P), dtype, kind="output")
    xt = k.sbuf(P, [F], dtype)
    pt = k.psum(F, [P], dtype)
    ot = k.sbuf(F, [P], dtype)
    t = k.load(xt, rows_ap(x, 0, P, F, dtype))
    t = k.add(TensorTranspose(src=xt, dst=pt), t)
    t = k.add(TensorCopy(inp=pt, out=ot), t)
    k.store(rows_ap(out, 0, F, P, dtype), ot, t)
    return k.prog


# --- element-wise with broadcasting -------------------------------------------------------------------------

def broadcast_add(R: int, C: int, dtype="float32", *, column: bool = False) -> Program:
    """out = a[R, C] + b: b[C] broadcast over rows (DMA with pstride 0), or with ``column`` b[R, 1]
    broadcast over columns (a zero free stride in VectorE's access pattern)."""
    k = Kernel(f"badd_{'col' if column else 'row'}_{R}x{C}")
    a = k.tensor("a", (R, C), dtype)
    b = k.tensor("b", (R, 1) if column else (C,), dtype)
    out = k.tensor("out", (R, C), dtype, kind="output")
    row_tok = None
    if not column:
        bt = k.sbuf(PMAX, [C], dtype)
        parts = min(PMAX, R)
        bt = sub(bt, parts)
        row_tok = k.load(bt, hbm(b, parts, 0, ((1, C),), dtype))  # one row to every partition
    for r0, rows in tiles(R):
        at = k.sbuf(rows, [C], dtype)
        t = k.load(at, rows_ap(a, r0, rows, C, dtype))
        if column:
            ct = k.sbuf(rows, [1], dtype)
            tb = k.load(ct, rows_ap(b, r0, rows, 1, dtype))
            in1 = sub(ct, dims=((0, C),))  # [rows, 1] read C times along the free dim
        else:
            tb = row_tok
            in1 = sub(bt, rows)
        ot = k.sbuf(rows, [C], dtype)
        t = k.add(TensorTensor(alu=Alu.ADD, in0=at, in1=in1, out=ot), t, tb)
        k.store(rows_ap(out, r0, rows, C, dtype), ot, t)
    return k.prog


# --- reductions, softmax, layernorm -----------------------------------------------------------------------

def row_reduce(R: int, C: int, dtype="float32") -> Program:
    """sum[r] = x[r, :].sum(), max[r] = x[r, :].max(), 128 rows at a time (nl.sum / nl.max axis=1)."""
    k = Kernel(f"row_reduce_{R}x{C}")
    x = k.tensor("x", (R, C), dtype)
    s = k.tensor("sum", (R,), dtype, kind="output")
    m = k.tensor("max", (R,), dtype, kind="output")
    for r0, rows in tiles(R):
        xt = k.sbuf(rows, [C], dtype)
        st = k.sbuf(rows, [1], dtype)
        mt = k.sbuf(rows, [1], dtype)
        t = k.load(xt, rows_ap(x, r0, rows, C, dtype))
        ts = k.add(TensorReduce(alu=Alu.ADD, inp=xt, out=st), t)
        tm = k.add(TensorReduce(alu=Alu.MAX, inp=xt, out=mt), t)
        k.store(rows_ap(s, r0, rows, 1, dtype), st, ts)
        k.store(rows_ap(m, r0, rows, 1, dtype), mt, tm)
    return k.prog


def softmax(R: int, C: int, dtype="float32") -> Program:
    """Row softmax: -max (TensorReduce negate) -> exp(x - max) with accum_out sum (ScalarE) ->
    1/sum (ScalarE reciprocal) -> multiply by the per-partition scalar (TensorScalar)."""
    k = Kernel(f"softmax_{R}x{C}")
    x = k.tensor("x", (R, C), dtype)
    out = k.tensor("out", (R, C), dtype, kind="output")
    f32 = DType.float32
    for r0, rows in tiles(R):
        xt = k.sbuf(rows, [C], dtype)
        neg_max = k.sbuf(rows, [1], f32)
        e = k.sbuf(rows, [C], f32)
        total = k.sbuf(rows, [1], f32)
        rtotal = k.sbuf(rows, [1], f32)
        yt = k.sbuf(rows, [C], dtype)
        t = k.load(xt, rows_ap(x, r0, rows, C, dtype))
        t = k.add(TensorReduce(alu=Alu.MAX, inp=xt, out=neg_max, negate=True), t)
        t = k.add(Activation(func=Act.EXP, inp=xt, out=e, bias=neg_max, accum_out=total), t)
        t = k.add(Activation(func=Act.RECIPROCAL, inp=total, out=rtotal), t)
        t = k.add(TensorScalar(inp=e, out=yt, alu0=Alu.MULTIPLY, scalar0=rtotal), t)
        k.store(rows_ap(out, r0, rows, C, dtype), yt, t)
    return k.prog


def layernorm(R: int, C: int, dtype="float32", eps: float = 1e-5) -> Program:
    """Row layernorm with gamma/beta (nki tutorial layernorm v2): bn_stats over <= 512-element chunks,
    bn_aggr -> (mean, var), rstd = (var + eps) ** -0.5 in one TensorScalar, (x - mean) * rstd in
    another, then * gamma + beta (broadcast rows loaded with pstride 0)."""
    k = Kernel(f"layernorm_{R}x{C}")
    x = k.tensor("x", (R, C), dtype)
    g = k.tensor("gamma", (C,), dtype)
    b = k.tensor("beta", (C,), dtype)
    out = k.tensor("out", (R, C), dtype, kind="output")
    f32 = DType.float32
    parts = min(PMAX, R)
    gt, bt = k.sbuf(parts, [C], dtype), k.sbuf(parts, [C], dtype)
    tg = k.load(gt, hbm(g, parts, 0, ((1, C),), dtype))
    tb = k.load(bt, hbm(b, parts, 0, ((1, C),), dtype))
    chunks = list(tiles(C, 512))
    for r0, rows in tiles(R):
        xt = k.sbuf(rows, [C], dtype)
        stats = k.sbuf(rows, [3 * len(chunks)], f32)
        mv = k.sbuf(rows, [2], f32)
        rstd = k.sbuf(rows, [1], f32)
        y = k.sbuf(rows, [C], f32)
        yt = k.sbuf(rows, [C], dtype)
        t = k.load(xt, rows_ap(x, r0, rows, C, dtype))
        for j, (c0, cs) in enumerate(chunks):
            t = k.add(BnStats(inp=sub(xt, offset_elems=c0, dims=((1, cs),)),
                              out=sub(stats, offset_elems=3 * j, dims=((1, 3),))), t)
        t = k.add(BnAggr(inp=stats, out=mv), t)
        mean, var = sub(mv, dims=((1, 1),)), sub(mv, offset_elems=1, dims=((1, 1),))
        t = k.add(TensorScalar(inp=var, out=rstd, alu0=Alu.ADD, scalar0=eps, alu1=Alu.POW, scalar1=-0.5), t)
        t = k.add(TensorScalar(inp=xt, out=y, alu0=Alu.SUBTRACT, scalar0=mean, alu1=Alu.MULTIPLY, scalar1=rstd), t)
        t = k.add(TensorTensor(alu=Alu.MULTIPLY, in0=y, in1=sub(gt, rows), out=y), t, tg)
        t = k.add(TensorTensor(alu=Alu.ADD, in0=y, in1=sub(bt, rows), out=yt), t, tb)
        k.store(rows_ap(out, r0, rows, C, dtype), yt, t)
    return k.prog


# --- DMA: gather, scatter, transpose --------------------------------------------------------------------------

def embedding(V: int, D: int, N: int, dtype="float32", index_dtype="int32") -> Program:
    """out[i, :] = table[ids[i], :] with DmaGather, 128 ids at a time."""
    k = Kernel(f"embedding_{V}x{D}_{N}")
    table = k.tensor("table", (V, D), dtype)
    ids = k.tensor("ids", (N,), index_dtype)
    out = k.tensor("out", (N, D), dtype, kind="output")
    for r0, rows in tiles(N):
        it = k.sbuf(rows, [1], index_dtype)
        et = k.sbuf(rows, [D], dtype)
        t = k.load(it, rows_ap(ids, r0, rows, 1, index_dtype))
        t = k.add(DmaGather(queue=k.queue("gather", "software_dynamic"), table=hbm(table, V, D, ((1, D),), dtype),
                            index=it, dst=et), t)
        k.store(rows_ap(out, r0, rows, D, dtype), et, t)
    return k.prog


def index_add(V: int, D: int, N: int, dtype="float32", accumulate: bool = True) -> Program:
    """out = table with out[ids[i], :] += src[i, :] (or = with ``accumulate=False``) via DmaScatter."""
    k = Kernel(f"index_add_{V}x{D}_{N}")
    table = k.tensor("table", (V, D), dtype)
    ids = k.tensor("ids", (N,), "int32")
    src = k.tensor("src", (N, D), dtype)
    out = k.tensor("out", (V, D), dtype, kind="output")
    q = k.queue("scatter", "software_dynamic")
    # copy table -> out through SBUF first, then scatter into out
    done = []
    for r0, rows in tiles(V):
        tt = k.sbuf(rows, [D], dtype)
        t = k.load(tt, rows_ap(table, r0, rows, D, dtype))
        done.append(k.add(Dma(queue=q, src=tt, dst=rows_ap(out, r0, rows, D, dtype)), t))
    for r0, rows in tiles(N):
        it = k.sbuf(rows, [1], "int32")
        st = k.sbuf(rows, [D], dtype)
        t1 = k.load(it, rows_ap(ids, r0, rows, 1, "int32"))
        t2 = k.load(st, rows_ap(src, r0, rows, D, dtype))
        k.add(DmaScatter(queue=q, src=st, index=it, table=hbm(out, V, D, ((1, D),), dtype), accumulate=accumulate),
              t1, t2, *done)
    return k.prog


def dma_transpose(R: int, C: int, dtype="float32") -> Program:
    """out[C, R] = x[R, C].T with DMA transposes HBM -> SBUF, 128 rows of x at a time (C <= 128)."""
    k = Kernel(f"dma_transpose_{R}x{C}")
    x = k.tensor("x", (R, C), dtype)
    out = k.tensor("out", (C, R), dtype, kind="output")
    for r0, rows in tiles(R):
        tt = k.sbuf(C, [rows], dtype)
        t = k.load(tt, rows_ap(x, r0, rows, C, dtype), transpose=True)
        k.store(hbm(out, C, R, ((1, rows),), dtype, offset=r0), tt, t)
    return k.prog


# --- single instructions over one tile -------------------------------------------------------------------------

def single(P: int, F: int, make, in_dtypes, out_dtype, name: str = "single") -> Program:
    """Load inputs x0, x1, ... [P, F] into SBUF, run the instruction ``make(*tiles, out=tile)`` builds, store out."""
    k = Kernel(name)
    srcs = [k.tensor(f"x{i}", (P, F), dt) for i, dt in enumerate(in_dtypes)]
    out = k.tensor("out", (P, F), out_dtype, kind="output")
    tiles_in, toks = [], []
    for t, dt in zip(srcs, in_dtypes):
        st = k.sbuf(P, [F], dt)
        toks.append(k.load(st, rows_ap(t, 0, P, F, dt)))
        tiles_in.append(st)
    ot = k.sbuf(P, [F], out_dtype)
    t = k.add(make(*tiles_in, out=ot), *toks)
    k.store(rows_ap(out, 0, P, F, out_dtype), ot, t)
    return k.prog
