"""Bad input on 2 ranks: argv[1] = "mismatch" (rank 1 passes another shape) or "dead" (rank 1 exits)."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import trnscope  # noqa: F401

mode = sys.argv[1]
dist.init_process_group("neuron", timeout=timedelta(seconds=30))
r = dist.get_rank()
dev = torch.device("neuron")
t = torch.ones(4, device=dev)
dist.all_reduce(t)  # a first collective that every rank completes
if mode == "mismatch":
    dist.all_reduce(torch.ones(4 if r == 0 else 5, device=dev))
elif mode == "dead":
    if r == 1:
        os._exit(3)
    dist.all_reduce(t)
print(f"rank {r} finished without an error", flush=True)
