"""``trnscope demo``: the RMSNorm case study.

Naive RMSNorm is six ATen ops, each its own kernel (NEFF) that reads its inputs from HBM and
writes its result back; ``torch.rms_norm`` is one fused kernel that reads x once and writes once.
This command lowers both with trnscope's kernel library and runs them on the emulated NeuronCore.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ..compiler import OpCall, TensorMeta, lower
from ..hw import get_spec
from ..sim import simulate

SHAPES = ((1024, 2048), (4096, 4096), (8192, 8192))
DTYPES = ("float32", "bfloat16")
EPS = 1e-6


def naive_calls(rows: int, hidden: int, dtype: str) -> list[OpCall]:
    x = TensorMeta.contiguous((rows, hidden), dtype)
    w = TensorMeta.contiguous((hidden,), dtype)
    r = TensorMeta.contiguous((rows, 1), dtype)
    return [
        OpCall.make("aten::pow.Tensor_Scalar", (x,), (x,), {"arg1": 2}),
        OpCall.make("aten::mean.dim", (x,), (r,), {"arg1": [-1], "keepdim": True}),
        OpCall.make("aten::add.Tensor", (r, None), (r,), {"arg1": EPS}),
        OpCall.make("aten::rsqrt", (r,), (r,)),
        OpCall.make("aten::mul.Tensor", (x, r), (x,)),
        OpCall.make("aten::mul.Tensor", (x, w), (x,)),
    ]


def fused_call(rows: int, hidden: int, dtype: str) -> OpCall:
    x = TensorMeta.contiguous((rows, hidden), dtype)
    w = TensorMeta.contiguous((hidden,), dtype)
    return OpCall.make("aten::rms_norm", (x, w), (x,), {"normalized_shape": (hidden,), "eps": EPS})


def run_variant(calls: list[OpCall], spec) -> dict:
    """Execute the kernels back to back as one stream on the device (launch latency between NEFFs)."""
    device_ns = 0.0
    hbm = 0
    for i, call in enumerate(calls):
        tl = simulate(lower(call, spec), spec)
        device_ns += tl.total_ns + (spec.neff_launch_latency_ns if i else 0.0)
        hbm += tl.summary["hbm_read_bytes"] + tl.summary["hbm_write_bytes"]
    return {"dispatches": len(calls), "device_ns": device_ns, "hbm_bytes": hbm}


class DemoCommand:
    name = "demo"
    help = "the RMSNorm case study: naive ops vs torch.rms_norm on the emulated NeuronCore"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shapes", default=",".join(f"{r}x{h}" for r, h in SHAPES),
                            help="comma-separated ROWSxHIDDEN shapes")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        spec = get_spec()
        shapes = []
        for item in args.shapes.split(","):
            try:
                r, h = (int(v) for v in item.lower().split("x"))
            except ValueError:
                raise ValueError(f"bad shape {item!r}: write ROWSxHIDDEN, e.g. 4096x4096") from None
            shapes.append((r, h))
        console.rule(f"RMSNorm on an emulated {spec.neuroncore} ({spec.instance})")
        table = Table(title="naive (6 ops) vs torch.rms_norm (fused kernel), device time per call")
        for col in ("shape", "dtype", "variant", "dispatches", "device time", "HBM traffic", "speed-up"):
            table.add_column(col, justify="right" if col not in ("variant", "dtype") else "left")
        for rows, hidden in shapes:
            for dtype in DTYPES:
                naive = run_variant(naive_calls(rows, hidden, dtype), spec)
                fused = run_variant([fused_call(rows, hidden, dtype)], spec)
                for label, res in (("naive", naive), ("torch.rms_norm", fused)):
                    table.add_row(f"{rows}x{hidden}", dtype, label, str(res["dispatches"]),
                                  f"{res['device_ns'] / 1e3:,.1f} us", f"{res['hbm_bytes'] / 2**20:,.1f} MiB",
                                  f"{naive['device_ns'] / res['device_ns']:.2f}x")
        console.print(table)
        console.print("Device times come from trnscope's NeuronCore model (docs/cost-model.md); every kernel "
                      "is a real tiled Program: `trnscope inspect` shows one.")
        return 0
