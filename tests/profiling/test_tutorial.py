"""The RMSNorm tutorial's claims, on small shapes: naive = many ops, each its own kernel; rms_norm =
one op, one kernel; the fused kernel takes less device time; key_averages shows NEURON columns."""

import pytest
import torch
from torch.autograd import DeviceType

NAIVE_OPS = {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"}


@pytest.fixture(scope="module")
def profiles(tutorial, xw, tmp_path_factory):
    x, w = xw
    out = tmp_path_factory.mktemp("tutorial")
    naive, naive_dir = tutorial.profile_variant(tutorial.naive_rms_norm, x, w, out, warmup_iters=2, active=1)
    fused, fused_dir = tutorial.profile_variant(tutorial.fused_rms_norm, x, w, out, warmup_iters=2, active=1)
    return {"naive": (naive, naive_dir), "fused": (fused, fused_dir)}


def _op_events_with_kernels(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.kernels]


def test_naive_is_six_aten_ops_each_with_its_own_kernel(profiles):
    prof, _ = profiles["naive"]
    ops = _op_events_with_kernels(prof)
    assert len(ops) >= 6
    assert all(len(e.kernels) == 1 for e in ops)
    assert {e.name for e in ops} == NAIVE_OPS
    assert all(e.name.startswith("aten::") for e in ops)
    device_rows = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    assert len(device_rows) == len(ops)
    # each op's own kernel: the kernel names differ per op call (one NEFF per op and shape)
    assert len({e.kernels[0].name for e in ops}) == len(ops)


def test_rms_norm_is_one_op_one_kernel(profiles):
    prof, _ = profiles["fused"]
    ops = _op_events_with_kernels(prof)
    assert [e.name for e in ops] == ["aten::rms_norm"]
    assert len(ops[0].kernels) == 1
    assert len([e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]) == 1
    # no emulator machinery is left in the events
    assert not any(e.name.startswith("trnscope::") or e.name == "_RMSNorm" for e in prof.events())


def test_naive_takes_more_device_time_than_fused(tutorial, profiles):
    naive = tutorial.device_time_us(profiles["naive"][0])
    fused = tutorial.device_time_us(profiles["fused"][0])
    assert naive > fused > 0


def test_table_has_neuron_columns_sorted_by_device_time(profiles):
    prof, _ = profiles["naive"]
    table = prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=20)
    header = table.splitlines()[1]
    assert "Self NEURON" in header and "NEURON total" in header and "Self CPU" in header
    assert "Self NEURON time total:" in table
    avgs = [e for e in prof.key_averages() if e.key in NAIVE_OPS]
    assert {e.key for e in avgs} == NAIVE_OPS
    for e in avgs:
        assert e.self_device_time_total > 0 and e.cpu_time_total > 0
        # structured ops are folded: the outer op carries its kernel, once per call
        assert e.device_time_total == pytest.approx(e.self_device_time_total)
    mul = next(e for e in avgs if e.key == "aten::mul")
    assert mul.count == 2


def test_compiled_variant_is_one_neff(tutorial, xw, tmp_path):
    if not tutorial.compile_available():
        pytest.skip("torch.compile(backend='neuron') not available")
    x, w = xw
    fn = torch.compile(tutorial.naive_rms_norm, backend="neuron", fullgraph=True)
    prof, where = tutorial.profile_variant(fn, x, w, tmp_path, warmup_iters=2, active=1)
    rows = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    assert len(rows) == 1
    ops = _op_events_with_kernels(prof)
    assert len(ops) == 1 and not ops[0].name.startswith("aten::")
    assert len(list(where.glob("*.ntff"))) == 1
