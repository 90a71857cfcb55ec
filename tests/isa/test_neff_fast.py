"""The NEFF body written from the Program's shapes is byte for byte the reference body (every
instruction encoded on its own): on compiler programs, on hand-written ones with values that compare
equal but print differently, on decoded NEFFs and on instruction lists edited behind the Program's
back. The hash is the NEFF's identity (file names, the timeline cache, stored profiles), so any
difference is a bug."""

from __future__ import annotations

import hashlib
import math
import pickle
from dataclasses import replace

import pytest

from trnscope import hw
from trnscope.compiler.builder import KernelBuilder
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.compiler.lowering import OpCall, lower
from trnscope.compiler.meta import TensorMeta
from trnscope.isa import (
    AP, Act, Activation, AffineSelect, Alu, Dma, Iota, LoadStationary, Memset, MultiplyMoving, Program, Random,
    SemaphoreSet, SemaphoreWait, Space, TensorCopy, TensorScalar, TensorTensor, hbm, neff, psum, sbuf,
)
from trnscope.isa.neff import _encode_body_reference, encode_body

SPEC = hw.TRN2


def _meta(*shape, dtype="bfloat16", stride=None):
    m = TensorMeta.contiguous(shape, dtype)
    return m if stride is None else TensorMeta(m.shape, tuple(stride), m.dtype)


def _lowered(name, inputs, outputs, attrs=None):
    return lower(OpCall.make(name, inputs, outputs, attrs), SPEC)


def _odd_values():
    """Fields equal as Python values but different as text (1 / 1.0 / True, 0.0 / -0.0), different as
    values but equal as text (inf / nan / None all print null), enums and their strings, patterns as
    scalar operands, tuples of coefficients, a semaphore set, a sync wait and a constant tensor."""
    p = Program("odd", meta={"note": "hand-written", "b": [1, 2]})
    x = p.tensor("x", (128, 64), "float32")
    p.tensor("c", (4,), "float32", "const", value=[1.0, -0.0, 2.5, 3.0])
    s = p.semaphore("s")
    q = p.queue("q", "input")
    t = sbuf(0, 128, (64,), "float32")
    col = sbuf(0, 128, (1,), "float32", offset=512)
    with p.origin("aten::odd"):
        p.add(Dma(queue=q, src=hbm(x, 128, 64, [(1, 64)], "float32"), dst=t, signals=((s, 1),)))
        for v in (1, 1.0, True, 0.0, -0.0, math.inf, -math.inf, math.nan, 2.5):
            p.add(Memset(out=t, value=v))
        for scale in (1, 1.0, col):
            p.add(Activation(func=Act.EXP, inp=t, out=t, scale=scale, bias=0.0, waits=((s, 1),)))
        p.add(Activation(func=Act.GELU, inp=t, out=t, accum_out=col))
        p.add(TensorScalar(inp=t, out=t, alu0=Alu.MULTIPLY, scalar0=2, alu1=Alu.ADD, scalar1=col))
        p.add(TensorScalar(inp=t, out=t, alu0=Alu.MULTIPLY, scalar0=2.0))
        p.add(TensorScalar(inp=t, out=t, alu0="multiply", scalar0=2.0))  # an enum's string
        p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, waits=((s, True),)))
        p.add(Iota(out=t, base=3, channel_multiplier=-1, coefs=(1, 2)))
        p.add(AffineSelect(inp=t, out=t, cmp=Alu.IS_LT, base=-5, coefs=(1,), fill=-math.inf))
        p.add(Random(out=t, dist="normal", a=0.0, b=1.0, seed=7))
        p.add(SemaphoreSet(sem=s, value=0))
        p.add(SemaphoreWait(waits=((s, 0),), signals=((s, 2),)))
        p.add(TensorCopy(inp=t, out=sbuf(0, 128, (64,), "bfloat16", offset=1024), on=Activation.ENGINE))
        # the same pattern with its offset as a float: an equal tuple, but other text
        p.add(TensorTensor(alu=Alu.ADD, in0=AP(Space.SBUF, t.dtype, 128, ((1, 64),), 0, 256.0), in1=t, out=t))
        p.add(TensorTensor(alu=Alu.ADD, in0=AP(Space.SBUF, t.dtype, 128, ((1, 64),), 0, 256), in1=t, out=t))
    return p


def _builder_program():
    p = Program("built")
    x = p.tensor("x", (512, 96), "float32")
    o = p.tensor("o", (512, 96), "float32", "output")
    kb = KernelBuilder(p, SPEC)
    qi, qo = kb.queue("qIn", "input"), kb.queue("qOut", "output")
    with p.origin("aten::mul"):
        for r in range(0, 512, 128):
            t = kb.tile(128, (96,), "float32")
            kb.dma(qi, hbm(x, 128, 96, [(1, 96)], "float32", offset=r * 96), t)
            kb.emit(TensorScalar(inp=t, out=t, alu0=Alu.MULTIPLY, scalar0=0.5))
            kb.dma(qo, t, hbm(o, 128, 96, [(1, 96)], "float32", offset=r * 96))
            kb.release(t)
    return p


PROGRAMS = {
    "matmul_bf16": lambda: matmul_program(640, 384, 1152, "bfloat16", spec=SPEC),
    "matmul_fp32": lambda: matmul_program(256, 256, 512, "float32", spec=SPEC),
    "broadcast_add": lambda: _lowered("aten::add.Tensor", [_meta(512, 768), _meta(512, 768, stride=(0, 1))],
                                      [_meta(512, 768)]),
    "softmax": lambda: _lowered("aten::_softmax", [_meta(300, 1000)], [_meta(300, 1000)],
                                {"dim": -1, "half_to_float": False}),
    "rms_norm": lambda: _lowered("aten::_fused_rms_norm", [_meta(256, 2048), _meta(2048)],
                                 [_meta(256, 2048), _meta(256, 1, dtype="float32")],
                                 {"normalized_shape": [2048], "eps": 1e-6}),
    "sum_rows": lambda: _lowered("aten::sum.dim_IntList", [_meta(384, 1000, dtype="float32")],
                                 [_meta(384, dtype="float32")], {"dim": [1], "keepdim": False}),
    "builder": _builder_program,
    "odd_values": _odd_values,
    "empty": lambda: Program("empty"),
}


def _same(p: Program) -> bytes:
    fast = encode_body(p)
    assert fast == _encode_body_reference(p)
    return fast


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fast_body_is_the_reference_body(name, fresh_caches):
    p = PROGRAMS[name]()
    assert neff._engine_streams(p) is not None  # the shapes path, not the fallback to the reference
    body = _same(p)
    assert _same(p) == body  # again, from the memoised shape texts
    assert p.content_hash == hashlib.sha256(body).digest()
    # the same Program with its list handed over whole
    q = Program(p.name, p.target, list(p.tensors), list(p.queues), list(p.semaphores), list(p.ops),
                list(p.instructions), dict(p.constants), dict(p.meta))
    assert q._index is None
    assert _same(q) == body


def test_compiled_graph_body_is_the_reference_body():
    torch = pytest.importorskip("torch")
    from torch._functorch.aot_autograd import aot_module_simplified

    from trnscope.compiler.graph import compile_graph

    graphs = []

    def fw(gm, example_inputs):
        graphs.append(gm)
        return gm

    def fn(a, w, b):
        return torch.softmax(torch.nn.functional.gelu(a @ w + b), dim=-1)

    args = (torch.randn(256, 128), torch.randn(128, 384), torch.randn(384))
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=fw))(*args)
    for epilogues in (True, False):
        prog = compile_graph(graphs[0], SPEC, epilogues=epilogues).program
        assert neff._engine_streams(prog) is not None
        _same(prog)


def test_decoded_neff_hashes_as_written():
    for p in (matmul_program(256, 128, 512, "float32", spec=SPEC), _odd_values()):
        q = neff.from_bytes(neff.to_bytes(p))
        assert q._hash == p.content_hash
        q._hash = None  # recompute from the decoded instructions
        assert q.content_hash == p.content_hash
        assert encode_body(q) == _encode_body_reference(q)


def test_list_edited_behind_the_program_is_indexed_again():
    p = _odd_values()
    body = _same(p)
    # an equal instruction whose scale prints differently: equal for the simulator, not for the hash
    i = next(k for k, ins in enumerate(p.instructions) if isinstance(ins, Activation) and ins.scale == 1
             and type(ins.scale) is float)
    p.instructions[i] = replace(p.instructions[i], scale=1)
    edited = _same(p)
    assert edited != body
    p.instructions.append(Memset(out=sbuf(0, 128, (64,), "float32"), value=-0.0, op=0))
    _same(p)
    del p.instructions[3:5]
    _same(p)
    p.instructions.reverse()
    _same(p)


def test_fields_the_shapes_cannot_key_take_the_reference_path():
    p = Program("lists")
    t = sbuf(0, 128, (64,), "float32")
    p.add(Iota(out=t, coefs=[1, 2]))  # a list: not hashable, so not indexed
    p.add(Iota(out=t, coefs=(1, 2)))
    assert p._index is None
    assert not p.shape_index().exact
    assert encode_body(p) == _encode_body_reference(p)


def test_unwritable_values_fail_as_the_reference_fails():
    np = pytest.importorskip("numpy")
    p = Program("np")
    p.add(Memset(out=sbuf(0, 128, (64,), "float32"), value=np.float64(1.5)))
    with pytest.raises(TypeError):
        _encode_body_reference(p)
    with pytest.raises(TypeError):
        encode_body(p)


def test_content_hash_of_a_pickled_program():
    p = _builder_program()
    q = pickle.loads(pickle.dumps(p))
    assert q._index is None  # pattern ids are per process: the copy indexes anew
    q._hash = None
    assert q.content_hash == p.content_hash
    q.add(LoadStationary(src=sbuf(0, 128, (128,), "bfloat16")))
    q.add(MultiplyMoving(moving=sbuf(0, 128, (512,), "bfloat16", offset=1024), dst=psum(0, 128, (512,))))
    _same(q)


def _fill_program(value) -> Program:
    p = Program("fill")
    x = p.tensor("x", (128, 64), "float32", "output")
    q = p.queue("q", "output")
    t = sbuf(0, 128, (64,), "float32")
    p.add(Memset(out=t, value=value))
    p.add(AffineSelect(inp=t, out=t, cmp=Alu.IS_LT, base=0, coefs=(1,), fill=value))
    p.add(Dma(queue=q, src=t, dst=hbm(x, 128, 64, [(1, 64)], "float32")))
    return p


def test_non_finite_values_have_their_own_hash_and_round_trip():
    """JSON writes NaN, +-inf and None alike (null): programs differing only there once shared a NEFF
    hash, so the NEFF cache could run one for the other."""
    values = (math.nan, math.inf, -math.inf, None, 0.0)
    progs = [_fill_program(v) for v in values]
    hashes = [p.content_hash for p in progs]
    assert len(set(hashes)) == len(values)
    for v, p in zip(values, progs):
        assert encode_body(p) == _encode_body_reference(p)
        back = neff.from_bytes(neff.to_bytes(p))
        got = [back.instructions[0].value, back.instructions[1].fill]
        if v is None:
            assert got == [None, None]
        elif math.isnan(v):
            assert all(math.isnan(g) for g in got)
        else:
            assert got == [v, v]
