"""Issue 19, case 6: profile files of the wrong shape are clean errors naming the file (or, for the
optional host samples, lose only their own lanes); NEFFs whose JSON is damaged behind a valid hash
are refused by `trnscope inspect` with one line."""

from __future__ import annotations

import hashlib
import io
import shutil
import struct
import tarfile

import orjson
import pytest
from rich.console import Console

from trnscope.analysis import ProfileAnalysis, ProfileError, load_profile
from trnscope.analysis.profile_dir import ProfileFormatError, read_ntff, read_ntff_header
from trnscope.cli.main import main as cli
from trnscope.formats import neff as neff_header

NTFF_HEAD = struct.Struct("<4sHHIQ32s")


@pytest.fixture()
def profile(rmsnorm, tmp_path):
    copy = tmp_path / "host_pid_1" / "20260101_000000_000000"
    shutil.copytree(rmsnorm["fused"], copy)
    return copy


@pytest.mark.parametrize("shape", [[], [1, 2], {"samples": 5}, {"samples": [1, None, "x"]},
                                   {"samples": [{"cpu_id": True, "timestamp": "soon", "util": []}]}])
def test_host_samples_of_another_shape_only_lose_their_lanes(profile, shape):
    (profile / "cpu_util.json").write_bytes(orjson.dumps(shape))
    analysis = ProfileAnalysis(load_profile(profile))
    assert analysis.to_dict()["headline"]


@pytest.mark.parametrize("events", [[1], [["X"]], ["event"]])
def test_system_trace_events_that_are_not_objects_are_named(profile, events):
    (profile / "system_trace.json").write_bytes(orjson.dumps({"traceEvents": events}))
    with pytest.raises(ProfileError, match=r"system_trace.json: event #0 is a JSON"):
        load_profile(profile)


@pytest.mark.parametrize("cat", ["framework", "neuron_rt"])
@pytest.mark.parametrize("field", ["pid", "tid", "cat"])
def test_system_trace_thread_ids_that_are_objects_are_named(profile, cat, field):
    """Found by the fuzz suite at TRNSCOPE_FUZZ_SCALE=3: a system-trace event whose pid, tid or
    category is an object raised TypeError (unhashable) while the traces were merged."""
    doc = orjson.loads((profile / "system_trace.json").read_bytes())
    target = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    target[field] = {"x": 1}
    doc["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": {"x": 1}, "tid": 1, "args": {"name": "t"}})
    (profile / "system_trace.json").write_bytes(orjson.dumps(doc))
    try:
        ProfileAnalysis(load_profile(profile))  # the duplicate framework events are dropped: it opens
    except ProfileError as exc:
        assert exc.problem.startswith("event #") and "re-export" in exc.hint


def _rewrite_ntff(path, header=None, body=None):
    data = path.read_bytes()
    magic, major, minor, hsize, bsize, digest = NTFF_HEAD.unpack_from(data)
    old_header, old_body = data[NTFF_HEAD.size:NTFF_HEAD.size + hsize], data[NTFF_HEAD.size + hsize:]
    header = old_header if header is None else orjson.dumps(header)
    body = old_body if body is None else body
    path.write_bytes(NTFF_HEAD.pack(magic, major, minor, len(header), len(body), hashlib.sha256(body).digest())
                     + header + body)
    return orjson.loads(old_header), old_body


@pytest.mark.parametrize("field,value", [("executions", 1.5), ("executions", [7]), ("vnc", "zero"),
                                         ("summary", {"engines": {"pe": {"active_time_ns": "x"}}}),
                                         ("tables", []), ("framework_ops", {"a": 1})])
def test_ntff_header_fields_of_the_wrong_type_are_named(profile, field, value):
    ntff = next(profile.glob("*.ntff"))
    header, _ = _rewrite_ntff(ntff)
    _rewrite_ntff(ntff, header={**header, field: value})
    with pytest.raises(ProfileFormatError, match=rf"{ntff.name}: header.{field}"):
        read_ntff_header(ntff)


def test_a_damaged_parquet_table_behind_a_valid_hash_is_named(profile):
    ntff = next(profile.glob("*.ntff"))
    header, body = _rewrite_ntff(ntff)
    table = next(iter(header["tables"].values()))
    damaged = bytearray(body)
    damaged[table["offset"]:table["offset"] + 64] = bytes(64)
    _rewrite_ntff(ntff, body=bytes(damaged))
    with pytest.raises(ProfileFormatError, match=rf"{ntff.name}: table .* is damaged"):
        read_ntff(ntff)
    from trnscope.profiling.ntff import NtffFormatError, read_ntff as read_written

    with pytest.raises(NtffFormatError, match="is damaged"):
        read_written(ntff)


def _neff_with(path, edit):
    """The NEFF with one JSON member edited, repacked with a valid size and hash."""
    from trnscope.isa import neff as neff_format

    data = path.read_bytes()
    header = neff_format.read_header(data)
    hsize = header["header_size"]
    with tarfile.open(fileobj=io.BytesIO(data[hsize:hsize + header["data_size"]])) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    members = [(name, edit(name, blob)) for name, blob in members]
    body = neff_format._tar_bytes(members)
    fields = list(neff_header.HEADER.unpack(data[:neff_header.HEADER.size]))
    fields[3], fields[8] = len(body), hashlib.sha256(body).digest()
    path.write_bytes(neff_header.HEADER.pack(*fields).ljust(hsize, b"\0") + body)


def _json_edit(member: str, change):
    def edit(name, blob):
        return orjson.dumps(change(orjson.loads(blob))) if name == member else blob
    return edit


NEFF_DAMAGE = {
    "neff.json is a list": _json_edit("neff.json", lambda doc: [doc]),
    "a tensor shape is a number": _json_edit("sg00/def.json", lambda d: {**d, "var": [{**d["var"][0], "shape": 3}]}),
    "a tensor without a name": _json_edit("sg00/def.json", lambda d: {**d, "var": [{k: v for k, v in d["var"][0].items() if k != "name"}]}),
    "a huge dimension": _json_edit("sg00/def.json", lambda d: {**d, "var": [{**d["var"][0], "shape": [2**62, 2**62]}]}),
    "a numeric tensor name": _json_edit("sg00/def.json", lambda d: {**d, "var": [{**d["var"][0], "name": 5}] + d["var"][1:]}),
}


@pytest.mark.parametrize("damage", sorted(NEFF_DAMAGE))
def test_inspect_refuses_or_shows_a_damaged_neff_in_one_line(profile, damage):
    neff = next(profile.glob("*.neff"))
    _neff_with(neff, NEFF_DAMAGE[damage])
    out = io.StringIO()
    code = cli(["inspect", str(neff)], console=Console(file=out, width=300))
    text = out.getvalue()
    assert code in (0, 2) and "Traceback" not in text
    if code == 2:
        assert "error:" in text and neff.name in text.split("error:")[-1]
