"""Ops that reach ``neuron`` whole although PyTorch defines them as compositions.

``torch.rms_norm`` is CompositeImplicitAutograd: on a backend without its own kernel it decomposes
into pow, mean, add, rsqrt and two muls before the device sees it. TorchNeuron, like CUDA, runs it
as ONE fused kernel, so ``neuron`` registers it for PrivateUse1 and gives autograd a backward that
runs as ordinary device ops.
"""

from __future__ import annotations

import torch

from .. import runtime
from . import dispatch

_CUT = runtime.CLOCK.emulation()

_lib: torch.library.Library | None = None
_aten = torch.ops.aten


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps):
        with torch._C._AutoDispatchBelowAutograd():
            y = dispatch.execute(_aten.rms_norm.default, (x, normalized_shape, weight, eps), {})
        ctx.save_for_backward(x, weight)
        ctx.normalized_shape = tuple(normalized_shape)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, grad):
        with _CUT:  # the backward's ops are device ops, each costing the host its dispatch; the glue is not
            return _RMSNorm._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        x, weight = ctx.saved_tensors
        dims = tuple(range(-len(ctx.normalized_shape), 0))
        eps = ctx.eps if ctx.eps is not None else torch.finfo(x.dtype).eps
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
        xhat = xf * rstd
        g = grad.float() * (weight.float() if weight is not None else 1.0)
        n = 1
        for d in ctx.normalized_shape:
            n *= d
        gx = rstd * (g - xhat * (g * xhat).sum(dims, keepdim=True) / n)
        gw = None
        if weight is not None and ctx.needs_input_grad[2]:
            lead = tuple(range(grad.dim() - len(ctx.normalized_shape)))
            gw = (grad.float() * xhat).sum(lead).to(weight.dtype) if lead else (grad.float() * xhat).to(weight.dtype)
        return gx.to(x.dtype), None, gw, None


def _rms_norm_autograd(x, normalized_shape, weight=None, eps=None):
    # trnscope's Python glue in place of a C++ autograd kernel: emulator work (the fused kernel's
    # dispatch inside it costs the host what the host-cost model says)
    with _CUT:
        return _RMSNorm.apply(x, normalized_shape, weight, eps)


def _rms_norm_device(x, normalized_shape, weight=None, eps=None):
    return dispatch.execute(_aten.rms_norm.default, (x, normalized_shape, weight, eps), {})


def register() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("rms_norm", _rms_norm_device, "PrivateUse1")
    lib.impl("rms_norm", _rms_norm_autograd, "AutogradPrivateUse1")
    _lib = lib
