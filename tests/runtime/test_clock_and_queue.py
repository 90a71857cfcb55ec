"""The emulated clock and a NeuronCore's queue, on both implementations: the Python ones
(runtime/clock.py, runtime/queue.py) and, where the device's C++ core is loaded, its C++ twins
(device/csrc/runtime.cpp), which must do the same arithmetic."""

import random
import time

import pytest

from trnscope import hw
from trnscope.compiler import OpCall, TensorMeta
from trnscope.runtime import MODELLED, REAL, EmulatedClock, NativeClock, NeuronCoreRuntime
from trnscope.runtime.queue import KernelQueue

try:
    import torch  # noqa: F401  (the C++ core needs torch)

    from trnscope.device._core import CORE
except ImportError:  # pragma: no cover - torch-free checkout
    CORE = None

IMPLS = ["python"] + (["cpp"] if CORE is not None else [])


@pytest.fixture(params=IMPLS)
def Clock(request):
    """A clock factory of each implementation (``Clock(mode="real")``)."""
    if request.param == "python":
        return EmulatedClock
    return lambda mode=REAL: NativeClock(CORE, mode)


def _queue(impl: str, launch: int):
    return KernelQueue(0, launch) if impl == "python" else CORE.Queue(0, launch, 1 << 30)


def test_emulator_work_does_not_advance_the_clock(Clock):
    c = Clock()
    c.hold()
    t0 = c.now()
    with c.emulation():
        time.sleep(0.02)
    assert c.now() - t0 < 5_000_000  # the 20 ms of "emulation" are cut out
    assert c.in_cut(c.cuts[-1][0] + 1)


def test_wait_until_advances_emulated_time_without_sleeping(Clock):
    c = Clock()
    target = c.now() + 50_000_000
    real0 = time.perf_counter()
    waited = c.wait_until(target)
    assert time.perf_counter() - real0 < 0.01
    assert waited > 49_000_000 and c.now() >= target
    assert c.wait_until(target) == 0  # already there


def test_real_timestamps_map_onto_emulated_time(Clock):
    c = Clock()
    c.hold()
    before = time.perf_counter_ns()
    with c.emulation():
        inside = time.perf_counter_ns()
        time.sleep(0.01)
    after = time.perf_counter_ns()
    # inside the cut, emulated time stands still at the cut's start
    assert c.to_emulated(inside) == c.to_emulated(c.cuts[-1][0])
    # across the cut, emulated time advanced by (after - before) minus the cut
    cut = c.cuts[-1][1] - c.cuts[-1][0]
    assert c.to_emulated(after) - c.to_emulated(before) == pytest.approx((after - before) - cut, abs=1000)


def _work(c, n: int) -> None:
    for _ in range(n):
        with c.emulation():
            pass
        c.wait_until(c.now() + 10)


def test_history_does_not_grow_without_a_hold(Clock):
    """Every op enters a cut: outside a hold (no profiler recording) the clock keeps a bounded
    history however long the loop runs, and its time still advances correctly."""
    c = Clock()
    _work(c, 10)
    size = (len(c.cuts), c.segments)
    _work(c, 5000)
    assert (len(c.cuts), c.segments) == size and c.segments <= 2
    t0 = c.now()
    with c.emulation():
        time.sleep(0.01)
    assert c.now() - t0 < 5_000_000  # cuts still come off
    assert c.wait_until(c.now() + 50_000_000) > 49_000_000  # waits still go on


def test_held_history_maps_exactly_after_the_hold(Clock):
    """Timestamps taken inside a hold map after it ends exactly as they did during it, however
    much unheld work (cuts, waits) follows."""
    c = Clock()
    _work(c, 100)
    c.hold()
    stamps = []
    for _ in range(50):
        stamps.append(time.perf_counter_ns())
        with c.emulation():
            inside = time.perf_counter_ns()
        stamps.append(inside)
        c.wait_until(c.now() + 1000)
    stamps.append(time.perf_counter_ns())
    during = [c.to_emulated(t) for t in stamps]
    in_cut = [c.in_cut(t) for t in stamps]
    c.release()
    held = (len(c.cuts), c.segments)
    _work(c, 2000)
    assert len(c.cuts) == held[0] and c.segments <= held[1] + 1
    assert [c.to_emulated(t) for t in stamps] == during
    assert [c.in_cut(t) for t in stamps] == in_cut and any(in_cut) and not all(in_cut)


def test_a_hold_without_work_keeps_the_mapping_of_its_stretch(Clock):
    """A hold in which nothing cut or waited still maps through the entry in force at its start."""
    c = Clock()
    _work(c, 3)
    c.hold()
    t = time.perf_counter_ns()
    before = c.to_emulated(t)
    c.release()
    _work(c, 3)
    assert c.to_emulated(t) == before


@pytest.fixture(params=IMPLS)
def _rt(request):
    # modelled host time: the host advances only by the modelled costs, so whether work is still in
    # flight when a test looks does not depend on how fast this machine runs the test
    def make():
        if request.param == "python":
            rt = NeuronCoreRuntime(0, EmulatedClock(MODELLED), hw.TRN2)
        else:
            rt = NeuronCoreRuntime(0, NativeClock(CORE, MODELLED), hw.TRN2,
                                   _queue("cpp", int(hw.TRN2.neff_launch_latency_ns)))
        rt.recording = True
        return rt

    return make


def test_execution_is_asynchronous_and_starts_after_launch_latency(_rt):
    rt = _rt()
    x = TensorMeta.contiguous((4096, 4096), "float32")  # 370 us a kernel: far more than the host's dispatch cost
    call = OpCall.make("aten::exp", (x,), (x,))
    for _ in range(4):
        rt.execute(call)
    a, b, c, d = rt.records
    assert a.device_start_ns >= a.host_end_ns + hw.TRN2.neff_launch_latency_ns - 1_000_000
    # back-to-back (the host ran ahead): each still pays the per-NEFF start overhead on the device
    start = int(hw.TRN2.neff_launch_latency_ns)
    assert b.device_start_ns == a.device_end_ns + start and d.device_start_ns == c.device_end_ns + start
    assert d.host_end_ns < d.device_end_ns  # the host returned before the device finished
    assert rt.in_flight()
    rt.synchronize()
    assert not rt.in_flight()
    stats = rt.stats()
    assert (stats["neffs_executed"], stats["cache_hits"], stats["dispatches"]) == (1, 3, 4)
    # compiled by the first call, or found in this process's or this test session's NEFF cache
    assert stats["neffs_compiled"] + stats["neffs_loaded"] <= 1
    assert b.compile_ns == c.compile_ns == d.compile_ns == 0 and (a.compile_ns > 0) == (stats["neffs_compiled"] == 1)


def test_device_time_grows_with_size_host_time_does_not(_rt):
    rt = _rt()
    small = TensorMeta.contiguous((1024,), "float32")
    large = TensorMeta.contiguous((4096, 4096), "float32")
    for meta in (small, large):
        rt.execute(OpCall.make("aten::exp", (meta,), (meta,)))  # warm the NEFF cache
    rt.records.clear()

    def heavy_numerics():
        time.sleep(0.005)  # stands in for computing a big tensor on the host

    for meta in (small, large) * 3:
        rt.execute(OpCall.make("aten::exp", (meta,), (meta,)), heavy_numerics)
    small_recs, large_recs = rt.records[0::2], rt.records[1::2]
    dev_small = min(r.device_end_ns - r.device_start_ns for r in small_recs)
    dev_large = min(r.device_end_ns - r.device_start_ns for r in large_recs)
    assert dev_large > 50 * dev_small
    host_small = min(r.host_end_ns - r.host_start_ns for r in small_recs)
    host_large = min(r.host_end_ns - r.host_start_ns for r in large_recs)
    assert host_large < 1_000_000 and host_small < 1_000_000  # the 5 ms of numerics are not host time


def test_host_to_device_copy_blocks_and_orders_after_kernels(_rt):
    rt = _rt()
    x = TensorMeta.contiguous((2048, 2048), "float32")
    rt.execute(OpCall.make("aten::exp", (x,), (x,)))
    rt.copy("d2h", 16 * 2**20)
    k, cp = rt.records
    assert cp.device_start_ns >= k.device_end_ns
    expected = hw.TRN2.host_transfer_fixed_ns + 16 * 2**20 / hw.TRN2.host_device_bytes_per_s * 1e9
    assert cp.device_end_ns - cp.device_start_ns == pytest.approx(expected, rel=1e-6)
    assert rt.clock.now() >= cp.device_end_ns


def _replay(clock, queue, seed: int) -> list:
    """A random program of clock and queue calls (modelled mode: no real time reaches the clock);
    everything the calls return, in order."""
    rng = random.Random(seed)
    out = []
    depth = holds = 0
    for _ in range(600):
        step = rng.randrange(10)
        if step == 0:
            out.append(clock.advance(rng.randrange(-5, 50_000)))
        elif step == 1:
            out.append(clock.wait_until(clock.now() + rng.randrange(-1000, 100_000)))
        elif step == 2 and depth < 3:
            clock.emulation().__enter__()
            depth += 1
        elif step == 3 and depth:
            clock.emulation().__exit__(None, None, None)
            depth -= 1
        elif step == 4:
            clock.hold()
            holds += 1
        elif step == 5 and holds:
            clock.release()
            holds -= 1
        elif step == 6:
            out.append(queue.submit(getattr(clock, "native", clock), rng.randrange(4), rng.randrange(1, 90_000),
                                    rng.choice((0, 0, 1_000_000))))
        elif step == 7:
            queue.current_stream = rng.randrange(3)
            out.append(queue.enqueue(clock.now() + rng.randrange(10_000), rng.randrange(50_000), rng.randrange(2) * 20_000))
        elif step == 8:
            queue.stream_wait(rng.randrange(3), clock.now() + rng.randrange(-10_000, 200_000))
            out.append(queue.stream_done(rng.randrange(3)))
        else:
            queue.order_after(clock.now() + rng.randrange(-50_000, 50_000))
        out.append((clock.now(), queue.device_free_ns, clock.held, clock.waited_ns, len(clock.waits)))
    out.append(tuple(queue.stats()))
    return out


@pytest.mark.skipif(CORE is None, reason="the C++ core is not loaded")
@pytest.mark.parametrize("seed", range(4))
def test_the_cpp_clock_and_queue_do_the_python_arithmetic(seed):
    """The same program of calls gives the same answers, value for value, on both implementations."""
    py = _replay(EmulatedClock(MODELLED), _queue("python", 20_000), seed)
    cpp = _replay(NativeClock(CORE, MODELLED), _queue("cpp", 20_000), seed)
    assert [tuple(x) if isinstance(x, (list, tuple)) else x for x in cpp] == \
        [tuple(x) if isinstance(x, (list, tuple)) else x for x in py]
