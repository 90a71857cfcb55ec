"""The target spec decides what the compiler emits, and every cache keys on the spec's content."""

from __future__ import annotations

import warnings

import pytest
import torch

from trnscope.compiler import lower
from trnscope.compiler.opcall import from_aten
from trnscope.hw import resolve
from trnscope.hw.spec import KiB
from trnscope.isa import validate
from trnscope.sim import simulate

from .helpers import aten, meta

TRN2 = resolve("trn2")


def _call(op, *args):
    out = op(*args)
    return from_aten(op, args, {}, tuple(o for o in (out if isinstance(out, tuple) else (out,))
                                        if isinstance(o, torch.Tensor)))


def test_an_edited_spec_in_the_same_process_gets_its_own_program():
    """trn2, then trn2 with 64 KiB of SBUF per partition: the lowering cache must not hand the first
    Program to the second spec (it would not fit, and the device would fall back to the CPU)."""
    small = TRN2.replace(sbuf_bytes_per_partition=64 * KiB)
    call = _call(aten.mm.default, meta(2048, 2048), meta(2048, 2048))
    big_prog = lower(call, TRN2)
    small_prog = lower(call, small)
    assert small_prog is not big_prog
    validate(small_prog, small)
    assert small_prog.meta["sbuf_peak_bytes"] <= 64 * KiB
    assert simulate(small_prog, small).total_ns > 0
    # and the other way round: the edited spec's Program is not served to trn2
    assert lower(call, TRN2) is big_prog


@pytest.mark.parametrize("case", ["sum0", "sum1", "add", "softmax", "layer_norm", "rms_norm", "cumsum"])
def test_kernels_tile_by_the_specs_partitions(case):
    """A what-if core with 64 partitions: every tile of these kernels spans at most 64 (tiling,
    reductions, norms and scans read ``spec.partitions``, not a constant)."""
    spec = TRN2.replace(partitions=64)
    x = meta(1024, 1024, dtype=torch.float32)
    call = {
        "sum0": lambda: _call(aten.sum.dim_IntList, x, [0]),
        "sum1": lambda: _call(aten.sum.dim_IntList, x, [1]),
        "add": lambda: _call(aten.add.Tensor, x, x),
        "softmax": lambda: _call(aten._softmax.default, x, -1, False),
        "layer_norm": lambda: _call(aten.native_layer_norm.default, x, [1024], meta(1024, dtype=torch.float32),
                                    meta(1024, dtype=torch.float32), 1e-5),
        "rms_norm": lambda: _call(aten.rms_norm.default, x, [1024], meta(1024, dtype=torch.float32), 1e-6),
        "cumsum": lambda: _call(aten.cumsum.default, x, 1),
    }[case]()
    prog = lower(call, spec)
    validate(prog, spec)
    widest = max(ap.partitions for ins in prog.instructions for ap in (*ins.reads(), *ins.writes())
                 if hasattr(ap, "space") and ap.space.value != "hbm")
    assert widest == 64
    assert lower(call, TRN2) is not prog


def test_device_runs_trn2_then_an_edited_trn2_without_fallback():
    from trnscope.hw import get_spec, set_instance

    before = get_spec()
    try:
        set_instance("trn2")
        a = torch.ones(512, 512, device="neuron")
        first = (a @ a).cpu()
        set_instance(TRN2.replace(sbuf_bytes_per_partition=64 * KiB))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a validation warning or a CPU fallback fails the test
            second = (a @ a).cpu()
        assert torch.equal(first, second)
    finally:
        set_instance(before)
