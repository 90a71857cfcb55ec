"""PyTorch's OpInfo database on ``neuron`` vs CPU, per op, in float32 and bfloat16.

Each op's first samples run on both devices; results must match within the dtype's tolerance.
The share of ops served only by device kernels (no CPU fallback) is reported by
``python -m trnscope.device.opinfo_sweep`` (README, "OpInfo").
"""

import pytest
import torch

from trnscope.device.opinfo_sweep import ops_to_sweep, run_op

OPS = ops_to_sweep()
SAMPLES = 2


@pytest.mark.parametrize("opinfo", OPS, ids=[o.full_name for o in OPS])
def test_op_matches_cpu(opinfo):
    checked = 0
    for dtype in (torch.float32, torch.bfloat16):
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        res = run_op(opinfo, dtype, SAMPLES)
        if res.samples == 0:
            continue
        checked += 1
        assert res.ok, f"{res.op} {res.dtype}: {res.correct}/{res.samples} samples correct; {res.error}"
    if not checked:
        pytest.skip("no sample runs on CPU")
