"""Run PyTorch's OpInfo database on ``neuron`` against CPU: which ops are correct, and which ran as
real device kernels rather than CPU fallbacks. ``python -m trnscope.device.opinfo_sweep --out F``
writes the full report; the tests run the same check per op.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.utils._pytree import tree_map

import trnscope  # noqa: F401  (registers neuron)
from trnscope import runtime
from trnscope.compiler import precision

from .runtime_bridge import EXECUTOR

# ops whose results are random by design: compared by shape and dtype only
RANDOM_OPS = {"bernoulli", "normal", "multinomial", "rand_like", "randn_like", "randint_like", "uniform",
              "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
              "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
              "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
              "torch.empty_like"}
SAMPLES_PER_OP = 4
TOLERANCE = {torch.float32: dict(rtol=1.3e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@dataclass
class OpResult:
    op: str
    dtype: str
    samples: int = 0
    correct: int = 0
    kernels: int = 0
    fallbacks: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    # op -> why it fell back ("no neuron kernel", or the reason its kernel declined this call)
    fallback_reasons: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.samples > 0 and self.correct == self.samples

    @property
    def lowered(self) -> bool:
        return self.samples > 0 and self.fallbacks == 0


def _to(device):
    def move(x):
        if isinstance(x, torch.Tensor):
            y = x.detach().to(device)
            return y.requires_grad_(x.requires_grad) if x.is_leaf and x.dtype.is_floating_point else y
        return x
    return move


def _compare(actual, expected, dtype, random_op: bool) -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"expected a tensor, got {type(actual).__name__}")
        actual = actual.cpu()
        if random_op:
            assert actual.shape == expected.shape and actual.dtype == expected.dtype
            return
        tol = TOLERANCE.get(expected.dtype, {}) if expected.dtype.is_floating_point else dict(rtol=0, atol=0)
        torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, check_stride=False, **tol)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _compare(a, e, dtype, random_op)
    elif isinstance(expected, (int, float, bool)):
        assert actual == expected or (isinstance(expected, float) and abs(actual - expected) <= 1e-4 * max(1, abs(expected)))


def run_op(opinfo, dtype: torch.dtype, samples: int = SAMPLES_PER_OP) -> OpResult:
    res = OpResult(opinfo.full_name if hasattr(opinfo, "full_name") else opinfo.name, str(dtype).replace("torch.", ""))
    core = runtime.core(0)
    random_op = opinfo.name in RANDOM_OPS or opinfo.full_name in RANDOM_OPS
    try:
        sample_iter = opinfo.sample_inputs("cpu", dtype, requires_grad=False)
        for i, sample in enumerate(sample_iter):
            if i >= samples:
                break
            args = (sample.input, *sample.args)
            try:
                with torch.no_grad():
                    expected = opinfo(*args, **sample.kwargs)
            except Exception:
                continue  # the sample itself is invalid on CPU
            res.samples += 1
            dev_args = tree_map(_to("neuron"), args)
            dev_kwargs = tree_map(_to("neuron"), dict(sample.kwargs))
            before = dict(EXECUTOR.fallbacks)
            core.recording = True
            core.records.clear()
            try:
                # correctness at the dtype's own precision: FP32 matmuls are not auto-cast to BF16
                with warnings.catch_warnings(), torch.no_grad(), precision.auto_cast("none"):
                    warnings.simplefilter("ignore")
                    actual = opinfo(*dev_args, **dev_kwargs)
                    _compare(actual, expected, dtype, random_op)
                res.correct += 1
            except Exception as exc:  # a wrong result or a crash on neuron
                if not res.error:
                    res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            finally:
                core.recording = False
                res.kernels += sum(1 for r in core.records if r.kind == "kernel")
                for r in core.records:
                    if r.kind == "fallback" and r.op not in res.fallback_reasons:
                        res.fallback_reasons[r.op] = r.neff_name or "no neuron kernel"
                core.records.clear()
            for name, n in EXECUTOR.fallbacks.items():
                if n > before.get(name, 0):
                    res.fallbacks += n - before.get(name, 0)
                    if name not in res.fallback_ops:
                        res.fallback_ops.append(name)
    except Exception as exc:
        res.error = res.error or f"sample generation: {type(exc).__name__}: {exc}"[:300]
    return res


def ops_to_sweep():
    from torch.testing._internal.common_methods_invocations import op_db

    # sparse layouts are not device tensors here (nor on TorchNeuron): those OpInfos are left out
    return [o for o in op_db if torch.float32 in o.supported_dtypes("cpu") and not o.name.startswith("sparse.")
            and "to_sparse" not in o.name]


def summarize(results: list[OpResult]) -> dict:
    by_dtype: dict[str, dict] = {}
    for dt in sorted({r.dtype for r in results}):
        rs = [r for r in results if r.dtype == dt and r.samples]
        by_dtype[dt] = {
            "ops": len(rs),
            "correct": sum(r.ok for r in rs),
            "correct_share": sum(r.ok for r in rs) / max(1, len(rs)),
            "lowered": sum(r.ok and r.lowered for r in rs),
            "lowered_share": sum(r.ok and r.lowered for r in rs) / max(1, len(rs)),
            "failures": sorted(f"{r.op}: {r.error}" for r in rs if not r.ok),
            "fallback_ops": sorted({f for r in rs for f in r.fallback_ops}),
        }
    return by_dtype


HARNESS_NOTE = (
    "`tensor_split` takes its index tensor on the CPU (CUDA fails the same way), and "
    "`as_strided.partial_views` depends on the input's storage layout, which `.to()` compacts: both "
    "failures come from the sweep moving every tensor argument to the device.")


def markdown(report: dict, samples: int) -> str:
    """docs/opinfo-report.md: the summary table, failures, and every op that still falls back with
    how many OpInfos hit it and why (no kernel, or the reason its kernel declined the call)."""
    results = report["results"]
    samples = report.get("samples", samples)
    lines = [
        "# OpInfo on `neuron` vs CPU", "",
        f"Generated by `python -m trnscope.device.opinfo_sweep --samples {samples} --markdown docs/opinfo-report.md` "
        f"(torch {report['torch']}, {report['seconds']:.0f} s on the 2-core machine).",
        f"Every OpInfo with float32 support on CPU (sparse layouts excluded), its first {samples} samples, in "
        "float32 and bfloat16 where supported; results compared with CPU within the dtype's tolerance. "
        "\"Device kernels only\" counts ops whose samples all ran as lowered NeuronCore kernels with no CPU "
        "fallback.", "",
        "| dtype | ops | correct | device kernels only |", "|---|---|---|---|"]
    for dt, s in report["summary"].items():
        lines.append(f"| {dt} | {s['ops']} | {s['correct']} ({100 * s['correct_share']:.1f}%) | "
                     f"{s['lowered']} ({100 * s['lowered_share']:.1f}%) |")
    lines += ["", "## Failures", ""]
    lines += [f"- {dt}: {f}" for dt, s in report["summary"].items() for f in s["failures"]]
    lines += ["", HARNESS_NOTE, "", "## Ops that still fall back to the CPU", "",
              "Number of OpInfos (either dtype) whose samples hit each op, and why it fell back. A dtype with no "
              "NeuronCore equivalent (float64, complex) falls back by design: the device has no such type.", ""]
    hits: dict[str, set] = {}
    why: dict[str, set] = {}
    for r in results:
        for op in r["fallback_ops"]:
            hits.setdefault(op, set()).add(r["op"])
            reason = r.get("fallback_reasons", {}).get(op, "no neuron kernel")
            why.setdefault(op, set()).add("float64/complex dtype" if "has no NeuronCore equivalent" in reason
                                          else reason)
    lines += ["| op | OpInfos | why |", "|---|---|---|"]
    for op in sorted(hits, key=lambda o: (-len(hits[o]), o)):
        lines.append(f"| `{op}` | {len(hits[op])} | {'; '.join(sorted(why[op]))[:160]} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="opinfo_report.json")
    ap.add_argument("--samples", type=int, default=SAMPLES_PER_OP)
    ap.add_argument("--limit", type=int, default=0, help="only the first N ops (for a quick look)")
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names (full names or prefixes before '.')")
    ap.add_argument("--markdown", default="", help="also write the report as Markdown (docs/opinfo-report.md)")
    ap.add_argument("--render", default="", help="only render --markdown from an existing JSON report")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        with open(args.markdown, "w") as f:
            f.write(markdown(report, args.samples))
        return 0
    ops = ops_to_sweep()
    if args.ops:
        wanted = {w.strip() for w in args.ops.split(",") if w.strip()}
        ops = [o for o in ops if o.full_name in wanted or o.name in wanted]
    if args.limit:
        ops = ops[: args.limit]
    results = []
    t0 = time.time()
    for i, op in enumerate(ops):
        for dtype in (torch.float32, torch.bfloat16):
            if dtype in op.supported_dtypes("cpu"):
                results.append(run_op(op, dtype, args.samples))
        if (i + 1) % 50 == 0:
            print(f"{i + 1}/{len(ops)} ops, {time.time() - t0:.0f} s", file=sys.stderr)
    report = {"summary": summarize(results), "results": [asdict(r) for r in results],
              "torch": torch.__version__, "seconds": time.time() - t0, "samples": args.samples}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report, args.samples))
    for dt, s in report["summary"].items():
        print(f"{dt}: {s['correct']}/{s['ops']} ops correct ({100 * s['correct_share']:.1f}%), "
              f"{s['lowered']} served by device kernels only ({100 * s['lowered_share']:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
