from __future__ import annotations

import numpy as np

from trnscope.trace.timeunits import (
    float_us_loses_ns,
    ns_to_us_text,
    parse_ns_values,
    rewrite_ts_as_ns,
    us_to_ns,
)
from trnscope.trace.track_kinds import classify
from trnscope.trace.tracks import TrackKind


def test_microseconds_to_nanoseconds_is_exact():
    assert us_to_ns([1, 2, 3]).tolist() == [1000, 2000, 3000]
    assert us_to_ns([2413669097444.592, 0.001, -1.5, 7]).tolist() == [2413669097444592, 1, -1500, 7000]
    assert us_to_ns([1712195495406752]).tolist() == [1712195495406752000]


def test_float_precision_check():
    assert not float_us_loses_ns([1, 2])
    assert not float_us_loses_ns([2413669097444.592])
    assert float_us_loses_ns([1712195495406752.8])
    assert not float_us_loses_ns([1712195495406752.0])


def test_text_rewrite_keeps_every_nanosecond():
    text = b'{"ts": 1712195495406752.797, "dur": 1.5, "x": {"ts":12.3}, "ts" : 7, "ts": 1e3, "ts": -2.05}'
    assert rewrite_ts_as_ns(text) == (
        b'{"ts": 1712195495406752797, "dur": 1.5, "x": {"ts":12300}, "ts" : 7000, "ts": 1e3, "ts": -2050}'
    )
    assert parse_ns_values([1712195495406752797, 1e3]).tolist() == [1712195495406752797, 1000000]


def test_nanoseconds_to_microsecond_text():
    assert [ns_to_us_text(v) for v in (0, 1000, 1500, -1500, 1712195495406752797, 7)] == [
        b"0", b"1", b"1.500", b"-1.500", b"1712195495406752.797", b"0.007",
    ]
    assert np.asarray([1]).dtype.kind == "i"


def test_track_kinds():
    common = dict(pid=1, tid=2, thread_name="", process_name="", process_labels="", device_fraction=0.0)
    assert classify(is_counter=False, **common) is TrackKind.CPU_THREAD
    assert classify(is_counter=True, **common) is TrackKind.COUNTER
    assert classify(is_counter=False, **{**common, "process_labels": "GPU 0"}) is TrackKind.GPU_STREAM
    assert classify(is_counter=False, **{**common, "device_fraction": 1.0}) is TrackKind.GPU_STREAM
    neuron = {**common, "process_labels": "NeuronCore 0", "thread_name": "TensorE"}
    assert classify(is_counter=False, **neuron) is TrackKind.DEVICE_QUEUE
    assert classify(is_counter=False, **{**common, "pid": "Spans", "tid": "PyTorch Profiler"}) is TrackKind.OTHER
