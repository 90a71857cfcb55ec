"""The Parquet trace cache: written off the first answer's path, complete or not at all, and never
trusted when an entry is damaged or half written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import orjson
import pytest

from trnscope.analysis import TraceCache, load_profile
from trnscope.analysis import trace_cache as tc
from trnscope.trace import parse_kineto


def kineto_file(path: Path, events: int = 200) -> Path:
    rows = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for i in range(events):
        rows.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1,
                     "ts": 1000 + i * 10, "dur": 8, "args": {"i": i}})
    path.write_bytes(orjson.dumps({"traceEvents": rows}))
    return path


def slices_of(trace) -> list:
    s = trace.slices
    return list(zip(s.ts_ns.tolist(), s.dur_ns.tolist(), [trace.strings[int(n)] for n in s.name]))


def entries(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))


def staging(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith(tc.STAGING_PREFIX))


def test_first_answer_does_not_wait_for_the_write(tmp_path, monkeypatch):
    source = kineto_file(tmp_path / "t.json")
    cache = TraceCache(tmp_path / "cache")
    release = threading.Event()
    started = threading.Event()
    real_save = tc.save_parquet

    def slow_save(trace, directory):
        started.set()
        assert release.wait(30)
        return real_save(trace, directory)

    monkeypatch.setattr(tc, "save_parquet", slow_save)
    first = load_profile(source, cache=cache)
    assert not first.from_cache
    assert started.wait(10)  # the write is under way, and the answer is already here
    assert not entries(cache.directory)
    # a second request meanwhile parses again rather than reading a half-written entry
    again = load_profile(source, cache=cache)
    assert not again.from_cache and slices_of(again.trace) == slices_of(first.trace)
    assert not cache.wait(timeout=0.05)
    release.set()
    assert cache.wait(timeout=30)
    assert len(entries(cache.directory)) == 1 and not staging(cache.directory)
    warm = load_profile(source, cache=cache)
    assert warm.from_cache and slices_of(warm.trace) == slices_of(first.trace)


def test_concurrent_requests_and_a_second_writer_leave_one_complete_entry(tmp_path, monkeypatch):
    source = kineto_file(tmp_path / "t.json")
    caches = [TraceCache(tmp_path / "cache"), TraceCache(tmp_path / "cache")]  # as two servers would
    saves = []
    real_save = tc.save_parquet
    gate = threading.Barrier(2, timeout=30)

    def racing_save(trace, directory):
        saves.append(directory)
        if len(saves) <= 2:
            gate.wait()  # the two writers' files are written at the same time
        return real_save(trace, directory)

    monkeypatch.setattr(tc, "save_parquet", racing_save)
    results = []
    threads = [threading.Thread(target=lambda c=c: results.append(load_profile(source, cache=c)))
               for c in caches for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in caches:
        assert c.wait(timeout=60)
    assert len(results) == 8
    assert 2 <= len(saves) <= 8  # each cache writes a key once at a time; both tried
    [entry] = entries(tmp_path / "cache")
    assert tc._complete(entry) and not staging(tmp_path / "cache")
    expected = slices_of(results[0].trace)
    warm = load_profile(source, cache=TraceCache(tmp_path / "cache"))
    assert warm.from_cache and slices_of(warm.trace) == expected


CRASHING_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from trnscope.analysis import TraceCache, load_profile
    from trnscope.analysis import trace_cache as tc
    real_save = tc.save_parquet
    def save_then_hang(trace, directory):
        real_save(trace, directory)
        (Path(directory) / "slices.parquet").write_bytes(b"PAR1 cut short")  # as if mid-file
        print("writing", flush=True)
        time.sleep(600)
    tc.save_parquet = save_then_hang
    load_profile(sys.argv[1], cache=TraceCache(sys.argv[2]))
""")


def test_a_writer_killed_mid_write_leaves_nothing_that_is_trusted(tmp_path):
    source = kineto_file(tmp_path / "t.json")
    directory = tmp_path / "cache"
    env = {**os.environ, "TRNSCOPE_NO_DEVICE": "1"}
    writer = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, str(source), str(directory)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout.readline().strip() == "writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    assert staging(directory) and not entries(directory)  # its files stayed where no lookup reads
    cache = TraceCache(directory)
    fresh = load_profile(source, cache=cache)
    assert not fresh.from_cache
    assert cache.wait(timeout=30)
    warm = load_profile(source, cache=cache)
    assert warm.from_cache and slices_of(warm.trace) == slices_of(fresh.trace)
    assert len(staging(directory)) == 1  # the dead writer's folder is young: left alone for now


@pytest.mark.parametrize("damage", ["no marker", "truncated file", "bad marker"])
def test_a_damaged_entry_is_dropped_and_rebuilt(tmp_path, damage):
    source = kineto_file(tmp_path / "t.json")
    cache = TraceCache(tmp_path / "cache", background=False)
    load_profile(source, cache=cache)
    [entry] = entries(cache.directory)
    if damage == "no marker":  # e.g. written by a trnscope from before the marker
        (entry / tc.MARKER).unlink()
    elif damage == "truncated file":
        path = entry / "slices.parquet"
        path.write_bytes(path.read_bytes()[:-40])
    else:
        (entry / tc.MARKER).write_bytes(b"{not json")
    built = []
    trace, cached = cache.get_or_build([source], "kineto", lambda: built.append(1) or parse_kineto(source.read_bytes()))
    assert not cached and built == [1]
    [again] = entries(cache.directory)
    assert tc._complete(again)
    _, cached = cache.get_or_build([source], "kineto", lambda: pytest.fail("the rebuilt entry should load"))
    assert cached


def test_old_staging_folders_are_swept(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir()
    old, young = directory / f"{tc.STAGING_PREFIX}old", directory / f"{tc.STAGING_PREFIX}young"
    for path in (old, young):
        path.mkdir()
        (path / "slices.parquet").write_bytes(b"partial")
    long_ago = time.time() - tc.STALE_STAGING_S - 60
    os.utime(old, (long_ago, long_ago))
    cache = TraceCache(directory, background=False)
    load_profile(kineto_file(tmp_path / "t.json"), cache=cache)
    assert not old.exists() and young.exists()
