"""Lowering framework ops and graphs to Programs: tiling, SBUF/PSUM allocation, DMA, semaphores.

``trnscope.compiler.lowering`` is the registry module; kernels register with its ``lowering``
decorator (``from trnscope.compiler.lowering import lowering``), which this package does not
re-export, so the name means one thing here.
"""

from . import lowering
from .builder import AllocationError, KernelBuilder
from .lowering import LoweringContext, NoLowering, OpCall, has_lowering, lower, registered
from .meta import TensorMeta

__all__ = ["AllocationError", "KernelBuilder", "LoweringContext", "NoLowering", "OpCall", "TensorMeta",
           "has_lowering", "lower", "lowering", "registered"]
