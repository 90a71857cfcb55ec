"""The examples of examples/nki against PyTorch, in fp32 and bf16, on CPU tensors (the interpreter runs the
kernel's Program), and what their runs report (simulated time, MFU/MBU, per-line cost)."""

import math

import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
DTYPES = [torch.float32, torch.bfloat16]


def close(got, ref, dtype, **kw):
    tol = dict(TOL[dtype], **kw)
    torch.testing.assert_close(got.float(), ref.float(), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_add(examples, dtype):
    a, b = torch.randn(300, 1100).to(dtype), torch.randn(300, 1100).to(dtype)
    got = examples.tensor_add.tensor_add(a, b)
    assert got.dtype == dtype and got.shape == a.shape
    close(got, a.float() + b.float(), dtype)
    run = examples.tensor_add.tensor_add.last_run
    assert run.total_ns > 0 and run.bottleneck == "dma/hbm" and 0 < run.mbu <= 100


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm(examples, dtype):
    x, w = torch.randn(200, 512).to(dtype), torch.randn(512).to(dtype)
    got = examples.rmsnorm.rmsnorm(x, w)
    close(got, torch.rms_norm(x.float(), (512,), w.float(), 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm(examples, dtype):
    x = torch.randn(150, 1000).to(dtype)
    g, b = torch.randn(1000).to(dtype), torch.randn(1000).to(dtype)
    got = examples.layernorm.layernorm(x, g, b)
    close(got, F.layer_norm(x.float(), (1000,), g.float(), b.float(), 1e-5), dtype, atol=3e-2 if dtype is
          torch.bfloat16 else 1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(examples, dtype):
    x = torch.randn(260, 700).to(dtype) * 3
    close(examples.softmax.softmax(x), torch.softmax(x.float(), -1), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention(examples, dtype, causal):
    s, d = 512, 64
    q, k, v = (torch.randn(s, d).to(dtype) for _ in range(3))
    got = examples.attention.attention_fwd(q.T.contiguous(), k.T.contiguous(), v, scale=1 / math.sqrt(d),
                                           causal=causal)
    ref = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None], is_causal=causal)[0]
    close(got, ref, dtype, atol=3e-2 if dtype is torch.bfloat16 else 1e-4)
    run = examples.attention.attention_fwd.last_run
    assert run.mfu > 0 and set(run.engines()) >= {"tensor", "vector", "scalar", "dma"}
    assert (run.engines()["gpsimd"] > 0) == causal  # affine_select masks the diagonal blocks


@pytest.mark.parametrize("dtype", DTYPES)
def test_mamba_selective_scan(examples, dtype):
    g = torch.Generator().manual_seed(0)
    batch, chans, seq, states = 2, 160, 64, 4
    delta = (torch.rand(batch, chans, seq, generator=g) * 0.1 + 0.01).to(dtype)
    u = torch.randn(batch, chans, seq, generator=g).to(dtype)
    A = -(torch.rand(chans, states, generator=g) * 1.5 + 0.5)
    B = torch.randn(batch, states, seq, generator=g).to(dtype)
    C = torch.randn(batch, states, seq, generator=g).to(dtype)
    got = examples.mamba.selective_scan(delta, u, A, B, C)
    # PyTorch reference: the recurrence step by step in float64
    d64, u64, b64, c64 = (t.double() for t in (delta, u, B, C))
    h = torch.zeros(batch, chans, states, dtype=torch.float64)
    ys = []
    for t in range(seq):
        h = torch.exp(d64[:, :, t, None] * A.double()) * h + (d64[:, :, t] * u64[:, :, t])[..., None] * b64[:, None, :, t]
        ys.append((h * c64[:, None, :, t]).sum(-1))
    close(got, torch.stack(ys, -1), dtype, atol=5e-2 if dtype is torch.bfloat16 else 1e-4)
    ops = {type(i).__name__ for i in examples.mamba.selective_scan.last_run.program.instructions}
    assert "TensorScan" in ops


def test_run_report_ties_instructions_to_source_lines(examples):
    a, b = torch.randn(256, 1024), torch.randn(256, 1024)
    examples.tensor_add.tensor_add(a, b)
    run = examples.tensor_add.tensor_add.last_run
    rows = run.by_source()
    assert {r["location"].split(":")[0] for r in rows} == {"tensor_add.py"}
    assert sum(r["instructions"] for r in rows) == run.instruction_count
    meta = run.program.meta["nki"]
    assert len(meta["instruction_location"]) == run.instruction_count
    assert "tensor_add.py:" in run.describe()


def test_example_profile_ties_every_instruction_to_its_line(examples, tmp_path):
    from trnscope.profiling.ntff import read_ntff

    x, w = torch.randn(256, 1024), torch.randn(1024)
    examples.rmsnorm.rmsnorm(x, w)
    where = examples.rmsnorm.rmsnorm.last_run.save_profile(tmp_path)
    (ntff,) = where.glob("*.ntff")
    _, tables = read_ntff(ntff)
    lines = tables["instruction"].column("nki_source_location").to_pylist()
    assert lines and all(s.startswith("rmsnorm.py:") for s in lines)
    assert {s.split()[0] for s in lines} == {r["location"] for r in examples.rmsnorm.rmsnorm.last_run.by_source()}
