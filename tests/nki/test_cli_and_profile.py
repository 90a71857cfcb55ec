"""A kernel file run unchanged by `trnscope run` (import nki, torch_neuronx.nki_op), profiles for
`trnscope view`, and the two ISA semantics NKI added (two-input scan, six-value bn_stats)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import nki
    import nki.isa as nisa
    import nki.language as nl
    import torch
    from torch_neuronx import nki_op

    @nki.jit
    def double(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nki_op("script::double", mutates_args=())
    def double_op(x: torch.Tensor) -> torch.Tensor:
        return double(x)

    x = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64)
    y = double_op(x.to("neuron"))
    torch.neuron.synchronize()
    print("max err", float((y.cpu() - 2 * x).abs().max()), double.last_run.target)
''')


def test_trnscope_run_runs_an_nki_script_unchanged(tmp_path):
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    prof = tmp_path / "prof"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), TRNSCOPE_INSTANCE="trn1")
    res = subprocess.run([sys.executable, "-m", "trnscope.cli.main", "run", "--profile", str(prof), str(script)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "max err 0.0 trn1" in res.stdout
    from trnscope.profiling.ntff import read_ntff

    ntffs = list(prof.glob("*/*/*.ntff"))
    assert len(ntffs) == 1
    header, tables = read_ntff(ntffs[0])
    assert header["neff_name"] == "double"
    assert all("kernel_script.py:" in s for s in tables["instruction"].column("nki_source_location").to_pylist())


def test_save_profile_writes_a_directory_trnscope_view_opens(tmp_path):
    from trnscope.analysis.profile_dir import scan_profile_dir as scan_profile

    @nki.jit
    def neg(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.activation(t, nl.negative, t)
        nisa.dma_copy(out, t)
        return out

    x = np.random.rand(128, 256).astype(np.float32)
    np.testing.assert_allclose(neg(x), -x)
    where = neg.last_run.save_profile(tmp_path)
    files = scan_profile(where)
    assert files.complete and not files.problems(), files.problems()
    assert len(files.neffs) == 1 and len(files.ntffs) == 1


@nki.jit
def scan_kernel(a, b, init):
    """out[i] = out[i-1] * a[i] + b[i] with reverse0 (out[i-1] on the left), from a per-partition initial value."""
    p, n = a.shape
    ta, tb, ti = (nl.ndarray(s, nl.float32, buffer=nl.sbuf) for s in ((p, n), (p, n), (p, 1)))
    nisa.dma_copy(ta, a)
    nisa.dma_copy(tb, b)
    nisa.dma_copy(ti, init)
    h = nl.ndarray((p, n), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(h, ta, tb, ti, nl.multiply, nl.add, reverse0=True)
    st = nl.ndarray((p, 6), nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(st, ta[:, 0:min(n, 512)])
    out = nl.ndarray((p, n), nl.float32, buffer=nl.shared_hbm)
    stats = nl.ndarray((p, 6), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, h)
    nisa.dma_copy(stats, st)
    return out, stats


def test_two_input_scan_and_six_value_bn_stats():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 1.0, (64, 33)).astype(np.float32), rng.standard_normal((64, 33)).astype(np.float32)
    init = rng.standard_normal((64, 1)).astype(np.float32)
    out, stats = scan_kernel(a, b, init)
    h, ref = init[:, 0].copy(), np.empty_like(a)
    for i in range(a.shape[1]):
        h = h * a[:, i] + b[:, i]
        ref[:, i] = h
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    even, odd = a[:, 0::2], a[:, 1::2]
    want = np.stack([np.full(64, even.shape[1]), even.mean(1), even.var(1) * even.shape[1],
                     np.full(64, odd.shape[1]), odd.mean(1), odd.var(1) * odd.shape[1]], 1)
    np.testing.assert_allclose(stats, want, rtol=1e-4, atol=1e-5)
