"""Tensor- and data-parallel groups on 4 ranks (2 x 2): an all_reduce on each; writes OUT/rank<r>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.distributed.records import RECORDS

out_dir = sys.argv[1]
runtime.core(0).recording = True
dist.init_process_group("neuron")
r = dist.get_rank()
tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][r // 2]
dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][r % 2]
dev = torch.device("neuron")
for name, group in (("tp", tp), ("dp", dp), ("world", None)):
    t = torch.full((2**20,), float(r), device=dev)  # 4 MiB
    dist.all_reduce(t, group=group)
    members = dist.get_process_group_ranks(group) if group is not None else list(range(4))
    assert t[0].item() == sum(members), (name, t[0].item())
torch.neuron.synchronize()
rows = [[c.kind, c.group_ranks, c.nbytes, c.algorithm, c.device_end_ns - c.device_start_ns, c.link_shared_by]
        for c in RECORDS]
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    json.dump(rows, f)
dist.destroy_process_group()
