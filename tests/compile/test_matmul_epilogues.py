"""Matmul epilogues in compiled graphs: element-wise chains, row reductions, softmax and layout copies
after a matmul run while its tiles leave PSUM. Each graph is compiled with and without epilogues;
both Programs run in the interpreter against eager PyTorch, and the fused one must move fewer HBM
bytes (simulator summary) through fewer scratch tensors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch._functorch.aot_autograd import aot_module_simplified

import trnscope  # noqa: F401
from trnscope import hw, interp
from trnscope.compiler.graph import compile_graph
from trnscope.compiler.verify import span_array
from trnscope.sim import simulate
from trnscope.sourceline import split_op_label

TOL = {torch.float32: 2e-4, torch.bfloat16: 4e-2}


def _graphs(fn, args):
    """The forward ATen graph of fn (AOTAutograd, as the neuron backend gets it) and the tensors its
    placeholders receive (Dynamo orders them by first use, not by fn's signature)."""
    graphs, fed = [], []

    def fw(gm, example_inputs):
        graphs.append(gm)

        def run(inputs):
            fed.append(list(inputs))
            return gm(*inputs)

        run._boxed_call = True
        return run

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=fw))(*args)
    assert len(graphs) == 1
    return graphs[0], fed[0]


def _run(compiled, args):
    feeds = {f"in{i}": span_array(a) for i, a in enumerate(args) if compiled.inputs[i] >= 0}
    out = interp.run(compiled.program, feeds, spec=hw.TRN2)
    return [np.asarray(out[f"out{i}"]).astype(np.float32) for i in range(len(compiled.outputs))]


def _traffic(compiled):
    s = simulate(compiled.program, hw.TRN2).summary
    scratch = sum(1 for t in compiled.program.tensors if t.kind == "scratch")
    return s["hbm_read_bytes"] + s["hbm_write_bytes"], scratch, s["total_time_ns"]


def check(fn, args, dtype, fewer_scratch=True):
    """Fused and unfused Programs both match eager; returns (fused, unfused) traffic figures."""
    gm, fed = _graphs(fn, args)
    ref = fn(*args)
    refs = ref if isinstance(ref, tuple) else (ref,)
    result = {}
    for fuse in (True, False):
        compiled = compile_graph(gm, hw.TRN2, "graph", epilogues=fuse)
        got = _run(compiled, fed)
        for g, r in zip(got, refs):
            tol = TOL[dtype]
            np.testing.assert_allclose(g.reshape(r.shape), r.float().numpy(), rtol=tol, atol=tol,
                                       err_msg=f"epilogues={fuse}")
        result[fuse] = (compiled, *_traffic(compiled))
    fused, unfused = result[True], result[False]
    assert fused[1] < unfused[1], f"HBM bytes fused {fused[1]} vs unfused {unfused[1]}"
    if fewer_scratch:
        assert fused[2] < unfused[2], f"scratch tensors fused {fused[2]} vs unfused {unfused[2]}"
    return fused, unfused


def _op_labels(compiled) -> set[str]:
    """The ops the instructions came from (labels carry the source line: ``aten::mm (x.py:3)``)."""
    prog = compiled.program
    return {split_op_label(prog.ops[i.op])[0] for i in prog.instructions if 0 <= i.op < len(prog.ops)}


def _bytes(*shapes, dtype):
    return sum(int(np.prod(s)) for s in shapes) * torch.tensor([], dtype=dtype).element_size()


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_mlp(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 80, 96).to(dtype)
    wg, wu = (torch.randn(200, 96) / 10).to(dtype), (torch.randn(200, 96) / 10).to(dtype)
    wd = (torch.randn(96, 200) / 10).to(dtype)

    def swiglu(x, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)

    fused, unfused = check(swiglu, (x, wg, wu, wd), dtype)
    # gate: silu leaves with the gate's evacuation; up: the product with silu leaves with the up's
    # evacuation; neither matmul output touches HBM: 4 intermediates of [160 x 200] fewer written and read
    saved = unfused[1] - fused[1]
    assert saved >= 2 * _bytes((160, 200), (160, 200), dtype=dtype)
    assert fused[0].kernels == 3


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_bias_gelu(dtype, approximate):
    torch.manual_seed(0)
    x, w, b = torch.randn(200, 64).to(dtype), (torch.randn(600, 64) / 8).to(dtype), torch.randn(600).to(dtype)

    def f(x, w, b):
        return F.gelu(F.linear(x, w, b), approximate=approximate)

    fused, unfused = check(f, (x, w, b), dtype)
    # the addmm's output is neither stored nor reloaded
    assert unfused[1] - fused[1] == 2 * _bytes((200, 600), dtype=dtype)
    assert fused[0].kernels == 1 and fused[2] == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_scores_scale_mask_softmax(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 96, 32).to(dtype) for _ in range(3))
    mask = torch.triu(torch.full((96, 96), -1e4), 1)[None, None].to(dtype)

    def attn(q, k, v, mask):
        s = q @ k.transpose(-1, -2) * 32 ** -0.5 + mask
        return torch.softmax(s, dim=-1) @ v

    fused, unfused = check(attn, (q, k, v, mask), dtype)
    # every instruction, fused into an epilogue or emitted by its eager kernel, names its line
    for compiled in (fused[0], unfused[0]):
        prog = compiled.program
        lines = {split_op_label(prog.ops[i.op])[1] for i in prog.instructions if 0 <= i.op < len(prog.ops)}
        assert lines and None not in lines and {line.file for line in lines} == {"test_matmul_epilogues.py"}, lines
    # the [2*4 x 96 x 96] scores never reach HBM: only the probabilities are stored (for the second bmm)
    assert unfused[1] - fused[1] >= 2 * 2 * _bytes((8, 96, 96), dtype=dtype)
    assert "aten::_softmax" in _op_labels(fused[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_add_then_rmsnorm(dtype):
    """o_proj + residual + RMSNorm: the residual sum and the normalised rows leave the matmul's epilogue."""
    torch.manual_seed(0)
    x, h = torch.randn(1, 300, 256).to(dtype), torch.randn(1, 300, 384).to(dtype)
    wo, g = (torch.randn(256, 384) / 16).to(dtype), torch.randn(256).to(dtype)

    def block(x, h, wo, g):
        r = x + F.linear(h, wo)
        n = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * g
        return r, n

    fused, unfused = check(block, (x, h, wo, g), dtype)
    assert fused[0].kernels == 1
    assert unfused[1] - fused[1] >= 2 * _bytes((300, 256), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_add_only(dtype):
    torch.manual_seed(0)
    x, h, wo = torch.randn(130, 512).to(dtype), torch.randn(130, 700).to(dtype), (torch.randn(512, 700) / 25).to(dtype)

    fused, unfused = check(lambda x, h, wo: x + h @ wo.t(), (x, h, wo), dtype)
    assert unfused[1] - fused[1] == 2 * _bytes((130, 512), dtype=dtype)


def test_cast_to_bf16_after_matmul():
    torch.manual_seed(0)
    x, w = torch.randn(160, 96), torch.randn(96, 1100) / 10

    fused, unfused = check(lambda x, w: (x @ w).to(torch.bfloat16), (x, w), torch.bfloat16)
    # the fp32 product is evacuated straight to bf16: 4 + 4 bytes per element less traffic
    assert unfused[1] - fused[1] == 2 * _bytes((160, 1100), dtype=torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_output_stored_in_its_transposed_layout(dtype):
    """(p @ v).transpose(1, 2).reshape(b, s, d): the bmm stores straight into the copy's layout."""
    torch.manual_seed(0)
    p, v = torch.softmax(torch.randn(1, 4, 160, 160), -1).to(dtype), torch.randn(1, 4, 160, 48).to(dtype)

    def merge(p, v):
        return (p @ v).transpose(1, 2).reshape(1, 160, 4 * 48)

    fused, unfused = check(merge, (p, v), dtype)
    assert fused[0].kernels == 1 and fused[2] == 0
    assert unfused[1] - fused[1] == 2 * _bytes((4, 160, 48), dtype=dtype)


def test_epilogue_operand_computed_after_the_matmul_is_not_fused():
    """An operand produced after the matmul cannot be read by its epilogue: that node stays unfused."""
    torch.manual_seed(0)
    x, w, y = torch.randn(64, 32), torch.randn(32, 48), torch.randn(64, 48)

    def f(x, w, y):
        return x @ w + torch.exp(y)

    gm, fed = _graphs(f, (x, w, y))
    compiled = compile_graph(gm, hw.TRN2)
    (got,) = _run(compiled, fed)
    np.testing.assert_allclose(got.reshape(64, 48), f(x, w, y).numpy(), rtol=1e-4, atol=1e-4)


def test_matmul_output_used_outside_and_inside_is_stored_once():
    torch.manual_seed(0)
    x, w = torch.randn(96, 64), torch.randn(64, 80)

    def f(x, w):
        y = x @ w
        return y, torch.tanh(y)

    # both values are graph outputs (no scratch either way); the fused Program does not reload y
    fused, unfused = check(f, (x, w), torch.float32, fewer_scratch=False)
    assert fused[0].kernels == 1
    assert unfused[1] - fused[1] == _bytes((96, 80), dtype=torch.float32)


def test_clone_of_a_fresh_value_is_not_copied():
    """clone() of a scratch value nobody else reads (dropout's clone in eval) costs no kernel."""
    x = torch.randn(64, 32)

    def f(x):
        return torch.exp(x).clone() * 2

    gm, fed = _graphs(f, (x,))
    compiled = compile_graph(gm, hw.TRN2)
    (got,) = _run(compiled, fed)
    np.testing.assert_allclose(got.reshape(64, 32), f(x).numpy(), rtol=1e-5, atol=1e-5)
    assert "aten::clone" not in _op_labels(compiled)
    assert compiled.kernels == 2


def test_wide_output_spans_several_column_blocks():
    """N = 2600 > one 2048-column block: the bias row is loaded per block, the relu runs per block."""
    torch.manual_seed(0)
    x, w, b = torch.randn(140, 64), torch.randn(64, 2600) / 8, torch.randn(2600)

    fused, unfused = check(lambda x, w, b: torch.relu(x @ w + b), (x, w, b), torch.float32)
    assert fused[0].kernels == 1


def test_addmm_alpha_beta_then_epilogue():
    torch.manual_seed(0)
    b, x, w = torch.randn(96, 72), torch.randn(96, 40), torch.randn(40, 72)

    fused, unfused = check(lambda b, x, w: torch.tanh(torch.addmm(b, x, w, beta=0.5, alpha=2.0)), (b, x, w),
                           torch.float32)
    assert fused[0].kernels == 1


def test_row_reduction_needs_the_whole_row_in_one_block():
    """A softmax over 2600 columns cannot run in an epilogue (rows span two blocks): it stays a
    kernel of its own, and the graph still computes the same values."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(32, 2600) / 4

    def f(x, w):
        return torch.softmax(x @ w * 0.5, dim=-1)

    gm, fed = _graphs(f, (x, w))
    compiled = compile_graph(gm, hw.TRN2)
    (got,) = _run(compiled, fed)
    np.testing.assert_allclose(got.reshape(64, 2600), f(x, w).numpy(), rtol=1e-4, atol=1e-6)
    assert "aten::_softmax" in _op_labels(compiled)
    assert compiled.kernels == 2  # mm with the scaling fused, then the softmax kernel
