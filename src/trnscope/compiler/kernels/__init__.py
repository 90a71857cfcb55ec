"""The kernel library: importing it registers every lowering."""

from . import (  # noqa: F401
    activation, attention, elementwise, indexreduce, layernorm, matmul, movement, norm, pointwise, reduce, reductions,
    batchnorm, reorder,
    linalg_small, pooling, scatter,
    softmax,
)
