"""The collective cost model, topology placement, what-if parsing and fingerprint checks (no processes)."""

import math

import pytest
import torch

from trnscope.distributed import cost, signature as sig, whatif
from trnscope.distributed.errors import CollectiveMismatchError
from trnscope.distributed.topology import Placement, hop_between, place, ring_hops
from trnscope.hw import TRN1, TRN2
from trnscope.hw.interconnect import TRN1_32XLARGE, TRN2_48XLARGE, topology_for

MiB = 2**20


def test_four_rank_all_reduce_of_64_mib_is_the_documented_ring_formula():
    # docs/cost-model.md, "Collectives": ring all_reduce = 2(p-1) x (alpha + (S/p)/B); four ranks on
    # one trn2 chip: alpha = the DMA fixed latency (1300 ns), B = one core's DMA bandwidth (16 x 23 B/ns)
    places = [place(r, 0, TRN2, TRN2_48XLARGE) for r in range(4)]
    hops = ring_hops(places, TRN2, TRN2_48XLARGE)
    ns, algo = cost.collective_ns("all_reduce", 64 * MiB, hops, 4)
    S, p = 64 * MiB, 4
    B = 16 * 23e9
    assert algo == "ring"
    assert ns == round(2 * (p - 1) * (1300 + (S / p) / B * 1e9))
    assert 280_000 < ns < 282_000  # 281.3 us


def test_ranks_on_two_chips_are_bound_by_neuronlink_and_two_nodes_by_efa():
    # trn1.32xlarge: 2 cores per chip; local ranks 0-3 = chips 0 and 1
    places = [place(r, 0, TRN1, TRN1_32XLARGE) for r in range(4)]
    kinds = sorted(h.kind for h in ring_hops(places, TRN1, TRN1_32XLARGE))
    assert kinds == ["chip", "chip", "neuronlink", "neuronlink"]
    ns, _ = cost.collective_ns("all_reduce", 64 * MiB, ring_hops(places, TRN1, TRN1_32XLARGE), 4)
    chip_step = 1300 + 16 * MiB / (16 * 17e9) * 1e9       # the slower hop (one core's DMA, 272 GB/s)
    link_step = 2600 + 16 * MiB / (384 * 2**30) * 1e9
    assert ns == round(6 * max(chip_step, link_step))
    two_nodes = [Placement(0, 0, 0), Placement(1, 0, 0)]
    efa = ring_hops(two_nodes, TRN1, TRN1_32XLARGE)
    assert {h.kind for h in efa} == {"efa"}
    assert cost.collective_ns("all_reduce", 64 * MiB, efa, 2)[0] == round(2 * (15_000 + 32 * MiB / 100e9 * 1e9))


def test_small_all_reduce_takes_the_tree_and_big_the_ring():
    places = [Placement(n, 0, 0) for n in range(8)]
    hops = ring_hops(places, TRN2, TRN2_48XLARGE)
    assert cost.collective_ns("all_reduce", 1024, hops, 8)[1] == "tree"
    assert cost.collective_ns("all_reduce", 256 * MiB, hops, 8)[1] == "ring"
    assert cost.collective_ns("barrier", 0, hops, 8)[0] == round(2 * math.ceil(math.log2(8)) * 15_000)


def test_a_slower_link_what_if_slows_the_collective_by_its_factor():
    places = [Placement(0, c, 0) for c in range(4)]
    base = cost.collective_ns("all_gather", 64 * MiB, ring_hops(places, TRN2, TRN2_48XLARGE), 4)[0]
    slow = whatif.link_scale("neuronlink:2")
    assert cost.collective_ns("all_gather", 64 * MiB, ring_hops(places, TRN2, TRN2_48XLARGE, slow), 4)[0] == \
        pytest.approx(2 * base, abs=2)


def test_what_if_parsing_and_its_errors():
    assert whatif.rank_slowdowns("3:1.25, 1:2") == {3: 1.25, 1: 2.0}
    assert whatif.link_scale("2").factor("efa") == 2.0
    with pytest.raises(whatif.WhatIfError, match="RANK:FACTOR"):
        whatif.rank_slowdowns("three")
    with pytest.raises(whatif.WhatIfError, match="unknown link 'pcie'"):
        whatif.link_scale("pcie:2")
    with pytest.raises(whatif.WhatIfError, match="> 0"):
        whatif.rank_slowdowns("1:0")


def test_placement_and_topologies():
    assert place(13, 0, TRN2, TRN2_48XLARGE) == Placement(0, 1, 5)
    with pytest.raises(ValueError, match="128 ranks per instance"):
        place(128, 0, TRN2, TRN2_48XLARGE)
    assert topology_for(TRN1).instance == "trn1.32xlarge"
    assert topology_for(TRN2, "trn2.48xlarge").chips == 16
    with pytest.raises(ValueError, match="TRNSCOPE_INSTANCE=trn1.32xlarge"):
        topology_for(TRN2, "trn1.32xlarge")
    assert hop_between(Placement(0, 0, 0), Placement(0, 0, 1), TRN2, TRN2_48XLARGE).kind == "chip"
    for name, (value, source, _) in TRN2_48XLARGE.sources().items():
        assert source, name


def test_a_shape_mismatch_names_both_ranks():
    a = sig.encode(10, 4, "all_reduce", torch.empty(4, 4), "sum")
    b = sig.encode(12, 4, "all_reduce", torch.empty(4, 5), "sum")
    with pytest.raises(CollectiveMismatchError) as exc:
        sig.check([a, a, b], [0, 1, 2], "default")
    msg = str(exc.value)
    assert "rank 0 called all_reduce(#4, float32[4, 4], sum)" in msg and "rank 2 called all_reduce(#4, float32[4, 5]" in msg
    c = sig.encode(10, 4, "all_reduce", torch.empty(4, 4, dtype=torch.bfloat16), "sum")
    with pytest.raises(CollectiveMismatchError, match="bfloat16"):
        sig.check([a, c], [0, 1], "default")
    sig.check([a, sig.encode(99, 4, "all_reduce", torch.empty(4, 4), "sum")], [0, 1], "default")  # arrival may differ


def test_rings_of_sibling_groups_share_the_ports_they_send_through():
    from trnscope.distributed import groups
    from trnscope.distributed.topology import shared_hops

    # trn1.32xlarge, 2 NeuronCores per chip: ranks 0,1 on chip 0 and 2,3 on chip 1. The data-parallel
    # groups {0,2} and {1,3} both cross between the chips: each chip's NeuronLink carries two rings
    places = {r: place(r, 0, TRN1, TRN1_32XLARGE) for r in range(4)}
    known = [(0, 1, 2, 3), (0, 1), (2, 3), (0, 2), (1, 3)]
    assert groups.siblings(known, [0, 2]) == [(1, 3)]
    assert groups.siblings(known, [0, 1]) == [(2, 3)]
    assert groups.siblings(known, [0, 1, 2, 3]) == []

    def ring(g):
        return ring_hops([places[r] for r in g], TRN1, TRN1_32XLARGE)

    dp = shared_hops(ring((0, 2)), [ring((1, 3))])
    assert [h.kind for h in dp] == ["neuronlink", "neuronlink"] and all(h.shared_by == 2 for h in dp)
    S = 64 * MiB
    ns, algo = cost.collective_ns("all_reduce", S, dp, 2)
    B = 384 * 2**30 / 2  # the chip's NeuronLink, half for each ring
    assert algo == "ring" and ns == round(2 * (2600 + (S / 2) / B * 1e9))
    assert ns > cost.collective_ns("all_reduce", S, ring((0, 2)), 2)[0]  # alone it has the whole link
    # tensor-parallel groups {0,1} and {2,3} stay on their own chips: each core's DMA is its own
    tp = shared_hops(ring((0, 1)), [ring((2, 3))])
    assert tp == ring((0, 1)) and all(h.shared_by == 1 for h in tp)
    # two instances: every data-parallel ring leaving an instance shares its EFA
    two = [Placement(n, c, 0) for n in range(2) for c in range(4)]
    rings = [ring_hops([two[c], two[4 + c]], TRN2, TRN2_48XLARGE) for c in range(4)]
    shared = shared_hops(rings[0], rings[1:])
    assert {h.shared_by for h in shared} == {4}
    assert shared[0].bytes_per_s == TRN2_48XLARGE.efa_bytes_per_s_per_instance / 4
    assert whatif.link_sharing("0") is False and whatif.link_sharing("") is True
    with pytest.raises(whatif.WhatIfError, match="TRNSCOPE_LINK_SHARING"):
        whatif.link_sharing("maybe")


def test_the_analysis_says_when_sharing_was_assumed_but_the_siblings_ran_apart(tmp_path):
    import json

    from trnscope.analysis.ranks import load_run

    def write(run, late_ns):
        # data-parallel groups {0,2} (name "1") and {1,3} (name "2"), each one all_reduce #1 timed as sharing
        # its links with the other; group "2" transfers late_ns later
        for r in range(4):
            group, name = ([0, 2], "1") if r % 2 == 0 else ([1, 3], "2")
            start = 10_000 + (late_ns if name == "2" else 0)
            ev = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_Sum_float32 (neuron cc)",
                  "pid": 1, "tid": 7, "ts": start / 1000, "dur": 0.5,
                  "args": {"Process Group Name": name, "Seq": 1, "profiling_name": "nccl:all_reduce",
                           "Process Group Ranks": group, "arrival_ns": start, "device_time_ns": 500,
                           "link_shared_by": 2}}
            d = run / f"rank_{r}" / "h_pid_1" / "t"
            d.mkdir(parents=True)
            (d / "trace.json").write_text(json.dumps({"distributedInfo": {"rank": r, "world_size": 4},
                                                      "baseTimeNanoseconds": 1000, "traceEvents": [ev]}))
            (d / "manifest.json").write_text('{"complete": true}')

    write(tmp_path / "together", 0)
    assert load_run(tmp_path / "together").problems() == []
    write(tmp_path / "apart", 5_000)
    a = load_run(tmp_path / "apart")
    assert [c.key[0] for c in a.unshared()] == ["1", "2"]
    assert "2 collective(s) timed with their links shared by sibling groups that did not run at the same time" \
        in " ".join(a.problems())
