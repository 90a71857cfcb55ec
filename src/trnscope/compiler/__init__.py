"""Lowering framework ops and graphs to Programs: tiling, SBUF/PSUM allocation, DMA, semaphores."""

from .builder import AllocationError, KernelBuilder
from .lowering import LoweringContext, NoLowering, OpCall, has_lowering, lower, lowering, registered
from .meta import TensorMeta

__all__ = ["AllocationError", "KernelBuilder", "LoweringContext", "NoLowering", "OpCall", "TensorMeta",
           "has_lowering", "lower", "lowering", "registered"]
