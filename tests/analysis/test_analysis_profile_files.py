"""Reading profile directories: NTFF files, device traces built from them, damaged and incomplete input."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from trnscope.analysis import NEURON, ProfileError, detect_kind, load_profile
from trnscope.analysis.device_trace import ENGINE_LANES, ENGINE_TITLES, WAIT_NAME, build_device_trace
from trnscope.analysis.profile_dir import ProfileFormatError, read_ntff, read_ntff_header, scan_profile_dir
from trnscope.formats.ntff import parse_semaphore_list
from trnscope.trace import TrackKind


@pytest.fixture(scope="module")
def naive_files(rmsnorm):
    return scan_profile_dir(rmsnorm["naive"])


def test_scan_finds_every_file(naive_files):
    files = naive_files
    assert files.complete and files.problems() == []
    assert files.framework_trace.name == "trace.json" and files.system_trace.name == "system_trace.json"
    assert len(files.neffs) == 6 and len(files.ntffs) == 6
    assert {neff for neff, _ in files.ntffs} == set(files.neffs)  # NEFF and NTFF share the numeric id


def test_ntff_tables_and_header(naive_files):
    path = next(iter(naive_files.ntffs.values()))
    ntff = read_ntff(path)
    header = read_ntff_header(path)
    assert header["neff_id"] == ntff.header["neff_id"]
    assert ntff.rows("instruction") == header["instructions_written"]
    ins = ntff.table("instruction")
    assert ins["opcode"].dtype == object and np.all(ins["end_ns"] >= ins["start_ns"])
    assert len(header["executions"]) == 3


def test_device_trace_lanes_and_dependencies(naive_files):
    path = next(p for (neff, _), p in naive_files.ntffs.items()
                if "mul" in read_ntff_header(p)["neff_name"])
    device = build_device_trace(read_ntff(path))
    trace = device.trace
    names = [t.name for t in trace.tracks if t.kind is not TrackKind.COUNTER]
    for engine in ENGINE_LANES:
        assert ENGINE_TITLES.get(engine, engine) in names  # every engine shown, even idle ones
    assert any(name.startswith("q") for name in names)  # DMA queues
    counters = [t.name for t in trace.tracks if t.kind is TrackKind.COUNTER]
    assert sorted(counters) == ["DMA throughput", "PSUM usage", "Pending DMAs", "SBUF usage"]
    assert device.memory["sbuf"]["peak_bytes"] > 0  # mul streams its operands through SBUF
    instructions = device.ntff.rows("instruction")
    waits = int(np.count_nonzero(trace.slice_names() == WAIT_NAME))
    assert len(trace.slices) == instructions + waits and waits > 0
    # slices are coloured by their framework op (category) and keep the instruction id in args
    assert set(trace.strings.lookup(trace.slices.cat)) <= {"aten::mul.Tensor", "semaphore"}
    table = device.ntff.table("instruction")
    for instruction in range(instructions):
        before, _ = device.dependencies(instruction)
        for dep in before:  # a wait is released by a signal that happened before the waiter started
            assert table["end_ns"][dep.instruction] <= table["start_ns"][instruction] + 1e-6
            assert device.row_of_instruction(dep.instruction) is not None


def test_semaphore_list_parsing():
    assert parse_semaphore_list("qSyncIO0:1;S[1] (Vector):2") == [("qSyncIO0", 1), ("S[1] (Vector)", 2)]
    assert parse_semaphore_list("") == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty"])
def test_damaged_ntff_is_refused_clearly(naive_files, tmp_path, damage):
    source = next(iter(naive_files.ntffs.values()))
    data = bytearray(source.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "flip":
        data[-10] ^= 0xFF
    elif damage == "magic":
        data[:4] = b"XXXX"
    else:
        data = bytearray()
    target = tmp_path / source.name
    target.write_bytes(bytes(data))
    with pytest.raises(ProfileFormatError) as info:
        read_ntff(target)
    message = str(info.value)
    assert source.name in message
    assert {"truncate": "truncated", "flip": "checksum", "magic": "not an NTFF", "empty": "truncated"}[damage] in message


def test_incomplete_profile_still_opens_with_a_warning(rmsnorm, tmp_path):
    copy = tmp_path / "profile"
    shutil.copytree(rmsnorm["fused"], copy)
    (copy / "manifest.json").unlink()
    assert detect_kind(copy) == NEURON  # trace.json beside system_trace.json is enough
    profile = load_profile(copy)
    assert any("no manifest" in w for w in profile.warnings)


def test_truncated_framework_trace_is_a_profile_error(rmsnorm, tmp_path):
    copy = tmp_path / "profile"
    shutil.copytree(rmsnorm["fused"], copy)
    trace = copy / "trace.json"
    trace.write_bytes(trace.read_bytes()[:2000])
    with pytest.raises(ProfileError) as info:
        load_profile(copy)
    assert "trace.json" in str(info.value) and info.value.hint


def test_not_a_profile(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ProfileError):
        load_profile(tmp_path)
    with pytest.raises(ProfileError):
        load_profile(tmp_path / "missing.json")
