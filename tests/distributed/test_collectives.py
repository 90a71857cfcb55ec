"""The neuron process group on real processes: numerics of every collective, timings the ranks agree on
and that repeat, errors that name the rank at fault."""

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
    # the same run again: the same timeline (modelled host time, no shared NEFF cache)
    again = _timings(tmp_path, "b")
    assert again[0]["rows"] == r0["rows"] and again[1]["rows"] == r1["rows"]


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
