"""Device memory accounting, capacity and out-of-memory behaviour."""

import gc
import re

import pytest
import torch

import trnscope.device  # noqa: F401
from trnscope import hw
from trnscope.device import dispatch, memory

pytestmark = pytest.mark.usefixtures("host_executor")


def test_allocations_and_frees_are_counted():
    gc.collect()
    base = torch.neuron.memory_allocated()
    stats0 = torch.neuron.memory_stats()
    x = torch.empty(1000, device="neuron")  # 4000 bytes
    assert torch.neuron.memory_allocated() == base + 4000
    y = torch.empty(10, 10, dtype=torch.float16, device="neuron")
    assert torch.neuron.memory_allocated() == base + 4200
    v = x[10:20]  # a view allocates nothing
    assert torch.neuron.memory_allocated() == base + 4200
    del x
    assert torch.neuron.memory_allocated() == base + 4200  # the view keeps the storage alive
    del v
    assert torch.neuron.memory_allocated() == base + 200
    del y
    assert torch.neuron.memory_allocated() == base
    stats = torch.neuron.memory_stats()
    assert stats["allocation.all.allocated"] - stats0["allocation.all.allocated"] == 2
    assert stats["allocation.all.freed"] - stats0["allocation.all.freed"] == 2
    assert stats["allocated_bytes.all.allocated"] - stats0["allocated_bytes.all.allocated"] == 4200
    # freed buffers stay cached for reuse (reserved >= allocated) until empty_cache() returns them
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()


def test_results_of_ops_are_device_allocations():
    a = torch.ones(256, device="neuron")
    before = torch.neuron.memory_allocated()
    b = a * 2  # structured op: allocated, then computed in place
    c = torch.cat([a, b])  # fresh host result adopted without a copy
    u = a.unique()  # data-dependent size
    assert torch.neuron.memory_allocated() == before + 1024 + 2048 + u.untyped_storage().nbytes()
    del b, c, u
    assert torch.neuron.memory_allocated() == before


def test_peak_and_reset():
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    assert torch.neuron.max_memory_allocated() == base
    x = torch.empty(1 << 18, dtype=torch.uint8, device="neuron")
    del x
    assert torch.neuron.max_memory_allocated() == base + (1 << 18)
    # reserved = allocated + freed buffers cached for reuse: the freed 256 KiB stays reserved
    assert torch.neuron.memory_reserved() == base + (1 << 18)
    assert torch.neuron.max_memory_reserved() == base + (1 << 18)
    y = torch.empty(1 << 18, dtype=torch.uint8, device="neuron")  # reuses the cached buffer
    assert torch.neuron.max_memory_reserved() == base + (1 << 18)
    del y
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base
    torch.neuron.empty_cache()


def test_capacity_is_the_hbm_of_one_neuroncore():
    free, total = torch.neuron.mem_get_info()
    assert total == hw.get_spec().hbm_bytes_per_core == memory.capacity()
    assert free == total - torch.neuron.memory_allocated()
    hw.set_instance("trn1")
    assert torch.neuron.mem_get_info()[1] == hw.TRN1.hbm_bytes_per_core
    assert torch.neuron.memory_stats()["capacity_bytes"] == hw.TRN1.hbm_bytes_per_core


def test_out_of_memory_names_requested_and_free_bytes_and_device_stays_usable():
    total = memory.capacity()
    free = total - torch.neuron.memory_allocated()
    ooms = torch.neuron.memory_stats()["num_ooms"]
    request = total + 4
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(request, dtype=torch.uint8, device="neuron")
    msg = str(info.value)
    assert f"({request} bytes)" in msg and f"({free} bytes) is free" in msg and "neuron:0" in msg
    assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
    assert torch.neuron.memory_allocated() == total - free
    x = torch.arange(4.0, device="neuron")
    assert (x * 2).cpu().tolist() == [0, 2, 4, 6]


def test_cumulative_out_of_memory(small_capacity):
    keep = [torch.empty(256 * 1024, dtype=torch.uint8, device="neuron") for _ in range(3)]
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 512\.00 KiB \(524288 bytes\)"):
        torch.empty(512 * 1024, dtype=torch.uint8, device="neuron")
    free = small_capacity - torch.neuron.memory_allocated()
    assert free == 256 * 1024
    del keep[0]
    y = torch.empty(512 * 1024, dtype=torch.uint8, device="neuron")  # fits after a free
    assert y.numel() == 512 * 1024


def test_out_of_memory_inside_an_op_and_in_backward(small_capacity):
    x = torch.ones(32 * 1024, device="neuron", requires_grad=True)  # 128 KiB
    with pytest.raises(torch.OutOfMemoryError):
        torch.cat([x] * 8)  # a 1 MiB result cannot fit next to x
    loss = (x * x).sum()
    hog = torch.empty(small_capacity - torch.neuron.memory_allocated() - 64 * 1024,
                      dtype=torch.uint8, device="neuron")  # leaves 64 KiB: too little for a gradient
    with pytest.raises(torch.OutOfMemoryError):  # raised on autograd's device thread
        loss.backward()
    del hog
    (x * x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((32 * 1024,), 2.0))


def test_error_raised_while_temporaries_die_keeps_its_type():
    """A kernel failing after its output was allocated: the output dies while the exception
    unwinds through C++; the exception must arrive intact and the memory return."""

    class Boom(dispatch.HostExecutor):
        def execute(self, call):
            result = super().execute(call)
            if call.name == "aten::mul.Tensor":
                raise ValueError("boom")
            return result

    a = torch.ones(1000, device="neuron")
    a * 3  # the first call of a signature takes the plain path; the second allocates first
    before = torch.neuron.memory_allocated()
    old = dispatch.set_executor(Boom())
    try:
        for _ in range(2):
            with pytest.raises(ValueError, match="boom"):
                a * 3  # the output is allocated and computed, then the executor raises
    finally:
        dispatch.set_executor(old)
    assert torch.neuron.memory_allocated() == before


def test_live_blocks_snapshot():
    x = torch.empty(333, dtype=torch.uint8, device="neuron")
    blocks = memory.live_blocks(0)
    assert (x.untyped_storage().data_ptr(), 333, 0) in blocks
    assert re.match(r"\d", str(len(blocks)))


def test_the_buffer_cache_holds_no_more_than_it_can_serve():
    """Freed buffers are reused at their exact size only: the cache keeps at most the memory in use
    (or its floor) and lets the buffers cached longest ago go, so a program that moves on to other
    shapes does not keep the old shapes' buffers."""
    torch.neuron.empty_cache()
    gc.collect()
    mib = 1 << 20
    keep = torch.empty(8 * mib, dtype=torch.uint8, device="neuron")
    for size in range(1, 40):  # 39 distinct sizes, each freed at once: 780 MiB if all were kept
        torch.empty(size * mib, dtype=torch.uint8, device="neuron")
    budget = max(memory.POOL_FLOOR, torch.neuron.memory_allocated())
    assert memory.cached_bytes(0) <= budget
    assert memory.cached_bytes(0) >= 35 * mib  # the most recent sizes are still there
    assert memory._take_pooled(39 * mib, 0) is not None and memory._take_pooled(1 * mib, 0) is None
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated() + memory.cached_bytes(0)
    del keep
    torch.neuron.empty_cache()
    assert memory.cached_bytes(0) == 0
