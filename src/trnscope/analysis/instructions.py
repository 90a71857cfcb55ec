"""Instruction tables (an NTFF's ``instruction`` table) grouped by a key per instruction: the
framework op it came from, its source line. One definition of a group's time for the device view's
tables, the roofline per op and the source-line split: the union of its instructions' intervals
(engines running side by side count once), so a group's time never exceeds the NEFF's."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .tensor_peak import dtype_of_operands
from .utilization import union_length


@dataclass
class Group:
    key: object
    instructions: int
    busy_ns: float  # union of the group's instruction intervals
    model_flops: float
    hbm_bytes: float
    # model FLOPs per dtype TensorE streamed (tensor_peak), when the table has operand text
    flops_by_dtype: dict[str, float] = field(default_factory=dict)


def group_time(table: dict[str, np.ndarray], keys) -> list[Group]:
    """Per distinct key (one per instruction of ``table``, None leaves an instruction out), its
    instruction count, busy time, model FLOPs and HBM bytes, in key order."""
    keys = list(keys)
    if not keys:
        return []
    index: dict[object, int] = {}
    codes = np.fromiter((-1 if k is None else index.setdefault(k, len(index)) for k in keys), np.int64, len(keys))
    start, end = np.asarray(table["start_ns"], float), np.asarray(table["end_ns"], float)
    zeros = np.zeros(len(keys))
    flops = np.asarray(table.get("model_flops", zeros), float)
    hbm = np.asarray(table.get("hbm_read_bytes", zeros), float) + np.asarray(table.get("hbm_write_bytes", zeros), float)
    by_dtype: dict[int, dict[str, float]] = {}
    operands = table.get("operands")
    if operands is not None:
        for i in np.flatnonzero((flops > 0) & (codes >= 0)).tolist():
            slot = by_dtype.setdefault(int(codes[i]), {})
            d = dtype_of_operands(operands[i])
            slot[d] = slot.get(d, 0.0) + float(flops[i])
    out = []
    for key in sorted(index, key=str):
        mine = codes == index[key]
        out.append(Group(key, int(mine.sum()), float(union_length(start[mine], end[mine])), float(flops[mine].sum()),
                         float(hbm[mine].sum()), by_dtype.get(index[key], {})))
    return out


def op_names(table: dict[str, np.ndarray]) -> list[str]:
    """Each instruction's framework-op label ("(no op)" where it has none)."""
    ops = table.get("framework_op")
    return [str(o) if o else "(no op)" for o in (ops if ops is not None else [])]
