"""MLP, attention block and a tiny HF Llama decoder layer compile to few NEFFs, match eager, train."""

import pytest
import torch

import trnscope  # noqa: F401
from trnscope.device.dynamo_backend import COUNTERS


class Attention(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, s, d))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


def _train_step(model, x):
    out = model(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    return out, [p.grad for p in model.parameters()]


@pytest.mark.parametrize("make", [_mlp, Attention], ids=["mlp", "attention"])
def test_compiled_block_matches_eager_and_trains(make):
    torch._dynamo.reset()
    COUNTERS.reset()
    torch.manual_seed(0)
    eager = make()
    compiled = make()
    compiled.load_state_dict(eager.state_dict())
    eager, compiled = eager.to("neuron"), compiled.to("neuron")
    x = torch.randn(2, 16, 64)
    out_e, grads_e = _train_step(eager, x.to("neuron"))
    out_c, grads_c = _train_step(torch.compile(compiled, backend="neuron"), x.to("neuron"))
    torch.testing.assert_close(out_c.cpu(), out_e.cpu(), rtol=1e-4, atol=1e-5)
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc.cpu(), ge.cpu(), rtol=1e-4, atol=1e-5)
    assert COUNTERS.eager_graphs == 0, COUNTERS.reasons
    assert 1 <= COUNTERS.neffs_compiled + COUNTERS.neff_cache_hits <= 2  # one forward NEFF, one backward NEFF


def test_llama_decoder_layer_compiles_and_trains():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    torch._dynamo.reset()
    COUNTERS.reset()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    layer, rope = LlamaDecoderLayer(cfg, 0), LlamaRotaryEmbedding(cfg)

    def run(layer, rope, x, pos):
        out = layer(x, position_embeddings=rope(x, pos))
        return out[0] if isinstance(out, tuple) else out

    x = torch.randn(2, 16, 64)
    pos = torch.arange(16)[None].expand(2, 16)
    ref = run(layer, rope, x, pos)
    ref.sum().backward()
    dev = LlamaDecoderLayer(cfg, 0)
    dev.load_state_dict(layer.state_dict())
    dev = dev.to("neuron")
    out = torch.compile(run, backend="neuron")(dev, LlamaRotaryEmbedding(cfg).to("neuron"), x.to("neuron"),
                                                pos.to("neuron"))
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    for p_dev, p_ref in zip(dev.parameters(), layer.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p_ref.grad, rtol=1e-3, atol=1e-5)
    assert COUNTERS.eager_graphs == 0, COUNTERS.reasons
    assert COUNTERS.neffs_compiled + COUNTERS.neff_cache_hits <= 12


def test_a_graph_that_names_the_device_runs_with_its_host_views():
    """HF's eager attention upcasts the scores with ``softmax(..., dtype=float32)``: the traced graph
    holds ``_to_copy(x, dtype=float32, device=neuron)``, whose result meets host views in the next bmm
    (the Llama-7B-shaped layer failed with "Expected all tensors on the same device ... aten::bmm")."""
    torch._dynamo.reset()
    COUNTERS.reset()

    def attend(q, k, v):
        s = torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1, dtype=torch.float32).to(q.dtype)
        return s @ v

    q, k, v = (torch.randn(2, 32, 16, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    eager = attend(*(t.to("neuron") for t in (q, k, v)))
    got = torch.compile(attend, backend="neuron")(*(t.to("neuron") for t in (q, k, v)))
    torch.testing.assert_close(got.cpu(), eager.cpu())
    assert COUNTERS.eager_graphs == 0, COUNTERS.reasons
