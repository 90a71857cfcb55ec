"""The neuron process group on real processes: numerics of every collective, timings the ranks agree on,
errors that name the rank at fault."""

import json
import subprocess
import sys

import pytest

from trnscope.distributed import cost
from trnscope.distributed.topology import place, ring_hops
from trnscope.hw import logical_spec
from trnscope.hw.interconnect import TRN2_48XLARGE

from .conftest import WORKERS, free_port, run, torchrun, worker_env


def _timings(tmp_path, name):
    out = tmp_path / name
    out.mkdir()
    p = torchrun(WORKERS / "collectives.py", 2, out)
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_every_collective_on_two_ranks_with_timings_the_ranks_agree_on_and_that_repeat(tmp_path):
    first = _timings(tmp_path, "a")
    r0, r1 = first
    kinds = [row[0] for row in r0["rows"]]
    for k in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier", "send"):
        assert k in kinds or (k == "send" and "send" in kinds), k
    # rank 0 sent, rank 1 received: the rest is the same collective on both, with the same device times
    coll0 = [row for row in r0["rows"] if row[0] not in ("send", "recv")]
    coll1 = [row for row in r1["rows"] if row[0] not in ("send", "recv")]
    assert [row[:7] for row in coll0] == [row[:7] for row in coll1]
    send = next(row for row in r0["rows"] if row[0] == "send")
    recv = next(row for row in r1["rows"] if row[0] == "recv")
    assert send[5:7] == recv[5:7]
    # the last one: a 4 MiB all_reduce between cores 0 and 1 of one chip, as the cost model says
    big = coll0[-1]
    trn2 = logical_spec("trn2")  # the ranks run at trn2's default LNC
    hops = ring_hops([place(0, 0, trn2, TRN2_48XLARGE), place(1, 0, trn2, TRN2_48XLARGE)], trn2, TRN2_48XLARGE)
    assert big[0] == "all_reduce" and big[3] == 4 * 2**20
    assert big[6] - big[5] == cost.collective_ns("all_reduce", 4 * 2**20, hops, 2)[0]
    # collectives queue one after another on the collective engines, never before their arrival
    for a, b in zip(coll0, coll0[1:]):
        assert b[5] >= a[6] and b[5] >= b[7]
    # the compiled graph that calls all_reduce: two NEFFs around it in one compiled call, the second
    # after the collective's end on the device
    assert r0["segmented_graphs"] == 1
    segs = [e for e in r0["execs"] if e[0] == "kernel" and e[1].startswith("fwd1_seg")]
    assert [e[1] for e in segs] == ["fwd1_seg1", "fwd1_seg2"]
    between = [row for row in coll0 if segs[0][3] <= row[8] <= segs[1][2]]
    assert len(between) == 1 and between[0][0] == "all_reduce"
    assert segs[1][4] >= between[0][6]
    # the same run again gives the same timeline: test_determinism.py


def test_mismatched_shapes_name_both_ranks_and_the_partial_profiles_say_so(tmp_path):
    from trnscope.analysis.ranks import load_run

    run_dir = tmp_path / "run"
    p = run([sys.executable, "-m", "trnscope", "run", "--nproc", "2", "--profile", str(run_dir),
             str(WORKERS / "faults.py"), "mismatch"], worker_env())
    assert p.returncode == 1
    text = p.stdout + p.stderr
    assert "CollectiveMismatchError" in text
    assert "rank 0 called all_reduce(#2, float32[4], sum) but rank 1 called all_reduce(#2, float32[5], sum)" in text
    assert "finished without an error" not in text
    a = load_run(run_dir)
    problems = " ".join(a.problems())
    assert "rank 0's profile is partial: CollectiveMismatchError" in problems
    assert "failed ranks" in problems
    assert json.loads((run_dir / "run.json").read_text())["complete"] is False


def test_a_dead_rank_is_named_by_the_survivor_within_the_timeout(tmp_path):
    port = free_port()
    procs = []
    for r in range(2):
        env = worker_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=r, WORLD_SIZE=2, LOCAL_RANK=r)
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / "faults.py"), "dead"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank hung instead of naming the dead rank")
    assert procs[1].returncode == 3
    assert procs[0].returncode != 0
    assert "RankFailedError: rank 1 did not complete all_reduce #2" in outs[0], outs[0][-3000:]


def test_groups_of_one_split_share_the_links_they_cross(tmp_path):
    from trnscope.hw import TRN1
    from trnscope.hw.interconnect import TRN1_32XLARGE

    # trn1.32xlarge: two NeuronCores per chip, so the data-parallel groups {0,2} and {1,3} both cross
    # between chips 0 and 1 at once and share each chip's NeuronLink; the tensor-parallel groups stay
    # on a chip, and the world group has no sibling
    out = tmp_path / "mesh"
    out.mkdir()
    p = torchrun(WORKERS / "mesh.py", 4, out, env=worker_env(TRNSCOPE_INSTANCE="trn1.32xlarge"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    S = 4 * 2**20
    places = [place(r, 0, TRN1, TRN1_32XLARGE) for r in range(4)]
    for r in range(4):
        rows = {tuple(row[1]): row for row in json.loads((out / f"rank{r}.json").read_text())}
        dp = rows[(0, 2) if r % 2 == 0 else (1, 3)]
        link = TRN1_32XLARGE.neuronlink_bytes_per_s_per_chip / 2
        assert dp[3:] == ["ring", round(2 * (2600 + (S / 2) / link * 1e9)), 2]
        tp = rows[(0, 1) if r < 2 else (2, 3)]
        alone = cost.collective_ns("all_reduce", S, ring_hops(places[:2], TRN1, TRN1_32XLARGE), 2)[0]
        assert tp[4:] == [alone, 1]
        world = rows[(0, 1, 2, 3)]
        assert world[4:] == [cost.collective_ns("all_reduce", S, ring_hops(places, TRN1, TRN1_32XLARGE), 4)[0], 1]
