"""DDP's bucket copies wait for the all_reduce that produced them; FSDP2's frees and re-allocations of
unsharded parameters show in torch.neuron's memory counters."""

import json

import pytest

from .conftest import WORKERS, torchrun, worker_env


def _run(tmp_path, mode, **env):
    out = tmp_path / mode
    out.mkdir()
    p = torchrun(WORKERS / "grads.py", 2, mode, out, env=worker_env(**env))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_ddp_bucket_copies_start_after_their_all_reduce(tmp_path):
    # a slow link makes each bucket's all_reduce last far longer than the host takes to reach the copies
    for rank in _run(tmp_path, "ddp", TRNSCOPE_LINK_SLOWDOWN=200):
        assert rank["grads_match"]
        colls = [c for c in rank["collectives"] if c[0] == "all_reduce"]  # (the forward broadcasts too)
        assert len(colls) >= 2  # several buckets
        last_submit = max(c[2] for c in colls)
        reduced = max(c[4] for c in colls)
        # what the host queued after the last bucket's all_reduce: DDP's copies of the buckets into .grad
        after = [e for e in rank["execs"] if e[2] >= last_submit and e[0] == "kernel"]
        assert after, rank["execs"]
        assert all(e[4] >= reduced for e in after), (reduced, after)
        # and the host did reach them before the all_reduces ended: the order is the device's doing
        assert min(e[2] for e in after) < reduced


def test_fsdp2_memory_counters_follow_the_unsharded_parameters(tmp_path):
    from trnscope.device._core import CORE

    if CORE is None:
        pytest.skip("without the C++ core FSDP2's frees are not counted (docs/distributed.md)")
    for rank in _run(tmp_path, "fsdp2"):
        assert rank["grads_match"]
        shard = rank["param_bytes"] // 2
        layer = rank["param_bytes"] // 4
        # after the forward every layer is resharded: only the shards, the output and the saved
        # activations stay; the backward frees those and leaves the sharded gradients
        assert rank["after_backward"] - rank["before"] == rank["grad_bytes"] == shard
        assert rank["after_forward"] - rank["before"] < layer
        # layer by layer the forward keeps only one activation more: each unsharded layer is freed
        steps = [b - a for a, b in zip(rank["after_layer"], rank["after_layer"][1:])]
        assert len(steps) == 3 and all(s <= 2 * rank["activation_bytes"] for s in steps), steps
        assert rank["peak"] - rank["before"] >= layer  # while a layer computed, it was whole
