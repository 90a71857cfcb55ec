"""Every collective of the neuron process group on 2+ ranks; writes RANK's timings to OUT/rank<r>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.distributed.records import RECORDS

out_dir = sys.argv[1]
runtime.core(0).recording = True
dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
dev = torch.device("neuron")


def check(name, got, want):
    if got != want:
        raise AssertionError(f"rank {r} {name}: {got} != {want}")


t = torch.full((4,), float(r + 1), device=dev)
dist.all_reduce(t)
check("all_reduce", t.cpu().tolist(), [w * (w + 1) / 2] * 4)
t = torch.full((4,), float(r + 1), device=dev)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
check("all_reduce avg", t.cpu().tolist(), [(w + 1) / 2] * 4)
t = torch.full((3,), float(r + 1), device=dev)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce max", t.cpu().tolist(), [float(w)] * 3)
out = torch.empty(w * 2, device=dev)
dist.all_gather_into_tensor(out, torch.full((2,), float(r), device=dev))
check("all_gather_into_tensor", out.cpu().tolist(), [float(k) for k in range(w) for _ in range(2)])
lst = [torch.empty(2, device=dev) for _ in range(w)]
dist.all_gather(lst, torch.full((2,), float(r), device=dev))
check("all_gather", [x.cpu().tolist() for x in lst], [[float(k)] * 2 for k in range(w)])
o = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(o, torch.arange(2 * w, dtype=torch.float32, device=dev))
check("reduce_scatter_tensor", o.cpu().tolist(), [float(w * (2 * r)), float(w * (2 * r + 1))])
o = torch.empty(2, device=dev)
dist.reduce_scatter(o, [torch.ones(2, device=dev) * k for k in range(w)])
check("reduce_scatter", o.cpu().tolist(), [float(w * r)] * 2)
b = torch.full((3,), float(r), device=dev)
dist.broadcast(b, w - 1)
check("broadcast", b.cpu().tolist(), [float(w - 1)] * 3)
a2a = torch.empty(w, device=dev)
dist.all_to_all_single(a2a, torch.arange(w, dtype=torch.float32, device=dev) + 10 * r)
check("all_to_all_single", a2a.cpu().tolist(), [float(10 * k + r) for k in range(w)])
outs = [torch.empty(1, device=dev) for _ in range(w)]
dist.all_to_all(outs, [torch.full((1,), float(10 * r + k), device=dev) for k in range(w)])
check("all_to_all", [x.item() for x in outs], [float(10 * k + r) for k in range(w)])
dist.barrier()
if r == 0:
    dist.send(torch.ones(3, device=dev) * 7, 1)
elif r == 1:
    x = torch.empty(3, device=dev)
    dist.recv(x, 0)
    check("recv", x.cpu().tolist(), [7.0] * 3)
t = torch.ones(8, device=dev)
work = dist.all_reduce(t, async_op=True)
work.wait()
check("async all_reduce", t.cpu().tolist(), [float(w)] * 8)
u = fc.all_reduce(torch.ones(3, device=dev) * (r + 1), "sum", dist.group.WORLD)
check("functional all_reduce", u.cpu().tolist(), [w * (w + 1) / 2] * 3)
g = fc.all_gather_tensor(torch.ones(2, device=dev) * r, 0, dist.group.WORLD)
check("functional all_gather", g.cpu().tolist(), [float(k) for k in range(w) for _ in range(2)])
s = fc.reduce_scatter_tensor(torch.arange(2 * w, dtype=torch.float32, device=dev), "sum", 0, dist.group.WORLD)
check("functional reduce_scatter", s.cpu().tolist(), [float(w * (2 * r)), float(w * (2 * r + 1))])
with dist._coalescing_manager(device=dev):
    t1, t2 = torch.ones(2, device=dev), torch.ones(3, device=dev) * 2
    dist.all_reduce(t1)
    dist.all_reduce(t2)
check("coalesced", (t1.cpu().tolist(), t2.cpu().tolist()), ([float(w)] * 2, [2.0 * w] * 3))


def graph(x):  # a compiled graph that calls a functional collective
    return fc.all_reduce(torch.tanh(x) * 2, "sum", dist.group.WORLD) + 1


xc = torch.full((8,), float(r), device=dev)
check("compiled functional all_reduce", torch.compile(graph, backend="neuron")(xc).cpu().tolist(),
      graph(xc).cpu().tolist())
big = torch.ones(2**20, device=dev)  # 4 MiB: a timed all_reduce the test checks against the formula
dist.all_reduce(big)
torch.neuron.synchronize()
rows = [[c.kind, c.seq, c.pg_name, c.nbytes, c.algorithm, c.device_start_ns, c.device_end_ns, c.arrival_ns,
         c.host_start_ns, c.host_end_ns] for c in RECORDS]
# the rank's whole timeline: every execution (kernels, copies) on the host and the device clock
execs = [[e.kind, e.op, e.host_start_ns, e.host_end_ns, e.device_start_ns, e.device_end_ns, e.compile_ns]
         for e in runtime.core(0).records]
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    from trnscope.device.dynamo_backend import COUNTERS

    json.dump({"rows": rows, "execs": execs, "segmented_graphs": COUNTERS.segmented_graphs, "clock": runtime.CLOCK.now(), "cc_free": runtime.core(0).cc_free_ns,
               "stats": runtime.core(0).stats()}, f)
dist.destroy_process_group()
