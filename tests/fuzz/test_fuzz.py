"""Issue 19's fuzz suite: seeded mutations of the real fixture traces, an RMSNorm profile folder,
its NEFFs and NTFFs, through every public loader, the summary, export (re-read) and the explorer's
loading path. Verdict: crashes, silent-wrong results and hangs are all 0.

The default size runs in `make test` (about a minute per shard on one core). Set
TRNSCOPE_FUZZ_SCALE=N for N times as many inputs (the figures in docs/hardening.md are from
TRNSCOPE_FUZZ_SCALE=3), and TRNSCOPE_FUZZ_REPORT=FILE to get the counts as JSON.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from oracle import Tally
from runner import fuzz_neffs, fuzz_ntffs, fuzz_profiles, fuzz_traces, seed_documents

SCALE = max(1, int(os.environ.get("TRNSCOPE_FUZZ_SCALE", "1")))
TRACE_SHARDS = 4
TRACES_PER_SHARD = 200 * SCALE
PROFILES = 40 * SCALE
NTFFS = 150 * SCALE
NEFFS = 100 * SCALE
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared/data/kineto-traces"


def _finish(tally: Tally, name: str) -> None:
    report = os.environ.get("TRNSCOPE_FUZZ_REPORT")
    if report:
        with open(f"{report}.{name}", "w") as handle:
            json.dump({"counts": dict(tally.counts), "failures": tally.failures}, handle, indent=1)
    counts = tally.counts
    assert counts["crashes"] == 0 and counts["silent_wrong"] == 0 and counts["hangs"] == 0, (
        dict(counts), tally.failures[:5])
    assert counts["loads"] == counts["ok"] + counts["clean_errors"] + counts["crashes"] + counts["hangs"]


@pytest.fixture(scope="module")
def seeds():
    fixtures = sorted(FIXTURES.glob("*.json*"))
    if not fixtures:
        pytest.skip(f"shared trace fixtures not found at {FIXTURES}")
    return seed_documents(fixtures)


@pytest.mark.parametrize("shard", range(TRACE_SHARDS))
def test_fuzz_kineto_traces(seeds, shard, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tally = fuzz_traces(seeds, TRACES_PER_SHARD, seed=1000 + shard, workdir=tmp_path)
    assert tally.counts["inputs"] == TRACES_PER_SHARD
    _finish(tally, f"traces{shard}")


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    from rmsnorm_profiles import rmsnorm_profiles, torch_available

    if not torch_available():
        pytest.skip("recording a profile needs torch")
    from conftest_shared import shared_tmp

    return rmsnorm_profiles(shared_tmp(tmp_path_factory))["fused"]


def test_fuzz_profile_folders(profile, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tally = fuzz_profiles(profile, PROFILES, seed=2000, workdir=tmp_path)
    _finish(tally, "profiles")


def test_fuzz_ntffs(profile, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tally = fuzz_ntffs(next(profile.glob("*.ntff")), NTFFS, seed=3000, workdir=tmp_path)
    _finish(tally, "ntffs")


def test_fuzz_neffs(profile, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tally = fuzz_neffs(next(profile.glob("*.neff")), NEFFS, seed=4000, workdir=tmp_path)
    _finish(tally, "neffs")
