"""The docs/nki.md table: every example against PyTorch in fp32 and bf16, its simulated time, MFU and MBU.

    trnscope run examples/nki/table.py [--target trn2]
"""

import argparse
import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))


def cases():
    import attention
    import layernorm
    import mamba
    import matmul
    import rmsnorm
    import softmax
    import tensor_add

    def add(dt):
        a, b = torch.randn(2048, 2048).to(dt), torch.randn(2048, 2048).to(dt)
        return "2048x2048", tensor_add.tensor_add, (a, b), a.float() + b.float()

    def mm(dt):
        a, b = torch.randn(1024, 2048).to(dt), torch.randn(1024, 1024).to(dt)
        return "[2048,1024]@[1024,1024]", matmul.matmul_optimized, (a, b), a.float().T @ b.float()

    def rms(dt):
        x, w = torch.randn(1024, 4096).to(dt), torch.randn(4096).to(dt)
        return "1024x4096", rmsnorm.rmsnorm, (x, w), torch.rms_norm(x.float(), (4096,), w.float(), 1e-6)

    def ln(dt):
        x, g, b = torch.randn(1024, 4096).to(dt), torch.randn(4096).to(dt), torch.randn(4096).to(dt)
        return "1024x4096", layernorm.layernorm, (x, g, b), F.layer_norm(x.float(), (4096,), g.float(), b.float())

    def sm(dt):
        x = torch.randn(1024, 4096).to(dt)
        return "1024x4096", softmax.softmax, (x,), torch.softmax(x.float(), -1)

    def att(dt):
        q, k, v = (torch.randn(2048, 128).to(dt) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None], is_causal=True)[0]
        return "S=2048 d=128 causal", attention.attention_fwd, (q.T.contiguous(), k.T.contiguous(), v), ref, \
            dict(scale=1 / math.sqrt(128), causal=True)

    def scan(dt):
        b, c, l, n = 1, 256, 512, 16
        d = (torch.rand(b, c, l) * 0.1 + 0.01).to(dt)
        u, B, C = torch.randn(b, c, l).to(dt), torch.randn(b, n, l).to(dt), torch.randn(b, n, l).to(dt)
        A = -(torch.rand(c, n) * 1.5 + 0.5)
        ref = torch.from_numpy(mamba.reference(d.double().numpy(), u.double().numpy(), A.double().numpy(),
                                               B.double().numpy(), C.double().numpy()))
        return "B=1 C=256 L=512 N=16", mamba.selective_scan, (d, u, A, B, C), ref

    return {"tensor add": add, "matmul (fully optimised)": mm, "RMSNorm": rms, "LayerNorm": ln, "softmax": sm,
            "flash attention fwd": att, "Mamba selective scan": scan}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="trn2")
    args = ap.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target
    torch.manual_seed(0)
    print(f"| example | shape | error fp32 | error bf16 | simulated ({args.target}, bf16) | MFU | MBU | bottleneck |")
    print("|---|---|---|---|---|---|---|---|")
    for name, make in cases().items():
        errs = {}
        for dt in (torch.float32, torch.bfloat16):
            shape, kernel, kargs, ref, *kw = make(dt)
            got = kernel(*kargs, **(kw[0] if kw else {}))
            # max |kernel - PyTorch| relative to max |PyTorch|
            errs[dt] = float((got.float() - ref.float()).abs().max() / ref.float().abs().max())
            run = kernel.last_run
        print(f"| {name} | {shape} | {errs[torch.float32]:.1e} | {errs[torch.bfloat16]:.1e} | "
              f"{run.total_ns / 1000:,.1f} us | {run.mfu:.1f}% | {run.mbu:.1f}% | {run.bottleneck} |")


if __name__ == "__main__":
    main()
