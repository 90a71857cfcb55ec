"""A compiled graph's Program computes what the graph computes: run it in the interpreter."""

import numpy as np
import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import trnscope  # noqa: F401
from trnscope import hw, interp
from trnscope.compiler.graph import compile_graph
from trnscope.compiler.verify import span_array


def _compile_programs(fn, *args):
    programs = []

    def fw(gm, example_inputs):
        programs.append(compile_graph(gm, hw.TRN2, "graph"))
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=fw))(*args)
    return programs


def _run(compiled, args):
    feeds = {f"in{i}": span_array(a) for i, a in enumerate(args)}
    out = interp.run(compiled.program, feeds, spec=hw.TRN2)
    return [np.asarray(out[f"out{i}"]).astype(np.float32) for i in range(len(compiled.outputs))]


def naive_rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def gelu_mlp(x, w1, w2):
    return torch.nn.functional.gelu(x @ w1) @ w2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_rmsnorm_program_matches_eager(dtype):
    x, w = torch.randn(300, 200).to(dtype), torch.randn(200).to(dtype)
    (compiled,) = _compile_programs(naive_rms, x, w)
    assert compiled.kernels == 1 and compiled.fused_ops == 6
    (got,) = _run(compiled, (x, w))
    ref = naive_rms(x, w).float().numpy()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=tol, atol=tol)


def test_compiled_mlp_program_matches_eager():
    x, w1, w2 = torch.randn(64, 96), torch.randn(96, 160) / 10, torch.randn(160, 48) / 10
    (compiled,) = _compile_programs(gelu_mlp, x, w1, w2)
    (got,) = _run(compiled, (x, w1, w2))
    ref = gelu_mlp(x, w1, w2).numpy()
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
