"""Autograd, nn.Module.to, optimizers, state_dict save/load and autocast on ``neuron``.

The host computes with ATen's CPU kernels, so results must equal CPU bit for bit.
"""

import copy
import io
import pickle

import pytest
import torch
import torch.nn.functional as F

import trnscope.device  # noqa: F401

pytestmark = pytest.mark.usefixtures("host_executor")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 32),
        torch.nn.SiLU(), torch.nn.Linear(32, 4),
    )


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)


def _assert_params_equal(cpu_model, dev_model, grads=False):
    for (name, p), q in zip(cpu_model.named_parameters(), dev_model.parameters()):
        assert q.device.type == "neuron", name
        assert torch.equal(p.detach(), q.detach().cpu()), name
        if grads:
            assert torch.equal(p.grad, q.grad.cpu()), name


def test_module_to_moves_parameters_and_buffers():
    m = torch.nn.BatchNorm1d(3)
    m.to("neuron")
    assert m.weight.device.type == "neuron" and m.running_mean.device.type == "neuron"
    assert isinstance(m.weight, torch.nn.Parameter) and m.weight.requires_grad
    m.cpu()
    assert m.weight.device.type == "cpu"


def test_mlp_backward_matches_cpu():
    model = _mlp()
    dev = copy.deepcopy(model).to("neuron")
    x, y = _batch()
    loss = F.cross_entropy(model(x), y)
    dloss = F.cross_entropy(dev(x.to("neuron")), y.to("neuron"))
    assert dloss.device.type == "neuron"
    loss.backward()
    dloss.backward()
    assert torch.equal(loss, dloss.cpu())
    _assert_params_equal(model, dev, grads=True)


def test_input_gradient_and_autograd_grad():
    x = torch.randn(5, 3, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    f = lambda t: (t.sin() * t.exp()).sum(dim=1).pow(2).mean()  # noqa: E731
    (g,) = torch.autograd.grad(f(x), x)
    (gd,) = torch.autograd.grad(f(xd), xd)
    assert gd.device.type == "neuron" and torch.equal(g, gd.cpu())


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
        lambda p: torch.optim.AdamW(p, lr=1e-2),  # foreach, the default for an accelerator
        lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
        lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
        lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    ],
    ids=["sgd-momentum", "adamw-foreach", "adamw-loop", "adamw-fused", "adam-amsgrad"],
)
def test_optimizer_steps_match_cpu(make):
    model = _mlp()
    dev = copy.deepcopy(model).to("neuron")
    opt, dopt = make(model.parameters()), make(dev.parameters())
    x, y = _batch()
    xd, yd = x.to("neuron"), y.to("neuron")
    for _ in range(3):
        opt.zero_grad()
        dopt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        F.cross_entropy(dev(xd), yd).backward()
        opt.step()
        dopt.step()
    _assert_params_equal(model, dev)
    for state in dopt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device.type == "neuron"


def test_conv_net_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, groups=2), torch.nn.GroupNorm(2, 8),
        torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
    )
    dev = copy.deepcopy(model).to("neuron")
    x = torch.randn(2, 3, 10, 10)
    out, dout = model(x), dev(x.to("neuron"))
    assert torch.equal(out, dout.cpu())
    out.square().sum().backward()
    dout.square().sum().backward()
    _assert_params_equal(model, dev, grads=True)
    assert torch.equal(model[1].running_mean, dev[1].running_mean.cpu())


def test_state_dict_save_and_load():
    model = _mlp().to("neuron")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    raw = buf.getvalue()

    same = torch.load(io.BytesIO(raw))  # saved location: neuron:0
    assert all(v.device.type == "neuron" for v in same.values())
    on_cpu = torch.load(io.BytesIO(raw), map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    for loc in ("neuron", "neuron:0", torch.device("neuron")):
        loaded = torch.load(io.BytesIO(raw), map_location=loc)
        assert all(v.device.type == "neuron" for v in loaded.values())
    cpu_model = _mlp()
    torch.manual_seed(7)
    cpu_model.load_state_dict(on_cpu)
    fresh = torch.nn.Sequential(*[copy.deepcopy(m) for m in _mlp()]).to("neuron")
    fresh.load_state_dict(torch.load(io.BytesIO(raw), map_location="neuron"))
    for k, v in model.state_dict().items():
        assert torch.equal(v.cpu(), fresh.state_dict()[k].cpu()), k
        assert torch.equal(v.cpu(), cpu_model.state_dict()[k]), k
    # a CPU checkpoint loads onto the device too
    buf2 = io.BytesIO()
    torch.save(cpu_model.state_dict(), buf2)
    assert all(v.device.type == "neuron" for v in torch.load(io.BytesIO(buf2.getvalue()), map_location="neuron").values())


def test_shared_storage_survives_save_load():
    x = torch.arange(10.0).to("neuron")
    buf = io.BytesIO()
    torch.save({"a": x, "b": x[2:5]}, buf)
    d = torch.load(io.BytesIO(buf.getvalue()))
    assert d["b"].untyped_storage().data_ptr() == d["a"].untyped_storage().data_ptr()
    d["a"][3] = -1
    assert d["b"][1].item() == -1


def test_deepcopy_and_pickle():
    x = torch.arange(4.0).to("neuron")
    assert torch.equal(copy.deepcopy(x).cpu(), x.cpu())
    assert torch.equal(pickle.loads(pickle.dumps(x)).cpu(), x.cpu())
    assert copy.deepcopy(torch.nn.Linear(2, 2).to("neuron")).weight.device.type == "neuron"


def test_autocast_casts_like_cuda_policies():
    a = torch.randn(4, 8, device="neuron")
    b = torch.randn(8, 3, device="neuron")
    with torch.autocast(device_type="neuron"):
        assert torch.get_autocast_dtype("neuron") == torch.bfloat16
        mm = a @ b
        lin = F.linear(a, b.t())
        soft = torch.softmax(mm, dim=-1)
        ln = F.layer_norm(mm, (3,))
        cat = torch.cat([mm, a[:, :3]])  # promote: widest type wins
        s = mm.sum()
        i = torch.ones(3, dtype=torch.int64, device="neuron") + 1
    assert mm.dtype == torch.bfloat16 and lin.dtype == torch.bfloat16
    assert soft.dtype == torch.float32 and ln.dtype == torch.float32 and s.dtype == torch.float32
    assert cat.dtype == torch.float32 and i.dtype == torch.int64
    assert torch.equal(mm.cpu(), a.cpu().bfloat16() @ b.cpu().bfloat16())
    with torch.autocast(device_type="neuron", dtype=torch.float16):
        assert (a @ b).dtype == torch.float16
    assert (a @ b).dtype == torch.float32  # off again outside


def test_autocast_training_step_matches_cpu_casts():
    model = _mlp()
    dev = copy.deepcopy(model).to("neuron")
    x, y = _batch()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        dloss = F.cross_entropy(dev(x.to("neuron")), y.to("neuron"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    assert dloss.dtype == torch.float32
    dloss.backward()
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in dev.parameters())
    assert torch.allclose(loss, dloss.cpu(), rtol=2e-2)


def test_autocast_bans_binary_cross_entropy():
    p = torch.rand(4, device="neuron")
    with torch.autocast("neuron"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)
