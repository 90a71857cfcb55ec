"""The NKI RMSNorm in the case study (`trnscope demo`): one dispatch, numbers of torch.rms_norm, device time
close to the compiler's fused kernel and far below the six naive kernels."""

import pytest
import torch

import trnscope  # noqa: F401
from trnscope.cli.demo import measure, variants


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.usefixtures("one_physical_core")  # at LNC=2 the ATen kernel loads its weight once per core
def test_nki_rmsnorm_variant(dtype):
    impls = variants()
    assert "nki.rmsnorm" in impls
    x = torch.randn(512, 2048).to(dtype).to("neuron")
    w = torch.randn(2048).to(dtype).to("neuron")
    got = impls["nki.rmsnorm"](x, w)
    ref = torch.rms_norm(x.cpu().float(), (2048,), w.cpu().float(), 1e-6)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype is torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.cpu().float(), ref, **tol)
    nki = measure(impls["nki.rmsnorm"], x, w, calls=1)
    fused = measure(impls["torch.rms_norm"], x, w, calls=1)
    naive = measure(impls["naive"], x, w, calls=1)
    assert nki.dispatches == 1 and nki.hbm_bytes == pytest.approx(fused.hbm_bytes, rel=0.01)
    assert nki.device_ns == pytest.approx(fused.device_ns, rel=0.15)
    assert naive.device_ns > 2 * nki.device_ns
