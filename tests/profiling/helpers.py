"""Helpers for the profiling tests: one profiling run, trace-format checks, the tutorial module."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from trnscope.profiling import NeuronConfig, NeuronProfiler

REPO = Path(__file__).resolve().parents[2]
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
ROWS, HIDDEN = 8, 64


def load_tutorial():
    spec = importlib.util.spec_from_file_location("rmsnorm_tutorial", REPO / "examples" / "rmsnorm_tutorial.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def profile_once(fn, out_dir, modes=None, sync=True, warmup=2, export=True, **profile_kwargs):
    """Warm up ``fn``; profile one call (no schedule); export. Returns (prof, export dir, result)."""
    cfg = NeuronConfig(modes=modes, profile_output_dir=out_dir) if not isinstance(modes, NeuronConfig) else modes
    exporter = NeuronProfiler(cfg)
    for _ in range(warmup):
        fn()
    torch.neuron.synchronize()
    with profile(activities=ACTIVITIES, experimental_config=cfg,
                 on_trace_ready=exporter.export_trace if export else None, **profile_kwargs) as prof:
        result = fn()
        if sync:
            torch.neuron.synchronize()
    return prof, exporter.last_export, result


def load_json(path):
    with open(path, "rb") as f:
        return json.loads(f.read())


def check_trace_event_format(doc: dict) -> None:
    """The Chrome trace-event rules this project relies on (and viewers need)."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    starts, ends = {}, {}
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        assert ph is not None, e
        if ph == "X":
            for k in ("ts", "dur", "pid", "tid", "name"):
                assert k in e, (k, e)
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
            assert e["dur"] >= 0, e
        elif ph in ("s", "f"):
            assert "id" in e and "ts" in e and "pid" in e and "tid" in e, e
            key = (e.get("cat"), e["id"])
            (starts if ph == "s" else ends).setdefault(key, []).append(e)
            if ph == "f":
                assert e.get("bp") == "e", e
        elif ph == "C":
            assert "ts" in e and isinstance(e.get("args"), dict), e
        elif ph == "M":
            assert "name" in e and "args" in e, e
    assert set(starts) == set(ends), (set(starts) ^ set(ends))
    for key in starts:
        assert len(starts[key]) == 1 and len(ends[key]) == 1, key
        assert starts[key][0]["ts"] <= ends[key][0]["ts"] + 1e-3, key


def x_events(doc, cat=None, name=None):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)
            and (name is None or e.get("name") == name)]


