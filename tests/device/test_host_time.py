"""On the neuron device, the host-side time of an op does not grow with tensor size; its device time does."""

import torch

import trnscope  # noqa: F401
from trnscope import runtime


def _per_op(x, reps=5):
    rt = runtime.core(0)
    y = x * 2  # warm: NEFF compiled, buffers cached
    del y
    torch.neuron.synchronize()
    rt.records.clear()
    rt.recording = True
    start = runtime.CLOCK.now()
    try:
        for _ in range(reps):
            y = x * 2
            del y
        host = (runtime.CLOCK.now() - start) / reps
        torch.neuron.synchronize()
    finally:
        rt.recording = False
    kernels = [r for r in rt.records if r.kind == "kernel"]
    rt.records.clear()
    device = sum(r.device_end_ns - r.device_start_ns for r in kernels) / len(kernels)
    return host, device


def test_host_time_flat_device_time_grows():
    small_host, small_dev = _per_op(torch.randn(1024, device="neuron"))
    large_host, large_dev = _per_op(torch.randn(4096, 4096, device="neuron"))  # 16M elements
    assert large_dev > 50 * small_dev
    # the 64 MiB op computes for tens of ms on the host; none of that is host time
    assert large_host < 3 * small_host + 200_000
