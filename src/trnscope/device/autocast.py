"""``torch.autocast(device_type="neuron")``: the autocast kernels for AutocastPrivateUse1.

PyTorch routes ops on PrivateUse1 tensors through the AutocastPrivateUse1 dispatch key while
autocast is enabled for the backend, but registers no kernels (not even a fallthrough) there: a
backend brings its own. These are the CUDA policies of ATen's ``autocast_mode.h`` (the op lists
``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_PROMOTE`` and CUDA's ``cat``/``stack``/``index_copy`` promotions), applied to
floating-point ``neuron`` tensors; every other op falls through. Unlike ATen, casts of fp32 leaf
weights are not cached across ops within one autocast region (same numbers, more casts).

The default autocast dtype of ``neuron`` is bfloat16, Trainium's native low-precision type.
"""

from __future__ import annotations

import torch

from . import _devices

BACKEND = _devices.BACKEND
KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION_FP = [
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution",
    "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
]
FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    # ATen appends dtype=float32 for these two norm overloads; casting the input is equivalent
    "norm.Scalar", "norm.ScalarOpt_dim",
]
FP32_SET_OPT_DTYPE = [
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList",
]
PROMOTE = [
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "tensordot", "scatter_add", "cat", "stack", "index_copy",
]
BANNED = ["binary_cross_entropy"]

_lib: torch.library.Library | None = None
_fallthrough_lib: torch.library.Library | None = None


def _eligible(t) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype != torch.float64
        and t.device.type == BACKEND
    )


def _cast(x, dtype):
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if _eligible(x) and x.dtype != dtype else x
    if type(x) in (list, tuple):
        return type(x)(_cast(i, dtype) for i in x)
    return x


def _tensors(args, kwargs):
    for x in list(args) + list(kwargs.values()):
        if isinstance(x, torch.Tensor):
            yield x
        elif type(x) in (list, tuple):
            yield from (i for i in x if isinstance(i, torch.Tensor))


def _op(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _kernel(op, policy: str):
    def lower(*args, **kwargs):
        dtype = torch.get_autocast_dtype(BACKEND)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    def fp32(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, torch.float32), **{k: _cast(v, torch.float32) for k, v in kwargs.items()})

    names = [a.name for a in op._schema.arguments]
    dtype_pos = names.index("dtype") if "dtype" in names else len(names)

    def set_opt_dtype(*args, **kwargs):
        # ATen: dtype = dtype if given else float32, when the first argument is eligible
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if args and _eligible(args[0]):
                if len(args) > dtype_pos:
                    if args[dtype_pos] is None:
                        args = args[:dtype_pos] + (torch.float32,) + args[dtype_pos + 1:]
                elif kwargs.get("dtype") is None:
                    kwargs = dict(kwargs, dtype=torch.float32)
            return op(*args, **kwargs)

    def promote(*args, **kwargs):
        dtype = torch.get_autocast_dtype(BACKEND)
        for t in _tensors(args, kwargs):
            if _eligible(t) and t.dtype == torch.float32:
                dtype = torch.float32
                break
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    def banned(*args, **kwargs):
        raise RuntimeError(
            f"{op.name()} is unsafe to autocast: torch.nn.functional.binary_cross_entropy and "
            "torch.nn.BCELoss are unsafe to autocast. Use "
            "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss "
            "instead, which are safe to autocast."
        )

    return {"lower": lower, "fp32": fp32, "set_opt_dtype": set_opt_dtype, "promote": promote,
            "banned": banned}[policy]


def register() -> None:
    global _lib, _fallthrough_lib
    if _lib is not None:
        return
    ft = torch.library.Library("_", "IMPL")
    ft.fallback(torch.library.fallthrough_kernel, KEY)
    lib = torch.library.Library("aten", "IMPL")
    for names, policy in (
        (LOWER_PRECISION_FP, "lower"), (FP32, "fp32"), (FP32_SET_OPT_DTYPE, "set_opt_dtype"),
        (PROMOTE, "promote"), (BANNED, "banned"),
    ):
        for name in names:
            lib.impl(name, _kernel(_op(name), policy), KEY)
    torch.set_autocast_dtype(BACKEND, torch.bfloat16)
    _lib, _fallthrough_lib = lib, ft
