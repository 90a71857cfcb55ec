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
from ..hw import resolve
from ..sim import simulate

aten = torch.ops.aten
N = 1024
MM = 2048   # matmul side: 17 GFLOP
TARGETS = ("trn1", "trn2")
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


def measure(name: str, target: str) -> Row | None:
    built = build_call(name)
    if built is None:
        return None
    op, args, kwargs = built
    spec = resolve(target)
    try:
        out = op(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the schema's guess did not fit: reported, not timed
        return Row(name, target, "", error=f"building the call: {type(exc).__name__}: {str(exc)[:120]}")
    outs = tuple(_tensors(out))
    ins = list(_tensors(args)) + list(_tensors(list(kwargs.values())))
    shape = " ".join("x".join(map(str, t.shape)) or "()" for t in ins[:3])
    row = Row(name, target, shape)
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


def sweep(ops: list[str], targets=TARGETS, progress=None) -> list[Row]:
    rows = []
    for i, name in enumerate(ops):
        t0 = time.time()
        for target in targets:
            row = measure(name, target)
            if row is None:
                row = Row(name, target, "", error="no representative call (add one to CALLS)")
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
        "(kernels/attention.py): the softmax chain of each 128-query tile (scores, VectorE row max from "
        "PSUM, ScalarE exp with the row sum, TensorE transposes of p, their PSUM copy, p v) is latency-bound "
        "with two tiles in flight: on trn1 VectorE and ScalarE are busy only 55-65% of the time (about 200 us "
        "each: the max, exp and p-copy passes at 1.12/1.4 GHz plus a 200-cycle dependent-instruction overhead "
        "on each of their ~1,400 instructions), TensorE 30-40% (115-127 us: three 128-deep passes per key, the "
        "causal mask added by an identity matmul). Reaching 2x needs fewer VectorE/ScalarE passes per score "
        "(a fused scale+max+copy, nki.isa.tensor_scalar_reduce, is not in the ISA model yet) and more tiles in "
        "flight than PSUM's 8 banks allow at one bank per score block; the bound counts only the unmasked "
        "pairs' FLOPs",
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
    "aten::binary_cross_entropy": "compute-bound on VectorE: the two clamps at -100 (max has no ScalarE form), "
                                  "(y - 1) * a, y * b, their difference and the mean's row sum are 9 VectorE "
                                  "cycles per FP32 element (about 66 us on trn1), against a bound of only the "
                                  "two inputs' reads (23 us: the output is one number)",
    "aten::smooth_l1_loss": "compute-bound on VectorE: the difference, the |d| < beta mark, the select and the "
                            "mean's row sum are 6 VectorE cycles per FP32 element (about 44 us on trn1; the abs, "
                            "square and both scalings run on ScalarE), against a bound of only the two inputs' "
                            "reads (23 us: the output is one number)",
    "aten::huber_loss": "as smooth_l1_loss",
    "aten::native_batch_norm": "two passes over x (the statistics of a channel need all of it before any "
                               "element is normalised): 1.5x the bound's bytes, at one core's DMA rate on trn1",
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


def _note(op: str, worst: float, bottleneck: str, rows: dict) -> str:
    """Why an op stays above the target ratio: a written reason, else what the simulator shows."""
    if worst <= TARGET_RATIO:
        return ""
    if why(op):
        return why(op)
    r = max((r for r in rows.values() if not r.error), key=lambda r: r.ratio)
    if r.limit == "hbm" and r.hbm_bytes < 1 << 20:
        return "under 1 MiB of traffic: its time is the fixed DMA and instruction latencies"
    if bottleneck in ("vector", "scalar", "gpsimd"):
        return (f"compute-bound on {bottleneck.capitalize()}E: several engine instructions per element (FP32 "
                "streams about one element per cycle per partition; the bound counts only HBM and TensorE)")
    trn2 = rows.get("trn2")
    if trn2 is not None and not trn2.error and trn2.ratio <= TARGET_RATIO:
        return ("within 2x on trn2; on trn1 one core's 16 DMA engines move 272 GB/s against its 410 GB/s HBM "
                "share, so staging every byte through SBUF costs at least 1.51x the bound before any latency")
    return f"DMA below HBM speed (MBU {r.mbu_percent:.0f}%): not analysed yet"


def markdown(rows: list[Row], seconds: float) -> str:
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.op, {})[r.target] = r
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
        "On trn1 one NeuronCore's 16 DMA engines move 272 GB/s against 410 GB/s of HBM, so a kernel that "
        "stages every byte through SBUF is at least 1.51x its HBM bound there (trn2: 368 vs 362 GB/s).", "",
        "The trn2 columns time one physical core (LNC=1: its own engines and its share of the pair's HBM "
        "bandwidth). At trn2's default LNC=2 a logical core is the pair, and kernels split their stores "
        "over both cores (docs/cost-model.md, Logical NeuronCores); this report does not time that yet.", ""]
    for target in TARGETS:
        rs = [r for r in timed if r.target == target]
        if not rs:
            continue
        within = sum(1 for r in rs if r.ratio <= TARGET_RATIO)
        lines.append(f"- {target}: {len(rs)} ops timed, {within} within {TARGET_RATIO:g}x of their bound; "
                     f"highest MBU {max(r.mbu_percent for r in rs):.1f}%")
    lines += ["", "## The worst ratios", ""]
    for target in TARGETS:
        rs = sorted((r for r in timed if r.target == target), key=lambda r: -r.ratio)[:10]
        lines.append(f"- {target}: " + ", ".join(f"`{r.op.replace('aten::', '')}` {r.ratio:.2f}x" for r in rs))
    lines += ["", "## Every op", "",
              "| op | shape | " + " | ".join(f"{t} time (us) | {t} bound (us) | {t} ratio | {t} MBU %" for t in TARGETS)
              + " | limit | why above 2x |",
              "|---|---|" + "---|---|---|---|" * len(TARGETS) + "---|---|"]
    errors = []
    for op in sorted(by):
        cells = []
        shape = limit = bottleneck = ""
        worst = 0.0
        for t in TARGETS:
            found = by[op].get(t)
            if found is None or found.error:
                cells.append("| | | |")
                if found is not None and t == TARGETS[-1]:
                    errors.append(f"- `{op}`: {found.error}")
                continue
            r = found
            shape, limit = r.shape, r.limit
            if r.ratio > worst:
                worst, bottleneck = r.ratio, r.bottleneck
            cells.append(f"{r.time_ns / 1e3:.1f} | {r.bound_ns / 1e3:.1f} | {r.ratio:.2f} | {r.mbu_percent:.0f}")
        if not shape:
            continue
        note = _note(op, worst, bottleneck, by[op])
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
        rows = sorted([Row(**r) for r in kept] + fresh, key=lambda r: (r.op, r.target))
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
