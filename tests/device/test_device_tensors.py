"""Tensor semantics on ``neuron``: transfers, factories, dtypes, views and aliasing."""

import pytest
import torch

import trnscope.device  # noqa: F401
from trnscope.device import memory

pytestmark = pytest.mark.usefixtures("host_executor")

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool]


def _sample(dtype):
    base = torch.arange(-6, 6).reshape(3, 4)
    return (base % 2 == 0) if dtype == torch.bool else (base * 1.5).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(dtype):
    a = _sample(dtype)
    d = a.to("neuron")
    assert d.device.type == "neuron" and d.dtype == dtype and d.shape == a.shape
    back = d.cpu()
    assert back.device.type == "cpu" and back.dtype == dtype
    assert torch.equal(back, a)
    assert torch.equal(a.t().to("neuron").cpu(), a.t())  # non-contiguous source
    assert torch.equal(d.to(torch.float32).cpu(), a.to(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_factories(dtype):
    assert torch.equal(torch.zeros(2, 3, dtype=dtype, device="neuron").cpu(), torch.zeros(2, 3, dtype=dtype))
    assert torch.equal(torch.ones(5, dtype=dtype, device="neuron").cpu(), torch.ones(5, dtype=dtype))
    e = torch.empty(4, 2, dtype=dtype, device="neuron")
    assert e.shape == (4, 2) and e.dtype == dtype and e.is_contiguous()
    s = torch.empty_strided((2, 3), (1, 2), dtype=dtype, device="neuron")
    assert s.stride() == (1, 2)
    if dtype != torch.bool:
        assert torch.equal(torch.arange(7, dtype=dtype, device="neuron").cpu(), torch.arange(7, dtype=dtype))
        assert torch.equal(torch.full((3,), 2, dtype=dtype, device="neuron").cpu(), torch.full((3,), 2, dtype=dtype))
    assert torch.equal(torch.tensor([1, 0, 1], dtype=dtype, device="neuron").cpu(), torch.tensor([1, 0, 1], dtype=dtype))
    x = torch.ones(3, dtype=dtype, device="neuron")
    assert torch.zeros_like(x).device.type == "neuron"
    assert x.new_empty(2).device.type == "neuron"


def test_default_dtype_and_channels_last():
    assert torch.empty(2, device="neuron").dtype == torch.get_default_dtype()
    c = torch.empty(1, 3, 4, 4, device="neuron", memory_format=torch.channels_last)
    assert c.stride() == torch.empty(1, 3, 4, 4, memory_format=torch.channels_last).stride()
    x = torch.arange(48.0).reshape(1, 3, 4, 4)
    assert torch.equal(x.to("neuron", memory_format=torch.channels_last).cpu(), x)


def test_views_share_storage_and_see_writes():
    base = torch.arange(24.0).reshape(4, 6)
    x = base.to("neuron")
    v = x.view(6, 4)
    t = x.t()
    s = x[1:3, ::2]
    e = x[0:1].expand(3, 6)
    a = x.as_strided((2, 2), (1, 6), 1)
    r = x.reshape(24)
    for view in (v, t, s, e, a, r):
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert view._is_view() and view._base is x

    s.mul_(-1)  # write through a strided slice
    base[1:3, ::2] *= -1
    t[5, 0] = 100.0  # write through the transpose: x[0, 5]
    base[0, 5] = 100.0
    a.add_(1000)  # as_strided covers x[0,1], x[1,1], x[0,2], x[1,2]
    base.as_strided((2, 2), (1, 6), 1).add_(1000)
    for dev_view, cpu_view in (
        (x, base), (v, base.view(6, 4)), (t, base.t()), (s, base[1:3, ::2]),
        (e, base[0:1].expand(3, 6)), (a, base.as_strided((2, 2), (1, 6), 1)), (r, base.reshape(24)),
    ):
        assert dev_view.shape == cpu_view.shape and dev_view.stride() == cpu_view.stride()
        assert torch.equal(dev_view.cpu(), cpu_view)


def test_more_views():
    base = torch.arange(12.0)
    x = base.to("neuron")
    x.unfold(0, 4, 4)[1].zero_()
    base.unfold(0, 4, 4)[1].zero_()
    x.view(3, 4).select(1, 2).fill_(7)
    base.view(3, 4).select(1, 2).fill_(7)
    x.view(3, 4).diagonal().neg_()
    base.view(3, 4).diagonal().neg_()
    for part in x.chunk(3):
        part[0] = -1
    for part in base.chunk(3):
        part[0] = -1
    assert torch.equal(x.cpu(), base)
    assert torch.equal(x.view(torch.int32).cpu(), base.view(torch.int32))
    assert torch.equal(x.view(3, 4).permute(1, 0).contiguous().cpu(), base.view(3, 4).permute(1, 0).contiguous())
    c = torch.view_as_complex(x.view(6, 2))
    assert c.dtype == torch.complex64
    assert torch.equal(c.cpu(), torch.view_as_complex(base.view(6, 2)))
    assert [p.item() for p in x.unbind()] == base.tolist()


def test_host_view_is_zero_copy():
    x = torch.zeros(3, 4, device="neuron")
    h = memory.host_view(x.t())
    assert h.device.type == "cpu" and h.shape == (4, 3) and h.stride() == (1, 4)
    assert h.data_ptr() == x.data_ptr()
    h[1, 2] = 5.0
    assert x[2, 1].item() == 5.0


def test_copy_between_devices_and_dtypes():
    x = torch.arange(6.0).to("neuron")
    y = torch.empty(6, dtype=torch.int64, device="neuron")
    y.copy_(x)
    assert torch.equal(y.cpu(), torch.arange(6))
    c = torch.empty(6, dtype=torch.float16)
    c.copy_(x)
    assert torch.equal(c, torch.arange(6.0).half())
    x[::2].copy_(torch.tensor([9.0, 9.0, 9.0]))
    assert x.cpu().tolist() == [9, 1, 9, 3, 9, 5]
    assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert x.to("neuron") is x


def test_scalars_and_printing():
    x = torch.tensor([1.5, -2.0], device="neuron")
    assert x[0].item() == 1.5
    assert x.tolist() == [1.5, -2.0]
    assert bool(x[0] > 0)
    assert "device='neuron:0'" in repr(x)
    assert (x + torch.tensor(1.0)).cpu().tolist() == [2.5, -1.0]  # CPU 0-dim tensors mix, as on CUDA


def test_mixing_devices_is_an_error():
    x = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3)
    idx = torch.tensor([0, 2])  # CPU indices are accepted, as on CUDA
    assert x[idx].device.type == "neuron"


def test_data_dependent_and_multi_output_ops():
    x = torch.tensor([3, 1, 3, 2, 0], device="neuron")
    assert x.unique().cpu().tolist() == [0, 1, 2, 3]
    assert (x > 1).nonzero().cpu().flatten().tolist() == [0, 2, 3]
    v, i = x.sort()
    assert v.cpu().tolist() == [0, 1, 2, 3, 3] and i.device.type == "neuron"
    m = x.float().view(1, 5).max(dim=1)
    assert m.values.item() == 3 and m.indices.item() == 0
    assert x[x > 1].cpu().tolist() == [3, 3, 2]


def test_resize_and_set():
    x = torch.arange(4.0).to("neuron")
    x.resize_(2, 2)
    assert x.shape == (2, 2) and x.cpu().flatten().tolist() == [0, 1, 2, 3]
    x.resize_(3, 3)  # grows the storage, keeps the bytes
    assert x.shape == (3, 3) and x.flatten()[:4].cpu().tolist() == [0, 1, 2, 3]
    y = torch.empty(0, device="neuron").set_(x.untyped_storage(), 0, (2,), (1,))
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    z = torch.empty(0, device="neuron").set_(x)
    assert z.shape == x.shape
    with pytest.raises(RuntimeError, match="devices must match"):
        torch.empty(0, device="neuron").set_(torch.ones(3).untyped_storage())


def test_out_arguments_resize_like_cpu():
    x = torch.arange(6.0).to("neuron")
    out = torch.empty(0, device="neuron")
    r = torch.add(x, 1, out=out)
    assert r is out and out.shape == (6,) and out.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    out2 = torch.empty(8, device="neuron")
    torch.mul(x, 2, out=out2[:6])
    assert out2[:6].cpu().tolist() == [0, 2, 4, 6, 8, 10]
    assert torch.arange(100, device="neuron").sum().item() == 4950


def test_random_ops():
    torch.neuron.manual_seed(0)
    d = torch.nn.functional.dropout(torch.ones(1000, device="neuron"), 0.5)
    assert set(d.unique().cpu().tolist()) == {0.0, 2.0}
    assert sorted(torch.randperm(10, device="neuron").cpu().tolist()) == list(range(10))
    assert torch.multinomial(torch.ones(4, device="neuron"), 2).device.type == "neuron"
    u = torch.rand(1000, device="neuron")
    assert 0 <= u.min().item() and u.max().item() < 1


def test_untyped_storage_on_device():
    s = torch.UntypedStorage(16, device="neuron")
    assert s.device.type == "neuron" and s.nbytes() == 16
    s2 = torch.UntypedStorage([1, 2, 3], device="neuron")
    assert s2.cpu().tolist() == [1, 2, 3]
    x = torch.arange(3.0).to("neuron")
    assert torch.equal(torch.frombuffer(bytearray(x.untyped_storage().cpu()), dtype=torch.float32), torch.arange(3.0))


def test_non_blocking_copy_to_cpu():
    x = torch.arange(6.0).reshape(2, 3).to("neuron")
    y = x.t().to("cpu", non_blocking=True)  # no pinned host memory needed
    assert y.device.type == "cpu" and torch.equal(y, torch.arange(6.0).reshape(2, 3).t())
    assert y.stride() == (1, 3)  # preserve_format keeps the layout, as on CPU
    assert torch.ones(2).to("neuron", non_blocking=True).device.type == "neuron"


def test_scalars_wrapped_as_tensors_keep_cpu_semantics():
    """ATen wraps Python scalars as 0-dim "wrapped number" tensors inside composite ops; they reach
    the backend as numbers and must behave as on CPU (type promotion included)."""
    i = torch.arange(-5, 5)
    f = torch.linspace(-2, 2, 10, dtype=torch.bfloat16)
    di, df = i.to("neuron"), f.to("neuron")
    cases = [
        (lambda a, b: torch.remainder(a, 3), i, di),
        (lambda a, b: torch.remainder(a, 1.5), i, di),  # int tensor, float scalar: float32 result
        (lambda a, b: torch.fmod(a, 0.7), f, df),
        (lambda a, b: torch.pow(2, a), f, df),
        (lambda a, b: torch.where(a > 0, a, 0.1), f, df),
        (lambda a, b: a.eq(2), i, di),
        (lambda a, b: torch.take_along_dim(a, (a.abs() % 3).long()), i, di),
    ]
    for fn, cpu, dev in cases:
        want = fn(cpu, None)
        got = fn(dev, None)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_complex_conjugate_and_negative_bits():
    x = torch.randn(4, 3, dtype=torch.complex64)
    d = x.to("neuron")
    c = d.conj()
    assert c.is_conj()
    assert torch.equal(c.cpu(), x.conj())
    assert torch.equal((c * 2).cpu(), x.conj() * 2)
    assert c[1, 2].item() == x.conj()[1, 2].item()
    y = torch.empty_like(d)
    y.copy_(c)
    assert torch.equal(y.cpu(), x.conj().resolve_conj())
    assert torch.equal(torch._neg_view(d).cpu(), -x)
    torch.testing.assert_close(torch.fft.hfft(d).cpu(), torch.fft.hfft(x), rtol=0, atol=0)
