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
# the sweep moves every tensor argument to the device; these two OpInfos need theirs where they were
HARNESS_LIMITS = {
    "tensor_split": "takes its index tensor on the CPU (CUDA fails the same way)",
    "as_strided.partial_views": "depends on the input's storage layout, which .to() compacts",
}


def _param(o):
    if o.full_name in HARNESS_LIMITS:
        return pytest.param(o, id=o.full_name, marks=pytest.mark.xfail(reason=HARNESS_LIMITS[o.full_name]))
    return pytest.param(o, id=o.full_name)


@pytest.mark.parametrize("opinfo", [_param(o) for o in OPS])
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
