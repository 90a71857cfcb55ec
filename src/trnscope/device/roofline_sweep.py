"""The kernel library against its roofline: every lowered op on a representative shape, timed by the
simulator and compared with the op's bound (docs/roofline-report.md).

    python -m trnscope.device.roofline_sweep --markdown docs/roofline-report.md

For each registered lowering (in-place variants share their functional op's kernel and are left
out) a call is built from the op's schema: tensors are [1024, 1024] FP32 (4 MiB; matmuls
[2048, 2048] and attention BF16), dims the last, scalars 0.5, everything with a default left to it; the ops whose
arguments a schema cannot say (index tensors, masks, matmul shapes, norms' weights) have their call
written in ``CALLS``. The op's bound is

    max(HBM bytes / HBM bandwidth, TensorE FLOPs / peak) + 2 x DMA fixed latency

with HBM bytes = every input's bytes read once plus every output's written once (what any kernel
must move; the kernel's own traffic where that is less: a gather reads only the rows it picks) and
the peak of the matmul's dtype; the fixed latency is one load's and one store's
(docs/cost-model.md, DMA). Ratio = simulated device time / bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from ..compiler.lowering import NoLowering, lower, registered
from ..compiler.opcall import from_aten
from ..hw import logical_spec
from ..sim import simulate

aten = torch.ops.aten
N = 1024
MM = 2048   # matmul side: 17 GFLOP
TARGETS = ("trn1", "trn2")
# the report's columns: (target, LNC degree). trn2 LNC=1 is one physical core (its engines, its share
# of the pair's HBM bandwidth): the per-core view; trn2 LNC=2 is trn2 as it ships, a logical core of
# two physical cores whose bound is the logical spec's (the pair's HBM bandwidth, both TensorEs)
COLUMNS = (("trn1", 1), ("trn2", 1), ("trn2", 2))


def column(target: str, lnc: int) -> str:
    """A column's name in the report: the target, with its LNC degree where the target has a choice."""
    return target if logical_spec(target, 1).lnc_supported == (1,) else f"{target} LNC={lnc}"
# ratio targets (issue 12): every op within 2x of its bound, or a reason why not
TARGET_RATIO = 2.0


def _m(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _x():
    return _m(N, N)


def _bf(*shape):
    return _m(*shape, dtype=torch.bfloat16)


def _idx(n, hi):
    return torch.zeros(n, dtype=torch.int64, device="meta").clamp_(0, hi - 1)


def _idx2(shape, hi):
    return torch.zeros(*shape, dtype=torch.int64, device="meta")


def _mask():
    return torch.empty(N, N, dtype=torch.bool, device="meta")


# ops whose representative call a schema cannot build: name -> (args, kwargs) factory
CALLS: dict[str, Callable[[], tuple[tuple, dict]]] = {
    "aten::mm": lambda: ((_bf(MM, MM), _bf(MM, MM)), {}),
    "aten::bmm": lambda: ((_bf(8, 1024, 1024), _bf(8, 1024, 1024)), {}),
    "aten::addmm": lambda: ((_bf(MM), _bf(MM, MM), _bf(MM, MM)), {}),
    "aten::baddbmm": lambda: ((_bf(8, 1024, 1024), _bf(8, 1024, 1024), _bf(8, 1024, 1024)), {}),
    "aten::mv": lambda: ((_x(), _m(N)), {}),
    "aten::addmv": lambda: ((_m(N), _x(), _m(N)), {}),
    "aten::dot": lambda: ((_m(N * N), _m(N * N)), {}),
    "aten::vdot": lambda: ((_m(N * N), _m(N * N)), {}),
    "aten::scaled_dot_product_attention": lambda: ((_bf(1, 16, N, 128),) * 3, {"is_causal": True}),
    "aten::_scaled_dot_product_flash_attention_for_cpu": lambda: ((_bf(1, 16, N, 128),) * 3, {"is_causal": True}),
    "aten::_scaled_dot_product_fused_attention_overrideable": lambda: ((_bf(1, 16, N, 128),) * 3, {"is_causal": True}),
    "aten::embedding": lambda: ((_m(32000, N), _idx(N, 32000)), {}),
    "aten::embedding_dense_backward": lambda: ((_x(), _idx(N, 32000), 32000, -1, False), {}),
    "aten::index_select": lambda: ((_x(), 0, _idx(N, N)), {}),
    "aten::gather": lambda: ((_x(), 1, _idx2((N, N), N)), {}),
    "aten::scatter.src": lambda: ((_x(), 1, _idx2((N, N), N), _x()), {}),
    "aten::scatter.value": lambda: ((_x(), 1, _idx2((N, N), N), 0.5), {}),
    "aten::scatter.reduce": lambda: ((_x(), 1, _idx2((N, N), N), _x()), {"reduce": "add"}),
    "aten::scatter_add": lambda: ((_x(), 1, _idx2((N, N), N), _x()), {}),
    "aten::scatter_reduce.two": lambda: ((_x(), 1, _idx2((N, N), N), _x(), "sum"), {}),
    "aten::index_add": lambda: ((_x(), 0, _idx(N, N), _x()), {}),
    "aten::index_copy": lambda: ((_x(), 0, _idx(N, N), _x()), {}),
    "aten::index_fill.int_Scalar": lambda: ((_x(), 0, _idx(N, N), 0.5), {}),
    "aten::index_fill.int_Tensor": lambda: ((_x(), 0, _idx(N, N), torch.tensor(0.5, device="meta")), {}),
    "aten::masked_fill.Scalar": lambda: ((_x(), _mask(), 0.5), {}),
    "aten::masked_fill.Tensor": lambda: ((_x(), _mask(), torch.tensor(0.5, device="meta")), {}),
    "aten::where.self": lambda: ((_mask(), _x(), _x()), {}),
    "aten::where.Scalar": lambda: ((_mask(), 0.5, 1.5), {}),
    "aten::where.ScalarOther": lambda: ((_mask(), _x(), 0.5), {}),
    "aten::where.ScalarSelf": lambda: ((_mask(), 0.5, _x()), {}),
    "aten::nll_loss_forward": lambda: ((_m(N, 32000), _idx(N, 32000), None, 1, -100), {}),
    "aten::nll_loss_backward": lambda: ((_m(()), _m(N, 32000), _idx(N, 32000), None, 1, -100, _m(())), {}),
    "aten::native_layer_norm": lambda: ((_x(), [N], _m(N), _m(N), 1e-5), {}),
    "aten::native_layer_norm_backward": lambda: ((_x(), _x(), [N], _m(N, 1), _m(N, 1), _m(N), _m(N),
                                                  [True, True, True]), {}),
    "aten::rms_norm": lambda: ((_x(), [N], _m(N), 1e-6), {}),
    "aten::_fused_rms_norm": lambda: ((_x(), [N], _m(N), 1e-6), {}),
    "aten::native_batch_norm": lambda: ((_m(8, 64, 64, 64), _m(64), _m(64), _m(64), _m(64), True, 0.1, 1e-5), {}),
    "aten::_native_batch_norm_legit": lambda: ((_m(8, 64, 64, 64), _m(64), _m(64), _m(64), _m(64), True, 0.1,
                                                1e-5), {}),
    "aten::_native_batch_norm_legit.no_stats": lambda: ((_m(8, 64, 64, 64), _m(64), _m(64), True, 0.1, 1e-5), {}),
    "aten::_batch_norm_with_update": lambda: ((_m(8, 64, 64, 64), _m(64), _m(64), _m(64), _m(64), 0.1, 1e-5), {}),
    "aten::native_group_norm": lambda: ((_m(8, 64, 64, 64), _m(64), _m(64), 8, 64, 4096, 32, 1e-5), {}),
    "aten::avg_pool2d": lambda: ((_m(8, 64, 64, 64), [2, 2]), {}),
    "aten::avg_pool3d": lambda: ((_m(8, 64, 16, 32, 32), [2, 2, 2]), {}),
    "aten::max_pool2d_with_indices": lambda: ((_m(8, 64, 64, 64), [2, 2]), {}),
    "aten::max_pool3d_with_indices": lambda: ((_m(8, 64, 16, 32, 32), [2, 2, 2]), {}),
    "aten::_adaptive_avg_pool2d": lambda: ((_m(8, 64, 64, 64), [8, 8]), {}),
    "aten::_adaptive_avg_pool3d": lambda: ((_m(8, 64, 16, 32, 32), [4, 4, 4]), {}),
    "aten::cat": lambda: (([_x(), _x()], 0), {}),
    "aten::stack": lambda: (([_x(), _x()], 0), {}),
    "aten::arange": lambda: ((N * N,), {"dtype": torch.float32, "device": "meta"}),
    "aten::arange.start": lambda: ((0, N * N), {"dtype": torch.float32, "device": "meta"}),
    "aten::arange.start_step": lambda: ((0, N * N, 1), {"dtype": torch.float32, "device": "meta"}),
    "aten::slice_backward": lambda: ((_m(N, N // 2), [N, N], 1, 0, N // 2, 1), {}),
    "aten::select_backward": lambda: ((_m(N), [N, N], 0, 3), {}),
    "aten::_softmax_backward_data": lambda: ((_x(), _x(), -1, torch.float32), {}),
    "aten::_log_softmax_backward_data": lambda: ((_x(), _x(), -1, torch.float32), {}),
    "aten::binary_cross_entropy": lambda: ((_x().sigmoid(), _x().sigmoid()), {}),
    "aten::glu": lambda: ((_x(), -1), {}),
    "aten::copy": lambda: ((_x(), _x()), {}),
    "aten::_copy_from": lambda: ((_x(), _x()), {}),
    "aten::_to_copy": lambda: ((_x(),), {"dtype": torch.bfloat16}),
    "aten::trace": lambda: ((_x(),), {}),
    "aten::roll": lambda: ((_x(), [1]), {"dims": [1]}),
    "aten::flip": lambda: ((_x(), [1]), {}),
    "aten::fill.Tensor": lambda: ((_x(), torch.tensor(0.5, device="meta")), {}),
    "aten::clamp.Tensor": lambda: ((_x(), _x(), _x()), {}),
    "aten::clamp": lambda: ((_x(), -0.5, 0.5), {}),
    "aten::div.Scalar_mode": lambda: ((_x(), 0.5), {"rounding_mode": "floor"}),
    "aten::div.Tensor_mode": lambda: ((_x(), _x()), {"rounding_mode": "floor"}),
    "aten::norm.ScalarOpt_dim_dtype": lambda: ((_x(), 2, [1]), {"keepdim": False, "dtype": torch.float32}),
    "aten::norm.ScalarOpt_dtype": lambda: ((_x(), 2), {"dtype": torch.float32}),
    "aten::round.decimals": lambda: ((_x(),), {"decimals": 2}),
}
# ops left out, and why
SKIP = {
    "aten::_to_copy.out": "the out= form of _to_copy",
    "aten::arange.out": "the out= form of arange", "aten::arange.start_out": "the out= form of arange",
    "aten::lift_fresh_copy": "a copy of a fresh constant (host-side)",
    "aten::alias_copy": "the same kernel as clone",
    "aten::contiguous": "the same kernel as clone",
    "aten::_copy_from": "the host<->device copy (runtime.copy), which has no meta kernel to build a call from",
}
MATMUL_FAMILY = ("mm", "bmm", "addmm", "baddbmm", "scaled_dot_product", "flash_attention", "fused_attention")


def _value(typ, name: str):
    """A representative value for a required schema argument of type ``typ`` (None: cannot say)."""
    kind = typ.kind()
    if kind == "OptionalType":
        inner = typ.getElementType()
        return None if inner.kind() == "TensorType" else _value(inner, name)
    if kind == "TensorType":
        return _x()
    if kind in ("IntType", "SymIntType"):
        return 1 if name.startswith("dim") else 2
    if kind == "ListType" and typ.getElementType().kind() in ("IntType", "SymIntType"):
        return [1]
    if kind in ("FloatType", "NumberType"):
        return 0.5
    if kind == "BoolType":
        return False
    return None


def build_call(name: str):
    """(OpOverload, args, kwargs) of ``name``'s representative call, or None."""
    base, _, overload = name.replace("aten::", "").partition(".")
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    op = getattr(packet, overload or "default", None)
    if op is None:
        return None
    if name in CALLS:
        args, kwargs = CALLS[name]()
        return op, args, kwargs
    values = []
    for a in op._schema.arguments:
        if a.kwarg_only:
            continue
        if a.has_default_value():
            break
        v = _value(a.type, a.name)
        if v is None and a.type.kind() != "OptionalType":
            return None
        values.append(v)
    return op, tuple(values), {}


@dataclass
class Row:
    op: str
    target: str
    shape: str
    time_ns: float = 0.0
    bound_ns: float = 0.0
    ratio: float = 0.0
    limit: str = ""              # what the bound is: hbm or flops
    hbm_bytes: int = 0           # every input read once, every output written once
    kernel_hbm_bytes: int = 0    # what the kernel read and wrote
    mbu_percent: float = 0.0
    mfu_percent: float = 0.0
    bottleneck: str = ""
    error: str = ""
    lnc: int = 1                 # the LNC degree timed (rows of reports before it was recorded: 1)

    @property
    def column(self) -> str:
        return column(self.target, self.lnc)


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)


def _attention_flops(name: str, args, kwargs) -> float:
    """The model FLOPs of attention (q k^T and p v over the (query, key) pairs the mask lets through:
    half the square and the diagonal when causal), not what a kernel happens to compute; 0 otherwise."""
    if "scaled_dot_product" not in name:
        return 0.0
    q, k, v = args[:3]
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    heads = q.numel() // (L * E)
    pairs = sum(min(i + 1, S) for i in range(L)) if kwargs.get("is_causal") else L * S
    return 2.0 * heads * pairs * (E + Ev)


def measure(name: str, target: str, lnc: int = 1) -> Row | None:
    """``name``'s representative call on one logical core of ``target`` at LNC degree ``lnc``: its bound
    uses that core's spec (at LNC=2 the pair's HBM bandwidth and both physical cores' TensorE peaks)."""
    built = build_call(name)
    if built is None:
        return None
    op, args, kwargs = built
    spec = logical_spec(target, lnc)
    try:
        out = op(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the schema's guess did not fit: reported, not timed
        return Row(name, target, "", error=f"building the call: {type(exc).__name__}: {str(exc)[:120]}", lnc=lnc)
    outs = tuple(_tensors(out))
    ins = list(_tensors(args)) + list(_tensors(list(kwargs.values())))
    shape = " ".join("x".join(map(str, t.shape)) or "()" for t in ins[:3])
    row = Row(name, target, shape, lnc=lnc)
    try:
        prog = lower(from_aten(op, args, kwargs, outs), spec)
    except NoLowering as exc:
        row.error = f"declined: {exc}"
        return row
    except Exception as exc:  # noqa: BLE001 - a kernel that fails on this call is a finding, reported
        row.error = f"kernel failed: {type(exc).__name__}: {str(exc)[:160]}"
        return row
    s = simulate(prog, spec).summary
    seen, nbytes = set(), 0
    for t in ins + list(outs):
        if id(t) not in seen:
            seen.add(id(t))
            nbytes += _nbytes(t)
    dtype = next((t.dtype for t in ins if t.is_floating_point()), torch.float32)
    peak = spec.peak_fp32_flops if dtype == torch.float32 else spec.peak_bf16_flops
    # an op that needs only part of an input (a gather's table, a slice) moves what its kernel moves
    nbytes = min(nbytes, s["hbm_read_bytes"] + s["hbm_write_bytes"])
    mem_ns = nbytes / spec.hbm_bytes_per_s_per_core * 1e9
    flop_ns = (_attention_flops(name, args, kwargs) or s["model_flops"]) / peak * 1e9
    row.bound_ns = max(mem_ns, flop_ns) + 2 * spec.dma_fixed_latency_ns
    row.limit = "flops" if flop_ns > mem_ns else "hbm"
    row.time_ns = s["total_time_ns"]
    row.ratio = row.time_ns / row.bound_ns
    row.hbm_bytes = nbytes
    row.kernel_hbm_bytes = s["hbm_read_bytes"] + s["hbm_write_bytes"]
    row.mbu_percent = s["mbu_estimated_percent"]
    row.mfu_percent = s["mfu_estimated_percent"]
    row.bottleneck = s["bottleneck"]
    return row


def ops_to_time() -> list[str]:
    """Every registered lowering but the in-place variants (the functional op's kernel) and SKIP."""
    names = registered()
    keep = []
    for n in names:
        base, dot, overload = n.partition(".")
        if base.endswith("_") and not base.endswith("__") and f"{base[:-1]}{dot}{overload}" in names:
            continue
        if base.endswith("_") and base[:-1] in {x.partition(".")[0] for x in names}:
            continue
        if n in SKIP:
            continue
        keep.append(n)
    return keep


def sweep(ops: list[str], columns=COLUMNS, progress=None) -> list[Row]:
    rows = []
    for i, name in enumerate(ops):
        t0 = time.time()
        for target, lnc in columns:
            row = measure(name, target, lnc)
            if row is None:
                row = Row(name, target, "", error="no representative call (add one to CALLS)", lnc=lnc)
            rows.append(row)
        if progress:
            progress(f"{i + 1}/{len(ops)} {name}: {time.time() - t0:.1f} s")
    return rows


# why the ops that stay above TARGET_RATIO cannot reach it (matched on the op name or its prefix
# before "."); each names the kernel's limiter as the simulator shows it, with the arithmetic
_SCATTER = ("an element scatter along the dim (a 2-D index: every element has its own target) has no "
            "contiguous run to move: the indirect DMA (kernels/scatter.py, chosen over VectorE one-hot "
            "matching when the dim is long) spends one descriptor per 4-byte element, each priced at S6's "
            "2 KiB knee: 1M x 2400 B / (16 x 17 B/ns) = 9.3 ms on trn1 (an accumulating one reads and "
            "writes HBM, 12 ms), against 44-54 us to move the bytes; the one-hot kernel would compare "
            "1024 x 1024 (k, j) pairs for each of the 1024 rows, at least three VectorE passes each (about 22 ms); "
            "an index that is the same across each slice (idx.expand) takes index_add's slice path and runs at HBM "
            "speed")
_SLICES = ("HBM-bound: self is copied to the output (HBM -> HBM) before the indirect-DMA scatter of the "
           "slices, because which rows the index overwrites is known only at run time: 1.33x (index_copy), "
           "1.5x (index_fill) and 1.67x (index_add, whose accumulate reads each row it adds to) the bound's "
           "bytes, at one core's DMA rate on trn1 (272 of 410 GB/s)")
_ARG = ("VectorE's max8 and nc_find_index8 (kernels/indexreduce.py) are two N-cycle passes per element: "
        "14.6 us for 1M FP32 elements on 128 partitions at 1.12 GHz, about DMA's 15.4 us at one core's 272 GB/s "
        "on trn1, so they overlap piece by piece but the last piece's scan, the merge of the partitions' (or "
        "pieces') extremes and the result's store still follow the last load; an argmin also negates each "
        "piece on ScalarE first")
WHY = {
    "aten::scatter": _SCATTER, "aten::scatter_add": _SCATTER, "aten::scatter_reduce": _SCATTER,
    "aten::index_add": _SLICES, "aten::index_copy": _SLICES, "aten::index_fill": _SLICES,
    "aten::argmax": _ARG, "aten::argmin": _ARG, "aten::max.dim": _ARG, "aten::min.dim": _ARG,
    "aten::_scaled_dot_product_fused_attention_overrideable": "flash attention at head dim 128, causal "
        "(kernels/attention.py): latency-bound with three query tiles in flight, VectorE and ScalarE about "
        "50-60% busy. Each score passes through three VectorE/ScalarE instructions: the copy out of PSUM "
        "with the scale and row max (one tensor_scalar_reduce), the exp with the row sum (ScalarE, from "
        "SBUF) and the copy of p^T out of PSUM after TensorE's transposes; the first and last read PSUM, "
        "which NC-v2's VectorE and ScalarE cannot do at the same time, so on trn1 those two passes alone "
        "are 73,728 scores per partition x (1/1.12 + 1/1.4) ns = 119 us, 2.4x the bound, before the "
        "200-cycle dependent-instruction overhead of each instruction and TensorE's in-order waits on the "
        "softmax of the lane at its head; the bound counts only the unmasked pairs' FLOPs",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "as _scaled_dot_product_fused_attention_overrideable; its "
        "log-sum-exp, laid out [B, L, H] (a head's values H apart), is collected per batch as [query, tile x head] "
        "and leaves once, a run of H heads per descriptor",
    "aten::scaled_dot_product_attention": "as _scaled_dot_product_fused_attention_overrideable; without a "
        "log-sum-exp its output is regrouped on chip (two TensorE transposes per 128 queries) so each head "
        "leaves as 128 runs of 2 KiB instead of 1,024 256-byte rows",
    "aten::nll_loss_forward": "its bound is 12 KiB of traffic (one picked log-probability per row), but each "
                              "pick is a 4-byte read of its own 32000-wide row: the one indirect DMA of all "
                              "1024 picks (8 rows to a partition) spends a descriptor on each, priced at the "
                              "2 KiB knee (1024 x 2400 B / (16 x 17 B/ns) = 9 us on trn1), between the target "
                              "load and the store, each with its fixed latency",
    "aten::div.Scalar_mode": "compute-bound on VectorE: floor division is ATen's div_floor (remainder, a - "
                             "remainder, divide, the quotient's next-integer mark, its sum with ScalarE's "
                             "floor): five VectorE passes of N cycles each (the divisor a scalar operand, the "
                             "intermediates in PSUM), 36.6 us for 1M FP32 elements on trn1 against 30.8 us of "
                             "DMA, plus the first tile's load and the last one's store",
    "aten::floor_divide.Scalar": "as div.Scalar_mode (the same kernel)",
    "aten::floor_divide": "compute-bound on VectorE: ATen's div_floor with a tensor divisor is eight VectorE "
                          "cycles per FP32 element even with the intermediates in PSUM (the divisor's inf "
                          "clamp, the remainder of two SBUF operands at 2 cycles, a - remainder, the b == 0 "
                          "select, the divide, the next-integer mark and its sum with ScalarE's floor): about "
                          "59 us for 1M elements at 1.12 GHz on trn1, against 46 us of DMA",
    "aten::div.Tensor_mode": "as floor_divide (rounding_mode='floor', the same kernel)",
    "aten::max_pool3d_with_indices": "compute-bound on VectorE: per window offset the update mark (candidate > "
                                     "best), the running max, the mark or-ed with isnan(candidate) and the "
                                     "position select, each N cycles with the running state in PSUM: 29 passes "
                                     "for a 2x2x2 window (the first a copy) and a copy out, over 2048 outputs a "
                                     "partition and row tile: about 219 us on trn1 against 170 us of DMA for the 32 MiB "
                                     "input and the values and int64 indices out",
    "aten::binary_cross_entropy": "VectorE-bound: the loss's sum is two ScalarE accumulates (kernels/reductions.py, "
                                  "emit_sum_terms), leaving VectorE two clamp-and-multiply scalar_tensor_tensor "
                                  "passes, 4 cycles per FP32 element (about 29 us on trn1), against a bound of "
                                  "only the two inputs' reads (23 us: the output is one number)",
    "aten::smooth_l1_loss": "the two inputs at one core's DMA rate on trn1 (31 us of 272 GB/s against the bound's "
                            "23 us at 410 GB/s); VectorE's difference and min(|d|, beta) (3 cycles an element) and "
                            "ScalarE's square and two relus with their sums accumulated run under it",
    "aten::huber_loss": "as smooth_l1_loss",
    "aten::native_batch_norm": "x is read once and held in SBUF (64 channels over 128 partitions, kernels/"
                               "batchnorm.py), but no element can be normalised before its channel's last one "
                               "is read, so the 8 MiB of loads and the 8 MiB of stores take turns on the DMA "
                               "engines (about 62 us at one core's 272 GB/s on trn1, bound 43.5 us at 410 GB/s)",
    "aten::_native_batch_norm_legit": "as native_batch_norm", "aten::_batch_norm_with_update": "as native_batch_norm",
    "aten::mv": "the matrix-vector product on VectorE (FP32 products, 2 cycles per element) and ScalarE (row "
                "sums): the products take about as long as the transfers at one core's DMA rate on trn1 (272 of "
                "410 GB/s), so the two do not hide each other; within 2x on trn2",
    "aten::addmv": "as mv, plus the bias vector",
    "aten::trace": "its 1024 diagonal elements lie 4100 bytes apart, so their load is 1024 descriptors of one "
                   "element, each priced at S6's 2 KiB knee (1024 x 2400 B / (16 x 17 B/ns) = 9 us on trn1) "
                   "against 4 KiB of bytes; reading whole rows instead would move 4 MiB (15 us)",
    "aten::native_group_norm": "a (sample, group) row of 32768 elements (64 channels of 64x64 in 8 groups) is too "
                               "long to hold between the statistics and the normalisation, so x is read twice "
                               "(1.5x the bound's bytes), and the weight multiply and bias add run on VectorE at "
                               "FP32's 2 cycles per element",
    "aten::native_layer_norm": "DMA-bound on trn1: the affine step reads the normalised rows from PSUM "
                               "(kernels/layernorm.py), so VectorE's bn_stats, weight multiply and bias add "
                               "take N cycles each (about 2.9 us a 128-row tile) under the tile's 1 MiB in "
                               "and 1 MiB out at one core's 272 GB/s (7.7 us, 1.51x the bound before any "
                               "latency); the first load and the last store do not overlap anything",
    "aten::native_layer_norm_backward": "compute-bound on VectorE/ScalarE: five row passes (g * w, two row "
                                        "sums, the correction, the scale) per element against three DMA passes",
}


def why(op: str) -> str:
    for key in (op, op.partition(".")[0]):
        if key in WHY:
            return WHY[key]
    return ""


def _lnc2_share(rows: dict[str, Row]) -> float | None:
    """The op's LNC=2 time over its LNC=1 time (0.5: the pair halves it), None when either is missing."""
    one, two = rows.get(column("trn2", 1)), rows.get(column("trn2", 2))
    if one is None or two is None or one.error or two.error or not one.time_ns:
        return None
    return two.time_ns / one.time_ns


def _note(op: str, rows: dict[str, Row]) -> str:
    """Why an op stays above the target ratio: a written reason, else what the simulator shows."""
    timed = [r for r in rows.values() if not r.error]
    if not timed or max(r.ratio for r in timed) <= TARGET_RATIO:
        return ""
    r = max(timed, key=lambda r: r.ratio)
    notes = []
    if why(op):
        notes.append(why(op))
    elif r.limit == "hbm" and r.hbm_bytes < 1 << 20:
        notes.append("under 1 MiB of traffic: its time is the fixed DMA and instruction latencies")
    elif r.bottleneck in ("vector", "scalar", "gpsimd"):
        notes.append(f"compute-bound on {r.bottleneck.capitalize()}E: several engine instructions per element (FP32 "
                     "streams about one element per cycle per partition; the bound counts only HBM and TensorE)")
    elif r.target == "trn1" and all(x.ratio <= TARGET_RATIO for x in timed if x.target != "trn1"):
        notes.append("within 2x on trn2; on trn1 one core's 16 DMA engines move 272 GB/s against its 410 GB/s HBM "
                     "share, so staging every byte through SBUF costs at least 1.51x the bound before any latency")
    elif r.lnc == 1:
        notes.append(f"DMA below HBM speed (MBU {r.mbu_percent:.0f}%): not analysed yet")
    two = rows.get(column("trn2", 2))
    share = _lnc2_share(rows)
    if two is not None and not two.error and two.ratio > TARGET_RATIO and share is not None and share > 0.8:
        how = "does not split over the pair" if share > 0.95 else "splits over the pair only in part"
        notes.append(f"at LNC=2 it takes {share:.2f} of its LNC=1 time against a bound that halves: its work {how}"
                     + (f" ({lnc2_why(op)})" if lnc2_why(op) else ""))
    return "; ".join(notes)


# why a kernel's work does not halve at LNC=2 (compiler/lnc.py gives each store, and what feeds it,
# to one physical core; kernels/common.core_shares splits a one-value reduction), matched as WHY is
_SCATTER_LNC2 = ("each element scatter names the whole output as the table it writes, so the builder orders "
                 "every scatter after the one before, on either core")
LNC2_WHY = {
    "aten::scatter": _SCATTER_LNC2, "aten::scatter_add": _SCATTER_LNC2, "aten::scatter_reduce": _SCATTER_LNC2,
    "aten::nll_loss_forward": "one indirect DMA of every pick and one 4-byte store: nothing to share",
    "aten::trace": "one strided load of the diagonal and one store: nothing to share",
    "aten::var": "each core streams half of every partition through bn_stats; the meet through HBM (a store and "
                 "a load, 2 x 1.3 us), the transposes and bn_aggr of the 128 partitions' triples stay on one core",
    "aten::std": "as var", "aten::var_mean": "as var", "aten::std_mean": "as var",
    "aten::argmax": "VectorE's max8 scans split; the meet through HBM, the transposes and the last scan stay on "
                    "one core",
    "aten::argmin": "as argmax",
}


def lnc2_why(op: str) -> str:
    for key in (op, op.partition(".")[0]):
        if key in LNC2_WHY:
            return LNC2_WHY[key]
    return ""


def markdown(rows: list[Row], seconds: float) -> str:
    names = [column(t, n) for t, n in COLUMNS]
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.op, {})[r.column] = r
    timed = [r for r in rows if not r.error]
    lines = [
        "# The kernel library against its roofline", "",
        f"Generated by `python -m trnscope.device.roofline_sweep --out docs/roofline-report.json --markdown docs/roofline-report.md` "
        f"(torch {torch.__version__}, {seconds:.0f} s on the 2-core machine).", "",
        "Every lowered op (in-place variants share their op's kernel) on one representative call: tensors "
        f"[{N}, {N}] FP32 unless the shape column says otherwise, the matmul family and attention in BF16. "
        "Bound = max(HBM bytes / HBM bandwidth, TensorE FLOPs / peak of the dtype) + 2 x DMA fixed latency, "
        "with HBM bytes = every input read once + every output written once (the kernel's own traffic where "
        "that is less: a gather reads only the rows it picks); time = simulated device time of "
        "the kernel; ratio = time / bound (1.0 is the roofline). MBU counts every byte the kernel read and "
        "wrote (docs/cost-model.md, Metrics). Source: `src/trnscope/device/roofline_sweep.py`.", "",
        "The columns, each one (logical) NeuronCore with the bound taken from its spec (`hw.logical_spec`):", "",
        "- **trn1**: one NeuronCore-v2 (Trn1 has no logical-core pairing): 410 GB/s of HBM, one TensorE, "
        "16 DMA engines.",
        "- **trn2 LNC=1**: one physical NeuronCore-v3, the per-core view (`NEURON_LOGICAL_NC_CONFIG=1`): "
        "half of an HBM bank pair's bandwidth (362.5 GB/s), one TensorE, 16 DMA engines.",
        "- **trn2 LNC=2**: trn2 as it ships: one logical core = two physical cores, each with its own engines, "
        "SBUF/PSUM and 16 DMA engines, sharing the pair's 725 GB/s; the bound uses that bandwidth and both "
        "TensorEs' peak, and the kernel is spread over both cores by the compiler (`compiler/lnc.py`, "
        "docs/cost-model.md, Logical NeuronCores). A kernel whose work does not split runs as long as at LNC=1 "
        "against a bound that halves.", "",
        "On trn1 one NeuronCore's 16 DMA engines move 272 GB/s against 410 GB/s of HBM, so a kernel that "
        "stages every byte through SBUF is at least 1.51x its HBM bound there (trn2, per physical core: "
        "368 vs 362 GB/s).", ""]
    for name in names:
        rs = [r for r in timed if r.column == name]
        if not rs:
            continue
        within = sum(1 for r in rs if r.ratio <= TARGET_RATIO)
        lines.append(f"- {name}: {len(rs)} ops timed, {within} within {TARGET_RATIO:g}x of their bound; "
                     f"highest MBU {max(r.mbu_percent for r in rs):.1f}%")
    lines += ["", "## The worst ratios", ""]
    for name in names:
        rs = sorted((r for r in timed if r.column == name), key=lambda r: -r.ratio)[:10]
        if rs:
            lines.append(f"- {name}: " + ", ".join(f"`{r.op.replace('aten::', '')}` {r.ratio:.2f}x" for r in rs))
    lines += ["", "## Every op", "",
              "| op | shape | " + " | ".join(f"{t} time (us) | {t} bound (us) | {t} ratio | {t} MBU %" for t in names)
              + " | limit | why above 2x |",
              "|---|---|" + "---|---|---|---|" * len(names) + "---|---|"]
    errors = []
    for op in sorted(by):
        cells = []
        shape = limit = ""
        for t in names:
            found = by[op].get(t)
            if found is None or found.error:
                cells.append("| | | |")
                if found is not None and t == names[-1]:
                    errors.append(f"- `{op}`: {found.error}")
                continue
            r = found
            shape, limit = r.shape, r.limit
            cells.append(f"{r.time_ns / 1e3:.1f} | {r.bound_ns / 1e3:.1f} | {r.ratio:.2f} | {r.mbu_percent:.0f}")
        if not shape:
            continue
        note = _note(op, by[op])
        lines.append(f"| `{op.replace('aten::', '')}` | {shape} | " + " | ".join(cells) + f" | {limit} | {note} |")
    if errors:
        lines += ["", "## Not timed", ""] + errors
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="roofline_report.json")
    ap.add_argument("--markdown", default="", help="also write the report as Markdown (docs/roofline-report.md)")
    ap.add_argument("--ops", default="", help="comma-separated op names (aten::sum.dim_IntList ...)")
    ap.add_argument("--render", default="", help="only render --markdown from an existing JSON report")
    ap.add_argument("--update", default="", help="re-time --ops in this JSON report, keep its other rows")
    args = ap.parse_args(argv)
    if args.update:
        with open(args.update) as f:
            report = json.load(f)
        ops = [o.strip() for o in args.ops.split(",") if o.strip() and o.strip() not in SKIP]
        t0 = time.time()
        fresh = sweep(ops, progress=lambda m: print(m, file=sys.stderr, flush=True))
        kept = [r for r in report["rows"] if r["op"] not in ops and r["op"] not in SKIP]
        rows = sorted([Row(**r) for r in kept] + fresh, key=lambda r: (r.op, r.target, r.lnc))
        seconds = report["seconds"] + time.time() - t0
        with open(args.out, "w") as f:
            json.dump({"rows": [asdict(r) for r in rows], "seconds": seconds, "torch": torch.__version__}, f, indent=1)
    elif args.render:
        with open(args.render) as f:
            report = json.load(f)
        rows = [Row(**r) for r in report["rows"]]
        seconds = report["seconds"]
    else:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()] or ops_to_time()
        t0 = time.time()
        rows = sweep(ops, progress=lambda m: print(m, file=sys.stderr, flush=True))
        seconds = time.time() - t0
        with open(args.out, "w") as f:
            json.dump({"rows": [asdict(r) for r in rows], "seconds": seconds, "torch": torch.__version__}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(rows, seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
