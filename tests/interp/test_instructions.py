"""The remaining instruction semantics, run-time API behaviour and error reporting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trnscope import interp
from trnscope.hw import get_spec
from trnscope.isa import (
    AP, Act, Activation, AffineSelect, Alu, BnAggr, BnStats, DType, Dma, FindIndex8, Iota, LoadStationary, Max8,
    Memset,
    MultiplyMoving, PartitionReduce, Program, ProgramError, Select, SemaphoreSet, SemaphoreWait, Space, TensorCopy,
    TensorReduce, TensorScalarReduce, TensorScan, TensorTensor, hbm, psum, sbuf, validate,
)

from . import programs as P
from .helpers import BF16, close, rand

PP = 128


def one_output(k: P.Kernel, tile: AP, shape, dtype, *deps, name="out"):
    out = k.tensor(name, shape, dtype, kind="output")
    k.store(hbm(out, tile.partitions, tile.free_size, ((1, tile.free_size),), dtype), tile, *deps)


def test_every_instruction_class_has_semantics():
    from trnscope.isa import INSTRUCTION_TYPES

    from trnscope.interp.semantics import SEMANTICS

    assert set(INSTRUCTION_TYPES.values()) == set(SEMANTICS)


# --- VectorE -------------------------------------------------------------------------------------------------

def test_max8_and_find_index8_give_the_largest_and_their_first_positions():
    """nki.isa.max8 / nc_find_index8: the 8 largest per partition, largest first, and the position of
    each one's first occurrence (ties keep the earliest; a NaN is the largest and finds the first NaN;
    a value not in the data gives the all-ones sentinel)."""
    C = 40
    x = rand((PP, C), seed=7, lo=-5, hi=5)
    x[:, 30] = x[:, 3] = x.max(1) + 1.0       # a tie for the largest: position 3 wins
    x[5, 20] = x[5, 9] = np.float32("nan")     # partition 5: NaN first, found at 9
    k = P.Kernel("m8")
    xi = k.tensor("x", (PP, C), "float32")
    xt = k.sbuf(PP, [C], "float32")
    m8 = k.sbuf(PP, [8], "float32")
    i8 = k.sbuf(PP, [8], "int32")
    t = k.load(xt, P.rows_ap(xi, 0, PP, C, "float32"))
    t = k.add(Max8(inp=xt, out=m8), t)
    t = k.add(Memset(out=P.sub(m8, offset_elems=7, dims=((1, 1),)), value=1e30), t)   # absent from the data
    t = k.add(FindIndex8(data=xt, vals=m8, out=i8), t)
    one_output(k, m8, (PP, 8), "float32", t, name="m8")
    one_output(k, i8, (PP, 8), "int32", t, name="i8")
    res = interp.run(k.prog, [x])
    ref = -np.sort(-np.where(np.isnan(x), np.inf, x), axis=1)[:, :8]
    got = res["m8"]
    rest = np.arange(PP) != 5
    np.testing.assert_array_equal(got[rest, :7], ref[rest, :7])
    assert np.isnan(got[5, :2]).all() and got[5, 2] == ref[5, 2]
    assert (res["i8"][:, 0] == np.where(np.arange(PP) == 5, 9, 3)).all()
    assert (res["i8"][rest, 1] == 3).all()   # the tie's second copy is the same value: its first position again
    assert (res["i8"][:, 7] == -1).all()


def test_tensor_scalar_reduce_scales_and_reduces_its_result():
    """nki.isa.tensor_scalar_reduce: out = x * s, reduce_res = -(row max of out) with the negation."""
    C = 48
    x = rand((PP, C), seed=11, lo=-4, hi=4)
    k = P.Kernel("tsr")
    xi = k.tensor("x", (PP, C), "float32")
    xt = k.sbuf(PP, [C], "float32")
    ot = k.sbuf(PP, [C], "bfloat16")
    mx = k.sbuf(PP, [1], "float32")
    t = k.load(xt, P.rows_ap(xi, 0, PP, C, "float32"))
    t = k.add(TensorScalarReduce(inp=xt, out=ot, alu0=Alu.MULTIPLY, scalar0=0.37, reduce_alu=Alu.MAX,
                                 reduce_res=mx, negate=True), t)
    one_output(k, ot, (PP, C), "bfloat16", t, name="o")
    one_output(k, mx, (PP, 1), "float32", t, name="m")
    res = interp.run(k.prog, [x])
    ref = torch.from_numpy(x * np.float32(0.37)).to(torch.bfloat16).float().numpy()
    got = np.asarray(res["o"]).astype(np.float32)
    np.testing.assert_array_equal(got, ref)
    # reduced over the result as written (BF16), as reduce_op(dst)
    np.testing.assert_array_equal(res["m"][:, 0], -ref.max(1))
    with pytest.raises(ProgramError, match="reduce_res must be"):
        TensorScalarReduce(inp=xt, out=xt, alu0=Alu.MULTIPLY, scalar0=1.0, reduce_alu=Alu.MAX,
                           reduce_res=ot).check(get_spec(), None)


def test_max8_takes_8_to_16384_elements():
    k = P.Kernel("m8bad")
    xt = k.sbuf(PP, [4], "float32")
    m8 = k.sbuf(PP, [8], "float32")
    with pytest.raises(ProgramError, match="max8 reads 8 to 16384"):
        Max8(inp=xt, out=m8).check(get_spec(), None)


@pytest.mark.parametrize("alu,ref", [
    (Alu.ADD, lambda x: np.cumsum(x, -1)),
    (Alu.MAX, lambda x: np.maximum.accumulate(x, -1)),
    (Alu.MULTIPLY, lambda x: np.cumprod(x, -1)),
    (Alu.SUBTRACT, lambda x: np.concatenate([x[:, :1], x[:, :1] - np.cumsum(x[:, 1:], -1)], 1)),
    (Alu.IS_GT, None),
])
def test_tensor_scan(alu, ref):
    x = rand((PP, 40), seed=1, lo=0.5, hi=1.5)
    prog = P.single(PP, 40, lambda x0, out: TensorScan(alu=alu, inp=x0, out=out), ["float32"], "float32")
    out = interp.run(prog, [x])["out"]
    if ref is None:  # out[i] = out[i-1] > x[i], out[0] = x[0]
        exp = x.copy()
        for i in range(1, x.shape[1]):
            exp[:, i] = (exp[:, i - 1] > x[:, i]).astype(np.float32)
    else:
        exp = ref(x.astype(np.float64))
    close(out, exp, rtol=1e-5)


@pytest.mark.parametrize("alu,torch_fn", [(Alu.ADD, torch.sum), (Alu.MAX, torch.amax), (Alu.MIN, torch.amin),
                                          (Alu.MULTIPLY, lambda t, dim: t.flatten(dim[0]).prod(-1))])
@pytest.mark.parametrize("axes", [1, 2, 3])
def test_tensor_reduce_axes_and_negate(alu, torch_fn, axes):
    shape = (PP, 3, 4, 5)
    x = rand(shape, seed=2, lo=0.5, hi=1.5)
    k = P.Kernel("reduce")
    xi = k.tensor("x", shape, "float32")
    xt = k.sbuf(PP, shape[1:], "float32")
    t = k.load(xt, hbm(xi, PP, 60, ((20, 3), (5, 4), (1, 5)), "float32"))
    kept = shape[1:4 - axes]
    n_out = int(np.prod(kept)) if kept else 1
    ot = k.sbuf(PP, kept or [1], "float32")
    t = k.add(TensorReduce(alu=alu, inp=xt, out=ot, axes=axes, negate=True), t)
    one_output(k, ot, (PP, n_out), "float32", t)
    out = interp.run(k.prog, [x])["out"]
    ref = -torch_fn(torch.from_numpy(x).double(), dim=tuple(range(4 - axes, 4))).reshape(PP, n_out)
    close(out, ref.numpy(), rtol=1e-5)


def test_tensor_reduce_bitwise_int():
    x = np.random.default_rng(3).integers(0, 2**31 - 1, (PP, 33)).astype(np.int32)
    k = P.Kernel("reduce_or")
    xi = k.tensor("x", (PP, 33), "int32")
    xt, ot = k.sbuf(PP, [33], "int32"), k.sbuf(PP, [1], "int32")
    t = k.load(xt, P.rows_ap(xi, 0, PP, 33, "int32"))
    t = k.add(TensorReduce(alu=Alu.BITWISE_XOR, inp=xt, out=ot), t)
    one_output(k, ot, (PP, 1), "int32", t)
    np.testing.assert_array_equal(interp.run(k.prog, [x])["out"][:, 0], np.bitwise_xor.reduce(x, axis=1))


def test_bn_stats_and_aggr_chan():
    C = 1000
    x = rand((PP, C), seed=4, lo=-2, hi=6)
    x[:, :10] += 1000.0  # a large offset in one chunk: naive sum-of-squares would lose the variance
    k = P.Kernel("bn")
    xi = k.tensor("x", (PP, C), "float32")
    xt = k.sbuf(PP, [C], "float32")
    stats = k.sbuf(PP, [9], "float32")
    mv = k.sbuf(PP, [2], "float32")
    t = k.load(xt, P.rows_ap(xi, 0, PP, C, "float32"))
    chunks = [(0, 400), (400, 400), (800, 200)]  # unequal counts
    for j, (c0, cs) in enumerate(chunks):
        t = k.add(BnStats(inp=P.sub(xt, offset_elems=c0, dims=((1, cs),)),
                          out=P.sub(stats, offset_elems=3 * j, dims=((1, 3),))), t)
    t = k.add(BnAggr(inp=stats, out=mv), t)
    one_output(k, stats, (PP, 9), "float32", t, name="stats")
    one_output(k, mv, (PP, 2), "float32", t, name="mv")
    res = interp.run(k.prog, [x])
    x64 = x.astype(np.float64)
    st = res["stats"].reshape(PP, 3, 3)
    for j, (c0, cs) in enumerate(chunks):
        part = x64[:, c0:c0 + cs]
        np.testing.assert_array_equal(st[:, j, 0], cs)
        close(st[:, j, 1], part.mean(1), rtol=1e-6)
        close(st[:, j, 2], ((part - part.mean(1, keepdims=True)) ** 2).sum(1), rtol=1e-5)
    close(res["mv"][:, 0], x64.mean(1), rtol=1e-6)
    close(res["mv"][:, 1], x64.var(1), rtol=1e-5)  # population variance


@pytest.mark.parametrize("src_dt,dst_dt", [("float32", "bfloat16"), ("bfloat16", "float32"), ("float32", "int32"),
                                           ("int32", "float32"), ("int32", "int8"), ("float32", "float16")])
def test_tensor_copy_casts(src_dt, dst_dt):
    rng = np.random.default_rng(5)
    x = (rng.uniform(-300, 300, (PP, 64)) if "float" in src_dt or src_dt == "bfloat16"
         else rng.integers(-300, 300, (PP, 64)))
    x = x.astype(BF16 if src_dt == "bfloat16" else src_dt)
    if src_dt == "float32" and dst_dt == "int32":
        x[0, :4] = [np.nan, np.inf, -np.inf, 2.5e9]
    prog = P.single(PP, 64, lambda x0, out: TensorCopy(inp=x0, out=out), [src_dt], dst_dt)
    out = interp.run(prog, [x])["out"]
    if dst_dt == "int32":
        exp = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0, posinf=2**31 - 1, neginf=-2**31))
        exp = np.clip(exp, -2**31, 2**31 - 1).astype(np.int32)  # truncate, saturate, NaN -> 0
    elif dst_dt == "int8":
        exp = x.astype(np.int8)  # integer narrowing wraps
    else:
        exp = x.astype(np.float32).astype(BF16 if dst_dt == "bfloat16" else dst_dt)  # RNE
    np.testing.assert_array_equal(out, exp)


def test_select_and_memset():
    k = P.Kernel("select")
    a, b = k.tensor("a", (PP, 32), "float32"), k.tensor("b", (PP, 32), "float32")
    at, bt, pt, ot, mt = (k.sbuf(PP, [32], "float32") for _ in range(5))
    it = k.sbuf(PP, [8], "int32")
    t1, t2 = k.load(at, P.rows_ap(a, 0, PP, 32, "float32")), k.load(bt, P.rows_ap(b, 0, PP, 32, "float32"))
    t = k.add(TensorTensor(alu=Alu.IS_GT, in0=at, in1=bt, out=pt), t1, t2)
    t = k.add(Select(pred=pt, on_true=at, on_false=bt, out=ot), t)
    tm = k.add(Memset(out=mt, value=3.5))
    ti = k.add(Memset(out=it, value=-7))
    one_output(k, ot, (PP, 32), "float32", t)
    one_output(k, mt, (PP, 32), "float32", tm, name="m")
    one_output(k, it, (PP, 8), "int32", ti, name="i")
    av, bv = rand((PP, 32), seed=6), rand((PP, 32), seed=7)
    res = interp.run(k.prog, {"a": av, "b": bv})
    np.testing.assert_array_equal(res["out"], np.maximum(av, bv))
    assert (res["m"] == 3.5).all() and (res["i"] == -7).all()


# --- GpSimdE -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_iota(dtype):
    k = P.Kernel("iota")
    ot = k.sbuf(PP, [4, 6], dtype)
    t = k.add(Iota(out=ot, base=5, channel_multiplier=100, coefs=(10, -1)))
    one_output(k, ot, (PP, 24), dtype, t)
    p, i, j = np.meshgrid(np.arange(PP), np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(interp.run(k.prog, [])["out"], (5 + 100 * p + 10 * i - j).reshape(PP, 24))


def test_affine_select_causal_mask():
    x = rand((PP, PP), seed=8)
    prog = P.single(PP, PP, lambda x0, out: AffineSelect(inp=x0, out=out, cmp=Alu.IS_GE, base=0, channel_multiplier=1,
                                                         coefs=(-1,), fill=-np.inf), ["float32"], "float32")
    out = interp.run(prog, [x])["out"]
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((PP, PP), bool)), x, -np.inf))


@pytest.mark.parametrize("alu,fn", [(Alu.ADD, np.sum), (Alu.MAX, np.max)])
def test_partition_reduce(alu, fn):
    x = rand((PP, 50), seed=9)
    k = P.Kernel("preduce")
    xi = k.tensor("x", (PP, 50), "float32")
    xt, ot = k.sbuf(PP, [50], "float32"), k.sbuf(1, [50], "float32")
    t = k.load(xt, P.rows_ap(xi, 0, PP, 50, "float32"))
    t = k.add(PartitionReduce(alu=alu, inp=xt, out=ot), t)
    one_output(k, ot, (1, 50), "float32", t)
    close(interp.run(k.prog, [x])["out"], fn(x.astype(np.float64), axis=0, keepdims=True), rtol=1e-5)


# --- TensorE -------------------------------------------------------------------------------------------------

def test_stationary_is_held_and_accumulate_flag():
    """One LDWEIGHTS serves two MATMULs; changing SBUF after LDWEIGHTS does not change the weights;
    accumulate=False restarts a PSUM accumulation group."""
    K, M, N = 64, 32, 48
    k = P.Kernel("stationary")
    w = k.tensor("w", (K, M), "float32")
    x = k.tensor("x", (K, N), "float32")
    wt, xt = k.sbuf(K, [M], "float32"), k.sbuf(K, [N], "float32")
    ps = k.psum(M, [N])
    ot1, ot2 = k.sbuf(M, [N], "float32"), k.sbuf(M, [N], "float32")
    t1, t2 = k.load(wt, P.rows_ap(w, 0, K, M, "float32")), k.load(xt, P.rows_ap(x, 0, K, N, "float32"))
    t = k.add(LoadStationary(src=wt), t1)
    t = k.add(Memset(out=wt, value=0.0), t)  # clobber the SBUF copy of the weights
    t = k.add(MultiplyMoving(moving=xt, dst=ps, accumulate=False), t2, t)
    t = k.add(MultiplyMoving(moving=xt, dst=ps, accumulate=True), t)
    tc = k.add(TensorCopy(inp=ps, out=ot1), t)
    t = k.add(MultiplyMoving(moving=xt, dst=ps, accumulate=False), tc)
    tc2 = k.add(TensorCopy(inp=ps, out=ot2), t)
    one_output(k, ot1, (M, N), "float32", tc, name="twice")
    one_output(k, ot2, (M, N), "float32", tc2, name="once")
    wv, xv = rand((K, M), seed=10), rand((K, N), seed=11)
    res = interp.run(k.prog, {"w": wv, "x": xv})
    ref = wv.astype(np.float64).T @ xv.astype(np.float64)
    # fp32 accumulation over K products: the standard bound is K * eps * (|w|^T |x|) per element
    # (a fixed atol fails on elements whose products nearly cancel, as numpy's BLAS reorders sums)
    bound = K * np.finfo(np.float32).eps * float((np.abs(wv).T.astype(np.float64) @ np.abs(xv)).max())
    close(res["once"], ref, rtol=0, atol=bound)
    close(res["twice"], 2 * ref, rtol=0, atol=2 * bound)


# --- DMA -------------------------------------------------------------------------------------------------------

def test_dma_cast_and_accumulate():
    k = P.Kernel("dma_acc")
    x = k.tensor("x", (PP, 16), "float32")
    out = k.tensor("out", (PP, 16), "bfloat16", kind="output")
    acc = k.tensor("acc", (PP, 16), "float32", kind="output")
    xt = k.sbuf(PP, [16], "bfloat16")
    t = k.load(xt, P.rows_ap(x, 0, PP, 16, "float32"))  # fp32 -> bf16 cast on the way in (RNE)
    k.store(P.rows_ap(out, 0, PP, 16, "bfloat16"), xt, t)
    t1 = k.store(P.rows_ap(acc, 0, PP, 16, "float32"), P.rows_ap(x, 0, PP, 16, "float32"))  # HBM -> HBM
    k.add(Dma(queue=k.queue("out"), src=xt, dst=P.rows_ap(acc, 0, PP, 16, "float32"), accumulate=True), t, t1)
    xv = rand((PP, 16), seed=12)
    res = interp.run(k.prog, [xv])
    np.testing.assert_array_equal(res["out"], xv.astype(BF16))
    np.testing.assert_array_equal(res["acc"], xv + xv.astype(BF16).astype(np.float32))


def test_dma_reshapes_in_element_order():
    """A DMA moves elements in (partition, free...) row-major order when the shapes differ."""
    k = P.Kernel("reshape")
    x = k.tensor("x", (1, 512), "float32")
    xt = k.sbuf(PP, [4], "float32")
    t = k.load(xt, hbm(x, 1, 0, ((1, 512),), "float32"))
    one_output(k, xt, (PP, 4), "float32", t)
    xv = rand((1, 512), seed=13)
    np.testing.assert_array_equal(interp.run(k.prog, [xv])["out"], xv.reshape(PP, 4))


# --- state, inputs and errors ------------------------------------------------------------------------------------

def test_uninitialised_sbuf_reads_as_nan():
    k = P.Kernel("uninit")
    t_in = k.sbuf(PP, [8], "float32")
    ti = k.sbuf(PP, [8], "int32")
    ot = k.sbuf(PP, [8], "float32")
    t = k.add(Activation(func=Act.EXP, inp=t_in, out=ot))  # nobody wrote t_in
    one_output(k, ot, (PP, 8), "float32", t)
    one_output(k, ti, (PP, 8), "int32", name="ints")
    k.tensor("never_written", (4,), "float32", kind="output")
    res = interp.run(k.prog, [])
    assert np.isnan(res["out"]).all() and np.isnan(res["never_written"]).all()
    assert (res["ints"] == -1).all()  # 0xFF bytes
    res = interp.run(k.prog, [], poison=False)
    assert (res["out"] == 1.0).all() and (res["never_written"] == 0).all()


def test_inputs_by_name_or_position_and_consts():
    k = P.Kernel("consts")
    a = k.tensor("a", (PP, 4), "float32")
    c = k.tensor("c", (PP, 4), "float32", kind="const", value=np.full((PP, 4), 2.0))
    b = k.tensor("b", (PP, 4), "float32")
    tiles = [k.sbuf(PP, [4], "float32") for _ in range(4)]
    deps = [k.load(tiles[i], P.rows_ap(t, 0, PP, 4, "float32")) for i, t in enumerate((a, b, c))]
    t = k.add(TensorTensor(alu=Alu.ADD, in0=tiles[0], in1=tiles[1], out=tiles[3]), *deps)
    t = k.add(TensorTensor(alu=Alu.MULTIPLY, in0=tiles[3], in1=tiles[2], out=tiles[3]), t)
    one_output(k, tiles[3], (PP, 4), "float32", t)
    av, bv = rand((PP, 4), seed=1), rand((PP, 4), seed=2)
    exp = (av + bv) * 2
    np.testing.assert_array_equal(interp.run(k.prog, [av, bv])["out"], exp)
    np.testing.assert_array_equal(interp.run(k.prog, {"b": bv, "a": av})["out"], exp)
    np.testing.assert_array_equal(interp.run(k.prog, {"b": torch.from_numpy(bv), "a": av.astype(np.float64)})["out"],
                                  exp)
    with pytest.raises(ValueError, match="needs input 'b'"):
        interp.run(k.prog, {"a": av})
    with pytest.raises(ValueError, match="no input tensor named 'z'"):
        interp.run(k.prog, {"a": av, "b": bv, "z": bv})
    with pytest.raises(ValueError, match="takes 2 inputs"):
        interp.run(k.prog, [av])
    with pytest.raises(ValueError, match=r"shape \(128, 4\)"):
        interp.run(k.prog, [av, bv[:, :2]])


def test_semaphore_instructions_have_no_data_effect():
    k = P.Kernel("sems")
    x = k.tensor("x", (PP, 4), "float32")
    xt = k.sbuf(PP, [4], "float32")
    t = k.load(xt, P.rows_ap(x, 0, PP, 4, "float32"))
    s = k.prog.semaphore("extra")
    t = k.add(SemaphoreWait(), t)
    k.prog.add(SemaphoreSet(sem=s, value=3))
    one_output(k, xt, (PP, 4), "float32", t)
    xv = rand((PP, 4), seed=3)
    np.testing.assert_array_equal(interp.run(k.prog, [xv])["out"], xv)


def _bad_partitions_program() -> Program:
    prog = Program("bad")
    x = prog.tensor("x", (256, 4), "float32")
    prog.add(Dma(queue=prog.queue("q"), src=hbm(x, 129, 4, ((1, 4),), "float32"), dst=sbuf(0, 129, [4], "float32")))
    return prog


def test_validate_and_run_reject_too_many_partitions():
    prog = _bad_partitions_program()
    pattern = r"instruction #0 q0:DMA_DIRECT2D in program 'bad'.*129 partitions"
    with pytest.raises(ProgramError, match=pattern):
        validate(prog, get_spec())
    with pytest.raises(ProgramError, match=pattern):
        interp.run(prog, [np.zeros((256, 4), np.float32)])
    # without the static check the interpreter's own bounds check still names the instruction
    with pytest.raises(ProgramError, match=r"instruction #0 q0:DMA_DIRECT2D.*partitions 0\.\.128"):
        interp.run(prog, [np.zeros((256, 4), np.float32)], check=False)


def test_negative_stride_below_the_partition_is_rejected():
    """validate() only bounds positive strides on chip; the interpreter never addresses outside SBUF."""
    prog = Program("neg")
    x = prog.tensor("x", (PP, 4), "float32")
    q = prog.queue("q")
    prog.add(Dma(queue=q, src=hbm(x, PP, 4, ((1, 4),), "float32"),
                 dst=AP(Space.SBUF, DType.float32, PP, ((-1, 4),), 0, 4)))
    with pytest.raises(ProgramError, match=r"instruction #0 .*SBUF overflow: the tile needs bytes -8\.\."):
        interp.run(prog, [np.zeros((PP, 4), np.float32)])
    with pytest.raises(ProgramError, match=r"instruction #0 .*reaches bytes -8\.\."):
        interp.run(prog, [np.zeros((PP, 4), np.float32)], check=False)


def test_matmul_without_stationary_is_an_error():
    prog = Program("nols")
    prog.add(MultiplyMoving(moving=sbuf(0, 8, [8], "bfloat16"), dst=psum(0, 8, [8])))
    with pytest.raises(ProgramError, match=r"instruction #0 tensor:MATMUL.*no LDWEIGHTS"):
        interp.run(prog, [], check=False)


def test_interpreter_steps():
    prog = P.broadcast_add(10, 8)
    it = interp.Interpreter(prog)
    it.load({"a": np.ones((10, 8), np.float32), "b": np.arange(8, dtype=np.float32)})
    from trnscope.isa import execution_order

    for i in execution_order(prog):
        it.step(i)
    assert it.executed == len(prog)
    np.testing.assert_array_equal(it.outputs()["out"], 1 + np.arange(8, dtype=np.float32)[None].repeat(10, 0))
