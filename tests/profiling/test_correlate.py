"""The classification shared by key_averages() and the exported traces, on synthetic events."""

from trnscope.profiling.correlate import MARKER_PREFIX, SPAN_NAME, SPAN_PREFIX, classify


def run(events, **kw):
    """events: (name, start, end, python?) on one thread."""
    names = [e[0] for e in events]
    return classify([1] * len(events), [e[1] for e in events], [e[2] for e in events], names,
                    [len(e) > 3 and e[3] for e in events], **kw)


def test_span_contents_are_dropped_and_the_marker_names_its_op():
    c = run([
        ("aten::mul", 0, 100),
        (SPAN_NAME, 10, 90),
        ("aten::empty", 20, 30),          # host view of the emulator
        ("aten::mul", 35, 40),            # the numerics on the host
        (MARKER_PREFIX + "42", 80, 81),
    ])
    assert c.keep == [True, False, False, False, False]
    assert c.dispatcher == {42: 0}
    assert c.internal == 3


def test_structured_op_is_folded_into_the_functional_op():
    c = run([
        ("aten::pow", 0, 100),
        ("aten::result_type", 1, 2),
        ("aten::empty", 5, 20), (SPAN_NAME, 6, 19),
        ("aten::pow", 30, 90), (SPAN_NAME, 31, 89), (MARKER_PREFIX + "7", 80, 81),
    ])
    assert [i for i, k in enumerate(c.keep) if k] == [0, 1]
    assert c.dispatcher == {7: 0} and c.folded == 2
    assert c.parent[1] == 0


def test_no_fold_for_plain_nesting():
    # aten::to -> aten::_to_copy -> aten::copy_ keeps its shape
    c = run([("aten::to", 0, 100), ("aten::_to_copy", 1, 99), ("aten::copy_", 2, 98), (SPAN_NAME, 3, 97),
             (MARKER_PREFIX + "1", 90, 91)])
    assert c.keep == [True, True, True, False, False]
    assert c.dispatcher == {1: 2}


def test_python_frames():
    c = run([
        ("trnscope/cli/run_cmd.py(10): main", 0, 1000, True),     # `trnscope run`: user code below
        ("train.py(3): <module>", 1, 999, True),
        ("aten::mul", 10, 100),
        ("trnscope/device/kernels.py(37): _fallback", 11, 99, True),
        ("trnscope/device/dispatch.py(88): execute", 12, 98, True),
        ("trnscope/device/neuron.py(97): synchronize", 200, 300, True),   # user calls torch.neuron.*
        ("trnscope/device/dispatch.py(150): synchronize", 201, 299, True),
    ])
    assert c.keep == [True, True, True, False, False, True, False]


def test_machinery_names_and_cuts():
    c = run([("aten::rms_norm", 0, 100), ("_RMSNorm", 1, 99), (SPAN_NAME, 2, 98), (MARKER_PREFIX + "3", 50, 51),
             ("aten::add", 200, 210)],
            machinery=frozenset({"_RMSNorm"}), in_cut=lambda s, e: s >= 200)
    assert c.keep == [True, False, False, False, False]
    assert c.dispatcher == {3: 0}


def test_numbered_span_links_its_executions_to_the_op():
    """Executions made inside span n (span_seqs: seq -> n) belong to the op around the span,
    through a structured fold too; an execution whose span was not recorded stays unlinked."""
    c = run([
        ("aten::pow", 0, 100),
        ("aten::empty", 5, 20), (SPAN_PREFIX + "3", 6, 19),
        ("aten::pow", 30, 90), (SPAN_PREFIX + "4", 31, 89),
        ("aten::mul", 40, 45),            # the numerics on the host, inside the span
        ("aten::add", 200, 300), (SPAN_PREFIX + "5", 210, 290),
    ], span_seqs={11: 4, 12: 4, 13: 5, 14: 99})
    assert [i for i, k in enumerate(c.keep) if k] == [0, 6]
    assert c.dispatcher == {11: 0, 12: 0, 13: 6}
    assert c.folded == 2 and c.internal == 4


def test_marker_wins_over_span_for_the_same_execution():
    c = run([("aten::a", 0, 50), (SPAN_PREFIX + "1", 1, 49), ("aten::b", 60, 100), (MARKER_PREFIX + "7", 70, 71)],
            span_seqs={7: 1})
    assert c.dispatcher == {7: 2}
