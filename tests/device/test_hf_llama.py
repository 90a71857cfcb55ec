"""A tiny random-config HF Llama trains on neuron with zero CPU fallbacks, matching CPU."""

import warnings

import pytest
import torch

import trnscope  # noqa: F401
from trnscope.device.runtime_bridge import EXECUTOR, CpuFallbackWarning

transformers = pytest.importorskip("transformers")


def _config():
    return transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama_forward_backward_adamw_on_neuron(dtype):
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(_config()).to(dtype)
    dev = transformers.LlamaForCausalLM(_config()).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("neuron")
    ids = torch.randint(0, 128, (2, 16))
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=1e-3)
    EXECUTOR.fallbacks.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuFallbackWarning)
        losses = []
        for model, opt, inp in ((cpu, opt_cpu, ids), (dev, opt_dev, ids.to("neuron"))):
            loss = model(inp, labels=inp).loss
            loss.backward()
            opt.step()
            second = model(inp, labels=inp).loss  # after one AdamW step
            losses.append((loss.item(), second.item()))
    assert EXECUTOR.fallbacks == {}
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert losses[1][0] == pytest.approx(losses[0][0], rel=tol)
    assert losses[1][1] == pytest.approx(losses[0][1], rel=tol)
    assert losses[1][1] < losses[1][0]
