"""Several NeuronCores as ``neuron:0`` .. ``neuron:N-1``, torch.accelerator, pinned memory."""

import threading
import warnings

import pytest
import torch

from trnscope import hw, runtime
from trnscope.device import memory


@pytest.fixture(autouse=True)
def _quiet_and_restore():
    """Eight cores to work with: trn2 at LNC=1 (its default LNC=2 shows four)."""
    warnings.simplefilter("ignore")
    hw.set_instance("trn2", 1)
    yield
    torch.neuron.set_device(0)
    hw.set_instance("trn2")


def test_device_count_is_the_cores_per_chip_of_the_instance():
    assert torch.neuron.device_count() == torch.accelerator.device_count() == hw.TRN2.cores_per_chip == 8
    hw.set_instance("trn2")  # the default LNC=2: one device per pair of physical cores
    assert torch.neuron.device_count() == torch.accelerator.device_count() == 4
    with pytest.raises(RuntimeError, match="Invalid device neuron:4.*trn2.*4 NeuronCore"):
        torch.empty(1, device="neuron:4")
    hw.set_instance("trn1")
    assert torch.neuron.device_count() == torch.accelerator.device_count() == 2
    with pytest.raises(RuntimeError, match="Invalid device neuron:2.*trn1.*2 NeuronCore"):
        torch.empty(1, device="neuron:2")
    with pytest.raises(ValueError, match="NeuronCore 5 does not exist"):
        runtime.core(5)


def test_tensors_live_on_the_core_asked_for():
    x = torch.randn(4, 5)
    y = x.to("neuron:1")
    assert y.device == torch.device("neuron", 1)
    assert (y * 2).device == torch.device("neuron", 1)
    assert torch.equal((y * 2).cpu(), x * 2)
    assert torch.ones(3, device="neuron:3").device.index == 3
    assert y[1:, ::2].device.index == 1  # views keep the core


def test_current_device_is_per_thread_and_used_by_factories_and_to():
    torch.neuron.set_device(2)
    assert torch.neuron.current_device() == torch.accelerator.current_device_index() == 2
    assert torch.empty(2, device="neuron").device.index == 2
    assert torch.randn(3).to("neuron").device.index == 2
    assert torch.randn(3).neuron().device.index == 2
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.neuron.current_device()))
    t.start()
    t.join()
    assert seen == [0]
    with torch.accelerator.device_index(5):
        assert torch.zeros(1, device="neuron").device.index == 5
    assert torch.neuron.current_device() == 2


def test_ops_across_cores_raise_like_cuda():
    a = torch.ones(3, 3, device="neuron:0")
    b = torch.ones(3, 3, device="neuron:1")
    for fn in (lambda: a + b, lambda: torch.mm(a, b), lambda: torch.cat([a, b])):
        with pytest.raises(RuntimeError, match="same device.*neuron:[01] and neuron:[01]"):
            fn()


def test_copies_between_cores_are_exact_and_ordered_on_both_queues():
    x = torch.randn(64, 64)
    src = x.to("neuron:1")
    big = torch.randn(1024, 1024, device="neuron:0")
    big = big @ big  # keeps core 0 busy
    r0, r1 = runtime.core(0), runtime.core(1)
    r1.recording = True
    r1.records.clear()
    try:
        dst = src.to("neuron:0")
        assert dst.device.index == 0 and torch.equal(dst.cpu(), x)
        assert torch.equal(src.t().to("neuron:0").cpu(), x.t())  # strided
        kernels = [r for r in r1.records if r.kind == "kernel"]
    finally:
        r1.recording = False
    assert kernels and kernels[0].op == "aten::_copy_from"
    assert kernels[0].device_start_ns >= r0.device_free_ns - (r0.device_free_ns - kernels[0].device_start_ns)
    # the copy waited for core 0's matmul, and core 0's later work waits for the copy
    assert r0.device_free_ns >= kernels[-1].device_end_ns


def test_memory_is_accounted_per_core_against_one_cores_hbm():
    before0, before1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = torch.empty(1 << 16, dtype=torch.uint8, device="neuron:1")
    assert torch.neuron.memory_allocated(1) == before1 + (1 << 16)
    assert torch.neuron.memory_allocated(0) == before0
    assert torch.accelerator.memory_allocated(1) == before1 + (1 << 16)
    assert torch.neuron.mem_get_info(1)[1] == hw.TRN2.hbm_bytes_per_core
    del t
    assert torch.neuron.memory_allocated(1) == before1


def test_each_core_has_its_own_queue():
    a = torch.randn(512, 512, device="neuron:0")
    b = torch.randn(512, 512, device="neuron:4")
    torch.neuron.synchronize(0)
    torch.neuron.synchronize(4)
    free4 = runtime.core(4).device_free_ns
    for _ in range(3):
        a = a @ a
    assert runtime.core(4).device_free_ns == free4  # work on core 0 does not occupy core 4
    assert runtime.core(0).device_free_ns > free4
    del b


def test_backward_on_another_core():
    w = torch.randn(4, 4, device="neuron:1", requires_grad=True)
    x = torch.randn(4, 4)
    (w @ x.to("neuron:1")).sum().backward()
    assert w.grad.device.index == 1
    torch.testing.assert_close(w.grad.cpu(), x.sum(1).expand(4, 4))
    assert torch._C._is_multithreading_enabled()  # restored after the backward pass


def test_rng_is_per_core_and_seeded_by_torch_manual_seed():
    torch.manual_seed(7)
    a = torch.randn(5, device="neuron:1").cpu()
    torch.manual_seed(7)
    assert torch.equal(a, torch.randn(5))
    assert len(torch.neuron.get_rng_state_all()) == torch.neuron.device_count()
    torch.neuron.set_device(1)
    torch.neuron.manual_seed(3)  # the current core only
    s0 = torch.neuron.get_rng_state(0)
    torch.randn(5, device="neuron:1")
    assert torch.equal(torch.neuron.get_rng_state(0), s0)


def test_torch_accelerator_synchronize_streams_and_memory():
    acc = torch.accelerator
    assert acc.current_accelerator() == torch.device("neuron")
    x = torch.randn(2048, 2048, device="neuron:0")
    x @ x
    assert runtime.core(0).in_flight()
    acc.synchronize()
    assert not runtime.core(0).in_flight()
    acc.synchronize("neuron:3")
    assert acc.current_stream(3).device_index == 3
    acc.empty_cache()
    acc.reset_peak_memory_stats(0)
    base = acc.memory_allocated(0)
    y = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
    assert acc.memory_allocated() == base + (1 << 20) == acc.max_memory_allocated()
    assert acc.memory_stats()["allocated_bytes.all.current"] == base + (1 << 20)
    del y
    assert acc.memory_reserved() == acc.memory_allocated() + memory.cached_bytes(0)
    acc.empty_cache()
    assert acc.memory_reserved() == acc.memory_allocated()
    free, total = acc.get_memory_info(0)
    assert total == hw.TRN2.hbm_bytes_per_core and free == total - acc.memory_allocated(0)


def test_pinned_memory():
    t = torch.randn(16)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and torch.equal(p, t) and p.data_ptr() != t.data_ptr()
    assert torch.empty(8, pin_memory=True).is_pinned()
    z = torch.zeros(2, 3, pin_memory=True)
    assert z.is_pinned() and torch.equal(z, torch.zeros(2, 3))
    assert not torch.zeros(2, device="neuron").is_pinned()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        torch.zeros(2, device="neuron").pin_memory()
    n = memory.pinned_stats()["count"]
    del p, z
    assert memory.pinned_stats()["count"] <= n - 2


def test_non_blocking_copies_from_pinned_memory_do_not_make_the_host_wait():
    rt = runtime.core(0)
    pinned = torch.randn(1 << 20).pin_memory()
    plain = torch.randn(1 << 20)
    rt.recording = True
    rt.records.clear()
    try:
        a = pinned.to("neuron", non_blocking=True)
        b = plain.to("neuron", non_blocking=True)  # not pinned: synchronous, as on CUDA
        back = a.to("cpu", non_blocking=True)
    finally:
        rt.recording = False
    h2d = [r for r in rt.records if r.kind == "h2d"]
    d2h = [r for r in rt.records if r.kind == "d2h"]
    assert h2d[0].host_end_ns < h2d[0].device_end_ns  # queued
    assert h2d[1].host_end_ns >= h2d[1].device_end_ns  # waited for
    assert d2h[0].host_end_ns < d2h[0].device_end_ns and back.is_pinned()
    torch.neuron.synchronize()
    assert torch.equal(a.cpu(), pinned) and torch.equal(b.cpu(), plain) and torch.equal(back, pinned)
