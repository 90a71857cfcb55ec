"""A tiny Hugging Face Llama (random weights, no downloads) trains on ``neuron`` like on CPU."""

import collections
import copy

import pytest
import torch

import trnscope.device  # noqa: F401
from trnscope.device import dispatch

pytestmark = pytest.mark.usefixtures("host_executor")

transformers = pytest.importorskip("transformers")


def _model(attn: str):
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=128, max_position_embeddings=64,
        attn_implementation=attn,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def _step(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_forward_backward_matches_cpu(attn):
    model = _model(attn)
    dev = copy.deepcopy(model).to("neuron")
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = _step(model, ids)
    with dispatch.recording() as calls:
        out = _step(dev, ids.to("neuron"))
    assert out.logits.device.type == "neuron"
    counts = collections.Counter(c.name for c in calls)
    assert counts["aten::mm"] > 0 and counts["aten::embedding_dense_backward"] == 1
    if attn == "eager":  # same ATen kernels as CPU: identical bits
        assert torch.equal(ref.loss, out.loss.cpu())
        assert torch.equal(ref.logits, out.logits.cpu())
        for (name, p), q in zip(model.named_parameters(), dev.parameters()):
            assert torch.equal(p.grad, q.grad.cpu()), name
    else:
        # CPU runs SDPA as its fused flash kernel; a PrivateUse1 backend gets ATen's math
        # decomposition (bmm, softmax), which rounds differently in the last bits
        assert counts["aten::bmm"] > 0
        torch.testing.assert_close(out.logits.cpu(), ref.logits, rtol=1e-5, atol=1e-5)
        for (name, p), q in zip(model.named_parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-6, msg=name)
