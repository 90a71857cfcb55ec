"""Steps of compute and an all_reduce on every rank: the straggler what-if's teaching example.

    TRNSCOPE_RANK_SLOWDOWN=3:1.25 trnscope run --nproc 4 --profile runs/straggler examples/distributed/straggler.py
    trnscope summary runs/straggler        # rank 3 is named; the others wait for it at every all_reduce

After ``--warmup`` steps (they compile), each step is annotated ``ProfilerStep#<n>`` (what HTA's straggler analysis groups iterations by).
``--mib`` sets the all_reduce size (64 MiB by default), ``--steps`` the step count.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch_neuronx  # noqa: F401


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--mib", type=float, default=64.0)
    ap.add_argument("--ops", type=int, default=20, help="small compute ops per step (host-bound work)")
    ap.add_argument("--warmup", type=int, default=2, help="unannotated steps first (they compile the NEFFs)")
    args = ap.parse_args()
    dist.init_process_group("neuron")
    dev = torch.device("neuron")
    torch.manual_seed(dist.get_rank())
    x = torch.randn(64, 64, device=dev)
    grad = torch.ones(int(args.mib * 2**20) // 4, device=dev)
    def step() -> None:
        y = x
        for _ in range(args.ops):
            y = torch.tanh(y @ x) * 0.5
        dist.all_reduce(grad)
        grad.div_(dist.get_world_size())
        y.sum().item()

    for _ in range(args.warmup):
        step()
    for n in range(1, args.steps + 1):
        with torch.profiler.record_function(f"ProfilerStep#{n}"):
            step()
    torch.neuron.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
