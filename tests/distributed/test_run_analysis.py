"""A profiled 4-rank run with a straggler what-if: the analysis, HTA and the merged view on its profiles."""

import json

import pytest

from trnscope.distributed import cost
from trnscope.distributed.topology import place, ring_hops
from trnscope.hw import logical_spec
from trnscope.hw.interconnect import TRN2_48XLARGE

from .conftest import ROOT, trnscope_run, worker_env

MiB = 2**20


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straggler") / "run"
    p = trnscope_run("--nproc", 4, "--profile", run_dir, ROOT / "examples/distributed/straggler.py",
                     "--steps", 2, "--mib", 64, "--ops", 4, env=worker_env(TRNSCOPE_RANK_SLOWDOWN="3:1.25"))
    assert p.returncode == 0, p.stdout + p.stderr
    return run_dir


def test_the_straggler_is_named_and_the_64_mib_all_reduce_takes_the_formula(straggler_run):
    from trnscope.analysis.ranks import load_run

    a = load_run(straggler_run)
    assert sorted(a.traces) == [0, 1, 2, 3] and a.problems() == []
    assert a.straggler() == 3
    rows = a.straggler_rows()
    assert rows and all(r["last_rank"] == 3 and r["late_by_ns"] > 0 for r in rows)
    # each of the others waited for rank 3 at every all_reduce; rank 3 never waited
    per = {s["rank"]: s for s in a.stragglers()}
    assert per[3]["own_wait_ns"] == 0 and all(per[r]["own_wait_ns"] > 0 for r in (0, 1, 2))
    # the ranks run at trn2's default LNC=2: a chip hop is a DMA of the logical core's two physical
    # cores' 16 engines each (23 GB/s per engine)
    trn2 = logical_spec("trn2")
    hops = ring_hops([place(r, 0, trn2, TRN2_48XLARGE) for r in range(4)], trn2, TRN2_48XLARGE)
    want, algo = cost.collective_ns("all_reduce", 64 * MiB, hops, 4)
    assert want == round(2 * 3 * (1300 + 16 * MiB / (trn2.lnc * 16 * 23e9) * 1e9))
    for r in rows:
        assert (r["bytes"], r["algorithm"], r["duration_ns"]) == (64 * MiB, algo, want)
    doc = a.traces[0].doc
    assert doc["distributedInfo"]["backend"] == "neuron" and doc["distributedInfo"]["world_size"] == 4
    ev = a.collectives[0].ranks[0]
    assert ev["cat"] == "kernel" and ev["name"].startswith("ncclKernel_AllReduce_RING_Sum_float32")
    assert {"Process Group Name", "Seq", "In msg nelems", "algorithm", "bytes"} <= set(ev["args"])


def test_hta_reads_the_ranks_and_names_the_straggler(straggler_run):
    hta = pytest.importorskip("hta.trace_analysis")
    from trnscope.analysis.ranks import hta_dir, load_run

    ta = hta.TraceAnalysis(trace_dir=str(hta_dir(load_run(straggler_run))))
    assert sorted(ta.t.traces) == [0, 1, 2, 3]
    overlap = ta.get_comm_comp_overlap(visualize=False)
    assert sorted(overlap["rank"]) == [0, 1, 2, 3]
    assert ta.get_potential_stragglers(profiler_steps=[1, 2], num_candidates=1, visualize=False) == [3]


def test_summary_and_the_merged_view_of_all_ranks(straggler_run, capsys):
    from trnscope.analysis.ranks import load_run, merged_trace
    from trnscope.cli.main import main

    assert main(["summary", str(straggler_run)]) == 0
    out = capsys.readouterr().out
    assert "straggler: rank 3" in out and "Compute / communication overlap per rank" in out
    assert main(["summary", "--json", str(straggler_run)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["straggler"] == 3 and len(data["overlap"]) == 4
    doc = merged_trace(load_run(straggler_run))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert {f"rank {r} · neuron:0" for r in range(4)} <= names
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "collective"]
    by_id = {}
    for e in flows:
        by_id.setdefault(e["id"], []).append(e["ph"])
    assert by_id and all(sorted(v) == ["f", "s", "t", "t"] for v in by_id.values())
    # the shared clock: one collective's activities end at the same instant on every rank
    first = load_run(straggler_run).collectives[0]
    ends = [e["ts"] + e["dur"] for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and e.get("args", {}).get("Seq") == first.key[2]]
    assert len(ends) == 4 and max(ends) - min(ends) < 0.002  # us: the same ns, rounded in two fields


def test_the_perfetto_archive_merges_every_rank_onto_one_timeline(straggler_run):
    import tarfile

    from trnscope.analysis.ranks import load_run, perfetto_archive

    a = load_run(straggler_run)
    with tarfile.open(perfetto_archive(a)) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("perfetto_manifest.json"))["perfetto_manifest"]
        docs = {n: json.load(tar.extractfile(n)) for n in names if n.startswith("rank_")}
    assert names[0] == "perfetto_manifest.json" and sorted(docs) == [f"rank_{r}.json" for r in range(4)]
    assert manifest["version"] == 1
    files = {f["path"]: f for f in manifest["files"]}
    assert sorted(files) == sorted(docs)
    # one machine per rank keeps their processes apart; every file is pinned to rank 0's on the shared clock
    assert len({f["machine"]["name"] for f in files.values()}) == 4
    for r in range(1, 4):
        assert files[f"rank_{r}.json"]["clocks"] == {"sync_to": {"file": "rank_0.json"}, "offset_ns": 0}
    for r in range(4):
        assert docs[f"rank_{r}.json"]["distributedInfo"]["rank"] == r
