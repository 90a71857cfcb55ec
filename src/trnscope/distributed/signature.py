"""A collective call's fingerprint, exchanged with the arrival times so ranks can check they agree."""

from __future__ import annotations

import torch

from .errors import CollectiveMismatchError

MAX_DIMS = 6
# [arrival_ns, seq, kind, dtype, reduce_op, numel, ndim, dims...]
WIDTH = 7 + MAX_DIMS
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter",
         "barrier", "send", "recv"]
_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.float8_e4m3fn, torch.float8_e5m2]
_REDOPS = ["", "sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum"]


def dtype_code(dt) -> int:
    return _DTYPES.index(dt) + 1 if dt in _DTYPES else 99


def dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


_REDOP_NAMES: dict = {}


def redop_name(op) -> str:
    """``sum``, ``avg``, ... for a ``ReduceOp`` (or its ``RedOpType``)."""
    if op is None:
        return ""
    import torch.distributed as dist

    if not _REDOP_NAMES:
        for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
            _REDOP_NAMES[getattr(dist.ReduceOp.RedOpType, name)] = name.lower()
    return _REDOP_NAMES.get(getattr(op, "op", op), "unknown")  # a ReduceOp holds its RedOpType in .op


def encode(arrival_ns: int, seq: int, kind: str, t: torch.Tensor | None, reduce_op: str) -> list[int]:
    shape = list(t.shape) if t is not None else []
    row = [arrival_ns, seq, KINDS.index(kind), dtype_code(t.dtype) if t is not None else 0,
           _REDOPS.index(reduce_op) if reduce_op in _REDOPS else 99, t.numel() if t is not None else 0, len(shape)]
    dims = shape[:MAX_DIMS] + [0] * (MAX_DIMS - min(len(shape), MAX_DIMS))
    return row + dims


def describe(row) -> str:
    kind = KINDS[row[2]] if 0 <= row[2] < len(KINDS) else f"op#{row[2]}"
    dt = _DTYPES[row[3] - 1] if 1 <= row[3] <= len(_DTYPES) else None
    nd = int(row[6])
    dims = [int(d) for d in row[7:7 + min(nd, MAX_DIMS)]] + (["..."] if nd > MAX_DIMS else [])
    red = _REDOPS[row[4]] if 0 <= row[4] < len(_REDOPS) else "?"
    shape = f"{dtype_name(dt) if dt is not None else 'no tensor'}[{', '.join(map(str, dims))}]"
    return f"{kind}(#{int(row[1])}, {shape}{', ' + red if red else ''})"


def check(rows: list[list[int]], ranks: list[int], pg_name: str, fields=(1, 2, 3, 4, 5, 6)) -> None:
    """Raise naming the first rank whose call differs from the group's first rank."""
    ref = rows[0]
    for r, row in zip(ranks[1:], rows[1:]):
        if any(row[i] != ref[i] for i in fields) or row[7:] != ref[7:]:
            raise CollectiveMismatchError(
                f"collective mismatch on process group {pg_name!r}: rank {ranks[0]} called {describe(ref)} but "
                f"rank {r} called {describe(row)}. Every rank of a group must call the same collectives, with the "
                f"same shapes and dtypes, in the same order.")
