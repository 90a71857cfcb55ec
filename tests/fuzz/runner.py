"""Run the public loaders on mutated inputs and tally what happens (see oracle.py for the rules).

Each ``fuzz_*`` function takes a seed and a number of inputs, writes every input to a file under
``workdir`` and hands it to every loader that reads that kind of file, and returns a Tally. A
library error (TraceFormatError, ProfileError, ...) naming the file is a clean refusal; any other
exception is a crash; a result that disagrees with the reference parse, or holds a negative
duration or an out-of-range figure, is silent-wrong; a case past its deadline is a hang.
"""

from __future__ import annotations

import io
import random
import shutil
import tarfile
import traceback
from pathlib import Path

import orjson
from rich.console import Console

from mutate import dump_events, dump_json, maybe_gzip, mutate_bytes, mutate_events
from oracle import Hang, Tally, check_figures, check_trace, deadline, reference_parse

CASE_SECONDS = 60.0
_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS  # what the explorer answers with


def _library_errors():
    from trnscope.analysis import ProfileError
    from trnscope.analysis.profile_dir import ProfileFormatError
    from trnscope.isa import NeffFormatError
    from trnscope.profiling.ntff import NtffFormatError
    from trnscope.trace import TraceFormatError

    return (TraceFormatError, ProfileError, ProfileFormatError, NeffFormatError, NtffFormatError)


def _attempt(tally: Tally, label: str, path: Path, fn):
    """Run one load; tally it; return its result, or None when it refused or failed."""
    tally.add("loads")
    try:
        with deadline(CASE_SECONDS):
            result = fn()
    except Hang:
        tally.add("hangs", f"{label}: {path}")
        return None
    except _library_errors() as exc:
        if path.name not in str(exc) and str(path.parent) not in str(exc):
            tally.add("crashes", f"{label}: error does not name the file: {exc}")
        else:
            tally.add("clean_errors")
        return None
    except Exception:  # noqa: BLE001 - the point of the suite
        tally.add("crashes", f"{label} on {path}:\n{traceback.format_exc(limit=6)}")
        return None
    tally.add("ok")
    return result


def _verdict(tally: Tally, label: str, path: Path, problem: str | None) -> None:
    if problem:
        tally.add("silent_wrong", f"{label} on {path}: {problem}")


# --- Kineto traces -------------------------------------------------------------------------------


def seed_documents(fixtures: list[Path], max_events: int = 400) -> list[tuple[str, object, list]]:
    """(name, document, events) per fixture, big ones cut to their first ``max_events`` events."""
    from trnscope.trace.jsonchunks import ChromeSource

    out = []
    for path in fixtures:
        source = ChromeSource.from_path(path)
        events = source.parse_whole()
        out.append((path.name, dict(source.metadata) or None, events[:max_events]))
    return out


def fuzz_traces(seeds, count: int, seed: int, workdir: Path, explorer_every: int = 8) -> Tally:
    from trnscope.analysis import ProfileAnalysis, load_profile
    from trnscope.trace import dumps_kineto, open_trace, parse_kineto, read_kineto

    rng = random.Random(seed)
    tally = Tally()
    for case in range(count):
        name, top, events = seeds[rng.randrange(len(seeds))]
        if rng.random() < 0.6:
            data = dump_events(top if top is not None else [], mutate_events(events, rng))
            if rng.random() < 0.15:
                data = mutate_bytes(data, rng)
        else:
            data = mutate_bytes(dump_events(top if top is not None else [], events), rng)
        data = maybe_gzip(data, rng)
        path = workdir / f"t{seed}_{case}.pt.trace.json"
        path.write_bytes(data)
        tally.add("inputs")
        label = f"seed {seed} case {case} ({name})"
        ref = reference_parse(data)
        trace = _attempt(tally, f"read_kineto {label}", path, lambda: read_kineto(path))
        again = _attempt(tally, f"parse_kineto {label}", path, lambda: parse_kineto(data, str(path)))
        _attempt(tally, f"open_trace {label}", path, lambda: open_trace(path))
        if (trace is None) != (again is None):
            _verdict(tally, label, path, "read_kineto and parse_kineto disagree")
        if trace is None:
            if ref is not None:
                tally.add("refused_but_reference_reads")
            path.unlink()
            continue
        _verdict(tally, f"read_kineto {label}", path, check_trace(trace, ref))
        exported = _attempt(tally, f"export re-read {label}", path, lambda: parse_kineto(dumps_kineto(trace), str(path)))
        if exported is not None:
            _verdict(tally, f"export {label}", path, _same(trace, exported))
        analysis = _attempt(tally, f"load_profile {label}", path, lambda: ProfileAnalysis(load_profile(path)))
        if analysis is not None:
            _verdict(tally, f"summary {label}", path, _summary_problem(analysis))
        if case % explorer_every == 0:
            explore(tally, label, path, workdir)
        path.unlink()
    return tally


def _same(trace, other) -> str | None:
    a, b = trace.slices, other.slices
    if len(a) != len(b):
        return f"export re-read has {len(b)} slices, not {len(a)}"
    if sorted(zip(a.ts_ns.tolist(), a.dur_ns.tolist())) != sorted(zip(b.ts_ns.tolist(), b.dur_ns.tolist())):
        return "export re-read changed slice times"
    if len(trace.flows) != len(other.flows):
        return f"export re-read has {len(other.flows)} flows, not {len(trace.flows)}"
    return None


def _summary_problem(analysis) -> str | None:
    data = analysis.to_dict()
    orjson.dumps(data, option=_JSON_OPTIONS, default=str)
    return check_figures(data)


def _summary_text(analysis) -> None:
    from trnscope.cli.analysis_cmds import _print_summary

    _print_summary(Console(file=io.StringIO(), width=160), "fuzz", analysis, 12, False)


# --- the explorer's loading path -----------------------------------------------------------------


def explore(tally: Tally, label: str, path: Path, workdir: Path) -> None:
    """What the explorer does with a file it lists: catalog, session, views, payloads."""
    from trnscope.explorer.app import Explorer
    from trnscope.explorer import payloads

    root = path if path.is_file() else path

    def run():
        explorer = Explorer([root], cache=None)
        out = []
        for entry in explorer.catalog.entries():
            session = explorer.sessions.get(entry)
            for build in (payloads.card, payloads.summary, payloads.ops):
                out.append(build(session))
            views = [session.system]
            files = session.profile.files
            for neff, nc in sorted((files.ntffs if files is not None else {}).keys())[:2]:
                views.append(_device_view(session, neff, nc, tally, label, path))
            for view in filter(None, views):
                layout = view.describe()
                start, end = layout["start"], max(layout["end"], layout["start"] + 1)
                out.append(view.lod(start, end, 400, None))
                out.append(view.select(start, end, None))
                for row in range(min(3, len(view.trace.slices))):
                    out.append(view.details(row))
        for item in out:
            orjson.dumps(item, option=_JSON_OPTIONS)
        return out

    _attempt(tally, f"explorer {label}", path, run)


def _device_view(session, neff, nc, tally, label, path):
    from trnscope.analysis import ProfileError

    try:
        return session.device(neff, nc)
    except ProfileError:
        return None  # a clean refusal of one NTFF (counted by the NTFF fuzzer)


# --- profile folders -----------------------------------------------------------------------------

PROFILE_JSON = ("trace.json", "system_trace.json", "cpu_util.json", "host_mem.json", "manifest.json")


def fuzz_profiles(profile: Path, count: int, seed: int, workdir: Path) -> Tally:
    from trnscope.analysis import ProfileAnalysis, load_profile
    from trnscope.cli.main import main as cli

    rng = random.Random(seed)
    tally = Tally()
    names = sorted(p.name for p in profile.iterdir())
    for case in range(count):
        folder = workdir / f"p{seed}_{case}" / "host_pid_1" / "20260101_000000_000000"
        shutil.copytree(profile, folder)
        target = folder / rng.choice(names)
        action = rng.random()
        if action < 0.1:
            target.unlink()
        elif target.name in PROFILE_JSON and action < 0.7:
            target.write_bytes(_mutate_json_file(target.read_bytes(), rng))
        else:
            target.write_bytes(mutate_bytes(target.read_bytes(), rng))
        tally.add("inputs")
        label = f"profile seed {seed} case {case} ({target.name})"
        analysis = _attempt(tally, f"load_profile {label}", folder, lambda: ProfileAnalysis(load_profile(folder)))
        if analysis is not None:
            _verdict(tally, f"summary {label}", folder, _summary_problem(analysis))
            _attempt(tally, f"summary text {label}", folder, lambda: _summary_text(analysis))
        out = io.StringIO()
        code = _attempt(tally, f"trnscope summary {label}", folder,
                        lambda: cli(["summary", str(folder)], console=Console(file=out, width=160)))
        if code not in (None, 0, 1) and "error:" not in out.getvalue():
            tally.add("crashes", f"trnscope summary {label}: exit {code} without an error line")
        explore(tally, label, folder, workdir)
        shutil.rmtree(folder.parents[1])
    return tally


def _mutate_json_file(data: bytes, rng: random.Random) -> bytes:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return mutate_bytes(data, rng)
    if isinstance(document, dict) and isinstance(document.get("traceEvents"), list):
        return dump_events(document, mutate_events(document["traceEvents"], rng))
    return dump_json(_mutate_value(document, rng, depth=0))


def _mutate_value(value, rng: random.Random, depth: int):
    """Replace one value somewhere inside a JSON document (or the whole of it)."""
    from mutate import SPECIAL_VALUES

    if depth > 6 or rng.random() < 0.25 or not isinstance(value, (dict, list)) or not value:
        return rng.choice(SPECIAL_VALUES)
    if isinstance(value, dict):
        key = rng.choice(list(value))
        return {**value, key: _mutate_value(value[key], rng, depth + 1)}
    i = rng.randrange(len(value))
    return [*value[:i], _mutate_value(value[i], rng, depth + 1), *value[i + 1:]]


# --- NTFF and NEFF files -------------------------------------------------------------------------


def fuzz_ntffs(ntff: Path, count: int, seed: int, workdir: Path) -> Tally:
    """Header edits with the checksum left valid, body edits with it recomputed (so the Parquet
    tables are reached), and plain byte damage."""
    import hashlib
    import struct

    from trnscope.analysis.device_trace import build_device_trace
    from trnscope.analysis.profile_dir import read_ntff, read_ntff_header
    from trnscope.profiling import ntff as writer_side

    head = struct.Struct("<4sHHIQ32s")
    data = ntff.read_bytes()
    magic, major, minor, hsize, bsize, digest = head.unpack_from(data)
    header, body = data[head.size:head.size + hsize], data[head.size + hsize:]
    rng = random.Random(seed)
    tally = Tally()
    for case in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            new_header = dump_json(_mutate_value(orjson.loads(header), rng, 0))
            mutated = head.pack(magic, major, minor, len(new_header), bsize, digest) + new_header + body
        elif kind == 1:
            new_body = mutate_bytes(body, rng)
            mutated = head.pack(magic, major, minor, hsize, len(new_body), hashlib.sha256(new_body).digest()) + header + new_body
        else:
            mutated = mutate_bytes(data, rng)
        path = workdir / f"n{seed}_{case}_instid_0_vnc_0.ntff"
        path.write_bytes(mutated)
        tally.add("inputs")
        label = f"ntff seed {seed} case {case}"
        _attempt(tally, f"read_ntff_header {label}", path, lambda: read_ntff_header(path))
        _attempt(tally, f"profiling.ntff.read_ntff {label}", path, lambda: writer_side.read_ntff(path))
        parsed = _attempt(tally, f"read_ntff {label}", path, lambda: read_ntff(path))
        if parsed is not None:
            _attempt(tally, f"device trace {label}", path, lambda: _device_answers(build_device_trace(parsed)))
        path.unlink()
    return tally


def _device_answers(device) -> None:
    from trnscope.explorer.device_view import DeviceView

    view = DeviceView(device, locate_execution=lambda seq: None)
    layout = view.describe()
    start, end = layout["start"], max(layout["end"], layout["start"] + 1)
    for answer in (layout, view.lod(start, end, 400, None), view.select(start, end, None),
                   *(view.details(row) for row in range(min(3, len(view.trace.slices))))):
        orjson.dumps(answer, option=_JSON_OPTIONS)
    problem = check_trace(view.trace, None)
    if problem and problem != "loaded a file the reference parse cannot read":
        raise AssertionError(problem)


def fuzz_neffs(neff: Path, count: int, seed: int, workdir: Path) -> Tally:
    """Edits of the JSON inside the NEFF's tar, repacked with a valid hash (so the decoder is
    reached), and plain byte damage; each read by ``neff.load`` and ``trnscope inspect``."""
    from trnscope.cli.main import main as cli
    from trnscope.isa import neff as neff_format

    data = neff.read_bytes()
    header = neff_format.read_header(data)
    hsize = header["header_size"]
    with tarfile.open(fileobj=io.BytesIO(data[hsize:hsize + header["data_size"]])) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    rng = random.Random(seed)
    tally = Tally()
    for case in range(count):
        if rng.random() < 0.75:
            i = rng.randrange(len(members))
            name, blob = members[i]
            if name.endswith(".json"):
                blob = _mutate_json_file(blob, rng)
            else:
                blob = mutate_bytes(blob, rng)
            body = neff_format._tar_bytes([*members[:i], (name, blob), *members[i + 1:]])
            mutated = _with_body(data[:hsize], body, neff_format) + body
        else:
            mutated = mutate_bytes(data, rng)
        path = workdir / f"neff_{seed}{case}.neff"
        path.write_bytes(mutated)
        tally.add("inputs")
        label = f"neff seed {seed} case {case}"
        _attempt(tally, f"neff.load {label}", path, lambda: neff_format.load(path))
        out = io.StringIO()
        code = _attempt(tally, f"trnscope inspect {label}", path,
                        lambda: cli(["inspect", str(path)], console=Console(file=out, width=160)))
        if code not in (None, 0) and (code != 2 or path.name not in out.getvalue()):
            tally.add("crashes", f"trnscope inspect {label}: exit {code}: {out.getvalue()[-300:]}")
        path.unlink()
    return tally


def _with_body(header: bytes, body: bytes, neff_format) -> bytes:
    """The NEFF header with the size and hash of ``body`` (field layout: trnscope.formats.neff.HEADER)."""
    import hashlib

    from trnscope.formats import neff as neff_header

    fields = list(neff_header.HEADER.unpack(header[: neff_header.HEADER.size]))
    fields[3], fields[8] = len(body), hashlib.sha256(body).digest()
    return neff_header.HEADER.pack(*fields).ljust(len(header), b"\0")
