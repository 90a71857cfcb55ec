"""The NeuronCore instruction set: access patterns, instructions, Programs and the NEFF container."""

from . import instructions, neff
from .ap import AP, Space, dense_dims, hbm, psum, sbuf
from .dtypes import DType
from .errors import DeadlockError, NeffFormatError, ProgramError

# every instruction class and what goes with it, as each engine module's __all__ lists them (star
# imports of the modules themselves: the type checker follows a module's literal __all__)
from .instructions import base as _base, dma as _dma, gpsimd_engine as _gpsimd, scalar_engine as _scalar
from .instructions import sync_engine as _sync, tensor_engine as _tensor, vector_engine as _vector
from .instructions.base import *  # noqa: F403
from .instructions.dma import *  # noqa: F403
from .instructions.gpsimd_engine import *  # noqa: F403
from .instructions.scalar_engine import *  # noqa: F403
from .instructions.sync_engine import *  # noqa: F403
from .instructions.tensor_engine import *  # noqa: F403
from .instructions.vector_engine import *  # noqa: F403
from .order import execution_order
from .program import Program, QueueDecl, TensorDecl
from .validate import validate

__all__ = [
    "AP", "DType", "DeadlockError", "NeffFormatError", "Program", "ProgramError", "QueueDecl", "Space", "TensorDecl",
    "dense_dims", "execution_order", "hbm", "instructions", "neff", "psum", "sbuf", "validate",
]
for _module in (_base, _dma, _gpsimd, _scalar, _sync, _tensor, _vector):
    __all__ += _module.__all__
