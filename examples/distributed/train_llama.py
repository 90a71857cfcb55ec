"""Data-parallel training of a tiny random-config Hugging Face Llama on emulated NeuronCores.

    trnscope run --nproc 2 examples/distributed/train_llama.py --mode ddp
    trnscope run --nproc 4 --profile runs/fsdp examples/distributed/train_llama.py --mode fsdp2
    trnscope run examples/distributed/train_llama.py            # one process: the reference

Every rank builds the same model (seeded), takes its slice of the same global batch and trains for
``--steps`` steps with SGD; rank 0 prints the global mean loss of each step (one JSON line, and
into ``--out`` if given) and the CPU fallbacks each rank had (``fallbacks``). Without torchrun it
trains on the whole batch in one process, which is what the ranks' losses must equal.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch_neuronx  # noqa: F401  (trnscope under `trnscope run`)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], default="ddp")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="global batch (split across ranks)")
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--out", help="write the result JSON here (rank 0)")
    args = ap.parse_args()

    import torch.distributed as dist

    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("neuron")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must divide by the {world} ranks")
    dev = torch.device("neuron")

    model = tiny_llama().to(dev)
    if distributed and args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif distributed:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(1)
    losses = []
    per = args.batch // world
    for _ in range(args.steps):
        ids = torch.randint(0, 128, (args.batch, args.seq), generator=g)
        mine = ids[rank * per:(rank + 1) * per].to(dev)
        out = model(input_ids=mine, labels=mine)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = out.loss.detach()
        if distributed:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())

    from trnscope.device.runtime_bridge import EXECUTOR

    fallbacks = sum(EXECUTOR.fallbacks.values())
    if distributed:
        t = torch.tensor([float(fallbacks)], device=dev)
        dist.all_reduce(t)
        fallbacks = int(t.item())
    if rank == 0:
        result = {"mode": args.mode if distributed else "single", "world_size": world, "losses": losses,
                  "fallbacks": fallbacks, "fallback_ops": dict(EXECUTOR.fallbacks)}
        print(json.dumps(result))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
