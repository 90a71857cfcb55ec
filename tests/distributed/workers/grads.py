"""What DDP and FSDP2 leave on the device timeline and in the memory counters; writes OUT/rank<r>.json.

``ddp``: one backward with DDP's bucket copies into ``.grad`` (gradient_as_bucket_view=False, several
buckets), every execution and collective of that backward on the modelled clock.
``fsdp2``: four fully_shard Linear layers; memory_allocated before the step, after the forward (the
unsharded parameters resharded), at the peak and after the backward, and the parameter bytes.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.distributed.records import RECORDS

mode, out_dir = sys.argv[1], sys.argv[2]
dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
dev = torch.device("neuron")
torch.manual_seed(0)
D = 256
model = torch.nn.Sequential(*[torch.nn.Linear(D, D, bias=False) for _ in range(4)]).to(dev)
param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
x = torch.randn(8, D, device=dev)
core = runtime.core(0)
result = {"param_bytes": param_bytes}

if mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, bucket_cap_mb=0.3, gradient_as_bucket_view=False)
    ddp(x).sum().backward()  # compiles
    torch.neuron.synchronize()
    model.zero_grad(set_to_none=True)
    core.recording = True
    RECORDS.clear()
    ddp(x).sum().backward()
    torch.neuron.synchronize()
    result["collectives"] = [[c.kind, c.host_start_ns, c.host_end_ns, c.device_start_ns, c.device_end_ns]
                             for c in RECORDS]
    result["execs"] = [[e.kind, e.op, e.host_start_ns, e.host_end_ns, e.device_start_ns, e.device_end_ns]
                       for e in core.records]
    grads = [p.grad.cpu() for p in model.parameters()]
else:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    torch.neuron.synchronize()
    mem = torch.neuron.memory_allocated
    after_layer = []
    for layer in model:  # after FSDP2's own post-forward hook: the layer is resharded again
        layer.register_forward_hook(lambda *_: after_layer.append(mem()))
    result["before"] = mem()
    torch.neuron.reset_peak_memory_stats()
    y = model(x)
    result["after_forward"] = mem()
    result["after_layer"] = after_layer
    result["activation_bytes"] = y.numel() * y.element_size()
    y.sum().backward()
    torch.neuron.synchronize()
    del y
    result["after_backward"] = mem()
    result["peak"] = torch.neuron.max_memory_allocated()
    result["grad_bytes"] = sum(p.grad.to_local().numel() * p.grad.element_size() for p in model.parameters())
    grads = [p.grad.full_tensor().cpu() for p in model.parameters()]

# the gradient equals one process's on the whole batch: every rank has the same x, so the mean is x's
torch.manual_seed(0)
ref = torch.nn.Sequential(*[torch.nn.Linear(D, D, bias=False) for _ in range(4)])
ref(x.cpu()).sum().backward()
result["grads_match"] = all(torch.allclose(g, p.grad, rtol=1e-4, atol=1e-5) for g, p in zip(grads, ref.parameters()))
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
