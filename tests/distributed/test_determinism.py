"""The same multi-rank run gives the same timeline on every rank, every time (modelled host time),
with the ranks sharing a persistent NEFF cache that starts cold or warm: which rank stores a NEFF
first is a race between the processes, and no profile may depend on it."""

import json

import pytest

from .conftest import ROOT, WORKERS, torchrun, trnscope_run, worker_env


def _env(cache):
    # the ranks share one persistent cache (conftest's default turns it off)
    return worker_env(TRNSCOPE_DISABLE_NEFF_CACHE="0", TORCH_NEURONX_NEFF_CACHE_DIR=cache)


def _two_ranks(tmp_path, name, cache):
    out = tmp_path / name
    out.mkdir()
    p = torchrun(WORKERS / "collectives.py", 2, out, env=_env(cache))
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _host_compiles(rank):
    return [e for e in rank["execs"] if e[6] > 0]


def test_two_ranks_cold_and_warm_cache_repeat_exactly(tmp_path):
    cold = tmp_path / "cache_a"
    a = _two_ranks(tmp_path, "a", cold)
    b = _two_ranks(tmp_path, "b", tmp_path / "cache_b")          # another cold cache
    c = _two_ranks(tmp_path, "c", cold)                          # warm: a's entries
    d = _two_ranks(tmp_path, "d", cold)                          # warm again
    for r in range(2):
        assert a[r]["execs"] and a[r]["rows"]
        assert a[r] == b[r], f"rank {r}: two cold runs differ"
        assert c[r] == d[r], f"rank {r}: two warm runs differ"
    # cold: both ranks compiled every NEFF they ran (each rank compiles, or waits for the one that
    # does), whoever stored it first; warm: every rank loaded the earlier run's NEFFs instead
    assert a[0]["stats"]["neffs_compiled"] == a[1]["stats"]["neffs_compiled"] > 0
    assert a[0]["stats"]["neffs_loaded"] == a[1]["stats"]["neffs_loaded"] == 0
    assert c[0]["stats"]["neffs_compiled"] == 0 and c[0]["stats"]["neffs_loaded"] == a[0]["stats"]["neffs_compiled"]
    assert len(_host_compiles(a[0])) == len(_host_compiles(a[1])) > 0
    # the same device work either way; only the host's compile-or-load time differs
    for r in range(2):
        assert [e[5] - e[4] for e in a[r]["execs"]] == [e[5] - e[4] for e in c[r]["execs"]]
        assert sum(e[6] for e in c[r]["execs"]) < sum(e[6] for e in a[r]["execs"])
    # the ranks agree on every collective's device times in every run
    for run in (a, c):
        coll = [[row[:7] for row in run[r]["rows"] if row[0] not in ("send", "recv")] for r in range(2)]
        assert coll[0] == coll[1]


def _profile_timeline(run_dir):
    """Per rank: every complete event of its framework trace as (name, cat, ts, dur, compile ns), in order."""
    from trnscope.analysis.ranks import load_run

    a = load_run(run_dir)
    assert a.problems() == []
    return {r: sorted((e["name"], e.get("cat", ""), e["ts"], e.get("dur", 0),
                       (e.get("args") or {}).get("compile_ns", 0)) for e in t.doc["traceEvents"] if e.get("ph") == "X")
            for r, t in a.traces.items()}


@pytest.mark.slow
def test_four_rank_profiles_repeat_with_a_cold_and_a_warm_cache(tmp_path):
    def once(name, cache):
        run_dir = tmp_path / name
        p = trnscope_run("--nproc", 4, "--profile", run_dir, ROOT / "examples/distributed/straggler.py",
                         "--steps", 1, "--warmup", 1, "--mib", 1, "--ops", 2, env=_env(cache))
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
        return _profile_timeline(run_dir)

    from trnscope.runtime.hostcost import host_costs

    load = host_costs().neff_load_ns
    cold = tmp_path / "cache"
    a, b = once("a", cold), once("b", tmp_path / "other_cache")
    c, d = once("c", cold), once("d", cold)
    assert sorted(a) == [0, 1, 2, 3]
    for r in range(4):
        assert a[r] == b[r], f"rank {r}: two cold runs differ"
        assert c[r] == d[r], f"rank {r}: two warm runs differ"
        assert a[r] != c[r]  # a warm cache loads instead of compiling: an honest, different host timeline
        # every rank compiled in the cold runs (whichever stored a NEFF first); in the warm ones every
        # rank loaded (the host-cost model's NEFF load) and none compiled
        assert [e for e in a[r] if e[4] > load]
        assert {e[4] for e in c[r]} <= {0, load} and load in {e[4] for e in c[r]}
