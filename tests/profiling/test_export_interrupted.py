"""Issue 19: an export that fails or is interrupted never leaves the user's ``with`` block, and
whatever it leaves behind reads as an incomplete profile everywhere (explorer, summary, --json)."""

from __future__ import annotations

import errno
import io
import os

import orjson
import pytest
import torch
from rich.console import Console

from trnscope.analysis import ProfileError, load_profile
from trnscope.analysis.profile_dir import scan_profile_dir
from trnscope.cli.main import main as cli
from trnscope.explorer.catalog import Catalog
from trnscope.profiling import NeuronProfilerWarning, ProfileMode, export
from trnscope.profiling.export import INTERRUPTED, load_manifest

from .helpers import profile_once

MODES = [ProfileMode.DEVICE, ProfileMode.RUNTIME]


def naive(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _summary(*args) -> tuple[int, str]:
    out = io.StringIO()
    code = cli(["summary", *map(str, args)], console=Console(file=out, width=2000))
    return code, out.getvalue()


def test_full_disk_while_writing_the_manifest_stays_out_of_the_with_block(xw, tmp_path, monkeypatch):
    x, w = xw
    real = export.write_json_atomic

    def full_disk(path, doc):
        if path.name == "manifest.json" and doc.get("complete", True) is not False or (
            path.name == "manifest.json" and doc.get("reason") != INTERRUPTED
        ):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, doc)

    monkeypatch.setattr(export, "write_json_atomic", full_disk)
    with pytest.warns(NeuronProfilerWarning, match="incomplete.*No space left"):
        _, where, _ = profile_once(lambda: naive(x, w), tmp_path, modes=MODES)
    assert load_manifest(where)["reason"] == INTERRUPTED  # the provisional one says what happened
    assert not [p for p in where.iterdir() if p.name.startswith(".")]  # no half-written files left


def test_no_space_even_for_the_first_manifest_is_a_warning(xw, tmp_path, monkeypatch):
    x, w = xw

    def no_space(path, doc):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "write_json_atomic", no_space)
    with pytest.warns(NeuronProfilerWarning, match="No space left"):
        _, where, result = profile_once(lambda: naive(x, w), tmp_path, modes=MODES)
    assert where is None and result is not None


def _interrupted_at(xw, tmp_path, monkeypatch, stage: str):
    """A profile whose export stopped as a kill at ``stage`` would leave it."""
    x, w = xw

    class Killed(BaseException):  # like SystemExit / KeyboardInterrupt: nothing catches it
        pass

    real = export.write_json_atomic

    def die(path, doc):
        if path.name == stage:
            raise Killed
        return real(path, doc)

    monkeypatch.setattr(export, "write_json_atomic", die)
    with pytest.raises(Killed):
        profile_once(lambda: naive(x, w), tmp_path, modes=MODES)
    (where,) = [p for p in tmp_path.rglob("manifest.json")]
    return where.parent


@pytest.mark.parametrize("stage", ["trace.json", "system_trace.json"])
def test_an_interrupted_export_reads_as_incomplete_everywhere(xw, tmp_path, monkeypatch, capsys, stage):
    where = _interrupted_at(xw, tmp_path, monkeypatch, stage)
    files = scan_profile_dir(where)
    assert not files.complete and any("did not finish" in p for p in files.problems())
    (entry,) = Catalog([tmp_path]).entries()
    assert entry.path == where and entry.manifest["complete"] is False
    assert any("did not finish" in p for p in entry.manifest["problems"])
    code, text = _summary(tmp_path)
    assert code == (1 if stage == "trace.json" else 0) and "did not finish" in text
    if stage == "system_trace.json":  # trace.json is there: figures, under a warning that comes first
        assert "INCOMPLETE profile" in text.split("Window")[0]
    else:
        with pytest.raises(ProfileError, match="incomplete profile.*no trace.json"):
            load_profile(where)
    capsys.readouterr()
    cli(["summary", "--json", str(tmp_path)], console=Console(file=io.StringIO()))
    (data,) = orjson.loads(capsys.readouterr().out)
    assert data["complete"] is False


def test_a_folder_of_neffs_and_ntffs_without_manifest_is_listed_incomplete(xw, tmp_path):
    x, w = xw
    _, where, _ = profile_once(lambda: naive(x, w), tmp_path / "run", modes=MODES)
    for name in ("manifest.json", "trace.json", "system_trace.json"):
        os.remove(where / name)  # what a kill -9 before the first manifest (older exports) left
    (entry,) = Catalog([tmp_path]).entries()
    assert entry.path == where and "no manifest.json" in " ".join(entry.manifest["problems"])
    code, text = _summary(where)
    assert code == 2 and "incomplete profile" in text and "no trace.json" in text


def test_the_manifest_records_a_window_ended_on_an_exception(xw, tmp_path):
    x, w = xw
    with pytest.raises(KeyError):
        profile_once(lambda: (naive(x, w), {}["missing"]), tmp_path, modes=MODES, warmup=0)
    (manifest,) = tmp_path.rglob("manifest.json")
    m = orjson.loads(manifest.read_bytes())
    assert m["window"]["ended_on_exception"] == "KeyError: 'missing'"
    assert any("ended on an exception (KeyError" in p for p in scan_profile_dir(manifest.parent).problems())


def test_a_clean_window_records_no_exception(xw, tmp_path):
    x, w = xw
    _, where, _ = profile_once(lambda: naive(x, w), tmp_path, modes=MODES)
    assert load_manifest(where)["window"]["ended_on_exception"] is None
    assert load_manifest(where)["complete"] is True
