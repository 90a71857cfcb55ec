"""Functional execution of Programs on NumPy: what a Program computes, bit for bit as far as the ISA says.

``run(program, inputs)`` returns the output tensors by name. The interpreter keeps HBM tensors as
flat arrays of their dtype and SBUF/PSUM as per-partition byte arrays viewed through each access
pattern; instructions execute one at a time in :func:`trnscope.isa.execution_order`. Numeric rules
(FP32 compute, casts on write, integer ops) are in :mod:`trnscope.interp.numerics`.
"""

from .interpreter import Interpreter, run
from .memory import Memory
from .numerics import ACT_FUNCS, ALU_OPS
from .special import erf, erfc, erfinv

__all__ = ["ACT_FUNCS", "ALU_OPS", "Interpreter", "Memory", "erf", "erfc", "erfinv", "run"]
