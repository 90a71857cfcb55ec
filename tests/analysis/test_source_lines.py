"""Device time per source line: the spelling of a line (trnscope.sourceline), a Kineto trace's
Python frames and backward pairing on a synthetic trace, and a real profile (eager ops, a compiled
graph and an NKI kernel, forward and backward) whose rows name the script's exact lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from synthetic import HOST_PID, KinetoBuilder

from trnscope import sourceline
from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.source_lines import BACKWARD, BACKWARD_CALL, CALL, FRAME, GRAPH, NKI, UNKNOWN, split_by_line
from trnscope.sourceline import SourceLine

US = 1000


def test_the_spelling_of_a_line_round_trips():
    line = SourceLine("pkg/model.py", 12, "forward")
    assert str(line) == "pkg/model.py:12 (forward)" and sourceline.parse(str(line)) == line
    assert sourceline.parse("model.py:7") == SourceLine("model.py", 7)
    assert sourceline.parse("not a line") is None and sourceline.parse(None) is None
    label = sourceline.op_label("aten::mul.Tensor", line)
    assert label == "aten::mul.Tensor (pkg/model.py:12)"
    assert sourceline.split_op_label(label) == ("aten::mul.Tensor", SourceLine("pkg/model.py", 12))
    assert sourceline.split_op_label("aten::mm") == ("aten::mm", None)
    assert sourceline.split_op_label("aten::clone (no line)") == ("aten::clone (no line)", None)
    assert sourceline.op_label("aten::mm", "") == "aten::mm"
    assert sourceline.parse_frame("model.py(36): forward") == SourceLine("model.py", 36, "forward")
    assert sourceline.parse_frame("<built-in method add of Tensor object at 0x1>") is None


@pytest.mark.parametrize("file, library", [
    ("model.py", False), ("mypkg/layers.py", False), ("torch/nn/modules/linear.py", True),
    ("trnscope/device/dispatch.py", True), ("contextlib.py", True), ("logging/__init__.py", True),
    ("/usr/lib/python3/dist-packages/foo.py", True), ("/x/site-packages/transformers/a.py", True), ("<string>", True),
])
def test_library_frames(file, library):
    assert sourceline.is_library(file) is library


def test_the_users_frame_is_the_innermost_outside_libraries():
    def inner():
        import contextlib

        with contextlib.nullcontext():
            return sourceline.user_line(sys._getframe())

    line = inner()
    assert line is not None and line.function == "inner" and line.file.endswith("test_source_lines.py")
    assert sourceline.display_path(__file__).endswith("test_source_lines.py")
    assert sourceline.display_path("<string>") == "<string>"


def _trace(tmp_path: Path) -> Path:
    """The user's forward at model.py(10) -> a library frame -> aten::mm launching ``mm_fwd``;
    autograd's thread runs MmBackward0 (Sequence number 5, the forward op's) launching ``mm_bwd``;
    a kernel launched outside any frame has no line."""
    b = KinetoBuilder()
    b.op("model.py(10): forward", 0, 100, cat="python_function")
    b.op("torch/nn/modules/linear.py(125): forward", 5, 90, cat="python_function")
    b.op("aten::mm", 10, 50, args={"Sequence number": 5, "Fwd thread id": 0})
    b.kernel("mm_fwd", 200, 40, launch=20)
    b.op("aten::add", 400, 20)
    b.kernel("add", 500, 10, launch=405)
    bwd = 200
    b.events += [
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": bwd, "args": {"name": "autograd"}},
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": HOST_PID,
         "tid": bwd, "ts": 600, "dur": 100, "args": {"Sequence number": 5, "Fwd thread id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": HOST_PID, "tid": bwd, "ts": 610, "dur": 60},
    ]
    c = b.kernel("mm_bwd", 700, 80)
    b.events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": HOST_PID, "tid": bwd, "ts": 620,
         "dur": 2, "args": {"correlation": c}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": HOST_PID, "tid": bwd, "ts": 620},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": 0, "tid": 7, "ts": 700, "bp": "e"},
    ]
    return b.write(tmp_path / "lines.pt.trace.json")


def test_a_kineto_trace_gives_functions_and_backward_lines(tmp_path):
    a = ProfileAnalysis(load_profile(_trace(tmp_path)))
    t = a.source_lines
    rows = {(r.line, r.backward): r for r in t.rows}
    forward = rows[("model.py:10 (forward)", False)]
    assert forward.origin == FRAME and forward.device_ns == 40 * US and forward.ops[0]["op"] == "aten::mm"
    backward = rows[("model.py:10 (forward)", True)]
    assert backward.origin == BACKWARD and backward.device_ns == 80 * US
    assert rows[(UNKNOWN, False)].device_ns == 10 * US and rows[(UNKNOWN, False)].origin == ""
    assert t.rows[-1].line == UNKNOWN  # last, whatever its time
    assert sum(r.device_ns for r in t.rows) == t.device_total_ns == 130 * US
    assert t.frames and not t.recorded and (t.with_line, t.executions) == (2, 3)


def test_a_neff_split_over_its_lines_adds_up():
    table = {"framework_op": ["aten::mul.Tensor (m.py:3)", "aten::add.Tensor (m.py:4)", "aten::clone", "k"],
             "nki_source_location": ["", "", "", "k.py:9 (kernel)"],
             "start_ns": [0, 10, 20, 30], "end_ns": [10, 20, 25, 60]}
    parts = {(str(line) if line else None, op, origin): f for line, op, origin, f in split_by_line(table)}
    assert parts == pytest.approx({("m.py:3", "aten::mul.Tensor", GRAPH): 10 / 55, ("m.py:4", "aten::add.Tensor", GRAPH): 10 / 55,
                                   (None, None, None): 5 / 55, ("k.py:9 (kernel)", "k", NKI): 30 / 55})
    assert split_by_line({"framework_op": ["aten::mm"], "start_ns": [0], "end_ns": [5]}) == []


def test_a_recorded_profile_names_the_scripts_lines(lines_profile):
    path, marks = lines_profile
    a = ProfileAnalysis(load_profile(path))
    t = a.source_lines
    assert t.recorded and t.with_line == t.executions > 10, (t.with_line, t.executions)
    assert sum(r.device_ns for r in t.rows) == pytest.approx(t.device_total_ns)
    rows = {(r.number, r.backward, r.origin): r for r in t.rows if r.file == "lines_model.py"}
    # eager: the exact line of the call (Kineto's frames only say the function's first line)
    eager = rows[(marks["eager"], False, CALL)]
    assert {o["op"] for o in eager.ops} == {"aten::addmm", "aten::gelu"} and eager.function == "step"
    # its backward: the same line, from autograd's thread
    assert {o["op"] for o in rows[(marks["eager"], True, BACKWARD)].ops} >= {"aten::mm", "aten::gelu_backward"}
    # the compiled graph: its members' line, called from the function dynamo compiled
    graph = rows[(marks["graph"], False, GRAPH)]
    assert {"aten::rsqrt", "aten::mean.dim"} <= {o["op"] for o in graph.ops}
    assert graph.callers and all(c.startswith("lines_model.py:") for c in graph.callers)
    assert (marks["graph"], True, GRAPH) in rows  # the backward graph's instructions keep the line
    # the NKI kernel: one row per ISA call's line, called from the custom op
    for name in ("nki_load", "nki_add", "nki_store"):
        row = rows[(marks[name], False, NKI)]
        assert row.function == "double" and row.callers == [f"lines_model.py:{marks['nki_call']} (double_op)"], row
    # gradient accumulation into the parameters pairs with no forward op: the backward() line
    # (mean's backward pairs with the mean on that line: one row for the line's backward)
    accumulate = [i for i, o in enumerate(a.execution_lines.origins) if o == BACKWARD_CALL]
    assert len(accumulate) == 2 and {a.ops.launch_ops[i] for i in accumulate} == {"aten::add.Tensor"}
    assert all(a.execution_lines.lines[i].line == marks["loss"] for i in accumulate)
    assert {o["op"] for o in rows[(marks["loss"], True, BACKWARD)].ops} == {"aten::add.Tensor", "aten::div.Tensor"}
    assert all(r.line != UNKNOWN for r in t.rows)
