"""The Markdown report the sweep writes (docs/opinfo-report.md) from its JSON results."""

from trnscope.device.opinfo_sweep import OpResult, markdown, summarize


def test_report_counts_fallbacks_and_says_why():
    results = [
        OpResult("abs", "float32", samples=3, correct=3, kernels=3),
        OpResult("pinverse", "float32", samples=3, correct=3, kernels=9, fallbacks=2,
                 fallback_ops=["aten::mul.Tensor"],
                 fallback_reasons={"aten::mul.Tensor": "dtype torch.float64 has no NeuronCore equivalent"}),
        OpResult("sort", "float32", samples=3, correct=2, fallbacks=3, fallback_ops=["aten::sort.stable"],
                 error="AssertionError: boom"),
    ]
    from dataclasses import asdict

    report = {"summary": summarize(results), "results": [asdict(r) for r in results], "torch": "x",
              "seconds": 1.0, "samples": 3}
    text = markdown(report, 0)
    assert "| float32 | 3 | 2 (66.7%) | 1 (33.3%) |" in text
    assert "- float32: sort: AssertionError: boom" in text
    assert "| `aten::mul.Tensor` | 1 | float64/complex dtype |" in text
    assert "| `aten::sort.stable` | 1 | no neuron kernel |" in text
    assert "--samples 3" in text
