"""Training loops whose scalars change every step reuse their NEFFs: an optimizer's learning rate,
bias corrections and step count reach the device as runtime operands, not as new kernels. Counted
from the runtime's statistics (NEFFs compiled), never from time."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import trnscope  # noqa: F401
from trnscope import runtime


def _compiled() -> int:
    return sum(rt.stats()["neffs_compiled"] for rt in runtime.cores())


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                               torch.nn.Linear(48, 6))


def _train(model, make_opt, steps: int, schedule) -> tuple[list[int], list[float]]:
    """(NEFFs compiled during each step, the learning rate each step used)."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 24, generator=g), torch.randint(0, 6, (16,), generator=g)
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    opt = make_opt(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    compiled, lrs = [], []
    on_device = device.type == "neuron"
    if on_device:
        rt = runtime.core(0)
        rt.records.clear()
        rt.recording = True
    for _ in range(steps):
        before = _compiled()
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        if on_device:
            torch.neuron.synchronize()
        compiled.append(_compiled() - before)
    if on_device:
        rt.recording = False
        fallbacks = sorted({r.op for r in rt.records if r.kind == "fallback"})
        rt.records.clear()
        assert not fallbacks, f"ops that ran on the CPU: {fallbacks}"  # every op counted is a device kernel
    return compiled, lrs


@pytest.mark.parametrize("make_opt, first_steps", [
    (lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01), 1),               # foreach: the accelerator default
    (lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01, foreach=False), 1),
    # SGD's first step creates the momentum buffers (a clone); its second is the first to update them
    (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4), 2),   # add_(grad, alpha=-lr)
], ids=["adamw-foreach", "adamw-loop", "sgd-momentum"])
def test_a_changing_learning_rate_compiles_nothing_after_the_first_step(make_opt, first_steps):
    cpu = _model()
    dev = copy.deepcopy(cpu).to("neuron")
    schedule = lambda step: 1.0 / (1.0 + step) + 0.01 * (step % 3)  # noqa: E731  a new value every step
    compiled, lrs = _train(dev, make_opt, 20, schedule)
    assert len(set(lrs)) == 20  # every step had its own learning rate
    assert compiled[first_steps:] == [0] * (20 - first_steps), f"NEFFs compiled per step: {compiled}"
    plans = {rt.index: len(rt.plans) for rt in runtime.cores()}
    _train(dev, make_opt, 3, lambda step: 0.3 + step)  # more values: no new dispatch plans either
    assert {rt.index: len(rt.plans) for rt in runtime.cores()} == plans
    # the numbers are still PyTorch's: the same training on the CPU gives the same parameters
    _train(cpu, make_opt, 20, schedule)
    _train(cpu, make_opt, 3, lambda step: 0.3 + step)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        assert torch.equal(p.detach(), q.detach().cpu()), name


def test_scalar_arguments_of_every_kind_reuse_the_kernel():
    x = torch.randn(64, 32, device="neuron")
    xi = torch.randint(-50, 50, (64, 32), dtype=torch.int32).to("neuron")
    ops = [lambda v: x * v, lambda v: x / torch.tensor(v), lambda v: x.add(x, alpha=v), lambda v: x.clamp(-v, v),
           lambda v: x.masked_fill(x > 0, v), lambda v: x.lerp(x.flip(0), v), lambda v: x.pow(v + 1.3),
           lambda v: xi + int(v * 10), lambda v: torch.full_like(x, v), lambda v: torch.rsub(x, v)]
    for op in ops:
        op(0.25)
    torch.neuron.synchronize()
    before = _compiled()
    rt = runtime.core(0)
    rt.records.clear()
    rt.recording = True
    try:
        for v in (0.5, 0.75, 1.5, -2.25):
            for op in ops:
                op(v)
        torch.neuron.synchronize()
    finally:
        rt.recording = False
    kinds = {r.kind for r in rt.records}
    rt.records.clear()
    assert kinds == {"kernel"}  # every op ran on the device: none fell back to the CPU
    assert _compiled() == before
    assert torch.equal((x * 0.75).cpu(), x.cpu() * 0.75)
    assert torch.equal((xi + 7).cpu(), xi.cpu() + 7)
