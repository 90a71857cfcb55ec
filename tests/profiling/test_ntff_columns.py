"""The columnar NTFF writer against the specification it replaced: one record per instruction
(``DeviceTimeline.records()``) turned into the four tables by a plain loop. Every table and column
must hold the same values, for a matmul, a program with DMA and semaphores on an LNC=2 pair,
an NKI kernel's source lines, and a truncated export."""

from __future__ import annotations

import numpy as np
import pytest

from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.compiler.lnc import respread
from trnscope.formats import ntff as ntff_format
from trnscope.profiling import ntff
from trnscope.sim import simulate


def reference_tables(timeline, limit=None) -> dict[str, dict[str, list]]:
    """The per-record export, as written before the columnar one (the specification)."""
    recs = timeline.records()[:limit] if limit is not None else timeline.records()
    ins = {c: [] for c in ntff_format.INSTRUCTION_COLUMNS}
    dma = {c: [] for c in ntff_format.DMA_COLUMNS}
    sem = {c: [] for c in ntff_format.SEMAPHORE_COLUMNS}
    source = ntff.nki_source_locations(timeline.program)
    for r in recs:
        for c in ntff_format.INSTRUCTION_COLUMNS:
            v = r.get(c)
            if c in ("waits", "signals"):
                v = ntff_format.semaphore_text(v or [])
            elif c == "nki_source_location":
                v = source[r["id"]] if source is not None else ""
            ins[c].append(v)
        if r.get("engine") == "dma" or "transfer_bytes" in r:
            dma["id"].append(r["id"])
            dma["queue"].append(r["timeline_track"])
            dma["trigger_ns"].append(r.get("dma_trigger_ts", r["start_ns"]))
            dma["data_start_ns"].append(r.get("dma_data_start_ns", r["start_ns"]))
            dma["end_ns"].append(r["end_ns"])
            dma["transfer_bytes"].append(int(r.get("transfer_bytes", 0)))
            for c in ("hbm_read_bytes", "hbm_write_bytes", "operands", "framework_op"):
                dma[c].append(r[c])
        for kind, pairs, t in (("wait", r.get("waits") or [], r["start_ns"]),
                               ("signal", r.get("signals") or [], r["end_ns"])):
            for s, v in pairs:
                sem["instruction_id"].append(r["id"])
                sem["engine"].append(r["engine"])
                sem["semaphore"].append(str(s))
                sem["kind"].append(kind)
                sem["value"].append(int(v))
                sem["time_ns"].append(t)
                sem["wait_ns"].append(r["evt_wait_time_ns"] if kind == "wait" else 0.0)
    return {"instruction": ins, "dma": dma, "semaphore": sem}


def reference_allocation_table(timeline, limit=None) -> dict[str, list]:
    """The per-instruction allocation table as written before the columnar one (the specification)."""
    program = timeline.program
    n = len(program.instructions) if limit is None else min(limit, len(program.instructions))
    ins_id, space_of, lo, hi, parts, write = [], [], [], [], [], []
    for i, ins in enumerate(program.instructions[:n]):
        for is_write, aps in ((0, ins.reads()), (1, ins.writes())):
            for ap in aps:
                if not ap.on_chip:
                    continue
                ins_id.append(i)
                space_of.append(0 if ap.space.value == "sbuf" else 1)
                lo.append(ap.offset)
                hi.append(ap.offset + ap.extent_bytes())
                parts.append(ap.start + ap.partitions)
                write.append(is_write)
    out: dict[str, list] = {c: [] for c in ntff_format.ALLOCATION_COLUMNS}
    if not ins_id:
        return out
    ins_id, space_of = np.asarray(ins_id, np.int64), np.asarray(space_of, np.int64)
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    parts, write = np.asarray(parts, np.int64), np.asarray(write, np.int64)
    start = np.asarray(timeline.start_ns[:n], np.float64)
    end = np.asarray(timeline.end_ns[:n], np.float64)
    ops = program.ops
    rows = 0
    for space, space_name in ((0, "sbuf"), (1, "psum")):
        mine = np.flatnonzero(space_of == space)
        if not len(mine):
            continue
        bounds = np.unique(np.concatenate((lo[mine], hi[mine])))
        first_seg = np.searchsorted(bounds, lo[mine])
        count = np.searchsorted(bounds, hi[mine]) - first_seg
        keep = count > 0
        mine, first_seg, count = mine[keep], first_seg[keep], count[keep]
        # one event per (access, piece it covers)
        access = np.repeat(mine, count)
        seg = np.repeat(first_seg, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
        order = np.lexsort((write[access], ins_id[access], seg))  # by piece, program order, reads first
        access, seg = access[order], seg[order]
        ev_ins, ev_write = ins_id[access], write[access]
        new = np.ones(len(seg), bool)
        same_piece = seg[1:] == seg[:-1]
        read_by_other = (ev_write[:-1] == 0) & (ev_ins[:-1] != ev_ins[1:])
        new[1:] = ~same_piece | ((ev_write[1:] == 1) & read_by_other)
        value = np.cumsum(new) - 1
        n_values = int(value[-1]) + 1
        opener = ev_ins[new]
        piece = seg[new]
        # closer: the read (or, for a value never read, the write) that ends last
        ev_end = end[ev_ins]
        has_read = np.zeros(n_values, bool)
        has_read[value[ev_write == 0]] = True
        candidate = np.where((ev_write == 0) | ~has_read[value], ev_end, -np.inf)
        last = np.full(n_values, -np.inf)
        np.maximum.at(last, value, candidate)
        is_last = candidate == last[value]
        closer = np.full(n_values, -1, np.int64)
        closer[value[is_last]] = ev_ins[is_last]  # ties: the last in program order wins
        width = np.maximum.reduceat(parts[access], np.flatnonzero(new))
        size = bounds[piece + 1] - bounds[piece]
        groups, inverse = np.unique(np.stack((opener, closer)), axis=1, return_inverse=True)
        inverse = inverse.reshape(-1)
        g = groups.shape[1]
        nbytes = np.bincount(inverse, weights=size, minlength=g).astype(np.int64)
        g_lo = np.full(g, np.iinfo(np.int64).max)
        g_hi = np.zeros(g, np.int64)
        g_parts = np.zeros(g, np.int64)
        np.minimum.at(g_lo, inverse, bounds[piece])
        np.maximum.at(g_hi, inverse, bounds[piece + 1])
        np.maximum.at(g_parts, inverse, width)
        first, final = groups[0], groups[1]
        order = np.lexsort((g_lo, start[first]))
        for k in order.tolist():
            op = program.instructions[int(first[k])].op
            out["id"].append(rows)
            out["space"].append(space_name)
            out["offset"].append(int(g_lo[k]))
            out["end_offset"].append(int(g_hi[k]))
            out["bytes_per_partition"].append(int(nbytes[k]))
            out["partitions"].append(int(g_parts[k]))
            out["start_ns"].append(float(start[first[k]]))
            out["end_ns"].append(float(max(end[final[k]], start[first[k]])))
            out["first_instruction"].append(int(first[k]))
            out["last_instruction"].append(int(final[k]))
            out["framework_op"].append(ops[op] if 0 <= op < len(ops) else "")
            rows += 1
    return out


def reference_nki_sources(program) -> list[str]:
    meta = program.meta
    parts = ([dict(meta["nki"], first_instruction=0)] if "nki" in meta else []) + list(meta.get("nki_linked", ()))
    out = [""] * len(program.instructions)
    for part in parts:
        for k, loc in enumerate(part["instruction_location"]):
            if 0 <= part["first_instruction"] + k < len(out) and 0 <= loc < len(part["locations"]):
                out[part["first_instruction"] + k] = part["locations"][loc]
    return out


def as_lists(columns: dict) -> dict[str, list]:
    out = {}
    for name, column in columns.items():
        out[name] = column.to_pylist() if hasattr(column, "to_pylist") else np.asarray(column).tolist()
    return out


@pytest.fixture(scope="module")
def matmul_timeline():
    return simulate(matmul_program(512, 256, 512, "bfloat16", spec=hw.TRN2), hw.TRN2, cache=False)


@pytest.fixture(scope="module")
def pair_timeline():
    spec = hw.logical_spec("trn2", 2)
    program = respread(matmul_program(256, 256, 256, "bfloat16", spec=hw.TRN2), spec)
    assert program.physical_cores()[0] == 2
    return simulate(program, spec, cache=False)


@pytest.mark.parametrize("which", ["matmul_timeline", "pair_timeline"])
@pytest.mark.parametrize("limit", [None, 37])
def test_columns_equal_the_per_record_export(request, which, limit):
    timeline = request.getfixturevalue(which)
    got = ntff.tables_of(timeline, limit)
    want = reference_tables(timeline, limit)
    assert len(want["semaphore"]["value"]) > 0 and len(want["dma"]["id"]) > 0
    for table, columns in want.items():
        assert as_lists(got[table]) == columns, table


def test_nki_source_lines_per_instruction(matmul_timeline):
    program = matmul_timeline.program
    n = len(program.instructions)
    saved = dict(program.meta)
    try:
        program.meta["nki"] = {"kernel": "k", "locations": ["k.py:3 (k)", "k.py:7 (k)"],
                               "instruction_location": [i % 3 - 1 for i in range(n // 2)]}  # -1: no line
        program.meta["nki_linked"] = [{"kernel": "j", "locations": ["j.py:9 (j)"], "first_instruction": n - 5,
                                       "instruction_location": [0] * 9}]  # runs past the end: cut
        got = ntff.tables_of(matmul_timeline)["instruction"]["nki_source_location"].to_pylist()
        assert got == reference_nki_sources(program)
        assert {"k.py:3 (k)", "k.py:7 (k)", "j.py:9 (j)", ""} == set(got)
    finally:
        program.meta.clear()
        program.meta.update(saved)


def test_written_file_reads_back_with_the_same_rows(tmp_path, matmul_timeline):
    path = tmp_path / "1_instid_0_vnc_0.ntff"
    ntff.write_ntff(path, {"neff_id": "1", "vnc": 0}, matmul_timeline)
    header, tables = ntff_format.read(path)
    assert header["format"] == "trnscope-ntff" and header["version"] == [1, 1]
    want = reference_tables(matmul_timeline)
    for name, columns in want.items():
        assert tables[name].to_pydict() == columns, name
        assert header["tables"][name]["columns"] == list(ntff_format.TABLES[name])
    assert tables["allocation"].num_rows == header["tables"]["allocation"]["rows"] > 0


@pytest.mark.parametrize("which", ["matmul_timeline", "pair_timeline"])
def test_on_chip_accesses_are_each_instructions_patterns_in_program_order(request, which):
    from trnscope.isa.columns import program_columns

    program = request.getfixturevalue(which).program
    want = []
    for i, ins in enumerate(program.instructions):
        for is_write, aps in ((0, ins.reads()), (1, ins.writes())):
            want += [(i, 0 if ap.space.value == "sbuf" else 1, ap.offset, ap.offset + ap.extent_bytes(),
                      ap.start + ap.partitions, is_write) for ap in aps if ap.on_chip]
    cols = program_columns(program)
    got = list(zip(*(a.tolist() for a in ntff._ShapePatterns(cols.reps).on_chip(cols.shape))))
    assert got == want and len(want) > 20


@pytest.mark.parametrize("which", ["matmul_timeline", "pair_timeline"])
@pytest.mark.parametrize("limit", [None, 37])
def test_allocation_table_equals_the_per_instruction_one(request, which, limit):
    timeline = request.getfixturevalue(which)
    want = reference_allocation_table(timeline, limit)
    assert len(want["id"]) > 0
    assert as_lists(ntff.allocation_table(timeline, limit)) == want
